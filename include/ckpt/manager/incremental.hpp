// ckpt/manager/incremental.hpp — incremental saves (ManagerOptions::incremental): a leaf
// whose bytes did not change since the previous step is hard-linked, not written again.
//
// The step is an ordinary native checkpoint (format version unchanged). What differs is
// the layout of its data files: each of the largest leaves (>= own_file_min_bytes, at
// most max_own_files of them) gets a data file of its own, holding that leaf alone at
// offset 0; every other leaf goes to the shared data files as usual. Saving the next
// step, each own-file leaf is hashed (xxh3, the checksum the manifest records anyway)
// and, when the previous step holds a leaf with the same path, dtype, shape and
// checksum in a file of its own, that file is hard-linked into the new step instead of
// written. Because a hard link is a second name of the same inode:
//   - deleting any step (retention, delete_step, rm -r) never breaks another: the bytes
//     live as long as one step names them;
//   - every step is a whole checkpoint: ckpt::restore, ckpt verify, ckpt convert read it
//     with no manager around, and `cp -r step elsewhere` copies it whole (cp follows no
//     link: it writes the bytes);
//   - the steps sharing a file share its fate: a disk error in it shows in each of them
//     (ckpt verify names the leaf).
// When a link cannot be made (another file system, EPERM, EMLINK, the previous step gone
// or unreadable), the leaf is written: incremental saves never fail for being
// incremental.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/native/reader.hpp>
#include <ckpt/format/native/writer.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt::detail::incremental {

namespace fs = std::filesystem;

// Leaves at least this large get a data file of their own (and can be linked) ...
inline constexpr std::uint64_t own_file_min_bytes = std::uint64_t{1} << 20;
// ... the largest this many of them: a reader keeps every data file open while it reads.
inline constexpr std::size_t max_own_files = 256;

// What an incremental write did, for the manager's save figures.
struct WriteResult {
  std::uint64_t bytes_total = 0;    // the snapshot's bytes
  std::uint64_t bytes_written = 0;  // bytes written to new data files or inline
  std::uint64_t bytes_linked = 0;   // bytes hard-linked from the previous step
  std::size_t leaves_linked = 0;
};

struct BaseLeaf {
  std::string file;
  dtype type;
  std::vector<std::int64_t> shape;
  std::uint64_t length;
  std::uint64_t checksum;
  std::uint64_t chunk_bytes;
  std::vector<std::uint64_t> chunks;  // format version 2: per-chunk xxh3
  const IndexBox* box = nullptr;      // a box's: its tile checksums, reused when it is linked
  std::shared_ptr<const Index> index{};  // keeps box alive
};

// What names a stored piece from one step to the next: its leaf's path, and for a box
// of a Sharded leaf (or of a leaf several ranks wrote) the box's origin too.
inline std::string piece_key(const Path& path, const Shape* origin = nullptr) {
  return origin ? path.str() + "@" + shape_str(*origin) : path.str();
}

// Pieces of the previous step (whole leaves, or boxes) that sit alone in a data file at
// offset 0, by piece_key.
inline std::map<std::string, BaseLeaf> linkable_leaves(const fs::path& base) {
  std::map<std::string, BaseLeaf> out;
  if (base.empty()) return out;
  std::shared_ptr<const Index> index;
  try {
    index = detail::native::open(base);
  } catch (const Error&) {
    return out;  // no usable previous step: everything is written
  }
  std::map<std::string, int> per_file;
  for (const auto& e : index->entries()) {
    if (!e.file.empty()) ++per_file[e.file];
    for (const auto& b : e.boxes)
      if (!b.bytes.file.empty()) ++per_file[b.bytes.file];
  }
  auto add = [&](const IndexEntry& e, std::string key, const IndexBox* box) {
    if (!e.file.empty() && e.offset == 0 && per_file[e.file] == 1 && e.codec == "raw")
      out.emplace(std::move(key),
                  BaseLeaf{e.file, e.type, e.shape, e.length, e.checksum, e.chunk_bytes, e.chunk_xxh3, box, index});
  };
  for (const auto& e : index->entries()) {
    if (e.boxes.empty()) add(e, piece_key(e.path), nullptr);
    for (const auto& b : e.boxes) add(b.bytes, piece_key(e.path, &b.origin), &b);
  }
  return out;
}

// "Unchanged" is known by the chunk checksums the manifest records anyway: bytes are
// hashed chunk by chunk (checksum_chunk_bytes) into `chunks` against the previous
// step's piece, stopping at the first difference (a changed piece then costs one extra
// chunk hash, no more). True when b is the same piece and every chunk matched; the
// caller hashes the rest, if any, while it writes. Each chunk hashed is counted into
// non_finite (SaveOptions::non_finite) as well: a linked leaf is hashed whole, so its
// NaN and infinities are this step's own count, not the previous step's.
inline bool same_as_base(std::span<const std::byte> bytes, dtype type, const Shape& shape, const BaseLeaf& b,
                         std::vector<std::uint64_t>& chunks, std::atomic<std::uint64_t>* non_finite = nullptr) {
  constexpr std::uint64_t chunk = detail::native::checksum_chunk_bytes;
  const std::size_t nchunks = static_cast<std::size_t>((bytes.size() + chunk - 1) / chunk);
  if (b.type != type || b.shape != shape || b.length != bytes.size() ||
      !(nchunks > 1 ? b.chunk_bytes == chunk && b.chunks.size() == nchunks : b.chunks.empty()))
    return false;
  for (std::size_t c = 0; c < nchunks; ++c) {
    const std::size_t at = static_cast<std::size_t>(c * chunk);
    const auto part = bytes.subspan(at, std::min<std::size_t>(chunk, bytes.size() - at));
    chunks.push_back(io::xxh3(part));
    detail::native::count_non_finite(non_finite, type, part);
    if (chunks.back() != (nchunks > 1 ? b.chunks[c] : b.checksum)) return false;
  }
  return true;
}

// Writes one leaf alone into `file` (no padding). chunks holds the checksums of its
// first chunks (hashed while comparing with the previous step, and counted then); the
// rest are hashed, and counted into non_finite, here, each just before it is written,
// while it is in cache.
// The file is returned open and not yet fsynced: the caller syncs every new file at
// the end, on several threads at once, so that their journal commits overlap instead
// of queueing one after another (one fsync per leaf, in turn, doubled the save time).
inline io::File write_own_file(const fs::path& file, std::span<const std::byte> bytes,
                               std::vector<std::uint64_t>& chunks, exec::ProgressTracker& progress,
                               dtype type = dtype::none, std::atomic<std::uint64_t>* non_finite = nullptr) {
  io::File f = io::File::create(file);
  std::uint64_t flushed = 0;
  for (std::size_t done = 0, k = 0; done < bytes.size(); done += detail::native::write_piece, ++k) {
    const auto part = bytes.subspan(done, std::min(detail::native::write_piece, bytes.size() - done));
    if (k >= chunks.size()) {
      chunks.push_back(io::xxh3(part));
      detail::native::count_non_finite(non_finite, type, part);
    }
    io::write_all(f, part, file);
    progress.add(part.size(), 0);
    const std::uint64_t written = done + part.size();
    if (written - flushed >= io::writeback_chunk) {
      io::start_writeback(f, flushed, written - flushed);
      flushed = written;
    }
  }
  io::start_writeback(f, flushed, bytes.size() - flushed);
  return f;
}

// Writes snap into the staging directory `dir` as a native checkpoint, linking the
// unchanged own-file leaves of `base` (the previous step's directory; empty: none).
inline WriteResult write(const Snapshot& snap, const fs::path& dir, const SaveOptions& opt, const fs::path& base) {
  using namespace ckpt::detail::native;
  WriteResult result;
  result.bytes_total = snap.total_bytes();
  exec::ProgressTracker progress(opt.progress, result.bytes_total, snap.leaves.size(), dir.string());
  const auto previous = linkable_leaves(base);

  auto plan = detail::native::plan_entries(snap, opt);
  IndexEntries& entries = plan.entries;
  const std::vector<std::size_t>& large = plan.large;
  result.bytes_written += plan.inline_bytes;
  if (plan.inline_leaves > 0) progress.add(plan.inline_bytes, plan.inline_leaves);

  // The largest leaves (>= own_file_min_bytes, at most max_own_files) get their own files.
  std::vector<std::size_t> by_size = large;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](auto a, auto b) { return entries[a].length > entries[b].length; });
  std::vector<std::size_t> own, shared;
  for (std::size_t i : by_size) {
    if (own.size() < max_own_files && entries[i].length >= own_file_min_bytes) own.push_back(i);
    else shared.push_back(i);
  }
  std::sort(shared.begin(), shared.end());
  // data-0 holds the shared leaves (if any); own files follow, in snapshot order.
  std::sort(own.begin(), own.end());
  const std::size_t first_own = shared.empty() ? 0 : 1;
  {
    std::uint64_t offset = 0;
    for (std::size_t i : shared) {
      entries[i].file = data_file_name(0);
      entries[i].offset = offset;
      offset += (entries[i].length + alignment - 1) / alignment * alignment;
    }
    for (std::size_t k = 0; k < own.size(); ++k) {
      entries[own[k]].file = data_file_name(first_own + k);
      entries[own[k]].offset = 0;
    }
  }

  // Jobs: the shared file (job 0 when there is one), then own-file leaves, biggest first.
  std::vector<std::size_t> own_jobs(own.size());
  for (std::size_t k = 0; k < own.size(); ++k) own_jobs[k] = k;
  std::stable_sort(own_jobs.begin(), own_jobs.end(),
                   [&](auto a, auto b) { return entries[own[a]].length > entries[own[b]].length; });
  const std::size_t njobs = first_own + own.size();
  std::vector<std::uint64_t> linked(own.size(), 0);
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::pair<io::File, fs::path>> unsynced;  // guarded by error_mutex
  auto worker = [&] {
    for (std::size_t j; (j = next.fetch_add(1)) < njobs;) {
      try {
        if (j < first_own) {
          detail::native::write_data_file(dir / data_file_name(0), snap, entries, shared, &progress,
                                          std::size_t{16} << 20, opt.non_finite);
          continue;
        }
        const std::size_t k = own_jobs[j - first_own];
        const std::size_t i = own[k];
        IndexEntry& e = entries[i];
        const auto bytes = snap.leaves[i].data.view;
        const fs::path target = dir / e.file;
        constexpr std::uint64_t chunk = checksum_chunk_bytes;
        const std::size_t nchunks = static_cast<std::size_t>((e.length + chunk - 1) / chunk);
        std::vector<std::uint64_t> chunks;
        chunks.reserve(nchunks);
        const auto& box = snap.leaves[i].box;
        if (const auto it = previous.find(piece_key(e.path, box ? &box->origin : nullptr)); it != previous.end()) {
          const BaseLeaf& b = it->second;
          if (same_as_base(bytes, e.type, e.shape, b, chunks, opt.non_finite) && ::link((base / b.file).c_str(), target.c_str()) == 0) {
            e.checksum = b.checksum;
            if (nchunks > 1) {
              e.chunk_bytes = chunk;
              e.chunk_xxh3 = std::move(chunks);
            }
            linked[k] = e.length;
            progress.add(e.length, 1);
            continue;
          }
        }
        io::File f = write_own_file(target, bytes, chunks, progress, e.type, opt.non_finite);
        {
          const std::lock_guard lock(error_mutex);
          unsynced.emplace_back(std::move(f), target);
        }
        if (nchunks > 1) {
          e.checksum = chunk_list_xxh3(chunks);
          e.chunk_bytes = chunk;
          e.chunk_xxh3 = std::move(chunks);
        } else {
          e.checksum = chunks.front();
        }
        progress.add(0, 1);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = njobs;
      }
    }
  };
  const unsigned threads = detail::native::data_file_count(opt, njobs);
  if (threads <= 1) {
    worker();
  } else {
    exec::WorkerThreads pool;
    for (unsigned t = 1; t < threads; ++t) pool.start(worker);
    worker();
  }
  if (error) std::rethrow_exception(error);
  progress.check();
  {  // fsync the new own files, several at once
    std::atomic<std::size_t> at{0};
    auto syncer = [&] {
      for (std::size_t k; (k = at.fetch_add(1)) < unsynced.size();) {
        try {
          unsynced[k].first.sync(unsynced[k].second);
        } catch (...) {
          const std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      }
    };
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < std::min<std::size_t>(unsynced.size(), 16); ++t) pool.emplace_back(syncer);
    syncer();
  }
  if (error) std::rethrow_exception(error);

  for (std::size_t k = 0; k < own.size(); ++k) {
    if (linked[k]) {
      result.bytes_linked += linked[k];
      ++result.leaves_linked;
    } else {
      result.bytes_written += entries[own[k]].length;
    }
  }
  for (std::size_t i : shared) result.bytes_written += entries[i].length;

  detail::native::box_sharded_entries(dir.string(), snap, entries);  // Sharded leaves, as detail::native::write
  IndexInfo info;
  info.type_name = snap.type_name;
  info.schema = snap.schema;
  info.fingerprint = snap.fingerprint;
  storage::detail::FileWriter manifest(dir / manifest_file, storage::Publish::in_place);
  const CommitRecord record = write_manifest(manifest, info, entries);
  manifest.close();
  const std::string commit = encode_commit(record);
  io::write_file_synced(dir / commit_file, std::as_bytes(std::span(commit)));
  progress.finish();
  return result;
}

}  // namespace ckpt::detail::incremental

namespace ckpt::detail::incremental {

// save_staged (save.hpp) for an incremental write: stages, writes linking from base,
// lets before_commit(staging, result) add files, and publishes.
template <class BeforeCommit>
WriteResult save_staged(const fs::path& dir, const Snapshot& snap, const SaveOptions& opts, const fs::path& base,
                        BeforeCommit&& before_commit) {
  std::error_code ec;
  if (!opts.force && fs::exists(dir, ec))
    throw Error(dir.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
  io::StagingDir staging(dir);
  const WriteResult r = write(snap, staging.path(), opts, base);
  before_commit(staging.path(), r);
  staging.commit(opts.force);
  return r;
}

}  // namespace ckpt::detail::incremental
