// ckpt/storage/object_store.hpp — checkpoints on object stores (S3, memory): save,
// open and the commit marker, written once against storage::Storage.
//
// A checkpoint at <prefix> is the native format's objects (<prefix>/data-K, manifest,
// commit) plus whatever the caller adds (a manager's _CHECKPOINT_METADATA and items/),
// and, written last, <prefix>/commit_success.txt. There is no rename on an object
// store, so the marker is the commit: readers refuse a prefix without it, a manager
// lists only steps with it and deletes the rest at start-up. Replacing a checkpoint
// (.force) deletes the old marker first, then the old objects, then writes the new
// ones: a reader sees the old checkpoint, nothing, or the new one, never a mix.
//
// The native format's writer is format/native/writer.hpp's, as for a directory: its data
// objects, one per storage connection, are streamed from the leaves' memory in one put
// each, all at once (S3: a PUT, or a parallel multipart upload when large); a
// restore hands every leaf to the storage together (get_many: S3 coalesces them into a
// few large parallel ranged GETs written straight into the target).
#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <exception>
#include <thread>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/native/writer.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/index.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/mapped_file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore/verifier.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::storage {

namespace detail {

// A local scratch directory for what callers write as files (a manager's metadata and
// items), uploaded before the commit marker; removed on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    path_ = std::filesystem::temp_directory_path(ec) / ("ckpt-upload-" + io::random_suffix());
    if (ec || !std::filesystem::create_directories(path_, ec))
      throw Error(path_.string(), "", "cannot create a scratch directory: " + ec.message());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// Uploads every regular file under dir as <loc>/<relative path>, each from a read-only
// mapping (not a copy on the heap). A top-level commit marker (Orbax writes one) is not
// uploaded: the save writes the object store's own marker last, after everything else.
inline void upload_tree(const std::filesystem::path& dir, const Location& loc) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const auto rel = it->path().lexically_relative(dir).generic_string();
    if (rel == commit_marker) continue;
    const auto file = io::MappedFile::open(it->path());
    loc.storage->put(loc.key(rel), ConstBytes(file->bytes()));
  }
  if (ec) throw Error(dir.string(), "", "cannot list the files to upload: " + ec.message());
}

}  // namespace detail

// --- the native format on objects -------------------------------------------------
namespace native_objects {

using namespace ckpt::native_format;

class ObjectReader final : public IndexReader {
  // Against the leaf's xxh3, or its chunks' (format v2).
  static void check(const Index& index, const IndexEntry& e, std::span<const std::byte> bytes) {
    LeafVerifier(index, e).update(bytes);
  }

 public:
  explicit ObjectReader(Location loc) : loc_(std::move(loc)) {}
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
  bool read_batch(const Index& index, std::span<const LeafRead> reads) const override {
    std::vector<ReadSegment> segments;
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
  Location loc_;
};

inline bool detect(const Location& loc) { return loc.storage->size(loc.key(commit_file)).has_value(); }

inline std::shared_ptr<const Index> open(const Location& loc) {
  const std::string& ckpt = loc.url;
  auto& st = *loc.storage;
  std::optional<std::vector<std::byte>> commit_bytes;
  try {
    commit_bytes = st.read_all(loc.key(commit_file), 4096);
  } catch (const CorruptCheckpointError& e) {
    throw CorruptCheckpointError(ckpt, "", std::string("commit record cannot be read: ") + e.what());
  }
  if (!commit_bytes)
    throw Error(ckpt, "", "not a native checkpoint (no commit record object); ckpt reads only its native format from "
                          "object stores");
  const CommitRecord commit =
      decode_commit({reinterpret_cast<const char*>(commit_bytes->data()), commit_bytes->size()}, ckpt);
  if (commit.manifest_bytes > max_manifest_bytes) throw CorruptCheckpointError(ckpt, "", "manifest size is implausible");
  auto manifest = std::make_shared<std::vector<std::byte>>();
  std::optional<std::vector<std::byte>> m;
  try {
    m = st.read_all(loc.key(manifest_file), commit.manifest_bytes);
  } catch (const CorruptCheckpointError&) {
    throw CorruptCheckpointError(ckpt, "", "manifest is larger than the commit marker records");
  }
  if (!m) throw CorruptCheckpointError(ckpt, "", "manifest object is missing");
  *manifest = std::move(*m);
  check_manifest(*manifest, commit, ckpt);

  IndexInfo info;
  std::vector<IndexEntry> entries = decode_manifest(*manifest, ckpt, info);
  const std::vector<const IndexEntry*> stored = stored_bytes(entries);
  // The data objects' sizes, asked for all at once (one request each).
  std::map<std::string, std::optional<std::uint64_t>> sizes;
  for (const IndexEntry* e : stored)
    if (!e->file.empty()) sizes[e->file];
  {
    std::vector<std::exception_ptr> errors(sizes.size());
    std::vector<std::jthread> threads;
    std::size_t k = 0;
    for (auto& [file, size] : sizes) {
      threads.emplace_back([&st, &loc, &errors, k, f = &file, n = &size] {
        try {
          *n = st.size(loc.key(*f));
        } catch (...) {
          errors[k] = std::current_exception();
        }
      });
      ++k;
    }
    threads.clear();  // joins
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  for (const IndexEntry* ep : stored) {
    const IndexEntry& e = *ep;
    if (e.file.empty()) continue;
    if (!sizes[e.file]) throw CorruptCheckpointError(ckpt, e.path.str(), "data file " + e.file + " is missing");
    check_within_file(ckpt, e, *sizes[e.file]);
  }
  // The entries' inline spans point into the manifest's bytes, which the Index keeps alive.
  return std::make_shared<const Index>(ckpt, std::move(info), std::move(entries), std::make_shared<ObjectReader>(loc), manifest);
}

}  // namespace native_objects

// --- save, open, commit ------------------------------------------------------------

inline bool is_committed(const Location& loc) { return loc.storage->size(loc.key(commit_marker)).has_value(); }

// Deletes everything under loc, the commit marker first (so that no reader ever sees a
// committed checkpoint with objects missing).
inline void remove_checkpoint(const Location& loc) {
  const std::string marker = loc.key(commit_marker);
  auto keys = loc.storage->list(loc.prefix.empty() ? std::string() : loc.prefix + "/");
  if (std::find(keys.begin(), keys.end(), marker) != keys.end()) loc.storage->remove({marker});
  std::erase(keys, marker);
  if (!keys.empty()) loc.storage->remove(keys);
}

// --- every other format on objects (issue 12) ---------------------------------------
// Written by the format's own writer into a local scratch directory and uploaded file
// by file; opened by downloading the checkpoint's objects into a scratch directory that
// the Index keeps while it lives, then detected as a local directory is. Whole-checkpoint
// transfers: right for what the interop formats carry (exports, conversions, a t5x or
// Orbax step), where the native format reads only the ranges a restore needs.
namespace interop_objects {

inline void write(const Location& loc, const Snapshot& snap, const SaveOptions& opts, FormatWriteFn write) {
  detail::ScratchDir scratch;
  write(snap, scratch.path(), opts);
  detail::upload_tree(scratch.path(), loc);
}

inline std::shared_ptr<const Index> open(const Location& loc, const std::vector<std::string>& keys) {
  const std::string dir = loc.prefix.empty() ? std::string() : loc.prefix + "/";
  auto scratch = std::make_shared<detail::ScratchDir>();
  for (const auto& key : keys) {
    const std::string rel = key.substr(dir.size());
    // Keys come from the bucket: each one must name a file inside the scratch directory.
    const std::filesystem::path r(rel);
    bool safe = !rel.empty() && r.is_relative();
    for (const auto& seg : r) safe = safe && !seg.empty() && seg != "." && seg != "..";
    if (!safe) throw CorruptCheckpointError(loc.url, "", "object " + quote_for_message(key) + " cannot be a file of a checkpoint");
    const auto bytes = loc.storage->read_all(key, std::uint64_t{1} << 40);
    if (!bytes) continue;  // deleted since the listing
    const auto file = scratch->path() / r;
    std::filesystem::create_directories(file.parent_path());
    io::write_file_synced(file, *bytes);
  }
  const FormatEntry* f = detect_format_entry(scratch->path());
  if (!f)
    throw Error(loc.url, "", "no checkpoint format this program reads is here (" + std::to_string(keys.size()) +
                                 " objects; formats: " + registered_format_names() + ")");
  const auto inner = ckpt::detail::open_with(*f, scratch->path());
  // Named by its URL; the entries' memory and the files stay with the inner Index.
  auto keep = std::make_shared<std::pair<std::shared_ptr<const Index>, std::shared_ptr<detail::ScratchDir>>>(inner, scratch);
  return std::make_shared<const Index>(loc.url, inner->info(), inner->entries(), inner->reader(), keep);
}

}  // namespace interop_objects

inline void save(const Location& loc, const Snapshot& snap, const SaveOptions& opts, FormatWriteFn write,
                 const BeforeCommitFn& before_commit) {
  const std::string dir = loc.prefix.empty() ? std::string() : loc.prefix + "/";
  const auto existing = loc.storage->list(dir);
  if (!existing.empty()) {
    if (!opts.force && std::find(existing.begin(), existing.end(), loc.key(commit_marker)) != existing.end())
      throw Error(loc.url, "", "a checkpoint already exists here (pass .force = true to overwrite)");
    remove_checkpoint(loc);  // the old checkpoint, or what an interrupted save left
  }
  if (write == &ckpt::native::write) native_format::write(snap, loc, opts);  // the one native writer
  else interop_objects::write(loc, snap, opts, write);
  if (before_commit) {
    detail::ScratchDir scratch;
    before_commit(scratch.path());
    detail::upload_tree(scratch.path(), loc);
  }
  const std::string text = "Checkpoint commit was successful to " + loc.url + "\n";
  loc.storage->put(loc.key(commit_marker), std::as_bytes(std::span(text)));
}

// Opens a committed checkpoint. A prefix inside a committed one (a manager step's
// items/NAME) counts as committed by the step's marker.
inline std::shared_ptr<const Index> open_index(const Location& loc) {
  bool committed = is_committed(loc);
  for (Location up = loc; !committed && !up.prefix.empty();) {
    const auto slash = up.prefix.rfind('/');
    up.prefix = slash == std::string::npos ? std::string() : up.prefix.substr(0, slash);
    committed = is_committed(up);
  }
  if (!committed) {
    const bool any = !loc.storage->list(loc.prefix.empty() ? std::string() : loc.prefix + "/").empty();
    throw Error(loc.url, "", any ? "no commit marker (" + std::string(commit_marker) +
                                       "): not a complete checkpoint (a save was interrupted or is in progress?)"
                                 : "no checkpoint here (no object under this prefix)");
  }
  // The native format is read object by object, range by range; any other is downloaded.
  if (loc.storage->size(loc.key(native_format::commit_file))) return native_objects::open(loc);
  const std::string dir = loc.prefix.empty() ? std::string() : loc.prefix + "/";
  auto keys = loc.storage->list(dir);
  std::erase(keys, loc.key(commit_marker));
  return interop_objects::open(loc, keys);
}

// What a scheme's header passes to register_url_scheme.
inline UrlScheme object_scheme(std::string_view scheme, Location (*open)(const std::string&)) {
  return UrlScheme{scheme, open, &save, &open_index, &is_committed};
}

}  // namespace ckpt::storage
