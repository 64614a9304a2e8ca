// ckpt/format/native/boxes.hpp — Sharded leaves in the native format: each is stored as
// the box the saving process held (by MPI saves, every process's box) of its global array.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/index.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/tile_checksums.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt::detail::native {

// The tile checksums (io/tile_checksums.hpp) of a box of `shape` holding `bytes`, for a
// box that a verified partial read reads in parts (larger than one piece; smaller ones
// are read whole) and whose rows are long enough to cut; else none.
inline std::vector<std::uint64_t> box_tile_checksums(const Shape& shape, dtype type, std::span<const std::byte> bytes) {
  if (bytes.size() <= box_piece) return {};
  const auto grid = io::TileGrid::for_box(shape, dtype_size(type));
  return grid ? io::tile_checksums(bytes, *grid) : std::vector<std::uint64_t>{};
}

// Whether b has the tiles this version writes for it (the grid TileGrid::for_box
// gives): an incremental save reuses them for the same bytes.
inline bool has_current_tile_grid(const IndexBox& b) {
  const auto grid = io::TileGrid::for_box(b.bytes.shape, dtype_size(b.bytes.type));
  return grid && !b.tiles.empty() && b.tile_bytes == grid->tile_bytes && b.tile_rows == grid->tile_rows &&
         b.tiles.size() == grid->count();
}

// Sets b's tile grid (TileGrid::for_box) and its checksums, box_tile_checksums of its
// bytes (none: b has no tiles). False when they are not one per tile of that grid.
inline bool set_tile_checksums(IndexBox& b, std::vector<std::uint64_t> tiles) {
  if (tiles.empty()) return true;
  const auto grid = io::TileGrid::for_box(b.bytes.shape, dtype_size(b.bytes.type));
  if (!grid || grid->count() != tiles.size()) return false;
  b.tile_bytes = grid->tile_bytes;
  b.tile_rows = grid->tile_rows;
  b.tiles = std::move(tiles);
  return true;
}

// Checks a Sharded leaf's box against its global shape; dir names the checkpoint.
inline void check_leaf_box(const std::string& dir, const SnapshotLeaf& l) {
  const LeafBox& b = *l.box;
  const Shape& s = l.data.shape;
  if (!is_numeric(l.data.type)) throw Error(dir, l.path.str(), "a Sharded leaf must be a numeric array");
  if (b.global_shape.size() != s.size() || b.origin.size() != s.size())
    throw ShapeMismatchError(dir, l.path.str(),
                             "Sharded: global_shape " + shape_str(b.global_shape) + " and offset " + shape_str(b.origin) +
                                 " must have the rank of local " + shape_str(s));
  for (std::size_t k = 0; k < s.size(); ++k)
    if (b.origin[k] < 0 || b.origin[k] + s[k] > b.global_shape[k])
      throw ShapeMismatchError(dir, l.path.str(),
                               "Sharded: local " + shape_str(s) + " at offset " + shape_str(b.origin) +
                                   " lies outside global_shape " + shape_str(b.global_shape));
}

// The tile checksums of a snapshot's Sharded leaves, hashed on a thread of its own from
// construction, while the writer writes and fsyncs the data files (on a core the writer
// leaves idle while it waits for the disk); box_sharded_entries takes them.
class BoxTiles {
 public:
  // No list at all when no leaf has tiles: 20,000 empty vectors were 480 KB of fresh
  // memory in every save of 20,000 small leaves.
  explicit BoxTiles(const Snapshot& snap) {
    bool any = false;
    for (const auto& l : snap.leaves) any = any || (l.box && l.data.view.size() > box_piece);
    if (!any) return;
    tiles_.resize(snap.leaves.size());
    hashing_.start([this, &snap] {
      for (std::size_t i = 0; i < snap.leaves.size(); ++i)
        if (const SnapshotLeaf& l = snap.leaves[i]; l.box) tiles_[i] = box_tile_checksums(l.data.shape, l.data.type, l.data.view);
    });
  }
  BoxTiles(const BoxTiles&) = delete;  // the hashing thread holds `this`
  BoxTiles& operator=(const BoxTiles&) = delete;
  std::vector<std::uint64_t> take(std::size_t i) {
    hashing_.wait();
    return i < tiles_.size() ? std::move(tiles_[i]) : std::vector<std::uint64_t>{};
  }

 private:
  std::vector<std::vector<std::uint64_t>> tiles_;
  exec::BackgroundTask hashing_;  // last: joined before tiles_ goes
};

// After the writer has stored every leaf whole: the entries of Sharded leaves become
// boxed entries (the global shape, one box holding what was written). tiles: their
// tile checksums, hashed while the writer wrote (null: hashed here).
inline void box_sharded_entries(const std::string& dir, const Snapshot& snap, IndexEntries& entries,
                                BoxTiles* tiles = nullptr) {
  for (std::size_t i = 0; i < snap.leaves.size(); ++i) {
    const SnapshotLeaf& l = snap.leaves[i];
    if (!l.box) continue;
    check_leaf_box(dir, l);  // save_staged has checked it; a direct write of the format has not
    IndexBox b;
    b.origin = l.box->origin;
    b.bytes = std::move(entries[i]);
    // the writer's chunk checksums are the pieces' (1 MiB each): not hashed twice
    b.pieces = b.bytes.chunk_xxh3.empty() ? box_piece_checksums(l.data.view) : b.bytes.chunk_xxh3.vec();
    b.ranks = {0};
    (void)set_tile_checksums(b, tiles ? tiles->take(i) : box_tile_checksums(b.bytes.shape, b.bytes.type, l.data.view));
    IndexEntry e;
    e.path = b.bytes.path;
    e.type = b.bytes.type;
    e.shape = l.box->global_shape;
    e.length = box_elements(e.shape) * dtype_size(e.type);
    e.boxes.push_back(std::move(b));
    entries[i] = std::move(e);
  }
}

}  // namespace ckpt::detail::native
