// ckpt/detail/sort_runs.hpp — a stable sort for sequences that are mostly in order.
//
// A restore sorts its 20,000 leaves twice, by path (the Index) and by size (the read
// queue), and both come almost in order: a list of leaves in the writer's order with a
// scalar or two before it ("step", then "leaves.0", "leaves.1", ...). std::stable_sort
// does not see that and spends O(n log n) on it (a millisecond or two for 20,000). This
// finds the ascending runs and merges them when there are few, in O(n) a run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

namespace ckpt::detail {

// Sorts [first, last) stably by less. Returns true when it already was strictly
// ascending (no two neighbours equal), so that a caller looking for duplicates among
// neighbours can skip that.
template <class It, class Less>
bool stable_sort_runs(It first, It last, Less less) {
  constexpr std::size_t max_runs = 16;  // beyond this, merging run by run costs more than sorting
  const auto n = static_cast<std::size_t>(std::distance(first, last));
  const auto at = [&](std::size_t k) -> decltype(auto) { return first[static_cast<std::ptrdiff_t>(k)]; };
  bool strict = true;
  std::vector<std::size_t> starts{0};
  for (std::size_t k = 1; k < n; ++k) {
    if (less(at(k - 1), at(k))) continue;
    strict = false;
    if (!less(at(k), at(k - 1))) continue;  // equal neighbours: still in order
    starts.push_back(k);
    if (starts.size() > max_runs) {
      std::stable_sort(first, last, less);
      return false;
    }
  }
  // Left to right: the merged prefix keeps its elements before equal ones of the next
  // run, so equal elements stay in their original order.
  starts.push_back(n);
  for (std::size_t r = 1; r + 1 < starts.size(); ++r)
    std::inplace_merge(first, first + static_cast<std::ptrdiff_t>(starts[r]), first + static_cast<std::ptrdiff_t>(starts[r + 1]),
                       less);
  return strict;
}

}  // namespace ckpt::detail
