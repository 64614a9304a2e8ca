// ckpt/mpi/zarr_plan.hpp — which chunks of which zarr arrays each rank writes, when the
// ranks write one t5x or Orbax checkpoint together
// (format/zarr/write_part.hpp). Every rank works out the same plan from every rank's
// description of its leaves:
//   - a Sharded leaf is one zarr array of its global shape, on a chunk grid that every
//     box is a union of chunks of: per dimension, the greatest common divisor of the
//     boxes' edges, so an even split gives chunks of a shard's shape (t5x's chunk grid
//     follows the shards), cut smaller (by divisors) until a chunk is within 64 MiB or a
//     quarter of SaveOptions::max_memory. Each distinct box is written by the least
//     loaded rank holding it (replicas are written once);
//   - a leaf every rank holds is chunked as one process would (ckpt::detail::zarr::meta_for), and
//     each chunk written by the least loaded rank (t5x: a partition held by several
//     hosts is further sharded across them); a 0-d array by rank 0.
// zarr stores each element once, so the boxes of a Sharded leaf must tile its array:
// a gap, or two different boxes that overlap, is an error naming the leaf.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/format/zarr/write_part.hpp>
#include <ckpt/leaf/box.hpp>
#include <ckpt/mpi/describe.hpp>

namespace ckpt::mpi::detail {

// More chunks than this in one array: the boxes share no reasonable grid.
inline constexpr std::uint64_t max_chunks_per_array = std::uint64_t{1} << 20;

// The largest divisor of n that is at most cap (at least 1).
inline std::int64_t largest_divisor_at_most(std::int64_t n, std::int64_t cap) {
  if (cap >= n) return n;
  std::int64_t best = 1;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    if (d <= cap) best = std::max(best, d);
    if (n / d <= cap) best = std::max(best, n / d);
  }
  return best;
}

struct DistinctBox {
  Shape origin, shape;
  std::vector<int> holders;
};

// The distinct boxes of leaf i over the ranks (empty boxes left out).
inline std::vector<DistinctBox> distinct_boxes(const std::vector<std::vector<LeafDesc>>& all, std::size_t i) {
  std::vector<DistinctBox> boxes;
  std::map<std::pair<Shape, Shape>, std::size_t> seen;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const LeafDesc& d = all[r][i];
    if (ckpt::detail::box_elements(d.shape) == 0) continue;
    auto [it, fresh] = seen.emplace(std::make_pair(d.origin, d.shape), boxes.size());
    if (fresh) boxes.push_back({d.origin, d.shape, {}});
    boxes[it->second].holders.push_back(static_cast<int>(r));
  }
  return boxes;
}

// Throws unless the boxes tile the global array: no two overlap, and together they
// hold every element.
inline void check_tiling(const std::string& dir, const std::string& path, const Shape& global,
                         const std::vector<DistinctBox>& boxes) {
  std::uint64_t covered = 0;
  for (std::size_t a = 0; a < boxes.size(); ++a) {
    covered += ckpt::detail::box_elements(boxes[a].shape);
    for (std::size_t b = a + 1; b < boxes.size(); ++b) {
      bool meet = true;
      for (std::size_t k = 0; k < global.size(); ++k)
        meet = meet && boxes[a].origin[k] < boxes[b].origin[k] + boxes[b].shape[k] &&
               boxes[b].origin[k] < boxes[a].origin[k] + boxes[a].shape[k];
      if (meet)
        throw Error(dir, path, "the boxes at " + shape_str(boxes[a].origin) + " and " + shape_str(boxes[b].origin) +
                                   " overlap; a zarr array stores each element once (only the native format keeps "
                                   "overlapping boxes)");
    }
  }
  if (covered != ckpt::detail::box_elements(global))
    throw Error(dir, path, "the ranks' boxes hold " + std::to_string(covered) + " of the " +
                               std::to_string(ckpt::detail::box_elements(global)) +
                               " elements of the global array; a zarr array needs them all (the native format "
                               "stores partial arrays)");
}

// The chunk shape of a Sharded leaf's array (see the top of this file).
inline Shape shard_chunks(const std::string& dir, const std::string& path, dtype type, const Shape& global,
                          const std::vector<DistinctBox>& boxes, std::uint64_t max_memory) {
  const std::size_t rank = global.size();
  Shape c(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    std::int64_t g = 0;
    for (const auto& b : boxes) {
      g = std::gcd(g, b.origin[k]);
      if (b.origin[k] + b.shape[k] < global[k]) g = std::gcd(g, b.origin[k] + b.shape[k]);
    }
    c[k] = std::max<std::int64_t>(g == 0 ? global[k] : g, 1);
  }
  const std::uint64_t target = ckpt::detail::zarr::chunk_target(max_memory);
  for (std::size_t k = 0; k < rank; ++k) {  // smaller, first dimension first, keeping the grid
    std::uint64_t bytes = dtype_size(type);
    for (auto x : c) bytes *= static_cast<std::uint64_t>(x);
    if (bytes <= target) break;
    const std::uint64_t rest = bytes / static_cast<std::uint64_t>(c[k]);
    c[k] = largest_divisor_at_most(c[k], static_cast<std::int64_t>(std::max<std::uint64_t>(target / rest, 1)));
  }
  std::uint64_t count = 1;
  for (std::size_t k = 0; k < rank; ++k)
    count *= static_cast<std::uint64_t>((global[k] + c[k] - 1) / c[k]);
  if (count > max_chunks_per_array)
    throw Error(dir, path, "the ranks' boxes share no chunk grid coarser than chunks of " + shape_str(c) + " (" +
                               std::to_string(count) +
                               " chunks); split the array evenly, or save the native format, which has no grid");
  return c;
}

// What `rank` writes of a zarr-based checkpoint of these leaves (see the top of this file).
// The same plan on every rank; throws the same error on every rank.
inline ckpt::detail::zarr::WritePart plan_zarr_part(const std::string& dir, const std::vector<std::vector<LeafDesc>>& all, int rank,
                                      std::uint64_t max_memory) {
  check_same_tree(dir, all);
  const int P = static_cast<int>(all.size());
  const auto& first = all[0];
  ckpt::detail::zarr::WritePart part;
  part.planned = true;
  part.metadata = rank == 0;
  part.process = rank;
  part.chunks.resize(first.size());
  part.regions.resize(first.size());
  std::vector<std::uint64_t> load(static_cast<std::size_t>(P), 0);
  auto least_loaded = [&](const std::vector<int>& among) {
    int best = among.front();
    for (int r : among)
      if (load[static_cast<std::size_t>(r)] < load[static_cast<std::size_t>(best)]) best = r;
    return best;
  };
  std::vector<int> everyone(static_cast<std::size_t>(P));
  std::iota(everyone.begin(), everyone.end(), 0);

  for (std::size_t i = 0; i < first.size(); ++i) {
    const LeafDesc& d0 = first[i];
    if (!is_numeric(d0.type)) continue;  // strings, None: the metadata's
    const std::uint64_t es = dtype_size(d0.type);
    auto& mine = part.regions[i];
    if (d0.boxed) {
      const auto boxes = distinct_boxes(all, i);
      check_tiling(dir, d0.path, d0.global, boxes);
      part.chunks[i] = shard_chunks(dir, d0.path, d0.type, d0.global, boxes, max_memory);
      for (const auto& b : boxes) {
        const int w = least_loaded(b.holders);
        load[static_cast<std::size_t>(w)] += ckpt::detail::box_elements(b.shape) * es;
        if (w == rank) mine.push_back({b.origin, b.shape, 0});
      }
    } else if (d0.shape.empty()) {
      if (rank == 0) mine.push_back({{}, {}, 0});
      load[0] += es;
    } else {
      const ckpt::detail::zarr::ArrayMeta m = ckpt::detail::zarr::meta_for(d0.type, d0.shape, io::codec::none, 0, ckpt::detail::zarr::chunk_target(max_memory));
      ckpt::detail::zarr::check_chunk_budget(m, max_memory, dir, d0.path);
      part.chunks[i] = m.chunks;
      const std::int64_t rows = d0.shape[0], per = m.chunks[0];
      const std::uint64_t row_bytes = rows == 0 ? 0 : d0.length / static_cast<std::uint64_t>(rows);
      for (std::int64_t at = 0; at < rows; at += per) {
        const std::int64_t n = std::min(per, rows - at);
        const int w = least_loaded(everyone);
        load[static_cast<std::size_t>(w)] += static_cast<std::uint64_t>(n) * row_bytes;
        if (w != rank) continue;
        ckpt::detail::zarr::Region r{Shape(d0.shape.size(), 0), d0.shape, static_cast<std::uint64_t>(at) * row_bytes};
        r.origin[0] = at;
        r.shape[0] = n;
        mine.push_back(std::move(r));
      }
    }
  }
  return part;
}

}  // namespace ckpt::mpi::detail
