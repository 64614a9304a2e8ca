// ckpt/snapshot_edit.hpp — the dtype cast of SaveOptions::save_dtype, applied to a
// Snapshot before it is written. (Renames and other edits are Snapshot's members.)
#pragma once

#include <algorithm>
#include <string_view>

#include <ckpt/leaf/convert.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

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
