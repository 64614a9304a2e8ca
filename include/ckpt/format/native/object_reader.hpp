// ckpt/format/native/object_reader.hpp — reads a native checkpoint's leaves from an
// object store (S3, memory) through storage::Storage: ranged gets, a whole restore
// handed to the storage at once (get_many), checksums checked on every core.
//
// format/native/reader.hpp opens a checkpoint on any storage and picks this reader, or,
// for a local directory, the file-descriptor one (pread, io_uring).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/index.hpp>
#include <ckpt/index/verifier.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::native {

class ObjectReader final : public IndexReader {
  // Against the leaf's xxh3, or its chunks' (format v2).
  static void check(const Index& index, const IndexEntry& e, std::span<const std::byte> bytes) {
    LeafVerifier(index.checkpoint(), e).update(bytes);
  }

 public:
  explicit ObjectReader(storage::Location loc) : loc_(std::move(loc)) {}
  void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
    if (e.file.empty()) {
      std::copy(e.inline_bytes.begin(), e.inline_bytes.end(), dst.begin());
    } else {
      try {
        loc_.storage->get(loc_.key(e.file), e.offset, dst);
      } catch (const CorruptCheckpointError& err) {
        throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
      } catch (const Error& err) {  // the network, credentials: not the checkpoint's fault
        throw Error(index.checkpoint(), e.path.str(), err.what());
      }
    }
    if (verify) check(index, e, dst);
  }

  // Ranged GETs: a leaf read in pieces (a restore under max_memory, ckpt::convert)
  // fetches only each piece, verified by the caller against the leaf's xxh3.
  bool has_xxh3() const override { return true; }
  bool reads_ranges() const override { return true; }
  // A request is worth about a piece: parts of boxes are fetched a piece (1 MiB) or a
  // few contiguous runs at a time, not a ranged GET per row.
  std::uint64_t range_overhead() const override { return box_piece; }
  void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const override {
    if (e.file.empty()) {
      std::copy_n(e.inline_bytes.begin() + static_cast<std::ptrdiff_t>(at), dst.size(), dst.begin());
      return;
    }
    try {
      loc_.storage->get(loc_.key(e.file), e.offset + at, dst);
    } catch (const CorruptCheckpointError& err) {
      throw CorruptCheckpointError(index.checkpoint(), e.path.str(), err.what());
    } catch (const Error& err) {
      throw Error(index.checkpoint(), e.path.str(), err.what());
    }
  }

  // A whole restore at once: every leaf's range handed to the storage together (S3
  // turns them into a few large parallel GETs), then the checksums on every core.
  bool reads_in_batches() const override { return true; }
  bool read_batch(const Index& index, std::span<const LeafRead> reads) const override {
    // A leaf stored as boxes (written by several processes) is assembled box by box, as
    // Index::read does it: then every read goes that way.
    for (const auto& r : reads)
      if (!r.entry->boxes.empty()) return false;
    std::vector<storage::ReadSegment> segments;
    for (const auto& r : reads) {
      const IndexEntry& e = *r.entry;
      if (r.dst.size() != e.length)
        throw Error(index.checkpoint(), e.path.str(),
                    "target holds " + std::to_string(r.dst.size()) + " bytes, checkpoint " + std::to_string(e.length));
      if (e.file.empty()) std::copy(e.inline_bytes.begin(), e.inline_bytes.end(), r.dst.begin());
      else segments.push_back({loc_.key(e.file), e.offset, r.dst});
    }
    try {
      loc_.storage->get_many(segments);
    } catch (const CorruptCheckpointError& err) {
      throw CorruptCheckpointError(index.checkpoint(), "", err.what());
    } catch (const Error& err) {
      throw Error(index.checkpoint(), "", err.what());
    }
    std::size_t bytes = 0;
    for (const auto& r : reads) bytes += r.verify ? r.dst.size() : 0;
    const unsigned threads = bytes < (std::size_t{16} << 20)
                                 ? 1u
                                 : std::min({std::max(1u, std::thread::hardware_concurrency()), 8u,
                                             static_cast<unsigned>(reads.size())});
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mu;
    auto worker = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < reads.size();) {
        if (!reads[i].verify) continue;
        try {
          check(index, *reads[i].entry, reads[i].dst);
        } catch (...) {
          std::lock_guard lock(error_mu);
          if (!error) error = std::current_exception();
          next = reads.size();
        }
      }
    };
    {
      std::vector<std::jthread> pool;
      for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
      worker();
    }
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  storage::Location loc_;
};

}  // namespace ckpt::detail::native
