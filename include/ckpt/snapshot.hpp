// ckpt/snapshot.hpp — the save-side pivot: a flat list of leaves (path, dtype, shape, bytes).
//
// Walking a value produces a Snapshot whose leaves point at the value's own memory,
// so a synchronous save copies nothing. make_owned() gives it one copy of its own,
// for saves that outlive the caller's state (async): make_owned(SnapshotBuffer&) puts
// every leaf's bytes into one buffer that the next save reuses, so an async save costs
// one memcpy into memory that is already mapped, and peak memory is state + one copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/huge_page_allocator.hpp>
#include <ckpt/detail/out_of_line.hpp>
#include <ckpt/detail/type_name.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/tree/edit.hpp>
#include <ckpt/tree/schema.hpp>
#include <ckpt/tree/walk.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

struct SnapshotLeaf {
  Path path;
  LeafBytes data;
  // A Sharded leaf's place in its global array (data is this process's box of it).
  detail::OutOfLine<LeafBox> box{};  // (detail/out_of_line.hpp: most leaves have none)
};

// One allocation that holds the bytes of a whole snapshot; reused from save to save.
class SnapshotBuffer {
 public:
  // At least n bytes; the old contents are not kept. Grows only (the old buffer is
  // freed before the new one is allocated, so growing never holds two).
  std::byte* reserve(std::size_t n) {
    if (n > capacity_) {
      data_.reset();
      capacity_ = 0;
      data_ = std::make_unique_for_overwrite<std::byte[]>(n);  // not zeroed: it is about to be overwritten
      capacity_ = n;
    }
    return data_.get();
  }
  std::size_t capacity() const noexcept { return capacity_; }
  void release() noexcept {
    data_.reset();
    capacity_ = 0;
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

struct Snapshot {
  // On huge pages from half a megabyte up (5,000 leaves): detail/huge_page_allocator.hpp.
  std::vector<SnapshotLeaf, detail::HugePageAllocator<SnapshotLeaf>> leaves;
  std::string type_name;  // the saving C++ type, for people
  Schema schema;          // the saving type's schema
  std::uint64_t fingerprint = 0;

  std::uint64_t total_bytes() const {
    std::uint64_t n = 0;
    for (const auto& l : leaves) n += l.data.size();  // streamed leaves too
    return n;
  }
  void make_owned() {
    for (auto& l : leaves) l.data.make_owned();
  }

  // ---- editing (for SaveOptions::transform): the same edits as Tree's (tree/edit.hpp) ----

  // Renames the leaf or every leaf of the subtree at `from` to lie at `to`; returns how
  // many moved (none: MissingLeafError).
  std::size_t rename(std::string_view from, std::string_view to) {
    return detail::rename_leaves(leaves, path_of, "", from, to);
  }
  // Removes the leaf or subtree at `path`; returns how many leaves went.
  std::size_t erase(std::string_view path) { return detail::erase_leaves(leaves, path_of, path); }
  // Adds (or replaces) a leaf holding a copy of `value`, of any leaf type.
  template <class U>
  void set(std::string_view path, const U& value) {
    static_assert(ckpt::leaf<U>, CKPT_STATIC_ERROR("Snapshot::set needs a leaf value",
                                                  "Pass a number, string, vector or xtensor; set a struct leaf by leaf.",
                                                  CKPT_NAMED_ABOVE));
    LeafBytes b = leaf_codec<U>::save(value);
    b.make_owned();
    detail::set_leaf(leaves, path_of, SnapshotLeaf{Path::parse(path), std::move(b)});
  }
  // Copies every borrowed leaf into buf (one allocation, each leaf 64-byte aligned) and
  // points the leaves at it; the snapshot then depends on buf, not on the value.
  void make_owned(SnapshotBuffer& buf) {
    constexpr std::size_t align = 64;
    auto borrowed = [](const SnapshotLeaf& l) {
      return !l.data.view.empty() && (l.data.storage.empty() || l.data.view.data() != l.data.storage.data());
    };
    std::size_t total = 0;
    for (const auto& l : leaves)
      if (borrowed(l)) total += (l.data.view.size() + align - 1) / align * align;
    std::byte* base = buf.reserve(total);
    std::size_t at = 0;
    for (auto& l : leaves) {
      if (!borrowed(l)) continue;
      const std::size_t n = l.data.view.size();
      if (n > 0) std::memcpy(base + at, l.data.view.data(), n);  // an empty leaf's data() may be null
      l.data.view = {base + at, n};
      at += (n + align - 1) / align * align;
    }
  }

 private:
  static Path& path_of(SnapshotLeaf& l) { return l.path; }
};

namespace detail {
// Counts what SnapshotBuilder will push, so that the leaves are allocated once: 20,000
// leaves grown by doubling moved every leaf about twice, into fresh pages each time.
struct LeafCounter {
  std::size_t n = 0;
  template <class U>
  void leaf(const Path&, const U&) { ++n; }
  void none(const Path&) { ++n; }
};
// Appends a leaf: compiled once, not inlined into the walk of every field of every
// saved struct.
CKPT_API SnapshotLeaf& append_leaf(Snapshot& s, const Path& p, LeafBytes bytes);

struct SnapshotBuilder {
  Snapshot& out;
  template <class U>
  void leaf(const Path& p, const U& v) {
    SnapshotLeaf& l = append_leaf(out, p, leaf_codec<U>::save(v));
    if constexpr (requires { leaf_codec<U>::box(v); }) l.box = leaf_codec<U>::box(v);
  }
  void none(const Path& p) { append_leaf(out, p, LeafBytes::own(dtype::none, {}, {})); }
};
}  // namespace detail

template <class T>
Snapshot take_snapshot(const T& value) {
  Snapshot s;
  s.type_name = std::string(detail::type_name<T>());
  s.schema = schema_of<T>();
  s.fingerprint = schema_fingerprint(s.schema);
  Path p;
  detail::LeafCounter count;
  walk(value, p, count);
  s.leaves.reserve(count.n);
  {
    detail::SnapshotBuilder b{s};
    walk(value, p, b);
  }
  return s;
}

#if CKPT_DEFINE_API
CKPT_API SnapshotLeaf& detail::append_leaf(Snapshot& s, const Path& p, LeafBytes bytes) {
  s.leaves.push_back({p, std::move(bytes)});
  return s.leaves.back();
}
#endif

}  // namespace ckpt
