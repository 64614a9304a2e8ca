// ckpt/index.hpp — the restore-side pivot: what a checkpoint holds and how to read it.
//
// A format turns files into an Index: per leaf, its path, dtype, shape and where its
// bytes live. Restores, metadata and the command-line tool read through it; a format
// supplies the one thing that differs, an IndexReader that fetches a leaf's bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/huge_page_allocator.hpp>
#include <ckpt/detail/out_of_line.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/tree/path.hpp>
#include <ckpt/tree/path_order.hpp>
#include <ckpt/tree/schema.hpp>
#if CKPT_DEFINE_API
#include <algorithm>
#include <cstring>
#endif

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

class Index;

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

// How a format fetches a leaf's bytes; it has checked the entry's bounds when opening.
class IndexReader {
 public:
  virtual ~IndexReader() = default;
  // Reads the whole leaf into dst (dst.size() == e.length), verifying its checksum when asked.
  virtual void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const = 0;
  // Whether entries carry the xxh3 of their bytes (checksum, chunk_xxh3), which reads
  // of a leaf in pieces verify (LeafVerifier); other formats check what they decode.
  virtual bool has_xxh3() const { return false; }
  // The fraction of the stored bytes already in the page cache, sampled; 1 when the
  // reader cannot tell (an object store, a format without files of its own). A restore
  // whose files are mostly not cached reads them as one sequential stream and verifies
  // on a second thread behind it (exec::ReadQueue): on this VM, two threads reading
  // parts of a freshly written, uncached file took twice as long as one stream.
  virtual double cached_fraction() const { return 1.0; }
  // Whether read_range reads only the range (boxed reads then read only what they need).
  virtual bool reads_ranges() const { return false; }
  // What one more read_range call costs, in bytes read: a read of part of a box weighs
  // it against the bytes when it chooses between many small ranges and fewer larger
  // ones. 0 (a file: a pread costs a system call) reads the fewest bytes; an object
  // store, where each range is a request, says how many bytes a request is worth.
  virtual std::uint64_t range_overhead() const { return 0; }
  // Reads bytes [at, at + dst.size()) of a stored leaf or box, unverified.
  virtual void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const {
    std::vector<std::byte> all(e.length);
    read(index, e, all, false);
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + dst.size()),
              dst.begin());
  }
  // Reads several ranges of one stored leaf or box, unverified: one read_range each, or
  // fewer calls where the reader can batch them (the native format: io/batch_read.hpp).
  virtual void read_ranges(const Index& index, const IndexEntry& e, std::span<const LeafRange> ranges) const {
    for (const LeafRange& r : ranges) read_range(index, e, r.at, r.dst);
  }
  // Reads pieces of stored leaves, unverified, given in the order they lie in the
  // files: a restore's one stream through files that are not in the page cache
  // (exec::ReadQueue). A reader whose leaves lie back to back overrides it to read
  // neighbours with one call: the kernel then issues larger requests (the native
  // format: a cold file is read faster in 64 MiB calls than in 4-16 MiB ones).
  virtual void read_in_file_order(const Index& index, std::span<const PieceRead> pieces) const {
    for (const PieceRead& p : pieces) read_range(index, *p.entry, p.at, p.dst);
  }
  // A reader for which many leaves are cheaper fetched together than one by one (an
  // object store: a few large ranged GETs instead of one request per leaf) says so here
  // and reads them all in read_batch, returning true; false: read them one by one (the
  // default). Asked first, so that a restore builds the batch only for such readers: for
  // 20,000 leaves it is 0.6 MB that a file's reader never looks at.
  virtual bool reads_in_batches() const { return false; }
  virtual bool read_batch(const Index& index, std::span<const LeafRead> reads) const {
    (void)index, (void)reads;
    return false;
  }
  // Reads several whole leaves stored in one piece each (no boxes, no per-chunk
  // checksums; every dst.size() == entry->length), verifying each when asked. A reader
  // that fetches neighbouring leaves with one call overrides it (the native format: one
  // pread of a run of adjacent small leaves into a buffer, instead of one pread each);
  // the default reads them one by one, through Index::read so that an error
  // names the leaf it was reading (defined after Index).
  virtual void read_group(const Index& index, std::span<const LeafRead> reads) const;
  // Reads the box at `origin` of `shape` of e (a whole stored array, not boxes) into dst
  // itself, fetching only the stored pieces that meet it (a chunked array: only its
  // chunks in the box), and returns true; false: Index::read_box reads by byte ranges.
  virtual bool read_box(const Index& index, const IndexEntry& e, const Shape& origin, const Shape& shape,
                        std::span<std::byte> dst) const {
    (void)index, (void)e, (void)origin, (void)shape, (void)dst;
    return false;
  }
  // Whether read_part works for e: the format records per-chunk checksums.
  virtual bool reads_parts(const IndexEntry&) const { return false; }
  // Reads bytes [offset, offset + dst.size()) of the leaf (offset on a chunk boundary,
  // the end on one or at the leaf's end), verifying those chunks when asked.
  virtual void read_part(const Index&, const IndexEntry&, std::uint64_t, std::span<std::byte>, bool) const {
    throw Error("this format reads whole leaves only");
  }
};

struct IndexInfo {
  std::string format;          // "ckpt-native", later "flax", "t5x", "orbax", "zarr"
  std::uint64_t format_version = 0;
  std::string library_version;
  std::string type_name;
  Schema schema;
  std::uint64_t fingerprint = 0;
  std::uint64_t processes = 0;  // how many processes saved it (0: not recorded, one)
};

class Index {
  // Entry i's path segments, for order_.
  struct SegmentsOf {
    const Index* index;
    const std::vector<std::string>& operator()(std::uint32_t i) const { return index->entries_[i].path.segments(); }
  };
  SegmentsOf segments_of() const { return {this}; }

 public:
  // Throws CorruptCheckpointError when a path appears twice, or is both a leaf and an
  // inner node (a.b and a.b.c both leaves).
  Index(std::string checkpoint, IndexInfo info, IndexEntries entries, std::shared_ptr<const IndexReader> reader,
        std::shared_ptr<const void> keep_alive);
  // The same from a plain vector (its entries are moved).
  Index(std::string checkpoint, IndexInfo info, std::vector<IndexEntry> entries,
        std::shared_ptr<const IndexReader> reader, std::shared_ptr<const void> keep_alive)
      : Index(std::move(checkpoint), std::move(info),
              IndexEntries(std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end())),
              std::move(reader), std::move(keep_alive)) {}

  const std::string& checkpoint() const noexcept { return checkpoint_; }
  const IndexInfo& info() const noexcept { return info_; }
  const IndexEntries& entries() const noexcept { return entries_; }

  const IndexEntry* find(const Path& p) const;
  // True when some leaf lies at or under p.
  bool has_subtree(const Path& p) const;
  // The distinct segments that follow p, in path order (empty when p is a leaf):
  // list indices first, by value ("2" before "10"), then the other names byte by byte.
  std::vector<std::string> children(const Path& p) const;
  // Calls fn(segment) for each of children(p) in turn, copying none; stops early when
  // fn returns false. (A restore counts a list's 20,000 items this way.)
  template <class Fn>
  void for_each_child(const Path& p, Fn&& fn) const {
    order_.for_each_child(segments_of(), p.segments(), fn);
  }
  // The entries of the list at p when each item is one leaf (item k is entry out[k]);
  // false when not (PathOrder::list_leaves).
  bool list_leaves(const Path& p, std::vector<std::uint32_t>& out) const {
    return order_.list_leaves(segments_of(), p.segments(), out);
  }
  // Reads a leaf's bytes into dst (dst.size() == e.length), verifying its checksum when asked.
  void read(const IndexEntry& e, std::span<std::byte> dst, bool verify = true) const;
  // Reads the box at `origin` of `shape` of a numeric leaf (its dtype, row-major) into
  // dst, reading only the stored bytes that intersect it (for Sharded targets).
  void read_box(const IndexEntry& e, const Shape& origin, const Shape& shape, std::span<std::byte> dst,
                bool verify = true) const;
  // Reads each stored box of e whole, one at a time, and checks the checksums that reads
  // of parts of it trust, its pieces' and its tiles' (a whole read checks only the box's
  // own): what `ckpt verify` adds for boxed leaves.
  void check_box_checksums(const IndexEntry& e) const;
  const std::shared_ptr<const IndexReader>& reader() const noexcept { return reader_; }
  // All of them at once, when the reader reads in batches (IndexReader::read_batch); false otherwise.
  bool reads_in_batches() const { return reader_->reads_in_batches(); }
  bool read_batch(std::span<const LeafRead> reads) const { return reader_->read_batch(*this, reads); }
  // Several small whole leaves at once (IndexReader::read_group); errors name the leaf.
  void read_group(std::span<const LeafRead> reads) const;
  // Whether read_pieces reads e a piece at a time (its format reads ranges and e is
  // stored in one piece, not as boxes); else it needs a buffer the leaf's size.
  bool reads_pieces(const IndexEntry& e) const { return reader_->reads_ranges() && e.boxes.empty(); }
  // Reads the leaf front to back through buf, calling fn(offset, piece) after each piece
  // (buf.size() bytes, the last shorter), and verifies the bytes as they pass: chunk by
  // chunk where the format records chunk checksums, else the leaf's xxh3 when the last
  // piece is read. A leaf of any size is read through one buffer (RestoreOptions::max_memory,
  // streamed converts). Pieces already handed to fn may turn out corrupt when a later
  // check fails: the call then throws, and the caller drops what fn made of them.
  // When !reads_pieces(e), buf must hold the whole leaf, read in one piece.
  void read_pieces(const IndexEntry& e, std::span<std::byte> buf, bool verify,
                   const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const;
  // Pieces of stored leaves in file order, unverified (IndexReader::read_in_file_order).
  void read_in_file_order(std::span<const PieceRead> pieces) const { reader_->read_in_file_order(*this, pieces); }
  // Parts of a leaf, when reads_parts(e) (see IndexReader::read_part).
  bool reads_parts(const IndexEntry& e) const { return reader_->reads_parts(e); }
  void read_part(const IndexEntry& e, std::uint64_t offset, std::span<std::byte> dst, bool verify) const {
    reader_->read_part(*this, e, offset, dst, verify);
  }

 private:

  std::string checkpoint_;
  IndexInfo info_;
  IndexEntries entries_;
  // Entry numbers in path order (tree/path_order.hpp): lookups are binary searches, and
  // a subtree is a range. A sorted vector rather than a map: no copy of any path, and
  // opening 20,000 leaves builds it in one pass when the writer's order is already path
  // order (a list of leaves), else one sort, instead of 20,000 node allocations.
  detail::PathOrder order_;
  std::shared_ptr<const IndexReader> reader_;
  std::shared_ptr<const void> keep_alive_;
};

// Where a restore's reads go when they may wait: a fill queues "read entry e into
// dst" here and the caller runs them all afterwards (exec::ReadQueue, on several
// threads). Declared beside Index so that restore/fill.hpp needs nothing from exec/.
class DeferredReads {
 public:
  virtual void push(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) = 0;

 protected:
  ~DeferredReads() = default;
};

}  // namespace ckpt

#if CKPT_DEFINE_API
#include <ckpt/restore/verifier.hpp>  // needs Index, above; kept out of units that only declare
#include <ckpt/io/tile_checksums.hpp>
#endif

namespace ckpt {

#if CKPT_DEFINE_API
CKPT_API Index::Index(std::string checkpoint, IndexInfo info, IndexEntries entries,
                      std::shared_ptr<const IndexReader> reader, std::shared_ptr<const void> keep_alive)
    : checkpoint_(std::move(checkpoint)),
      info_(std::move(info)),
      entries_(std::move(entries)),
      reader_(std::move(reader)),
      keep_alive_(std::move(keep_alive)) {
  if (entries_.size() > std::numeric_limits<std::uint32_t>::max())
    throw CorruptCheckpointError(checkpoint_, "", "more than 2^32 leaves");
  order_.build(static_cast<std::uint32_t>(entries_.size()), segments_of(), [&](std::uint32_t i, const char* what) {
    throw CorruptCheckpointError(checkpoint_, entries_[i].path.str(), what);
  });
}

CKPT_API const IndexEntry* Index::find(const Path& p) const {
  const std::uint32_t i = order_.find(segments_of(), p.segments());
  return i == detail::PathOrder::none ? nullptr : &entries_[i];
}

CKPT_API bool Index::has_subtree(const Path& p) const { return order_.has_subtree(segments_of(), p.segments()); }

CKPT_API std::vector<std::string> Index::children(const Path& p) const {
  std::vector<std::string> out;
  for_each_child(p, [&](const std::string& seg) {
    out.push_back(seg);
    return true;
  });
  return out;
}

CKPT_API void Index::read_pieces(const IndexEntry& e, std::span<std::byte> buf, bool verify,
                                 const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const {
  if (!reads_pieces(e)) {
    if (buf.size() < e.length)
      throw Error(checkpoint_, e.path.str(),
                  "the " + info_.format + " reader reads whole leaves, and this one (" + std::to_string(e.length) +
                      " bytes) is larger than the " + std::to_string(buf.size()) + "-byte buffer allowed");
    const auto all = buf.first(static_cast<std::size_t>(e.length));
    read(e, all, verify);
    return fn(0, all);
  }
  if (buf.empty() && e.length > 0) throw Error(checkpoint_, e.path.str(), "read_pieces needs a buffer");
  verify = verify && reader_->has_xxh3();
  LeafVerifier check(*this, e);
  for (std::uint64_t at = 0; at < e.length;) {
    const auto part = buf.first(static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), e.length - at)));
    try {
      reader_->read_range(*this, e, at, part);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& x) {
      throw CorruptCheckpointError(checkpoint_, e.path.str(), std::string("cannot read the leaf: ") + x.what());
    }
    if (verify) check.update(part);
    fn(at, part);
    at += part.size();
  }
  if (verify && e.length == 0) check.update({});
}

CKPT_API void Index::read(const IndexEntry& e, std::span<std::byte> dst, bool verify) const {
  if (dst.size() != e.length)
    throw Error(checkpoint_, e.path.str(),
                "target holds " + std::to_string(dst.size()) + " bytes, checkpoint " + std::to_string(e.length));
  if (!e.boxes.empty()) return read_box(e, Shape(e.shape.size(), 0), e.shape, dst, verify);
  try {
    reader_->read(*this, e, dst, verify);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(checkpoint_, e.path.str(), "out of memory reading the leaf");
  } catch (const std::exception& x) {  // one a reader did not foresee: still an Error naming the leaf
    throw CorruptCheckpointError(checkpoint_, e.path.str(), std::string("cannot read the leaf: ") + x.what());
  }
}

CKPT_API void Index::check_box_checksums(const IndexEntry& e) const {
  for (const IndexBox& b : e.boxes) {
    if (b.pieces.empty() && b.tiles.empty()) continue;
    std::vector<std::byte> bytes(b.bytes.length);
    reader_->read(*this, b.bytes, bytes, true);
    const std::string box = "the box at " + shape_str(b.origin) + ": ";
    if (!b.pieces.empty() && box_piece_checksums(bytes) != b.pieces)
      throw CorruptCheckpointError(checkpoint_, e.path.str(), box + "its piece checksums do not match its bytes");
    if (!b.tiles.empty()) {
      const auto grid = io::TileGrid::recorded(b.bytes.shape, dtype_size(b.bytes.type), b.tile_bytes, b.tile_rows);
      if (!grid || io::tile_checksums(bytes, *grid) != b.tiles)
        throw CorruptCheckpointError(checkpoint_, e.path.str(), box + "its tile checksums do not match its bytes");
    }
  }
}

CKPT_API void IndexReader::read_group(const Index& index, std::span<const LeafRead> reads) const {
  for (const LeafRead& r : reads) index.read(*r.entry, r.dst, r.verify);
}

CKPT_API void Index::read_group(std::span<const LeafRead> reads) const {
  for (const LeafRead& r : reads)
    if (r.dst.size() != r.entry->length || !r.entry->boxes.empty() || !r.entry->chunk_xxh3.empty())
      throw Error(checkpoint_, r.entry->path.str(), "read_group reads whole leaves stored in one piece");
  try {
    reader_->read_group(*this, reads);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(checkpoint_, "", "out of memory reading a group of " + std::to_string(reads.size()) + " leaves");
  } catch (const std::exception& x) {
    throw CorruptCheckpointError(checkpoint_, "", std::string("cannot read a group of leaves: ") + x.what());
  }
}

namespace detail {
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

// A verified read of part of a box by its tiles: each row block's touched tiles read
// whole (one range per row, or one for the block when they span its rows), verified,
// then the runs copied out of them.
inline void read_by_tiles(const Index& index, const IndexReader& reader, const IndexEntry& be, const IndexBox& box,
                          const TilePlan& plan, const std::vector<BoxRun>& runs, std::span<std::byte> dst) {
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
        throw CorruptCheckpointError(index.checkpoint(), be.path.str(),
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
inline void read_runs(const Index& index, const IndexReader& reader, const IndexEntry& be,
                      const std::vector<BoxRun>& runs, std::span<std::byte> dst, std::uint64_t overhead) {
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
inline std::uint64_t read_from_box(const Index& index, const IndexReader& reader, const IndexEntry& be,
                                   const Shape& bo, const IndexBox* box, const Shape& wo, const Shape& ws,
                                   std::span<std::byte> dst, bool verify) {
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
    read_runs(index, reader, be, runs, dst, overhead);
    return n;
  }
  // Part of a large box, verified: by its tiles when they cost less than its pieces (a
  // column strip of it), else by the pieces the runs touch (rows of it).
  const std::uint64_t by_pieces = piece_read_bytes(runs, be.length);
  if (box && !box->tiles.empty()) {
    const auto grid = io::TileGrid::recorded(be.shape, z, box->tile_bytes, box->tile_rows);
    if (!grid || grid->count() != box->tiles.size())
      throw CorruptCheckpointError(index.checkpoint(), be.path.str(), "a stored box's tile checksums do not fit it");
    const TilePlan plan(*grid, runs);
    const double by_tiles = static_cast<double>(plan.bytes) + static_cast<double>(plan.ranges) * static_cast<double>(overhead);
    const double pieces_cost = static_cast<double>(by_pieces) +
                               static_cast<double>((by_pieces + box_piece - 1) / box_piece) * static_cast<double>(overhead);
    if (by_tiles < pieces_cost && plan.largest <= max_tile_block_bytes) {
      read_by_tiles(index, reader, be, *box, plan, runs, dst);
      return n;
    }
  }
  const std::vector<std::uint64_t> none;
  const std::vector<std::uint64_t>& pieces = box ? box->pieces : none;
  if (pieces.size() != (be.length + box_piece - 1) / box_piece)
    throw CorruptCheckpointError(index.checkpoint(), be.path.str(), "a stored box lacks its piece checksums");
  std::vector<std::byte> buf(box_piece);
  std::uint64_t loaded = ~std::uint64_t{0};
  for (const BoxRun& r : runs) {
    for (std::uint64_t pos = r.src, out = r.dst, left = r.len; left > 0;) {
      const std::uint64_t p = pos / box_piece;
      if (p != loaded) {
        const std::uint64_t plen = std::min(box_piece, be.length - p * box_piece);
        reader.read_range(index, be, p * box_piece, std::span(buf).first(plen));
        if (io::xxh3(std::span(buf).first(plen)) != pieces[p])
          throw CorruptCheckpointError(index.checkpoint(), be.path.str(),
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
}  // namespace detail

CKPT_API void Index::read_box(const IndexEntry& e, const Shape& origin, const Shape& shape, std::span<std::byte> dst,
                              bool verify) const {
  const std::string where = e.path.str();
  if (!is_numeric(e.type)) throw Error(checkpoint_, where, "only numeric arrays can be read by box");
  if (origin.size() != e.shape.size() || shape.size() != e.shape.size())
    throw ShapeMismatchError(checkpoint_, where, "rank " + std::to_string(e.shape.size()) + " in checkpoint, box of rank " +
                                                     std::to_string(shape.size()) + " in target");
  for (std::size_t k = 0; k < shape.size(); ++k)
    if (origin[k] < 0 || shape[k] < 0 || origin[k] + shape[k] > e.shape[k])
      throw ShapeMismatchError(checkpoint_, where, "box at " + shape_str(origin) + " of shape " + shape_str(shape) +
                                                       " lies outside the array's shape " + shape_str(e.shape));
  const std::uint64_t want = detail::box_elements(shape);
  if (dst.size() != want * dtype_size(e.type))
    throw Error(checkpoint_, where, "target holds " + std::to_string(dst.size()) + " bytes, the box " +
                                        std::to_string(want * dtype_size(e.type)));
  if (want == 0) return;
  std::uint64_t got = 0;
  if (e.boxes.empty()) {
    try {
      if (reader_->read_box(*this, e, origin, shape, dst)) return;
    } catch (const Error&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw Error(checkpoint_, where, "out of memory reading the box");
    } catch (const std::exception& x) {
      throw CorruptCheckpointError(checkpoint_, where, std::string("cannot read the box: ") + x.what());
    }
    got = detail::read_from_box(*this, *reader_, e, Shape(e.shape.size(), 0), nullptr, origin, shape, dst, verify);
  } else {
    for (const IndexBox& b : e.boxes)
      got += detail::read_from_box(*this, *reader_, b.bytes, b.origin, &b, origin, shape, dst, verify);
  }
  if (got != want)
    throw CorruptCheckpointError(checkpoint_, where,
                                 got < want ? "part of the box at " + shape_str(origin) + " of shape " +
                                                  shape_str(shape) + " is in none of the saved boxes"
                                            : "saved boxes overlap");
}
#endif

}  // namespace ckpt
