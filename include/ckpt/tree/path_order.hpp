// ckpt/tree/path_order.hpp — the leaves of a checkpoint in path order: lookups by path,
// subtrees, children.
//
// Two holders of a checkpoint's leaves look them up by path: an Index (its entries'
// Paths) and the native format's leaf table (segments viewed in the manifest's bytes,
// format/native/leaf_table.hpp). PathOrder is the part they share: leaf numbers sorted
// by path, and the searches over them, for any way of giving a leaf's segments (a
// range of strings or string views).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include <ckpt/detail/sort_runs.hpp>

namespace ckpt::detail {

inline bool is_list_index(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// True when s names list item k exactly: "0", "1", ... (not "01", not "+1"). Compared
// digit by digit from the last: a restore asks once per item of a 20,000-item list,
// where formatting k and comparing the strings was a sixth of the walk.
inline bool is_item(std::string_view s, std::size_t k) {
  std::size_t i = s.size();
  do {
    if (i == 0 || s[--i] != static_cast<char>('0' + k % 10)) return false;
    k /= 10;
  } while (k != 0);
  return i == 0;
}

// The order of paths: segment by segment, list indices (all digits) before other names
// and by value ("2" before "10"), so that a list's items, which writers walk 0, 1, 2,
// ..., are already in order; the rest byte by byte. A total order, and lexicographic
// over segments, so a subtree is a contiguous range.
template <class A, class B>
bool path_less(const A& a, const B& b) {
  const std::size_t n = std::min(std::size(a), std::size(b));
  for (std::size_t i = 0; i < n; ++i) {
    const std::string_view x = a[i], y = b[i];
    if (x == y) continue;
    const bool dx = is_list_index(x), dy = is_list_index(y);
    if (dx != dy) return dx;                                     // list indices before names
    if (dx && x.size() != y.size()) return x.size() < y.size();  // "2" before "10"
    return x < y;
  }
  return std::size(a) < std::size(b);
}

template <class A, class B>
bool path_starts_with(const A& v, const B& prefix) {
  if (std::size(v) < std::size(prefix)) return false;
  for (std::size_t i = 0; i < std::size(prefix); ++i)
    if (std::string_view(v[i]) != std::string_view(prefix[i])) return false;
  return true;
}

template <class A, class B>
bool path_equal(const A& a, const B& b) {
  return std::size(a) == std::size(b) && path_starts_with(a, b);
}

// Leaf numbers 0..n-1 in path order. Every call takes `segs`, a function from a leaf
// number to its path's segments, so that the holder keeps its paths as it likes.
class PathOrder {
 public:
  PathOrder() = default;
  PathOrder(const PathOrder&) = delete;
  PathOrder& operator=(const PathOrder&) = delete;

  // Sorts the n leaves; calls fail(leaf, what) (which must throw) when a path appears
  // twice or is both a leaf and an inner node (a.b and a.b.c both leaves). A list of
  // 20,000 leaves comes in path order already, perhaps after a scalar or two ("step"
  // before "leaves.0"): merging those runs takes one pass where a sort took a
  // millisecond or two. Stable: of two equal paths the first is reported.
  template <class Segs, class Fail>
  void build(std::uint32_t n, Segs segs, Fail fail) {
    sorted_.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) sorted_[i] = i;
    const bool in_order = stable_sort_runs(sorted_.begin(), sorted_.end(),
                                           [&](std::uint32_t a, std::uint32_t b) { return path_less(segs(a), segs(b)); });
    for (std::size_t k = 1; k < sorted_.size(); ++k) {
      const auto& a = segs(sorted_[k - 1]);
      const auto& b = segs(sorted_[k]);
      if (!in_order && path_equal(a, b)) fail(sorted_[k], "leaf appears twice in the checkpoint");
      if (std::size(b) > std::size(a) && path_starts_with(b, a)) fail(sorted_[k - 1], "path is both a leaf and an inner node");
    }
  }

  // The leaf at path p, or `none`. Looks first at the leaf after the one it found last:
  // a restore walks its target in the order the writer walked the same struct, which is
  // the leaves' order, so most lookups cost one path comparison instead of a binary
  // search (20,000 leaves: 15 comparisons each, a measurable part of a restore). Only a
  // hint: threads that race on it lose nothing but the shortcut.
  static constexpr std::uint32_t none = ~std::uint32_t{0};
  template <class Segs, class Key>
  std::uint32_t find(Segs segs, const Key& p) const {
    const std::uint32_t hint = hint_.load(std::memory_order_relaxed);
    if (hint < sorted_.size() && path_equal(segs(hint), p)) {  // paths are unique (build checks)
      hint_.store(hint + 1, std::memory_order_relaxed);
      return hint;
    }
    auto it = lower_bound(segs, p);
    if (it == sorted_.end() || !path_equal(segs(*it), p)) return none;
    hint_.store(*it + 1, std::memory_order_relaxed);
    return *it;
  }
  // True when some leaf lies at or under p.
  template <class Segs, class Key>
  bool has_subtree(Segs segs, const Key& p) const {
    auto it = lower_bound(segs, p);
    return it != sorted_.end() && path_starts_with(segs(*it), p);
  }
  // Calls fn(segment) for each distinct segment that follows p, in path order, copying
  // none; stops early when fn returns false. (A restore counts a list's 20,000 items so.)
  template <class Segs, class Key, class Fn>
  void for_each_child(Segs segs, const Key& p, Fn&& fn) const {
    const std::size_t depth = std::size(p);
    const auto [first, last] = subtree(segs, p);
    std::string_view previous;
    bool previous_inner = false;  // the previous segment leads to more than one leaf
    for (auto it = first; it != last; ++it) {
      const auto& s = segs(*it);
      if (std::size(s) == depth) continue;
      const auto& seg = s[depth];  // as the holder keeps it
      // A child that is a leaf is unique (build() refuses a path twice, and a path both
      // a leaf and an inner node); only an inner child repeats, once per leaf under it.
      const bool inner = std::size(s) > depth + 1;
      if (inner && previous_inner && previous == std::string_view(seg)) continue;
      previous = seg;
      previous_inner = inner;
      if (!fn(seg)) return;
    }
  }
  // The leaves of the list at p, when each of its items is one leaf: item k is leaf
  // out[k]. False when p has no children, or a child is not a leaf ("3.x") or not
  // numbered as item k ("0", "1", ... in order: a hostile "999999999" is not a list
  // of a billion); the caller then asks child by child, and names what is wrong.
  template <class Segs, class Key>
  bool list_leaves(Segs segs, const Key& p, std::vector<std::uint32_t>& out) const {
    const std::size_t depth = std::size(p);
    const auto [first, last] = subtree(segs, p);
    out.clear();
    out.reserve(static_cast<std::size_t>(last - first));
    for (auto it = first; it != last; ++it) {
      const auto& s = segs(*it);
      if (std::size(s) != depth + 1) return false;  // p itself a leaf, or an item with leaves under it
      if (!is_item(s[depth], out.size())) return false;
      out.push_back(*it);
    }
    return !out.empty();
  }

 private:
  // The range of leaves at or under p, found by two binary searches rather than a
  // prefix comparison per leaf (a list of 20,000 items is one subtree).
  template <class Segs, class Key>
  std::pair<std::vector<std::uint32_t>::const_iterator, std::vector<std::uint32_t>::const_iterator> subtree(
      Segs segs, const Key& p) const {
    const auto first = lower_bound(segs, p);
    return {first, std::partition_point(first, sorted_.cend(), [&](std::uint32_t i) { return path_starts_with(segs(i), p); })};
  }

  template <class Segs, class Key>
  std::vector<std::uint32_t>::const_iterator lower_bound(Segs segs, const Key& p) const {
    return std::lower_bound(sorted_.begin(), sorted_.end(), p,
                            [&](std::uint32_t i, const Key& key) { return path_less(segs(i), key); });
  }

  std::vector<std::uint32_t> sorted_;
  mutable std::atomic<std::uint32_t> hint_{0};
};

}  // namespace ckpt::detail
