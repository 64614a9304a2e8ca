// ckpt/io/tile_checksums.hpp — checksums of rectangular tiles of a stored box, so that a
// reader of a column strip of a row-split array verifies what it reads without reading
// whole rows (a checkpoint saved by ranks split by rows, restored by ranks split by
// columns).
//
// A box of shape [d0, ..., dk] (k >= 1) is stored row-major: a matrix of
// R = d0 * ... * d(k-1) rows of L = dk * element-size bytes. Its tile grid cuts that
// matrix into tiles of tile_rows rows by tile_bytes bytes (the last row block and the
// last column of tiles may be smaller). Tile (b, j) covers rows [b * tile_rows, ...)
// and bytes [j * tile_bytes, ...) of each; its checksum chains xxh3 over its row
// segments from the top: h = xxh3(segment, seed = h), starting from seed 0. Tiles are
// numbered row block by row block: b * col_tiles() + j.
//
// Why chained short hashes: xxh3 of inputs up to 240 bytes runs as fast per byte as of
// 1 MiB blocks (128-byte segments, chained, hash within a few percent of 1 MiB blocks),
// so tiles cost one more pass over the box's bytes on save
// and nothing extra to verify what a strip reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <ckpt/io/checksum.hpp>

namespace ckpt::io {

struct TileGrid {
  std::uint64_t rows = 0;        // R
  std::uint64_t row_bytes = 0;   // L
  std::uint64_t tile_bytes = 0;  // bytes of a row a tile covers
  std::uint64_t tile_rows = 0;   // rows a tile covers

  std::uint64_t col_tiles() const { return (row_bytes + tile_bytes - 1) / tile_bytes; }
  std::uint64_t row_blocks() const { return (rows + tile_rows - 1) / tile_rows; }
  std::uint64_t count() const { return col_tiles() * row_blocks(); }
  // Bytes of a row in tile column j.
  std::uint64_t segment(std::uint64_t j) const { return std::min(tile_bytes, row_bytes - j * tile_bytes); }

  // At most this many tile columns: a strip's reads round out to a tile at each edge,
  // so at most 2/64 of a row more than it needs.
  static constexpr std::uint64_t max_col_tiles = 64;
  // Tiles narrower than this would cost more in checksums (8 bytes each) than they save.
  static constexpr std::uint64_t min_tile_bytes = 128;
  // Rows per tile make a tile about this large, which bounds the manifest's checksums
  // at one per 64 KiB of box and a partial read's rounding in rows.
  static constexpr std::uint64_t target_tile_bytes = std::uint64_t{64} << 10;

  // The grid ckpt writes for a box of `shape` and element size `elem`; none when the
  // box has one dimension or rows too short to cut (a strip of them reads whole rows).
  static std::optional<TileGrid> for_box(std::span<const std::int64_t> shape, std::size_t elem) {
    if (shape.size() < 2 || elem == 0) return std::nullopt;
    TileGrid g;
    g.rows = 1;
    for (std::size_t k = 0; k + 1 < shape.size(); ++k) g.rows *= static_cast<std::uint64_t>(std::max<std::int64_t>(shape[k], 0));
    g.row_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(shape.back(), 0)) * elem;
    if (g.rows == 0 || g.row_bytes < 2 * min_tile_bytes) return std::nullopt;
    const std::uint64_t wanted = (g.row_bytes + max_col_tiles - 1) / max_col_tiles;
    g.tile_bytes = std::max(min_tile_bytes, (wanted + elem - 1) / elem * elem);  // whole elements
    g.tile_rows = std::clamp<std::uint64_t>(target_tile_bytes / g.tile_bytes, 1, g.rows);
    return g;
  }

  // The grid a manifest records (tile_bytes by tile_rows) for a box of `shape`, when it
  // is one ckpt could have cut: tiles narrower than a row and no taller than the box.
  static std::optional<TileGrid> recorded(std::span<const std::int64_t> shape, std::size_t elem,
                                          std::uint64_t tile_bytes, std::uint64_t tile_rows) {
    auto g = for_box(shape, elem);
    if (!g || tile_bytes == 0 || tile_rows == 0 || tile_bytes >= g->row_bytes || tile_rows > g->rows) return std::nullopt;
    g->tile_bytes = tile_bytes;
    g->tile_rows = tile_rows;
    return g;
  }
};

// The chained xxh3 of one more row segment of a tile (see the top of this file).
inline std::uint64_t tile_step(std::uint64_t h, std::span<const std::byte> segment) noexcept { return xxh3(segment, h); }

// Every tile's checksum of a box's bytes (bytes.size() == rows * row_bytes), in one pass
// in storage order.
inline std::vector<std::uint64_t> tile_checksums(std::span<const std::byte> bytes, const TileGrid& g) {
  std::vector<std::uint64_t> h(g.count(), 0);
  const std::uint64_t cols = g.col_tiles();
  for (std::uint64_t r = 0; r < g.rows; ++r) {
    std::uint64_t* block = h.data() + (r / g.tile_rows) * cols;
    const std::byte* row = bytes.data() + r * g.row_bytes;
    for (std::uint64_t j = 0; j < cols; ++j) block[j] = tile_step(block[j], {row + j * g.tile_bytes, g.segment(j)});
  }
  return h;
}

}  // namespace ckpt::io
