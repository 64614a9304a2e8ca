// ckpt/format/native/reader.hpp — a native checkpoint directory becomes an Index.
//
// Opening reads the commit marker and the manifest only, checks the manifest against
// the marker, and checks every leaf's bytes lie inside its data file, so that later
// reads can trust offsets and lengths. Reading a leaf preads straight into the
// target, hashing each piece while it is still in cache.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <climits>  // IOV_MAX
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <ckpt/format/native/manifest.hpp>
#include <ckpt/io/batch_read.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::native_format {

namespace fs = std::filesystem;

class Reader final : public IndexReader {
 public:
  Reader(const fs::path& dir, std::map<std::string, io::File> files) {
    for (auto& [name, f] : files) files_.emplace(name, DataFile{std::move(f), dir / name});
  }

  void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
    if (e.file.empty()) {
      std::copy(e.inline_bytes.begin(), e.inline_bytes.end(), dst.begin());
      if (verify && io::xxh3(dst) != e.checksum) fail_checksum(index, e);
      return;
    }
    if (!e.chunk_xxh3.empty()) return read_part(index, e, 0, dst, verify);  // version 2 (issue 11)
    const auto& [f, name] = files_.at(e.file);
    constexpr std::size_t piece = std::size_t{1} << 20;
    io::Xxh3Stream hash;
    for (std::size_t done = 0; done < dst.size(); done += piece) {
      const auto part = dst.subspan(done, std::min(piece, dst.size() - done));
      try {
        io::pread_exact(f, part, e.offset + done, name);
      } catch (const Error& err) {
        throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
      }
      if (verify) hash.update(part);
    }
    if (verify && hash.digest() != e.checksum) fail_checksum(index, e);
  }

  // Small leaves lie back to back in a data file (each at a 4 KiB boundary, in snapshot
  // order): a run of neighbours is read with one preadv, the padding between them into
  // a scratch page, then each leaf is verified on its own. 20,000 leaves of 4 KiB: ~160
  // calls instead of 20,000, whose per-call cost (the page-cache lookup, the syscall)
  // was as large as the copying.
  void read_group(const Index& index, std::span<const LeafRead> reads) const override {
    std::vector<const LeafRead*> order;
    order.reserve(reads.size());
    for (const LeafRead& r : reads) {
      if (r.entry->file.empty()) read(index, *r.entry, r.dst, r.verify);
      else order.push_back(&r);
    }
    std::sort(order.begin(), order.end(), [](const LeafRead* a, const LeafRead* b) {
      return std::tie(a->entry->file, a->entry->offset) < std::tie(b->entry->file, b->entry->offset);
    });
    alignas(64) static thread_local std::byte padding[alignment];  // gaps are read here and dropped
    std::vector<iovec> iov;
    for (std::size_t i = 0; i < order.size();) {
      const IndexEntry& first = *order[i]->entry;
      std::uint64_t end = first.offset;
      iov.clear();
      std::size_t k = i;
      // A run: the same file, each leaf starting at most one padding page after the last.
      for (; k < order.size() && iov.size() + 2 <= IOV_MAX; ++k) {
        const IndexEntry& e = *order[k]->entry;
        if (e.file != first.file || e.offset < end || e.offset - end > alignment) break;
        if (e.offset > end) iov.push_back({padding, static_cast<std::size_t>(e.offset - end)});
        iov.push_back({order[k]->dst.data(), order[k]->dst.size()});
        end = e.offset + e.length;
      }
      const auto& [f, name] = files_.at(first.file);
      try {
        io::preadv_exact(f, iov, first.offset, name);
      } catch (const Error&) {
        // A short file or an I/O error somewhere in the run: read its leaves one by one,
        // so that the error names the leaf at fault, not the run's first (each read
        // verifies its leaf when asked).
        for (; i < k; ++i) read(index, *order[i]->entry, order[i]->dst, order[i]->verify);
        continue;
      }
      for (; i < k; ++i)
        if (order[i]->verify && io::xxh3(order[i]->dst) != order[i]->entry->checksum) fail_checksum(index, *order[i]->entry);
    }
  }

  bool reads_ranges() const override { return true; }
  bool has_xxh3() const override { return true; }
  void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const override {
    if (e.file.empty()) {
      std::copy_n(e.inline_bytes.begin() + static_cast<std::ptrdiff_t>(at), dst.size(), dst.begin());
      return;
    }
    try {
      const auto& [f, name] = files_.at(e.file);
      io::pread_exact(f, dst, e.offset + at, name);
    } catch (const Error& err) {
      throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
    }
  }

  // Many ranges of one leaf or box (a column strip's rows): batched (io/batch_read.hpp).
  void read_ranges(const Index& index, const IndexEntry& e, std::span<const LeafRange> ranges) const override {
    if (e.file.empty()) return IndexReader::read_ranges(index, e, ranges);
    std::vector<io::RangeRead> ops;
    ops.reserve(ranges.size());
    for (const LeafRange& r : ranges) ops.push_back({e.offset + r.at, r.dst});
    try {
      const auto& [f, name] = files_.at(e.file);
      io::pread_ranges(f, ops, name);
    } catch (const Error& err) {
      throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
    }
  }

  // ---- format version 2 (issue 11): parts of a leaf, each chunk verified on its own ----
  bool reads_parts(const IndexEntry& e) const override { return !e.file.empty() && !e.chunk_xxh3.empty(); }

  void read_part(const Index& index, const IndexEntry& e, std::uint64_t offset, std::span<std::byte> dst,
                 bool verify) const override {
    const std::uint64_t chunk = e.chunk_bytes;
    if (e.chunk_xxh3.empty() || offset % chunk != 0 || offset > e.length || dst.size() > e.length - offset ||
        (dst.size() % chunk != 0 && offset + dst.size() != e.length))
      throw Error(index.checkpoint(), e.path.str(), "a part read not on chunk boundaries");
    const auto& [f, name] = files_.at(e.file);
    // No posix_fadvise(WILLNEED) here, though several threads read parts of one file:
    // with it (Linux 6.18, ext4), cold restores ran at 0.4x a plain read() and every
    // later warm restore of the same pages at 0.64x, against 0.8-0.9x and 0.95-1.1x
    // without it (docs/benchmarks.md). The likely cause is that WILLNEED fills the
    // cache in small pages where the kernel's own readahead, which follows each
    // thread's sequential part, allocates large folios.
    for (std::size_t done = 0; done < dst.size(); done += chunk) {
      const auto part = dst.subspan(done, std::min<std::size_t>(chunk, dst.size() - done));
      try {
        io::pread_exact(f, part, e.offset + offset + done, name);
      } catch (const Error& err) {
        throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
      }
      const std::uint64_t k = (offset + done) / chunk;
      if (verify && io::xxh3(part) != e.chunk_xxh3[k])
        throw CorruptCheckpointError(index.checkpoint(), e.path.str(),
                                     "checksum mismatch in bytes [" + std::to_string(k * chunk) + ", +" +
                                         std::to_string(part.size()) + "): the leaf's bytes were altered or torn");
    }
  }

 private:
  [[noreturn]] static void fail_checksum(const Index& index, const IndexEntry& e) {
    throw CorruptCheckpointError(index.checkpoint(), e.path.str(),
                                 "checksum mismatch: the leaf's bytes were altered or torn");
  }
  // Each data file open, with its path for messages (made once, not at every read).
  struct DataFile {
    io::File file;
    fs::path name;
  };
  std::map<std::string, DataFile> files_;
};

inline bool detect(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / manifest_file, ec) || fs::is_regular_file(dir / commit_file, ec);
}

inline std::shared_ptr<const Index> open(const fs::path& dir) {
  const std::string ckpt = dir.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(ckpt, "", "no checkpoint here (not a directory)");
  if (!fs::is_regular_file(dir / commit_file, ec))
    throw CorruptCheckpointError(ckpt, "", "no commit marker: not a complete checkpoint (a save was interrupted?)");

  // io errors name the file; rethrown so that every error names the checkpoint itself.
  std::vector<std::byte> commit_bytes;
  try {
    commit_bytes = io::read_file(dir / commit_file, 4096);
  } catch (const Error& e) {
    throw CorruptCheckpointError(ckpt, "", std::string("commit marker cannot be read: ") + e.what());
  }
  const CommitRecord commit =
      decode_commit({reinterpret_cast<const char*>(commit_bytes.data()), commit_bytes.size()}, ckpt);
  if (commit.manifest_bytes > max_manifest_bytes) throw CorruptCheckpointError(ckpt, "", "manifest size is implausible");
  auto manifest = std::make_shared<std::vector<std::byte>>();
  try {
    *manifest = io::read_file(dir / manifest_file, commit.manifest_bytes);
  } catch (const CorruptCheckpointError&) {
    throw CorruptCheckpointError(ckpt, "", "manifest is larger than the commit marker records");
  } catch (const Error& e) {
    throw CorruptCheckpointError(ckpt, "", std::string("manifest cannot be read: ") + e.what());
  }
  check_manifest(*manifest, commit, ckpt);

  IndexInfo info;
  std::vector<IndexEntry> entries = decode_manifest(*manifest, ckpt, info);

  std::map<std::string, io::File> files;
  std::map<std::string, std::uint64_t> sizes;
  for (const IndexEntry* ep : stored_bytes(entries)) {
    const IndexEntry& e = *ep;
    if (e.file.empty()) continue;
    if (!files.count(e.file)) {
      const fs::path p = dir / e.file;
      try {
        io::File f = io::File::open_read(p);
        sizes[e.file] = f.size(p);
        files.emplace(e.file, std::move(f));
      } catch (const Error&) {
        throw CorruptCheckpointError(ckpt, e.path.str(), "data file " + e.file + " is missing or unreadable");
      }
    }
    check_within_file(ckpt, e, sizes[e.file]);
  }
  // The entries' inline spans point into the manifest's bytes, which the Index keeps alive.
  return std::make_shared<const Index>(ckpt, std::move(info), std::move(entries),
                                       std::make_shared<Reader>(dir, std::move(files)), manifest);
}

}  // namespace ckpt::native_format
