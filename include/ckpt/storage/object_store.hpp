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
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/format/native/reader.hpp>
#include <ckpt/format/native/writer.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/index.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/mapped_file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
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

// --- save, open, commit ------------------------------------------------------------

inline bool is_committed(const Location& loc) { return loc.storage->size(loc.key(commit_marker)).has_value(); }

// --- every other format on objects --------------------------------------------------
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
    loc.storage->remove_prefix(loc.prefix);  // the old checkpoint (marker first), or what an interrupted save left
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
  if (loc.storage->size(loc.key(native_format::commit_file))) return native_format::open(loc);
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
