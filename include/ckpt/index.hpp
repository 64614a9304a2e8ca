// ckpt/index.hpp — the restore-side pivot: what a checkpoint holds and how to read it.
//
// A format turns files into an Index: per leaf, its path, dtype, shape and where its
// bytes live. Restores, metadata and the command-line tool read through it; a format
// supplies the one thing that differs, an IndexReader that fetches a leaf's bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/tree/path.hpp>
#include <ckpt/tree/schema.hpp>

namespace ckpt {

struct IndexEntry {
  Path path;
  dtype type = dtype::none;
  Shape shape;
  std::string file;  // data file name inside the checkpoint, "" when stored inline
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // bytes
  std::string codec = "raw";
  std::uint64_t checksum = 0;  // xxh3-64 of the leaf's bytes
  std::span<const std::byte> inline_bytes;  // into memory the Index keeps alive
  // Native format v2 (issue 11): the xxh3 of each chunk_bytes-long piece of a leaf
  // longer than one chunk, so that parts of one leaf are read and verified by several
  // threads; checksum is then the xxh3 of these (as little-endian u64s). Else empty.
  std::uint64_t chunk_bytes = 0;
  std::vector<std::uint64_t> chunk_xxh3{};
};

class Index;

// How a format fetches a leaf's bytes; it has checked the entry's bounds when opening.
class IndexReader {
 public:
  virtual ~IndexReader() = default;
  // Reads the whole leaf into dst (dst.size() == e.length), verifying its checksum when asked.
  virtual void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const = 0;
  // Whether read_part works for e: the format records per-chunk checksums (issue 11).
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
};

class Index {
 public:
  Index(std::string checkpoint, IndexInfo info, std::vector<IndexEntry> entries,
        std::shared_ptr<const IndexReader> reader, std::shared_ptr<const void> keep_alive)
      : checkpoint_(std::move(checkpoint)),
        info_(std::move(info)),
        entries_(std::move(entries)),
        reader_(std::move(reader)),
        keep_alive_(std::move(keep_alive)) {
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (!by_path_.emplace(entries_[i].path.segments(), i).second)
        throw CorruptCheckpointError(checkpoint_, entries_[i].path.str(), "leaf appears twice in the checkpoint");
    }
    // A leaf cannot also be an inner node (a.b and a.b.c both leaves).
    for (auto it = by_path_.begin(); it != by_path_.end(); ++it) {
      auto next = std::next(it);
      if (next != by_path_.end() && next->first.size() > it->first.size() &&
          std::equal(it->first.begin(), it->first.end(), next->first.begin()))
        throw CorruptCheckpointError(checkpoint_, entries_[it->second].path.str(),
                                     "path is both a leaf and an inner node");
    }
  }

  const std::string& checkpoint() const noexcept { return checkpoint_; }
  const IndexInfo& info() const noexcept { return info_; }
  const std::vector<IndexEntry>& entries() const noexcept { return entries_; }

  const IndexEntry* find(const Path& p) const;
  // True when some leaf lies at or under p.
  bool has_subtree(const Path& p) const;
  // The distinct segments that follow p, in sorted order (empty when p is a leaf).
  std::vector<std::string> children(const Path& p) const;
  // Reads a leaf's bytes into dst (dst.size() == e.length), verifying its checksum when asked.
  void read(const IndexEntry& e, std::span<std::byte> dst, bool verify = true) const;
  // Parts of a leaf, when reads_parts(e) (see IndexReader::read_part).
  bool reads_parts(const IndexEntry& e) const { return reader_->reads_parts(e); }
  void read_part(const IndexEntry& e, std::uint64_t offset, std::span<std::byte> dst, bool verify) const {
    reader_->read_part(*this, e, offset, dst, verify);
  }

 private:
  static bool starts_with(const std::vector<std::string>& v, const std::vector<std::string>& pre) {
    return v.size() >= pre.size() && std::equal(pre.begin(), pre.end(), v.begin());
  }

  std::string checkpoint_;
  IndexInfo info_;
  std::vector<IndexEntry> entries_;
  std::map<std::vector<std::string>, std::size_t> by_path_;
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
CKPT_API const IndexEntry* Index::find(const Path& p) const {
  auto it = by_path_.find(p.segments());
  return it == by_path_.end() ? nullptr : &entries_[it->second];
}

CKPT_API bool Index::has_subtree(const Path& p) const {
  auto it = by_path_.lower_bound(p.segments());
  return it != by_path_.end() && starts_with(it->first, p.segments());
}

CKPT_API std::vector<std::string> Index::children(const Path& p) const {
  std::vector<std::string> out;
  const auto& pre = p.segments();
  for (auto it = by_path_.lower_bound(pre); it != by_path_.end() && starts_with(it->first, pre); ++it) {
    if (it->first.size() == pre.size()) continue;
    const std::string& seg = it->first[pre.size()];
    if (out.empty() || out.back() != seg) out.push_back(seg);
  }
  return out;
}

CKPT_API void Index::read(const IndexEntry& e, std::span<std::byte> dst, bool verify) const {
  if (dst.size() != e.length)
    throw Error(checkpoint_, e.path.str(),
                "target holds " + std::to_string(dst.size()) + " bytes, checkpoint " + std::to_string(e.length));
  reader_->read(*this, e, dst, verify);
}
#endif

}  // namespace ckpt
