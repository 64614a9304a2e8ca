// ckpt/snapshot_edit.hpp — changing a Snapshot before it is written: the save-side
// counterpart of RestoreOptions::transform (rename, drop, add leaves) and the dtype
// cast of SaveOptions::save_dtype.
#pragma once

#include <algorithm>
#include <string_view>

#include <ckpt/leaf/convert.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

// Moves the leaf or subtree at `from` to `to`; returns how many leaves moved.
inline std::size_t rename_leaves(Snapshot& s, std::string_view from, std::string_view to) {
  const Path f = Path::parse(from), t = Path::parse(to);
  std::size_t n = 0;
  for (auto& l : s.leaves) {
    if (!l.path.starts_with(f)) continue;
    std::vector<std::string> segs = t.segments();
    segs.insert(segs.end(), l.path.segments().begin() + static_cast<std::ptrdiff_t>(f.size()), l.path.segments().end());
    l.path = Path(std::move(segs));
    ++n;
  }
  return n;
}

// Drops the leaf or subtree at `path`; returns how many leaves went.
inline std::size_t erase_leaves(Snapshot& s, std::string_view path) {
  const Path p = Path::parse(path);
  const auto before = s.leaves.size();
  std::erase_if(s.leaves, [&](const SnapshotLeaf& l) { return l.path.starts_with(p); });
  return before - s.leaves.size();
}

// Adds (or replaces) a leaf holding a copy of `value`.
template <class U>
void add_leaf(Snapshot& s, std::string_view path, const U& value) {
  static_assert(leaf<U>, CKPT_STATIC_ERROR("ckpt::add_leaf needs a leaf value",
                                           "Pass a number, string, vector or xtensor; add a struct leaf by leaf.",
                                           CKPT_NAMED_ABOVE));
  const Path p = Path::parse(path);
  std::erase_if(s.leaves, [&](const SnapshotLeaf& l) { return l.path == p; });
  LeafBytes b = leaf_codec<U>::save(value);
  b.make_owned();
  s.leaves.push_back({p, std::move(b)});
}

// Casts every real floating leaf under `prefix` to `to` (e.g. float32 -> bfloat16).
// Each converted leaf owns its new bytes; the others still point at the state.
inline void cast_floating_leaves(Snapshot& s, dtype to, std::string_view prefix = "") {
  if (!is_real_floating(to)) throw Error("", std::string(prefix), "save_dtype must be a real floating dtype, not " +
                                                                     std::string(dtype_name(to)));
  const Path p = Path::parse(prefix);
  for (auto& l : s.leaves) {
    if (!l.path.starts_with(p) || !is_real_floating(l.data.type) || l.data.type == to) continue;
    const std::size_t n = l.data.view.size() / dtype_size(l.data.type);
    std::vector<std::byte> out(n * dtype_size(to));
    convert_elements(l.data.type, l.data.view.data(), to, out.data(), n);
    l.data = LeafBytes::own(to, std::move(l.data.shape), std::move(out));
  }
}

}  // namespace ckpt
