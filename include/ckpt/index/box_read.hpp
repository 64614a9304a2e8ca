// ckpt/index/box_read.hpp — how Index::read_box reads part of a stored array: the
// runs of bytes a wanted box meets in each stored box, read as they are or verified by
// the box's pieces or tiles, whichever reads fewer bytes and calls.
//
// Unverified, the runs are read as ranges (several runs as one range where a call
// costs more than the gap between them). Verified, a box read whole is checked against
// its checksum; part of a large box against the xxh3 of each box_piece bytes it touches
// (rows of it) or of each tile it touches (io/tile_checksums.hpp: a column strip of it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/index/entry.hpp>
#include <ckpt/index/reader.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/tile_checksums.hpp>
#include <ckpt/leaf/box.hpp>

namespace ckpt::detail {

struct BoxRun {
  std::uint64_t src, dst, len;  // bytes [src, src + len) of a stored box go to dst
};

// The bytes a verified read of runs (in increasing src order) reads a piece at a time:
// every box_piece bytes any run touches.
inline std::uint64_t piece_read_bytes(const std::vector<BoxRun>& runs, std::uint64_t length) {
  std::uint64_t bytes = 0, last = ~std::uint64_t{0};
  for (const BoxRun& r : runs)
    for (std::uint64_t p = r.src / box_piece; p <= (r.src + r.len - 1) / box_piece; ++p)
      if (p != last) bytes += std::min(box_piece, length - p * box_piece), last = p;
  return bytes;
}

// Calls f(run, row, begin, end) for every row of a box seen as rows of row_bytes that
// a run covers, with bytes [begin, end) of that row, in increasing order.
template <class F>
void for_each_row_part(const std::vector<BoxRun>& runs, std::uint64_t row_bytes, F&& f) {
  for (const BoxRun& r : runs) {
    const std::uint64_t first = r.src / row_bytes, last = (r.src + r.len - 1) / row_bytes;
    for (std::uint64_t row = first; row <= last; ++row)
      f(r, row, row == first ? r.src - row * row_bytes : 0, row == last ? r.src + r.len - row * row_bytes : row_bytes);
  }
}

// A read by tiles (io/tile_checksums.hpp): per row block, the tile columns [lo, hi) any
// run touches there, all of whose rows are read (hi == 0: none).
struct TilePlan {
  io::TileGrid grid;
  std::vector<std::uint64_t> lo, hi;
  std::uint64_t bytes = 0;    // what it reads
  std::uint64_t ranges = 0;   // in how many read_range calls
  std::uint64_t largest = 0;  // its largest row block's bytes, one buffer

  TilePlan(const io::TileGrid& g, const std::vector<BoxRun>& runs) : grid(g), lo(g.row_blocks(), ~std::uint64_t{0}), hi(g.row_blocks(), 0) {
    for_each_row_part(runs, g.row_bytes, [&](const BoxRun&, std::uint64_t row, std::uint64_t a, std::uint64_t e) {
      const std::uint64_t b = row / g.tile_rows;
      lo[b] = std::min(lo[b], a / g.tile_bytes);
      hi[b] = std::max(hi[b], (e - 1) / g.tile_bytes + 1);
    });
    for (std::uint64_t b = 0; b < lo.size(); ++b)
      if (hi[b] > 0) {
        const std::uint64_t block = rows_in(b) * width(b);
        bytes += block;
        ranges += width(b) == g.row_bytes ? 1 : rows_in(b);
        largest = std::max(largest, block);
      }
  }
  std::uint64_t rows_in(std::uint64_t b) const { return std::min(grid.tile_rows, grid.rows - b * grid.tile_rows); }
  std::uint64_t width(std::uint64_t b) const {
    return std::min(hi[b] * grid.tile_bytes, grid.row_bytes) - lo[b] * grid.tile_bytes;
  }
};

// Reads the part of a wanted box that lies in a stored box through the format's
// reader, with the fewest bytes and read calls the checks allow: Index::read_box's
// plan, for each stored box of a leaf (or the leaf itself, stored whole).
struct BoxReader {
  const Index& index;  // handed on to every call of the reader
  const IndexReader& reader;
  const std::string& checkpoint;  // named in errors

  std::uint64_t read_from_box(const IndexEntry& be, const Shape& bo, const IndexBox* box, const Shape& wo,
                              const Shape& ws, std::span<std::byte> dst, bool verify) const;
  void read_by_tiles(const IndexEntry& be, const IndexBox& box, const TilePlan& plan, const std::vector<BoxRun>& runs,
                     std::span<std::byte> dst) const;
  void read_runs(const IndexEntry& be, const std::vector<BoxRun>& runs, std::span<std::byte> dst,
                 std::uint64_t overhead) const;
};

// A verified read of part of a box by its tiles: each row block's touched tiles read
// whole (one range per row, or one for the block when they span its rows), verified,
// then the runs copied out of them.
inline void BoxReader::read_by_tiles(const IndexEntry& be, const IndexBox& box, const TilePlan& plan,
                                      const std::vector<BoxRun>& runs, std::span<std::byte> dst) const {
  const io::TileGrid& g = plan.grid;
  const std::uint64_t L = g.row_bytes, S = g.tile_bytes, cols = g.col_tiles();
  std::vector<std::byte> buf;
  std::vector<LeafRange> ranges;
  std::uint64_t loaded = ~std::uint64_t{0};
  auto load = [&](std::uint64_t b) {
    const std::uint64_t r0 = b * g.tile_rows, rows = plan.rows_in(b), w = plan.width(b), c0 = plan.lo[b] * S;
    buf.resize(rows * w);
    if (w == L) {
      reader.read_range(index, be, r0 * L, buf);
    } else {
      ranges.clear();
      for (std::uint64_t i = 0; i < rows; ++i) ranges.push_back({(r0 + i) * L + c0, std::span(buf).subspan(i * w, w)});
      reader.read_ranges(index, be, ranges);
    }
    for (std::uint64_t j = plan.lo[b]; j < plan.hi[b]; ++j) {
      std::uint64_t h = 0;
      for (std::uint64_t i = 0; i < rows; ++i) h = io::tile_step(h, std::span(buf).subspan(i * w + (j * S - c0), g.segment(j)));
      if (h != box.tiles[b * cols + j])
        throw CorruptCheckpointError(checkpoint, be.path.str(),
                                     "checksum mismatch in the tile at row " + std::to_string(r0) + ", byte " +
                                         std::to_string(j * S) + " of the box: the leaf's bytes were altered or torn");
    }
    loaded = b;
  };
  for_each_row_part(runs, L, [&](const BoxRun& r, std::uint64_t row, std::uint64_t a, std::uint64_t e) {
    const std::uint64_t b = row / g.tile_rows;
    if (b != loaded) load(b);
    const std::uint64_t w = plan.width(b), c0 = plan.lo[b] * S;
    std::memcpy(dst.data() + r.dst + (row * L + a - r.src), buf.data() + (row - b * g.tile_rows) * w + (a - c0), e - a);
  });
}

// A read by tiles holds one row block in memory: at most this much (else by pieces).
inline constexpr std::uint64_t max_tile_block_bytes = std::uint64_t{64} << 20;

// Unverified runs of a box: read_ranges of them, or, where the reader's range_overhead
// is worth more than the gap between runs, one range over several (at most
// max_run_group bytes, through a buffer).
inline constexpr std::uint64_t max_run_group = std::uint64_t{16} << 20;
inline void BoxReader::read_runs(const IndexEntry& be, const std::vector<BoxRun>& runs, std::span<std::byte> dst,
                                 std::uint64_t overhead) const {
  std::vector<std::byte> buf;
  std::vector<LeafRange> single;  // runs read on their own, handed over in batches
  for (std::size_t i = 0; i < runs.size();) {
    std::size_t j = i + 1;
    while (j < runs.size() && runs[j].src - (runs[j - 1].src + runs[j - 1].len) <= overhead &&
           runs[j].src + runs[j].len - runs[i].src <= max_run_group)
      ++j;
    if (j == i + 1) {
      single.push_back({runs[i].src, dst.subspan(runs[i].dst, runs[i].len)});
      if (single.size() == 4096) {
        reader.read_ranges(index, be, single);
        single.clear();
      }
    } else {
      const std::uint64_t begin = runs[i].src, end = runs[j - 1].src + runs[j - 1].len;
      buf.resize(end - begin);
      reader.read_range(index, be, begin, buf);
      for (std::size_t k = i; k < j; ++k) std::memcpy(dst.data() + runs[k].dst, buf.data() + (runs[k].src - begin), runs[k].len);
    }
    i = j;
  }
  if (!single.empty()) reader.read_ranges(index, be, single);
}

// Reads the part of one stored box (bytes be at origin bo; box: its piece and tile
// checksums, null for a leaf stored whole) that lies in the wanted box (wo, ws) into
// dst; returns the elements read.
inline std::uint64_t BoxReader::read_from_box(const IndexEntry& be, const Shape& bo, const IndexBox* box,
                                              const Shape& wo, const Shape& ws, std::span<std::byte> dst,
                                              bool verify) const {
  std::vector<BoxRun> runs;
  const std::size_t z = dtype_size(be.type);
  const std::uint64_t n = for_each_run(bo, be.shape, wo, ws, z, [&](std::uint64_t s, std::uint64_t d, std::uint64_t l) {
    runs.push_back({s, d, l});
  });
  if (n == 0) return 0;
  const bool whole = n == box_elements(be.shape);
  if (whole && runs.size() == 1) {
    reader.read(index, be, dst.subspan(runs[0].dst, runs[0].len), verify);
    return n;
  }
  if (!reader.reads_ranges() || (verify && (whole || be.length <= box_piece))) {
    std::vector<std::byte> all(be.length);  // what is verified is what was read: the whole box
    reader.read(index, be, all, verify);
    for (const BoxRun& r : runs) std::memcpy(dst.data() + r.dst, all.data() + r.src, r.len);
    return n;
  }
  const std::uint64_t overhead = reader.range_overhead();
  if (!verify) {
    read_runs(be, runs, dst, overhead);
    return n;
  }
  // Part of a large box, verified: by its tiles when they cost less than its pieces (a
  // column strip of it), else by the pieces the runs touch (rows of it).
  const std::uint64_t by_pieces = piece_read_bytes(runs, be.length);
  if (box && !box->tiles.empty()) {
    const auto grid = io::TileGrid::recorded(be.shape, z, box->tile_bytes, box->tile_rows);
    if (!grid || grid->count() != box->tiles.size())
      throw CorruptCheckpointError(checkpoint, be.path.str(), "a stored box's tile checksums do not fit it");
    const TilePlan plan(*grid, runs);
    const double by_tiles = static_cast<double>(plan.bytes) + static_cast<double>(plan.ranges) * static_cast<double>(overhead);
    const double pieces_cost = static_cast<double>(by_pieces) +
                               static_cast<double>((by_pieces + box_piece - 1) / box_piece) * static_cast<double>(overhead);
    if (by_tiles < pieces_cost && plan.largest <= max_tile_block_bytes) {
      read_by_tiles(be, *box, plan, runs, dst);
      return n;
    }
  }
  const std::vector<std::uint64_t> none;
  const std::vector<std::uint64_t>& pieces = box ? box->pieces : none;
  if (pieces.size() != (be.length + box_piece - 1) / box_piece)
    throw CorruptCheckpointError(checkpoint, be.path.str(), "a stored box lacks its piece checksums");
  std::vector<std::byte> buf(box_piece);
  std::uint64_t loaded = ~std::uint64_t{0};
  for (const BoxRun& r : runs) {
    for (std::uint64_t pos = r.src, out = r.dst, left = r.len; left > 0;) {
      const std::uint64_t p = pos / box_piece;
      if (p != loaded) {
        const std::uint64_t plen = std::min(box_piece, be.length - p * box_piece);
        reader.read_range(index, be, p * box_piece, std::span(buf).first(plen));
        if (io::xxh3(std::span(buf).first(plen)) != pieces[p])
          throw CorruptCheckpointError(checkpoint, be.path.str(),
                                       "checksum mismatch: the leaf's bytes were altered or torn");
        loaded = p;
      }
      const std::uint64_t take = std::min(left, (p + 1) * box_piece - pos);
      std::memcpy(dst.data() + out, buf.data() + (pos - p * box_piece), take);
      pos += take;
      out += take;
      left -= take;
    }
  }
  return n;
}
}  // namespace ckpt::detail
