// ckpt/index/entry.hpp — one leaf of an Index: its path, dtype, shape and where its
// bytes live, and the reads a format's IndexReader is asked for.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/huge_page_allocator.hpp>
#include <ckpt/detail/out_of_line.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt {

struct IndexBox;

struct IndexEntry {
  Path path;
  dtype type = dtype::none;
  Shape shape;
  std::string file;  // data file name inside the checkpoint, "" when stored inline
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // bytes
  // The bytes' encoding: "raw", "inline", a compressor's name (io::codec_name), "zarr3".
  // A view of a string with static storage (a literal): no leaf owns a copy.
  std::string_view codec = "raw";
  std::uint64_t checksum = 0;  // xxh3-64 of the leaf's bytes
  std::span<const std::byte> inline_bytes;  // into memory the Index keeps alive
  // A leaf stored as boxes of its global array (Sharded leaves, leaves written by several
  // processes): shape and length are the whole array's, the bytes are the boxes'.
  // Out of line (detail/out_of_line.hpp) here and below: most leaves have neither.
  detail::OutOfLineVector<IndexBox> boxes;  // (no initializer: IndexBox is incomplete here)
  // Native format v2: the xxh3 of each chunk_bytes-long piece of a leaf
  // longer than one chunk, so that parts of one leaf are read and verified by several
  // threads; checksum is then the xxh3 of these (as little-endian u64s). Else empty.
  std::uint64_t chunk_bytes = 0;
  detail::OutOfLineVector<std::uint64_t> chunk_xxh3{};
};

// One stored box of a leaf: its origin in the global array, its bytes (an entry whose
// shape is the box's), the xxh3 of each box_piece bytes of it when it is larger (so
// that reading part of a box verifies what it reads), the processes that held it.
// A box of two or more dimensions larger than a piece also has tile checksums
// (io/tile_checksums.hpp: tile_bytes of a row by tile_rows rows; else 0 and empty), so
// that reading a column strip of it verifies what it reads without whole rows.
struct IndexBox {
  Shape origin;
  IndexEntry bytes;
  std::vector<std::uint64_t> pieces{};
  std::vector<std::uint32_t> ranks{};
  std::uint64_t tile_bytes = 0;
  std::uint64_t tile_rows = 0;
  std::vector<std::uint64_t> tiles{};
};
inline constexpr std::uint64_t box_piece = std::uint64_t{1} << 20;

// An Index's entries: a vector whose buffer, from half a megabyte up (3,000 leaves),
// lies on huge pages (detail/huge_page_allocator.hpp): the fresh memory of opening
// 20,000 leaves costs a few faults instead of 830.
using IndexEntries = std::vector<IndexEntry, detail::HugePageAllocator<IndexEntry>>;

// The xxh3 of each box_piece bytes of a box larger than one piece (else none: the box's
// own checksum covers it), so that a reader of part of a box verifies what it reads.
inline std::vector<std::uint64_t> box_piece_checksums(std::span<const std::byte> bytes) {
  std::vector<std::uint64_t> out;
  if (bytes.size() <= box_piece) return out;
  for (std::size_t at = 0; at < bytes.size(); at += box_piece)
    out.push_back(io::xxh3(bytes.subspan(at, std::min<std::size_t>(box_piece, bytes.size() - at))));
  return out;
}


// One leaf to read: what exec::ReadQueue hands a reader that reads in batches.
struct LeafRead {
  const IndexEntry* entry;
  std::span<std::byte> dst;
  bool verify;
};

// A range of a stored leaf or box to read: bytes [at, at + dst.size()).
struct LeafRange {
  std::uint64_t at;
  std::span<std::byte> dst;
};

// A piece of a stored leaf (no boxes) to read: bytes [at, at + dst.size()) of *entry.
struct PieceRead {
  const IndexEntry* entry;
  std::uint64_t at;
  std::span<std::byte> dst;
};

}  // namespace ckpt
