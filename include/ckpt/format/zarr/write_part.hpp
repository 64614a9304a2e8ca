// ckpt/format/zarr/write_part.hpp — the part of a zarr-based checkpoint one process
// writes, when several write one checkpoint together (ckpt::mpi::save<t5x>,
// ckpt::mpi::save<orbax_without_ocdbt>).
//
// Each array leaf is one zarr array of its global shape. The ranks agree on its chunk
// grid (mpi/zarr_plan.hpp: one that every rank's box is a union of chunks of), and each
// rank writes the chunks of the regions it was given: its own box of a Sharded leaf,
// or some chunks of a leaf every rank holds. One process, the one with `metadata`,
// writes the rest: each `.zarray` and the format's own files (t5x's msgpack
// `checkpoint`, Orbax's `_METADATA`, ...). A format that can be written this way has
// `static void write_part(const Snapshot&, const storage::Location&, const SaveOptions&,
// const detail::zarr::WritePart&)` (and the same over a directory, which ckpt::mpi::save
// stages); its `write_to` is write_part of WritePart{} (everything).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <ckpt/format/zarr/chunks.hpp>
#include <ckpt/format/zarr/metadata.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt::detail::zarr {

struct WritePart {
  bool planned = false;                      // false: one process writes everything (ckpt::save)
  bool metadata = true;                      // this process writes .zarray and the format's files
  int process = 0;                           // which process this is (OCDBT: its own database)
  std::vector<Shape> chunks;                 // per leaf: its array's chunk shape
  std::vector<std::vector<Region>> regions;  // per leaf: what this process writes of it
  // One process writes everything, chunks as meta_for cuts them.
  bool whole() const { return !planned; }
  // What this process writes of leaf i's array (metadata m): all of it when whole.
  std::vector<Region> regions_of(std::size_t i, const ArrayMeta& m) const {
    return whole() ? std::vector<Region>{detail::zarr::whole(m)} : regions.at(i);
  }
};

// The shape of the array a leaf is (part of): its global shape when Sharded.
inline const Shape& array_shape(const SnapshotLeaf& l) { return l.box ? l.box->global_shape : l.data.shape; }

// The metadata of leaf i's array: meta_for's chunks within a save's max_memory, or the
// chunk grid the part gives.
inline ArrayMeta part_meta(const WritePart& part, std::size_t i, const SnapshotLeaf& l, io::codec c, int level,
                           std::uint64_t max_memory, const std::string& checkpoint) {
  if (part.whole()) {
    ArrayMeta m = meta_for(l.data.type, l.data.shape, c, level, chunk_target(max_memory));
    check_chunk_budget(m, max_memory, checkpoint, l.path.str());
    return m;
  }
  ArrayMeta m = meta_for(l.data.type, array_shape(l), c, level);
  m.chunks = part.chunks.at(i);
  return m;
}

// Writes what this process writes of leaf i's array under `array`.
inline void write_leaf_part(const storage::Location& array, const ArrayMeta& m, const WritePart& part, std::size_t i,
                            const SnapshotLeaf& l, exec::ProgressTracker* progress) {
  write_array_part(array, m, l.data, part.regions_of(i, m), part.metadata, progress);
}

// The bytes this process writes of the snapshot's arrays (its progress total).
inline std::uint64_t part_bytes(const Snapshot& s, const WritePart& part) {
  if (part.whole()) return s.total_bytes();
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < s.leaves.size(); ++i)
    for (const Region& r : part.regions.at(i))
      n += static_cast<std::uint64_t>(element_count(r.shape)) * dtype_size(s.leaves[i].data.type);
  return n;
}

}  // namespace ckpt::detail::zarr
