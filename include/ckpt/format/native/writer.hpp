// ckpt/format/native/writer.hpp — a Snapshot becomes data files, a manifest and a commit record.
//
// Written once against the storage concept (storage/storage.hpp): a local staging
// directory (storage::PosixStorage, Publish::in_place), S3 and process memory get the
// same objects. Large leaves go to data objects back to back, each at a 4 KiB
// boundary, appended straight from the leaf's memory (no serialization buffer: on disk
// a writev per piece, on S3 one PUT streamed from the leaves); several data objects
// are written by several threads, as many as the storage writes at once. Small leaves
// go inline in the manifest. Publishing the checkpoint (a rename, a commit marker) is
// the caller's: save_staged, storage/object_store.hpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <ckpt/format/native/boxes.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/leaf/stats.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::native {
using namespace ckpt::detail::native;  // the format's names (alignment, data_file_name, ...)
// Adds the NaN and infinite elements of a piece being written to SaveOptions::non_finite
// (when set): called beside the piece's xxh3, while the piece is in cache.
inline void count_non_finite(std::atomic<std::uint64_t>* counter, dtype type, std::span<const std::byte> piece) {
  if (!counter) return;
  if (const std::uint64_t n = ckpt::count_non_finite(type, piece)) counter->fetch_add(n, std::memory_order_relaxed);
}

inline const std::byte* zero_page() {
  alignas(4096) static const std::byte zeros[alignment] = {};
  return zeros;
}

// SaveOptions::data_files (0: one per hardware thread, at most 8), and at least as many
// as the storage writes at once (S3: its connections, each data object one PUT; a disk:
// 1, where one file measured fastest), never more than there are large leaves.
inline unsigned data_file_count(const SaveOptions& opt, std::size_t large_leaves, unsigned storage_parallelism = 1) {
  unsigned n = opt.data_files != 0 ? opt.data_files : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  n = std::max(n, storage_parallelism);
  return static_cast<unsigned>(std::clamp<std::size_t>(large_leaves, 1, n));
}

// The manifest entries of a snapshot, before any data file is written: every leaf's path,
// dtype, shape and length; a leaf under opt.inline_threshold (or of dtype none) kept
// inline with its checksum, the others listed in `large` for the data files. The one
// plan of the native writers (this one, on every storage; the incremental one; ckpt::mpi's).
struct EntryPlan {
  IndexEntries entries;
  std::vector<std::size_t> large;  // indices of the leaves that go to data files
  std::uint64_t inline_bytes = 0;
  std::size_t inline_leaves = 0;
};
inline EntryPlan plan_entries(const Snapshot& snap, const SaveOptions& opt) {
  EntryPlan plan;
  plan.entries.reserve(snap.leaves.size());
  plan.large.reserve(snap.leaves.size());  // pages it does not fill are never touched
  for (std::size_t i = 0; i < snap.leaves.size(); ++i) {
    const auto& leaf = snap.leaves[i];
    IndexEntry& e = plan.entries.emplace_back();
    e.path = leaf.path;
    e.type = leaf.data.type;
    e.shape = leaf.data.shape;
    e.length = leaf.data.size();
    if ((e.length < opt.inline_threshold && !leaf.data.stream) || e.type == dtype::none) {
      e.inline_bytes = leaf.data.view;
      e.checksum = io::xxh3(e.inline_bytes);
      count_non_finite(opt.non_finite, e.type, e.inline_bytes);
      plan.inline_bytes += e.length;
      ++plan.inline_leaves;
    } else {
      plan.large.push_back(i);
    }
  }
  return plan;
}

inline std::uint64_t aligned_length(std::uint64_t n) { return (n + alignment - 1) / alignment * alignment; }

// Spreads the large leaves over nfiles data files, biggest first onto the least loaded
// file, and sets each entry's file and offset (leaves at `alignment` boundaries, in
// snapshot order within a file). Returns the leaves of each file, in that order.
inline std::vector<std::vector<std::size_t>> place_in_files(IndexEntries& entries,
                                                            const std::vector<std::size_t>& large, std::size_t nfiles) {
  std::vector<std::vector<std::size_t>> per_file(nfiles);
  std::vector<std::uint64_t> load(nfiles, 0);
  std::vector<std::size_t> by_size = large;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](auto a, auto b) { return entries[a].length > entries[b].length; });
  for (std::size_t i : by_size) {
    const auto k = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    per_file[k].push_back(i);
    load[k] += aligned_length(entries[i].length);
  }
  for (std::size_t k = 0; k < nfiles; ++k) {
    std::sort(per_file[k].begin(), per_file[k].end());
    std::uint64_t offset = 0;
    for (std::size_t i : per_file[k]) {
      entries[i].file = data_file_name(k);
      entries[i].offset = offset;
      offset += aligned_length(entries[i].length);
    }
  }
  return per_file;
}

// Bytes are hashed and handed to the storage in pieces of this size, so that the copy
// (write() into the page cache) takes each piece while the hash has just brought it
// into cache (a whole large leaf hashed first and written after would be read from
// memory twice).
inline constexpr std::size_t write_piece = std::size_t{1} << 20;

// The buffer through which each data file's writer reads streamed leaves (LeafStream):
// 16 MiB, or its share of SaveOptions::max_memory (whole MiBs, so that chunk checksums
// fall on piece boundaries; never under one MiB).
inline std::size_t stream_buffer_bytes(const SaveOptions& opt, unsigned files) {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  std::uint64_t n = 16 * mib;
  if (opt.max_memory != 0) n = std::clamp<std::uint64_t>(opt.max_memory / files / mib * mib, mib, n);
  return static_cast<std::size_t>(n);
}

// Appends the leaves assigned to one data object, in order, each padded to the
// alignment, hashing each piece just before it is appended (while it is warm in cache).
// Streamed leaves are read into a buffer of stream_buffer bytes and appended from it.
// Progress counts bytes as they are appended when the storage writes them at once (a
// file), else the caller counts the object's bytes after close() (an upload).
// non_finite (SaveOptions::non_finite) counts NaN and infinities piece by piece too.
inline void write_data_file(storage::ObjectWriter& out, const Snapshot& snap, IndexEntries& entries,
                            const std::vector<std::size_t>& leaves, exec::ProgressTracker* progress = nullptr,
                            std::size_t stream_buffer = std::size_t{16} << 20,
                            std::atomic<std::uint64_t>* non_finite = nullptr) {
  if (progress && !out.writes_at_once()) progress = nullptr;
  {
    std::uint64_t size = 0;  // each leaf padded to the alignment, as appended below
    for (std::size_t i : leaves) size += aligned_length(entries[i].length);
    out.expect_size(size);
  }
  std::vector<storage::ConstBytes> batch;
  std::size_t batch_bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    out.append(batch, true);  // a leaf's memory stays put until the save returns
    batch.clear();
    batch_bytes = 0;
  };
  auto add = [&](const std::byte* p, std::size_t n) {
    batch.push_back({p, n});
    batch_bytes += n;
    if (batch.size() >= 512 || batch_bytes >= write_piece) flush();
  };
  std::vector<std::byte> buffer;  // for streamed leaves, allocated at the first
  for (std::size_t i : leaves) {
    const LeafBytes& data = snap.leaves[i].data;
    if (data.stream) {
      flush();  // everything queued so far goes out before the buffer is reused
      static_assert(write_piece == checksum_chunk_bytes);
      const std::uint64_t length = data.stream->size();
      if (buffer.empty()) buffer.resize(std::max(stream_buffer, write_piece) / write_piece * write_piece);
      std::vector<std::uint64_t> chunks;
      for (std::uint64_t done = 0; done < length;) {
        const auto part = std::span(buffer).first(static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - done)));
        data.stream->read(done, part);
        for (std::size_t c = 0; c < part.size(); c += write_piece) {
          const auto piece = part.subspan(c, std::min(write_piece, part.size() - c));
          chunks.push_back(io::xxh3(piece));
          count_non_finite(non_finite, data.type, piece);
        }
        out.append(std::span<const std::byte>(part), false);
        done += part.size();
        if (progress) progress->add(part.size(), 0);
      }
      if (chunks.size() <= 1) {  // one chunk: format v1's whole-leaf checksum, as for a leaf in memory
        entries[i].checksum = chunks.empty() ? io::xxh3({}) : chunks[0];
      } else {
        entries[i].checksum = chunk_list_xxh3(chunks);
        entries[i].chunk_bytes = checksum_chunk_bytes;
        entries[i].chunk_xxh3 = std::move(chunks);
      }
      const std::size_t pad = static_cast<std::size_t>((alignment - length % alignment) % alignment);
      if (pad) add(zero_page(), pad);
      if (progress) progress->add(0, 1);
      continue;
    }
    const auto bytes = data.view;
    if (bytes.size() <= write_piece) {
      entries[i].checksum = io::xxh3(bytes);
      count_non_finite(non_finite, data.type, bytes);
      add(bytes.data(), bytes.size());
      if (progress) progress->add(bytes.size(), 0);
    } else {
      // Format version 2: one checksum per chunk (= piece), so that a reader
      // verifies parts of the leaf on several threads; the leaf's is theirs hashed.
      static_assert(write_piece == checksum_chunk_bytes);
      std::vector<std::uint64_t> chunks;
      chunks.reserve(bytes.size() / write_piece + 1);
      for (std::size_t done = 0; done < bytes.size(); done += write_piece) {
        const auto part = bytes.subspan(done, std::min(write_piece, bytes.size() - done));
        chunks.push_back(io::xxh3(part));
        count_non_finite(non_finite, data.type, part);
        add(part.data(), part.size());
        if (progress) progress->add(part.size(), 0);
      }
      entries[i].checksum = chunk_list_xxh3(chunks);
      entries[i].chunk_bytes = checksum_chunk_bytes;
      entries[i].chunk_xxh3 = std::move(chunks);
    }
    const std::size_t pad = static_cast<std::size_t>((alignment - bytes.size() % alignment) % alignment);
    if (pad) add(zero_page(), pad);
    if (progress) progress->add(0, 1);
  }
  flush();
}

// A data file written in place in a staging directory (ckpt::mpi's rank files, an
// incremental save's shared file), fsynced before it returns.
inline void write_data_file(const std::filesystem::path& file, const Snapshot& snap, IndexEntries& entries,
                            const std::vector<std::size_t>& leaves, exec::ProgressTracker* progress = nullptr,
                            std::size_t stream_buffer = std::size_t{16} << 20,
                            std::atomic<std::uint64_t>* non_finite = nullptr) {
  storage::detail::FileWriter out(file, storage::Publish::in_place);
  write_data_file(out, snap, entries, leaves, progress, stream_buffer, non_finite);
  out.close();
}
}  // namespace ckpt::detail::native

namespace ckpt::detail::native {

// Writes the checkpoint under loc (an empty staging directory, or an object-store
// prefix with nothing under it); the caller publishes it.
inline void write(const Snapshot& snap, const storage::Location& loc, const SaveOptions& opt) {
  exec::ProgressTracker progress(opt.progress, snap.total_bytes(), snap.leaves.size(), loc.url);
  auto plan = detail::native::plan_entries(snap, opt);
  IndexEntries& entries = plan.entries;
  const std::vector<std::size_t>& large = plan.large;
  if (progress.active() && plan.inline_leaves > 0) progress.add(plan.inline_bytes, plan.inline_leaves);
  const unsigned nfiles = detail::native::data_file_count(opt, large.size(), loc.storage->parallelism());
  const auto per_file = detail::native::place_in_files(entries, large, nfiles);
  detail::native::BoxTiles tiles(snap);  // Sharded leaves' tile checksums, hashed meanwhile

  auto write_file = [&](unsigned k) {
    auto out = loc.storage->create(loc.key(data_file_name(k)));
    detail::native::write_data_file(*out, snap, entries, per_file[k], &progress,
                                    detail::native::stream_buffer_bytes(opt, nfiles), opt.non_finite);
    out->close();
    if (!out->writes_at_once()) {  // an upload: its bytes count once it is done
      std::uint64_t bytes = 0;
      for (std::size_t i : per_file[k]) bytes += entries[i].length;
      progress.add(bytes, per_file[k].size());
    }
  };
  if (!large.empty()) {
    if (nfiles == 1) {
      write_file(0);
    } else {  // the data objects at once; the first failure is rethrown
      std::vector<std::exception_ptr> errors(nfiles);
      {
        exec::WorkerThreads threads;
        for (unsigned k = 0; k < nfiles; ++k)
          threads.start([&, k] {
            try {
              write_file(k);
            } catch (...) {
              errors[k] = std::current_exception();
            }
          });
      }
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    }
  }

  detail::native::box_sharded_entries(loc.url, snap, entries, &tiles);  // Sharded leaves
  progress.check();  // a cancel seen by another thread stops the commit
  IndexInfo info;
  info.type_name = snap.type_name;
  info.schema = snap.schema;
  info.fingerprint = snap.fingerprint;
  const auto manifest = loc.storage->create(loc.key(manifest_file));
  const CommitRecord record = write_manifest(*manifest, info, entries);
  manifest->close();
  const std::string commit = encode_commit(record);
  loc.storage->put(loc.key(commit_file), std::as_bytes(std::span(commit)));
  progress.finish();
}

// Writes the checkpoint into `dir` (an empty staging directory); the caller renames it
// into place.
inline void write(const Snapshot& snap, const std::filesystem::path& dir, const SaveOptions& opt) {
  write(snap, storage::directory_location(dir, storage::Publish::in_place), opt);
}

}  // namespace ckpt::detail::native
