// ckpt/storage/object_store.hpp — what a checkpoint is on an object store (S3, memory):
// the commit marker, written last, written once against storage::Storage for every
// format.
//
// A checkpoint at <prefix> is the format's objects plus whatever the caller adds (a
// manager's _CHECKPOINT_METADATA and items/), and, written last,
// <prefix>/commit_success.txt. There is no rename on an object store, so the marker is
// the commit: readers refuse a prefix without it, a manager lists only steps with it and
// deletes the rest at start-up. Replacing a checkpoint (.force) deletes the old marker
// first, then the old objects, then writes the new ones: a reader sees the old
// checkpoint, nothing, or the new one, never a mix.
//
// The publish step (save.hpp) calls begin_publish, lets the format write its objects
// through the Storage, then commit; open_index (format/registry.hpp) calls
// require_committed before a format reads. Neither knows which format it publishes.
#pragma once

#include <algorithm>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/mapped_file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::storage {

inline bool is_committed(const Location& loc) { return loc.storage->size(loc.key(commit_marker)).has_value(); }

// Makes the place ready for a new checkpoint: refuses a committed one unless force,
// and deletes what is there (the old checkpoint, marker first, or what an interrupted
// save left).
inline void begin_publish(const Location& loc, bool force) {
  const std::string dir = loc.prefix.empty() ? std::string() : loc.prefix + "/";
  const auto existing = loc.storage->list(dir);
  if (existing.empty()) return;
  if (!force && std::find(existing.begin(), existing.end(), loc.key(commit_marker)) != existing.end())
    throw Error(loc.url, "", "a checkpoint already exists here (pass .force = true to overwrite)");
  loc.storage->remove_prefix(loc.prefix);
}

// Commits: the marker, after every other object of the checkpoint is stored.
inline void commit(const Location& loc) {
  const std::string text = "Checkpoint commit was successful to " + loc.url + "\n";
  loc.storage->put(loc.key(commit_marker), std::as_bytes(std::span(text)));
}

// Refuses a place without a committed checkpoint. A prefix inside a committed one (a
// manager step's items/NAME) counts as committed by the step's marker.
inline void require_committed(const Location& loc) {
  bool committed = is_committed(loc);
  for (Location up = loc; !committed && !up.prefix.empty();) {
    const auto slash = up.prefix.rfind('/');
    up.prefix = slash == std::string::npos ? std::string() : up.prefix.substr(0, slash);
    committed = is_committed(up);
  }
  if (committed) return;
  const bool any = !loc.storage->list(loc.prefix.empty() ? std::string() : loc.prefix + "/").empty();
  throw Error(loc.url, "", any ? "no commit marker (" + std::string(commit_marker) +
                                     "): not a complete checkpoint (a save was interrupted or is in progress?)"
                               : "no checkpoint here (no object under this prefix)");
}

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

}  // namespace detail

// Uploads every regular file under dir as <loc>/<relative path>, each from a read-only
// mapping (not a copy on the heap). A top-level commit marker (Orbax writes one) is not
// uploaded: the publish step writes the object store's own marker last.
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

// Writes files into a scratch directory with fill(dir) and uploads them under loc.
template <class Fill>
void write_as_files(const Location& loc, Fill&& fill) {
  detail::ScratchDir scratch;
  fill(scratch.path());
  upload_tree(scratch.path(), loc);
}

// What a scheme's header passes to register_url_scheme.
inline UrlScheme object_scheme(std::string_view scheme, Location (*open)(const std::string&)) {
  return UrlScheme{scheme, open};
}

}  // namespace ckpt::storage
