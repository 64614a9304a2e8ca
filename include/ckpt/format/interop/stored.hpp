// ckpt/format/interop/stored.hpp — the Index side shared by the formats of the JAX world.
//
// A leaf of a Flax, t5x, Orbax, zarr or safetensors checkpoint lives in one of three
// places: bytes inside a parsed file (msgpack), several such pieces (Flax's chunked
// arrays), or a store that `load` reads from (a zarr array's chunks, a byte range of a
// safetensors file), through the checkpoint's io::KvStore. IndexBuilder collects entries and where each one lives; the
// Reader it makes fetches them. These formats carry no checksums: `verify` has
// nothing to check beyond the decoding itself, which always validates sizes.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <ckpt/format/zarr/kv_chunks.hpp>
#include <ckpt/index.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt::detail::interop {

namespace fs = std::filesystem;

struct Stored {
  std::vector<std::span<const std::byte>> pieces;  // in-memory bytes, concatenated
  bool swap = false;                                // big-endian pieces
  // set: what fills the leaf's bytes itself (a zarr array's chunks in a key-value
  // store); `fail` throws naming the checkpoint and leaf
  std::function<void(std::span<std::byte>, const std::function<void(const std::string&)>& fail)> load;
  // with load: reads the box at (origin, shape) alone, decoding only what meets it
  std::function<void(const Shape& origin, const Shape& shape, std::span<std::byte>,
                     const std::function<void(const std::string&)>& fail)>
      load_box;
  // with load: reads bytes [at, at + dst.size()) of the leaf alone (a byte range of a file)
  std::function<void(std::uint64_t at, std::span<std::byte>)> load_range;
};

class Reader final : public IndexReader {
 public:
  explicit Reader(std::vector<Stored> stored) : stored_(std::move(stored)) {
    // Ranges when every leaf is plain bytes in memory (safetensors, a mapped file):
    // restores and converts under a memory budget then read them piece by piece.
    ranges_ = std::all_of(stored_.begin(), stored_.end(),
                          [](const Stored& s) { return s.load ? bool(s.load_range) : !s.swap; });
  }

  bool reads_ranges() const override { return ranges_; }
  void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const override {
    if (!ranges_) return IndexReader::read_range(index, e, at, dst);
    const Stored& s = stored(index, e);
    if (s.load_range) {
      if (at > e.length || dst.size() > e.length - at)
        throw Error(index.checkpoint(), e.path.str(), "range past the end of the leaf");
      return s.load_range(at, dst);
    }
    std::uint64_t start = 0;  // of the current piece, in the leaf
    auto out = dst;
    for (auto p : s.pieces) {
      const std::uint64_t end = start + p.size();
      if (!out.empty() && at < end && at + dst.size() > start) {
        const std::uint64_t from = std::max(at, start) - start;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(p.size() - from, out.size()));
        std::memcpy(out.data(), p.data() + from, n);
        drop_pages(p.subspan(static_cast<std::size_t>(from), n));
        out = out.subspan(n);
      }
      start = end;
    }
    if (!out.empty())
      throw CorruptCheckpointError(index.checkpoint(), e.path.str(), "stored bytes fall short of the leaf's size");
  }

  // A zarr array reads only the chunks that meet the box (a rank's shard).
  bool read_box(const Index& index, const IndexEntry& e, const Shape& origin, const Shape& shape,
                std::span<std::byte> dst) const override {
    const Stored& s = stored(index, e);
    auto fail = [&](const std::string& w) { throw CorruptCheckpointError(index.checkpoint(), e.path.str(), w); };
    if (s.load_box) {
      s.load_box(origin, shape, dst, fail);
      return true;
    }
    return false;
  }

  void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool) const override {
    const Stored& s = stored(index, e);
    auto fail = [&](const std::string& w) { throw CorruptCheckpointError(index.checkpoint(), e.path.str(), w); };
    if (s.load) {
      s.load(dst, fail);
      return;
    }
    std::size_t at = 0;
    for (auto p : s.pieces) {
      if (p.size() > dst.size() - at) fail("stored bytes exceed the leaf's size");
      std::copy(p.begin(), p.end(), dst.begin() + static_cast<std::ptrdiff_t>(at));
      at += p.size();
    }
    if (at != dst.size()) fail("stored bytes fall short of the leaf's size");
    if (s.swap) detail::zarr::byteswap(dst, dtype_size(e.type), e.type);
  }

 private:
  const Stored& stored(const Index& index, const IndexEntry& e) const {
    const auto i = static_cast<std::size_t>(&e - index.entries().data());
    if (&e < index.entries().data() || i >= stored_.size())
      throw Error(index.checkpoint(), e.path.str(), "entry does not belong to this index");
    return stored_[i];
  }
  // Bytes read by range from a mapped file are not needed again: the whole pages among
  // them leave this process's resident set (they stay in the page cache), so that a
  // leaf read piece by piece does not end up resident whole. A hint; for memory
  // that is not a file mapping (a parsed msgpack buffer) nothing is dropped.
  void drop_pages(std::span<const std::byte> b) const {
    if (!mapped_ || b.size() < 2 * page) return;
    const auto first = (reinterpret_cast<std::uintptr_t>(b.data()) + page - 1) / page * page;
    const auto last = (reinterpret_cast<std::uintptr_t>(b.data()) + b.size()) / page * page;
    if (last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }
  static constexpr std::uintptr_t page = 4096;
  std::vector<Stored> stored_;
  bool ranges_ = false;
  bool mapped_ = false;

 public:
  // The pieces point into read-only file mappings (io::MappedFile): see drop_pages.
  void set_mapped() { mapped_ = true; }
};

class IndexBuilder {
 public:
  explicit IndexBuilder(std::string checkpoint) : checkpoint_(std::move(checkpoint)) {}

  const std::string& checkpoint() const { return checkpoint_; }

  void add_bytes(Path p, dtype t, Shape shape, std::vector<std::span<const std::byte>> pieces, bool swap = false) {
    IndexEntry e;
    e.path = std::move(p);
    e.type = t;
    e.shape = std::move(shape);
    std::uint64_t n = 0;
    for (auto s : pieces) n += s.size();
    e.length = n;
    if (pieces.size() == 1) e.inline_bytes = pieces[0];
    e.codec = "inline";
    check_length(e);
    entries_.push_back(std::move(e));
    Stored s;
    s.pieces = std::move(pieces);
    s.swap = swap;
    stored_.push_back(std::move(s));
  }

  void add_none(Path p) { add_bytes(std::move(p), dtype::none, {}, {}); }

  void add_string(Path p, std::string text) {
    const std::string& s = strings_->emplace_back(std::move(text));
    add_bytes(std::move(p), dtype::string, {}, {std::as_bytes(std::span(s.data(), s.size()))});
  }

  // Memory the entries' spans point into, kept alive by the Index.
  void keep(std::shared_ptr<const void> k) { keep_.push_back(std::move(k)); }

  // A zarr v2 array of a key-value store: only the chunks a read meets are fetched.
  void add_zarr(Path p, std::shared_ptr<const detail::zarr::KvArrayV2> a, std::string_view codec = {}) {
    add_loaded(std::move(p), a->meta.type, a->meta.shape, a->name,
               codec.empty() ? io::codec_name(a->meta.compressor) : codec,
               [a](std::span<std::byte> dst, const detail::zarr::Fail& fail) { a->read(dst, fail); },
               [a](const Shape& o, const Shape& n, std::span<std::byte> dst, const detail::zarr::Fail& fail) {
                 a->read_box(o, n, dst, fail);
               });
  }

  // A leaf whose bytes `load` produces (dst is exactly dtype size x elements), and a box
  // of them `load_box` (may be empty: boxes are then cut from the whole); `where` is what
  // `ckpt tree` shows as its file, `codec` its encoding (a literal: IndexEntry::codec).
  void add_loaded(Path p, dtype t, Shape shape, std::string where, std::string_view codec, decltype(Stored::load) load,
                  decltype(Stored::load_box) load_box = {}, decltype(Stored::load_range) load_range = {}) {
    IndexEntry e;
    e.path = std::move(p);
    e.type = t;
    e.shape = std::move(shape);
    e.length = static_cast<std::uint64_t>(element_count(e.shape)) * dtype_size(t);
    e.file = std::move(where);
    e.codec = codec;
    entries_.push_back(std::move(e));
    Stored s;
    s.load = std::move(load);
    s.load_box = std::move(load_box);
    s.load_range = std::move(load_range);
    stored_.push_back(std::move(s));
  }

  std::shared_ptr<const Index> build(IndexInfo info) {
    keep_.push_back(strings_);
    auto all = std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(keep_));
    auto reader = std::make_shared<Reader>(std::move(stored_));
    if (mapped_) reader->set_mapped();
    return std::make_shared<const Index>(checkpoint_, std::move(info), std::move(entries_), std::move(reader),
                                         std::move(all));
  }
  // The in-memory pieces are spans of read-only file mappings (safetensors).
  void pieces_are_mapped() { mapped_ = true; }

 private:
  bool mapped_ = false;
  void check_length(const IndexEntry& e) const {
    if (!is_numeric(e.type)) return;
    const std::int64_t n = element_count(e.shape);
    if (n < 0 || static_cast<std::uint64_t>(n) > e.length / dtype_size(e.type) ||
        static_cast<std::uint64_t>(n) * dtype_size(e.type) != e.length)
      throw CorruptCheckpointError(checkpoint_, e.path.str(),
                                   "shape " + shape_str(e.shape) + " of " + std::string(dtype_name(e.type)) + " needs " +
                                       (n < 0 ? std::string("too many") : std::to_string(n)) + " elements but " +
                                       std::to_string(e.length) + " bytes are stored");
  }

  std::string checkpoint_;
  IndexEntries entries_;
  std::vector<Stored> stored_;
  std::shared_ptr<std::deque<std::string>> strings_ = std::make_shared<std::deque<std::string>>();
  std::vector<std::shared_ptr<const void>> keep_;
};

// The leaves of a Snapshot as a tree, for writers of nested formats (msgpack maps,
// directories): children in first-appearance order.
// (Children are held by pointer: clang with libstdc++ refuses a std::pair of the
// still-incomplete SnapNode inside its own definition.)
struct SnapNode {
  std::vector<std::pair<std::string, std::unique_ptr<SnapNode>>> children;
  const SnapshotLeaf* leaf = nullptr;

  SnapNode& child(const std::string& k) {
    for (auto& [name, n] : children)
      if (name == k) return *n;
    children.emplace_back(k, std::make_unique<SnapNode>());
    return *children.back().second;
  }
};

// Nests a snapshot's leaves; a path both a leaf and an inner node is an error.
inline SnapNode snapshot_tree(const Snapshot& snap, const std::string& checkpoint) {
  SnapNode root;
  for (const auto& l : snap.leaves) {
    SnapNode* n = &root;
    for (const auto& seg : l.path.segments()) {
      if (n->leaf) throw Error(checkpoint, l.path.str(), "path lies under another leaf");
      n = &n->child(seg);
    }
    if (n->leaf || !n->children.empty()) throw Error(checkpoint, l.path.str(), "path is both a leaf and an inner node");
    n->leaf = &l;
  }
  return root;
}

}  // namespace ckpt::detail::interop
