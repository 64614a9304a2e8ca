// ckpt/index.hpp — the restore-side pivot: what a checkpoint holds and how to read it.
//
// A format turns files into an Index: per leaf, its path, dtype, shape and where its
// bytes live (index/entry.hpp). Restores, metadata and the command-line tool read
// through it; a format supplies the one thing that differs, an IndexReader that fetches
// a leaf's bytes (index/reader.hpp).
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
#include <ckpt/index/entry.hpp>
#include <ckpt/index/reader.hpp>
#include <ckpt/tree/path.hpp>
#include <ckpt/tree/path_order.hpp>
#include <ckpt/tree/schema.hpp>
#if CKPT_DEFINE_API
#include <algorithm>
#include <cstring>
#include <ckpt/index/box_read.hpp>
#include <ckpt/index/verifier.hpp>
#include <ckpt/io/tile_checksums.hpp>
#endif

namespace ckpt {

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
  LeafVerifier check(checkpoint_, e);
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
  const detail::BoxReader boxes{*this, *reader_, checkpoint_};
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
    got = boxes.read_from_box(e, Shape(e.shape.size(), 0), nullptr, origin, shape, dst, verify);
  } else {
    for (const IndexBox& b : e.boxes)
      got += boxes.read_from_box(b.bytes, b.origin, &b, origin, shape, dst, verify);
  }
  if (got != want)
    throw CorruptCheckpointError(checkpoint_, where,
                                 got < want ? "part of the box at " + shape_str(origin) + " of shape " +
                                                  shape_str(shape) + " is in none of the saved boxes"
                                            : "saved boxes overlap");
}
#endif

}  // namespace ckpt
