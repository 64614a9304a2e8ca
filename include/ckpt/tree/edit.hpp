// ckpt/tree/edit.hpp — the edits a transform makes to a flat list of leaves.
//
// RestoreOptions::transform edits a Tree, SaveOptions::transform a Snapshot; both
// rename, erase and set leaves by dotted path with the same meaning and the same
// errors, because both call these. `path_of(leaf)` gives a leaf's Path by reference.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt::detail {

// Moves the leaf or every leaf of the subtree at `from` to lie at `to`; returns how many
// moved. Renaming what is not there is a MissingLeafError (a misspelt path, most often).
template <class Leaf, class Alloc, class PathOf>
std::size_t rename_leaves(std::vector<Leaf, Alloc>& leaves, PathOf path_of, const std::string& checkpoint,
                          std::string_view from, std::string_view to) {
  const Path f = Path::parse(from), t = Path::parse(to);
  std::size_t n = 0;
  for (auto& l : leaves) {
    Path& p = path_of(l);
    if (!p.starts_with(f)) continue;
    std::vector<std::string> segs = t.segments();
    segs.insert(segs.end(), p.segments().begin() + static_cast<std::ptrdiff_t>(f.size()), p.segments().end());
    p = Path(std::move(segs));
    ++n;
  }
  if (n == 0) throw MissingLeafError(checkpoint, {f.str()});
  return n;
}

// Removes the leaf or subtree at `path`; returns how many leaves went (0 is no error:
// the transform may run on checkpoints that never had it).
template <class Leaf, class Alloc, class PathOf>
std::size_t erase_leaves(std::vector<Leaf, Alloc>& leaves, PathOf path_of, std::string_view path) {
  const Path p = Path::parse(path);
  const auto before = leaves.size();
  std::erase_if(leaves, [&](Leaf& l) { return path_of(l).starts_with(p); });
  return before - leaves.size();
}

// Puts `leaf` at its path, replacing a leaf that is there.
template <class Leaf, class Alloc, class PathOf>
void set_leaf(std::vector<Leaf, Alloc>& leaves, PathOf path_of, Leaf leaf) {
  const Path p = path_of(leaf);
  std::erase_if(leaves, [&](Leaf& l) { return path_of(l) == p; });
  leaves.push_back(std::move(leaf));
}

}  // namespace ckpt::detail
