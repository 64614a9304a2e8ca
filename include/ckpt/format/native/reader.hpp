// ckpt/format/native/reader.hpp — a native checkpoint (a directory, or objects on S3 or in
// memory) becomes an Index.
//
// Opening reads the commit marker and the manifest only, checks the manifest against
// the marker, and checks every leaf's bytes lie inside its data file, so that later
// reads can trust offsets and lengths. Reading a leaf preads straight into the
// target, hashing each piece while it is still in cache.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <ckpt/detail/huge_page_allocator.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/native/object_reader.hpp>
#include <ckpt/io/batch_read.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::native {

namespace fs = std::filesystem;

// A restore's buffer for a run of small leaves (Reader::read_runs): read whole, each
// leaf verified there and copied out.
inline constexpr std::size_t bounce_buffer_bytes = std::size_t{256} << 10;

// A manifest's bytes, in memory of their own: from half a megabyte up on huge pages,
// not zeroed before they are read (detail/huge_page_allocator.hpp). Read into a
// std::vector, a 20,000-leaf manifest (2 MB) was zeroed first and then faulted in,
// 512 fresh pages, in every process that restores once.
//
// Such a manifest also holds, past its end, room for two of the reader's bounce
// buffers (take_spare(), lent to the Reader below). They mostly fall on the manifest's
// last huge page, which reading the manifest has faulted in already; a slab of their
// own was one more fresh huge page per restore, which the kernel zeroes before the
// first read into it, and the restore of 20,000 x 4 KiB leaves waited for that.
// Smaller manifests (fewer than ~8,000 leaves) leave
// the reader to its slab.
class ManifestBytes {
 public:
  static constexpr std::size_t spare_bytes = 2 * bounce_buffer_bytes;
  explicit ManifestBytes(std::size_t n)
      : size_(n), capacity_(with_spare(n)), data_(detail::HugePageAllocator<std::byte>{}.allocate(capacity_)) {
    if (capacity_ == size_) return;
    // Page-aligned by address: on huge pages the mapping is, elsewhere (a sanitizer's
    // build) the heap's block need not be.
    const auto end = reinterpret_cast<std::uintptr_t>(data_ + size_);
    const std::size_t pad = static_cast<std::size_t>(((end + page - 1) & ~std::uintptr_t{page - 1}) - end);
    spare_ = {data_ + size_ + pad, capacity_ - size_ - pad};
  }
  ManifestBytes(const ManifestBytes&) = delete;
  ManifestBytes& operator=(const ManifestBytes&) = delete;
  ~ManifestBytes() { detail::HugePageAllocator<std::byte>{}.deallocate(data_, capacity_); }
  std::span<std::byte> bytes() noexcept { return {data_, size_}; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::byte* data() const noexcept { return data_; }
  // Memory past the manifest, page-aligned, at least spare_bytes, that no one else
  // uses: given to the first caller only (a Reader, which keeps this object alive while
  // it uses it); empty for any later caller and for a small manifest.
  std::span<std::byte> take_spare() const noexcept {
    if (spare_taken_.exchange(true, std::memory_order_relaxed)) return {};
    return spare_;
  }

 private:
  static constexpr std::size_t page = 4096;
  // The bytes to allocate for a manifest of n: room for the spare and its alignment
  // from half a megabyte up.
  static std::size_t with_spare(std::size_t n) {
    if (n < detail::HugePageAllocator<std::byte>::min_bytes) return n;
    if (n > std::numeric_limits<std::size_t>::max() - page - spare_bytes) throw std::bad_alloc();
    return n + page + spare_bytes;
  }
  std::size_t size_, capacity_;
  std::byte* data_;
  std::span<std::byte> spare_;
  mutable std::atomic<bool> spare_taken_{false};
};

class Reader final : public IndexReader {
 public:
  // manifest: the checkpoint's manifest, whose spare memory (if any) becomes the first
  // bounce buffers.
  Reader(const fs::path& dir, std::map<std::string, io::File> files, std::shared_ptr<const ManifestBytes> manifest = {}) {
    for (auto& [name, f] : files) files_.emplace(name, DataFile{std::move(f), dir / name});
    if (manifest) {
      const std::span<std::byte> spare = manifest->take_spare();
      for (std::size_t at = 0; at + bounce_bytes <= spare.size() && bounces_.size() < slab_buffers; at += bounce_bytes)
        bounces_.push_back(spare.data() + at);
      lent_ = bounces_.size();
      if (lent_ != 0) lent_from_ = std::move(manifest);
    }
  }

  void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
    if (e.file.empty()) {
      std::copy(e.inline_bytes.begin(), e.inline_bytes.end(), dst.begin());
      if (verify && io::xxh3(dst) != e.checksum) fail_checksum(index, e);
      return;
    }
    if (!e.chunk_xxh3.empty()) return read_part(index, e, 0, dst, verify);  // version 2
    const DataFile& df = files_.at(e.file);
    constexpr std::size_t piece = std::size_t{1} << 20;
    io::Xxh3Stream hash;
    for (std::size_t done = 0; done < dst.size(); done += piece) {
      const auto part = dst.subspan(done, std::min(piece, dst.size() - done));
      if (verify) read_hashed(index, e, df, part, done, hash);
      else read_at(index, e, df, part, done);
    }
    if (verify && hash.digest() != e.checksum) fail_checksum(index, e);
  }

  // Small leaves lie back to back in a data file (each at a 4 KiB boundary, in snapshot
  // order): a run of neighbours is read with one pread into a scratch buffer of
  // bounce_bytes, padding and all, and each leaf is verified there and copied out.
  // 20,000 leaves of 4 KiB: ~320 calls instead of 20,000, whose per-call cost (the
  // page-cache lookup, the syscall) was as large as the copying.
  //
  // Why a copy through a buffer, not a preadv straight into the targets: on this
  // project's VMs, the kernel's first write into a page the program has touched but the
  // kernel has not is slow (the hypervisor's toll, not a fault the guest counts), so a
  // preadv into 20,000 freshly allocated 4 KiB vectors took about ten times as long as
  // reading into a reused buffer and copying. A buffer the size of a core's L2 costs one copy from cache where there is no such toll.
  // The reader keeps its buffers (one a thread at most) for its life, so each restore
  // pays that toll on a few pages only.
  static constexpr std::size_t bounce_bytes = bounce_buffer_bytes;
  // What one pread brings in when the bytes are then verified (read and read_part): a
  // quarter of a core's L2 on the AMD EPYCs this project measures on (1 MiB, which
  // the kernel's copy also pulls the page cache's bytes through), so that xxh3 reads
  // them from L2: a warm restore is faster in 256 KiB reads than in 1 MiB ones (a
  // checksum chunk), and as fast as one plain read().
  // But only from the page cache: bytes that must come from the disk are read in one
  // request, the rest of the checksum chunk, as a disk with little readahead prefers
  // (with read_ahead_kb 128, a cold checkpoint is read about a tenth faster in 1 MiB
  // pieces than in 256 KiB ones). Each piece is first asked of the cache
  // alone (io::pread_cached), which never waits for the disk.
  static constexpr std::size_t verified_read_bytes = std::size_t{256} << 10;
  void read_group(const Index& index, std::span<const LeafRead> reads) const override {
    std::vector<const LeafRead*> order;
    order.reserve(reads.size());
    for (const LeafRead& r : reads) {
      if (r.entry->file.empty() || r.dst.size() > bounce_bytes) read(index, *r.entry, r.dst, r.verify);
      else order.push_back(&r);
    }
    // By place in the files; a group usually comes in that order (a restore walks its
    // target in the writer's order), which is checked before sorting.
    const auto before = [](const LeafRead* a, const LeafRead* b) {
      return std::tie(a->entry->file, a->entry->offset) < std::tie(b->entry->file, b->entry->offset);
    };
    if (!std::is_sorted(order.begin(), order.end(), before)) std::sort(order.begin(), order.end(), before);
    read_runs(
        order.size(),
        [&](std::size_t k) {
          const LeafRead& r = *order[k];
          return RunLeaf{r.entry->file, r.entry->offset, r.entry->checksum, r.dst, r.verify};
        },
        [&](std::size_t k) { read(index, *order[k]->entry, order[k]->dst, order[k]->verify); },
        [&](std::size_t k) { fail_checksum(index, *order[k]->entry); });
  }

  // One small leaf of read_runs: where its bytes lie (dst.size() of them), where they go.
  struct RunLeaf {
    std::string_view file;
    std::uint64_t offset;
    std::uint64_t checksum;
    std::span<std::byte> dst;
    bool verify;
  };
  // Reads n small leaves (none longer than bounce_bytes), leaf(k) in file order: each run
  // of neighbours (one file, each at most one padding page after the last, together no
  // more than bounce_bytes) with one pread into a buffer, each leaf verified there and
  // copied out. When a run's read fails, alone(k) reads each of its leaves by itself, so
  // that the error names the leaf at fault; bad(k) throws for a checksum mismatch. What
  // read_group does for an Index's entries, and the leaf table for its records
  // (leaf_table.hpp).
  template <class Leaf, class Alone, class Bad>
  void read_runs(std::size_t n, Leaf&& leaf, Alone&& alone, Bad&& bad) const {
    const BounceBuffer bounce(*this);
    for (std::size_t i = 0; i < n;) {
      const RunLeaf first = leaf(i);
      std::uint64_t end = first.offset + first.dst.size();
      std::size_t k = i + 1;
      for (; k < n; ++k) {
        const RunLeaf e = leaf(k);
        if (e.file != first.file || e.offset < end || e.offset - end > alignment ||
            e.offset + e.dst.size() - first.offset > bounce_bytes)
          break;
        end = e.offset + e.dst.size();
      }
      const auto df = files_.find(first.file);
      const std::span<std::byte> run(bounce.bytes, static_cast<std::size_t>(end - first.offset));
      try {
        if (df == files_.end()) throw Error("data file " + std::string(first.file) + " is not open");
        io::pread_exact(df->second.file, run, first.offset, df->second.name);
      } catch (const Error&) {
        // A short file or an I/O error somewhere in the run: read its leaves one by one,
        // so that the error names the leaf at fault, not the run's first (each read
        // verifies its leaf when asked).
        for (; i < k; ++i) alone(i);
        continue;
      }
      for (; i < k; ++i) {
        const RunLeaf e = leaf(i);
        const auto bytes = run.subspan(static_cast<std::size_t>(e.offset - first.offset), e.dst.size());
        if (e.verify && io::xxh3(bytes) != e.checksum) bad(i);
        if (!bytes.empty()) std::memcpy(e.dst.data(), bytes.data(), bytes.size());  // an empty leaf's dst may be null
      }
    }
  }

  // How many bounce buffers the manifest lent (ManifestBytes::take_spare).
  std::size_t lent_buffers() const noexcept { return lent_; }

  bool reads_ranges() const override { return true; }
  bool has_xxh3() const override { return true; }
  // mincore on windows of each data file (mapped, never touched: a file cut short
  // meanwhile costs no SIGBUS): up to 64 windows of 64 pages a file, so that a 100 GB
  // checkpoint is sampled in microseconds, not walked.
  double cached_fraction() const override {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    constexpr std::size_t windows = 64, window_pages = 64;
    std::size_t pages = 0, cached = 0;
    unsigned char in_cache[window_pages];
    for (const auto& [name, df] : files_) {
      struct stat st {};
      if (::fstat(df.file.fd(), &st) != 0 || st.st_size <= 0) continue;
      const std::size_t size = static_cast<std::size_t>(st.st_size);
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, df.file.fd(), 0);
      if (map == MAP_FAILED) return 1.0;
      const std::size_t total = (size + page - 1) / page;
      const std::size_t step = std::max<std::size_t>(total / windows, window_pages);
      for (std::size_t first = 0; first < total; first += step) {
        const std::size_t n = std::min(window_pages, total - first);
        if (::mincore(static_cast<char*>(map) + first * page, n * page, in_cache) != 0) continue;
        for (std::size_t k = 0; k < n; ++k) cached += in_cache[k] & 1u;
        pages += n;
      }
      ::munmap(map, size);
    }
    return pages ? static_cast<double>(cached) / static_cast<double>(pages) : 1.0;
  }
  void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const override {
    if (e.file.empty()) {
      std::copy_n(e.inline_bytes.begin() + static_cast<std::ptrdiff_t>(at), dst.size(), dst.begin());
      return;
    }
    read_at(index, e, files_.at(e.file), dst, at);
  }

  // Pieces in file order (a restore's stream through an uncached checkpoint): each run
  // of neighbours in one file is read with one preadv, the padding between leaves into
  // a scratch page, so that the kernel sees reads as large as a plain read()'s.
  void read_in_file_order(const Index& index, std::span<const PieceRead> pieces) const override {
    std::array<std::byte, alignment> padding;
    std::vector<iovec> iov;
    for (std::size_t i = 0; i < pieces.size();) {
      const IndexEntry& first = *pieces[i].entry;
      if (first.file.empty()) {
        read_range(index, first, pieces[i].at, pieces[i].dst);
        ++i;
        continue;
      }
      const std::uint64_t start = first.offset + pieces[i].at;
      std::uint64_t end = start;
      std::size_t k = i;
      iov.clear();
      for (; k < pieces.size(); ++k) {
        const PieceRead& p = pieces[k];
        const std::uint64_t at = p.entry->offset + p.at;
        if (p.entry->file != first.file || at < end || at - end > alignment) break;
        if (at > end) iov.push_back({padding.data(), static_cast<std::size_t>(at - end)});
        iov.push_back({p.dst.data(), p.dst.size()});
        end = at + p.dst.size();
      }
      try {
        const auto& [f, name] = files_.at(first.file);
        io::preadv_exact(f, std::move(iov), start, name);
      } catch (const Error&) {
        // Read them one by one, so that the error names the leaf at fault.
        for (; i < k; ++i) read_range(index, *pieces[i].entry, pieces[i].at, pieces[i].dst);
      }
      i = k;
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

  // ---- format version 2: parts of a leaf, each chunk verified on its own ----
  bool reads_parts(const IndexEntry& e) const override { return !e.file.empty() && !e.chunk_xxh3.empty(); }

  void read_part(const Index& index, const IndexEntry& e, std::uint64_t offset, std::span<std::byte> dst,
                 bool verify) const override {
    const std::uint64_t chunk = e.chunk_bytes;
    if (e.chunk_xxh3.empty() || offset % chunk != 0 || offset > e.length || dst.size() > e.length - offset ||
        (dst.size() % chunk != 0 && offset + dst.size() != e.length))
      throw Error(index.checkpoint(), e.path.str(), "a part read not on chunk boundaries");
    const DataFile& df = files_.at(e.file);
    // No posix_fadvise(WILLNEED) here, though several threads read parts of one file:
    // with it (Linux 6.18, ext4), cold restores and every later warm restore of the same
    // pages were much slower than without it. The likely cause is that WILLNEED fills the
    // cache in small pages where the kernel's own readahead, which follows each
    // thread's sequential part, allocates large folios.
    // A chunk per pread when verifying (each hashed while it is in cache); unverified
    // (RestoreOptions::verify_checksums off), 64 MiB per pread, as a plain read() of a
    // cold file reads: the kernel then issues larger requests. (A cold restore's stream
    // reads through read_in_file_order, not here.)
    const std::size_t step = verify ? chunk : std::max<std::size_t>(chunk, (std::size_t{64} << 20) / chunk * chunk);
    for (std::size_t done = 0; done < dst.size(); done += step) {
      const auto part = dst.subspan(done, std::min<std::size_t>(step, dst.size() - done));
      if (!verify) {
        read_at(index, e, df, part, offset + done);
        continue;
      }
      io::Xxh3Stream hash;
      read_hashed(index, e, df, part, offset + done, hash);
      const std::uint64_t k = (offset + done) / chunk;
      if (hash.digest() != e.chunk_xxh3[k])
        throw CorruptCheckpointError(index.checkpoint(), e.path.str(),
                                     "checksum mismatch in bytes [" + std::to_string(k * chunk) + ", +" +
                                         std::to_string(part.size()) + "): the leaf's bytes were altered or torn");
    }
  }

 private:
  // Each data file open, with its path for messages (made once, not at every read).
  struct DataFile {
    io::File file;
    fs::path name;
  };
  // Bytes of leaf e from `at` on into dst; errors name the leaf.
  static void read_at(const Index& index, const IndexEntry& e, const DataFile& df, std::span<std::byte> dst,
                      std::uint64_t at) {
    try {
      io::pread_exact(df.file, dst, e.offset + at, df.name);
    } catch (const Error& err) {
      throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
    }
  }
  // The same, hashing what is read into `hash` while it is in L2: cached bytes in pieces
  // of verified_read_bytes, the rest (from the first piece not cached on) in one read.
  static void read_hashed(const Index& index, const IndexEntry& e, const DataFile& df, std::span<std::byte> dst,
                          std::uint64_t at, io::Xxh3Stream& hash) {
    for (std::size_t in = 0; in < dst.size();) {
      const auto piece = dst.subspan(in, std::min(verified_read_bytes, dst.size() - in));
      const std::size_t got = io::pread_cached(df.file, piece, e.offset + at + in);
      if (got == 0) {
        const auto rest = dst.subspan(in);
        read_at(index, e, df, rest, at + in);
        hash.update(rest);
        return;
      }
      hash.update(piece.first(got));
      in += got;
    }
  }
  [[noreturn]] static void fail_checksum(const Index& index, const IndexEntry& e) {
    throw CorruptCheckpointError(index.checkpoint(), e.path.str(),
                                 "checksum mismatch: the leaf's bytes were altered or torn");
  }
  std::map<std::string, DataFile, std::less<>> files_;
  // read_group's buffers: taken by a call, given back when it ends. The first ones are
  // lent by a large manifest (ManifestBytes::take_spare); the next are cut from one slab of
  // 2 MiB (slab_buffers of them, as many as a restore's reader threads), on a huge
  // page: each fresh 256 KiB buffer was 64 page faults, which a restore of many small
  // leaves paid on every open (detail/huge_page_allocator.hpp). Callers beyond those
  // get buffers of their own.
  static constexpr std::size_t slab_buffers = detail::huge_page_bytes / bounce_bytes;
  struct BounceBuffer {
    explicit BounceBuffer(const Reader& r) : reader(r) {
      const std::lock_guard lock(r.bounce_mutex_);
      if (!r.bounces_.empty()) {
        bytes = r.bounces_.back();
        r.bounces_.pop_back();
        return;
      }
      if (!r.slab_) {
        r.slab_ = Slab(detail::HugePageAllocator<std::byte>{}.allocate(detail::huge_page_bytes));
        for (std::size_t k = 1; k < slab_buffers; ++k) r.bounces_.push_back(r.slab_.get() + k * bounce_bytes);
        bytes = r.slab_.get();
        return;
      }
      bytes = r.own_bounces_.emplace_back(std::make_unique_for_overwrite<std::byte[]>(bounce_bytes)).get();
    }
    BounceBuffer(const BounceBuffer&) = delete;
    BounceBuffer& operator=(const BounceBuffer&) = delete;
    ~BounceBuffer() {
      const std::lock_guard lock(reader.bounce_mutex_);
      reader.bounces_.push_back(bytes);
    }
    const Reader& reader;
    std::byte* bytes = nullptr;
  };
  struct FreeSlab {
    void operator()(std::byte* p) const noexcept {
      detail::HugePageAllocator<std::byte>{}.deallocate(p, detail::huge_page_bytes);
    }
  };
  using Slab = std::unique_ptr<std::byte[], FreeSlab>;
  mutable std::mutex bounce_mutex_;
  mutable Slab slab_;
  mutable std::vector<std::unique_ptr<std::byte[]>> own_bounces_;  // beyond the slab's
  mutable std::vector<std::byte*> bounces_;                        // free ones, of any
  std::shared_ptr<const ManifestBytes> lent_from_;                 // owns the lent ones
  std::size_t lent_ = 0;
};

inline bool detect(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / manifest_file, ec) || fs::is_regular_file(dir / commit_file, ec);
}

// The manifest of the native checkpoint under loc, read through the storage concept
// after its commit record, and checked against that record. Errors name the checkpoint.
inline std::shared_ptr<const ManifestBytes> read_manifest(const storage::Location& loc) {
  const std::string& ckpt = loc.url;
  const storage::Storage& st = *loc.storage;
  const std::optional<fs::path> local = st.local_directory();
  std::error_code ec;
  if (local && !fs::is_directory(*local / loc.prefix, ec)) throw Error(ckpt, "", "no checkpoint here (not a directory)");

  // Storage errors name the object; rethrown so that every error names the checkpoint.
  // A remote store's own failures (the network, credentials) stay plain Errors: they
  // are not the checkpoint's fault.
  auto read = [&](std::string_view name, std::uint64_t max, auto&& how) {
    try {
      return how(loc.key(name), max);
    } catch (const CorruptCheckpointError& e) {
      std::optional<std::uint64_t> n;
      try {
        n = st.size(loc.key(name));
      } catch (const Error&) {
      }
      if (n && *n > max)  // the manifest: a torn or altered commit record, or a swapped manifest
        throw CorruptCheckpointError(ckpt, "", std::string(name) + " is larger than " +
                                                   (name == manifest_file ? "the commit marker records" : "it can be") +
                                                   " (" + std::to_string(*n) + " bytes, at most " + std::to_string(max) + ")");
      throw CorruptCheckpointError(ckpt, "", std::string(name) + " cannot be read: " + e.what());
    } catch (const Error& e) {
      if (!local) throw Error(ckpt, "", std::string(name) + " cannot be read: " + e.what());
      throw CorruptCheckpointError(ckpt, "", std::string(name) + " cannot be read: " + e.what());
    }
  };
  const auto read_all = [&](const std::string& key, std::uint64_t max) { return st.read_all(key, max); };
  const auto commit_bytes = read(commit_file, 4096, read_all);
  if (!commit_bytes)
    throw CorruptCheckpointError(ckpt, "", "no commit marker: not a complete checkpoint (a save was interrupted?)");
  const CommitRecord commit =
      decode_commit({reinterpret_cast<const char*>(commit_bytes->data()), commit_bytes->size()}, ckpt);
  if (commit.manifest_bytes > max_manifest_bytes) throw CorruptCheckpointError(ckpt, "", "manifest size is implausible");
  // A local file straight into a ManifestBytes, by the storage's size and get (what its
  // read_all does, into a vector); a remote object by read_all, one request, then copied.
  const auto manifest = read(manifest_file, commit.manifest_bytes,
                             [&](const std::string& key, std::uint64_t max) -> std::shared_ptr<ManifestBytes> {
                               if (!local) {
                                 const auto all = st.read_all(key, max);
                                 if (!all) return nullptr;
                                 auto m = std::make_shared<ManifestBytes>(all->size());
                                 std::copy(all->begin(), all->end(), m->bytes().begin());
                                 return m;
                               }
                               const auto n = st.size(key);
                               if (!n) return nullptr;
                               if (*n > max)
                                 throw CorruptCheckpointError(ckpt, "", "object is " + std::to_string(*n) +
                                                                            " bytes, more than the " + std::to_string(max) +
                                                                            " allowed");
                               auto m = std::make_shared<ManifestBytes>(static_cast<std::size_t>(*n));
                               st.get(key, 0, m->bytes());
                               return m;
                             });
  if (!manifest) throw CorruptCheckpointError(ckpt, "", "manifest is missing");
  check_manifest(manifest->bytes(), commit, ckpt);
  return manifest;
}

// Opens the named data files of a checkpoint in a local directory, each once, and
// measures each by its descriptor: what is read later is the file whose size was
// checked. A file that cannot be opened keeps no size (callers name the leaf in it).
inline std::map<std::string, io::File> open_data_files(const fs::path& local, const storage::Location& loc,
                                                       std::map<std::string, std::optional<std::uint64_t>>& sizes) {
  std::map<std::string, io::File> files;
  for (auto& [name, size] : sizes) {
    const fs::path p = local / loc.key(name);
    try {
      io::File f = io::File::open_read(p);
      size = f.size(p);
      files.emplace(name, std::move(f));
    } catch (const Error&) {
    }
  }
  return files;
}

// Opens the native checkpoint under loc, on any storage: the commit record and the
// manifest are read through the storage concept, and every stored leaf is checked to
// lie inside its data object. The leaves are then read by file descriptors (Reader,
// above) when the storage is a local directory, else by ranged gets (ObjectReader).
inline std::shared_ptr<const Index> open(const storage::Location& loc) {
  const std::string& ckpt = loc.url;
  const storage::Storage& st = *loc.storage;
  const std::optional<fs::path> local = st.local_directory();
  const auto manifest = read_manifest(loc);

  IndexInfo info;
  IndexEntries entries = decode_manifest(manifest->bytes(), ckpt, info);
  // The size of each data object. Neighbouring leaves share their file: each looks up
  // its file's slot only when its name differs from the one before (20,000 map lookups
  // by string were half a millisecond of opening 20,000 leaves, twice), and no list of
  // 20,000 pointers is built for it (fresh memory, which costs on this VM).
  std::map<std::string, std::optional<std::uint64_t>> sizes;
  {
    const std::string* last = nullptr;
    for_each_stored(entries, [&](const IndexEntry& e) {
      if (e.file.empty() || (last && *last == e.file)) return;
      last = &e.file;
      sizes.try_emplace(e.file);
    });
  }
  std::shared_ptr<const IndexReader> reader;
  if (local) {
    reader = std::make_shared<Reader>(*local / loc.prefix, open_data_files(*local, loc, sizes), manifest);
  } else {
    // The data objects' sizes, asked for all at once (one request each).
    std::vector<std::exception_ptr> errors(sizes.size());
    {
      std::vector<std::jthread> threads;
      std::size_t k = 0;
      for (auto& [name, size] : sizes) {
        threads.emplace_back([&st, &loc, &errors, k, n = &name, z = &size] {
          try {
            *z = st.size(loc.key(*n));
          } catch (...) {
            errors[k] = std::current_exception();
          }
        });
        ++k;
      }
    }
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    reader = std::make_shared<ObjectReader>(loc);
  }
  {
    const std::string* last = nullptr;
    const std::optional<std::uint64_t>* size = nullptr;
    for_each_stored(entries, [&](const IndexEntry& e) {
      if (e.file.empty()) return;
      if (!last || *last != e.file) {
        last = &e.file;
        size = &sizes.at(e.file);
      }
      if (!*size) throw CorruptCheckpointError(ckpt, e.path.str(), "data file " + e.file + " is missing or unreadable");
      check_within_file(ckpt, e, **size);
    });
  }
  // The entries' inline spans point into the manifest's bytes, which the Index keeps alive.
  return std::make_shared<const Index>(ckpt, std::move(info), std::move(entries), std::move(reader), manifest);
}

// A checkpoint directory.
inline std::shared_ptr<const Index> open(const fs::path& dir) {
  return open(storage::directory_location(dir));
}

}  // namespace ckpt::detail::native
