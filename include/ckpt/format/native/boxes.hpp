// ckpt/format/native/boxes.hpp — Sharded leaves in the native format: each is stored as
// the box the saving process held (by MPI saves, every process's box) of its global array.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <ckpt/index.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt::detail::native {

// The xxh3 of each box_piece bytes, for boxes larger than one piece (else none: the
// box's own checksum covers it), so that a reader of part of a box verifies what it reads.
inline std::vector<std::uint64_t> piece_checksums(std::span<const std::byte> bytes) {
  std::vector<std::uint64_t> out;
  if (bytes.size() <= box_piece) return out;
  for (std::size_t at = 0; at < bytes.size(); at += box_piece)
    out.push_back(io::xxh3(bytes.subspan(at, std::min<std::size_t>(box_piece, bytes.size() - at))));
  return out;
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

// After the writer has stored every leaf whole: the entries of Sharded leaves become
// boxed entries (the global shape, one box holding what was written).
inline void box_sharded_entries(const std::string& dir, const Snapshot& snap, std::vector<IndexEntry>& entries) {
  for (std::size_t i = 0; i < snap.leaves.size(); ++i) {
    const SnapshotLeaf& l = snap.leaves[i];
    if (!l.box) continue;
    check_leaf_box(dir, l);  // save_staged has checked it; a direct write of the format has not
    IndexBox b;
    b.origin = l.box->origin;
    b.bytes = std::move(entries[i]);
    // the writer's chunk checksums are the pieces' (1 MiB each): not hashed twice
    b.pieces = b.bytes.chunk_xxh3.empty() ? piece_checksums(l.data.view) : b.bytes.chunk_xxh3;
    b.ranks = {0};
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
