// ckpt/snapshot.hpp — the save-side pivot: a flat list of leaves (path, dtype, shape, bytes).
//
// Walking a value produces a Snapshot whose leaves point at the value's own memory,
// so a synchronous save copies nothing. make_owned() gives it one copy of its own,
// for saves that outlive the caller's state (async).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ckpt/detail/type_name.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/tree/schema.hpp>
#include <ckpt/tree/walk.hpp>

namespace ckpt {

struct SnapshotLeaf {
  Path path;
  LeafBytes data;
};

struct Snapshot {
  std::vector<SnapshotLeaf> leaves;
  std::string type_name;  // the saving C++ type, for people
  Schema schema;          // the saving type's schema
  std::uint64_t fingerprint = 0;

  std::uint64_t total_bytes() const {
    std::uint64_t n = 0;
    for (const auto& l : leaves) n += l.data.view.size();
    return n;
  }
  void make_owned() {
    for (auto& l : leaves) l.data.make_owned();
  }
};

namespace detail {
struct SnapshotBuilder {
  Snapshot& out;
  template <class U>
  void leaf(const Path& p, const U& v) {
    out.leaves.push_back({p, leaf_codec<U>::save(v)});
  }
  void none(const Path& p) { out.leaves.push_back({p, LeafBytes::own(dtype::none, {}, {})}); }
};
}  // namespace detail

template <class T>
Snapshot take_snapshot(const T& value) {
  Snapshot s;
  s.type_name = std::string(detail::type_name<T>());
  s.schema = schema_of<T>();
  s.fingerprint = schema_fingerprint(s.schema);
  detail::SnapshotBuilder b{s};
  Path p;
  walk(value, p, b);
  return s;
}

}  // namespace ckpt
