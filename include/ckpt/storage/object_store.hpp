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
// The publish step (save.hpp) calls begin_publish, lets the format (and a manager's
// before_commit) write their objects through the Storage (writing_location: a commit
// marker of the format's own held back), then commit; open_index (format/registry.hpp)
// calls require_committed before a format reads. Neither knows which format it
// publishes, and nothing goes through a local file.
#pragma once

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
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

// The storage a format writes a checkpoint on an object store through: every call goes
// to the real one, except the commit marker at the checkpoint's own prefix, which is
// the publish step's to write, last (Orbax's writer writes one of its own; on a local
// disk it is a file like any other).
class MarkerHeldBack final : public Storage {
 public:
  MarkerHeldBack(std::shared_ptr<Storage> base, std::string marker) : base_(std::move(base)), marker_(std::move(marker)) {}
  std::string root_url() const override { return base_->root_url(); }
  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override {
    if (key != marker_) base_->put(key, pieces);
  }
  std::unique_ptr<ObjectWriter> create(const std::string& key) override {
    if (key == marker_) return std::make_unique<Dropped>();
    return base_->create(key);
  }
  void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    base_->get(key, offset, dst);
  }
  void get_many(std::span<const ReadSegment> segments) const override { base_->get_many(segments); }
  std::optional<std::uint64_t> size(const std::string& key) const override { return base_->size(key); }
  std::optional<std::vector<std::byte>> read_all(const std::string& key, std::uint64_t max_bytes) const override {
    return base_->read_all(key, max_bytes);
  }
  std::vector<std::string> list(const std::string& prefix) const override { return base_->list(prefix); }
  std::vector<Listed> list_sizes(const std::string& prefix) const override { return base_->list_sizes(prefix); }
  void remove(const std::vector<std::string>& keys) override { base_->remove(keys); }
  std::vector<std::string> children(const std::string& prefix) const override { return base_->children(prefix); }
  void remove_prefix(const std::string& prefix) override { base_->remove_prefix(prefix); }
  std::optional<std::filesystem::path> local_directory() const override { return base_->local_directory(); }
  unsigned parallelism() const override { return base_->parallelism(); }

 private:
  struct Dropped final : ObjectWriter {
    void append(std::span<const ConstBytes>, bool) override {}
    void close() override {}
  };
  std::shared_ptr<Storage> base_;
  std::string marker_;
};

}  // namespace detail

// Where the format (and a manager's before_commit) writes a checkpoint being published
// at loc: loc, with the commit marker held back for commit().
inline Location writing_location(const Location& loc) {
  return Location{std::make_shared<detail::MarkerHeldBack>(loc.storage, loc.key(commit_marker)), loc.prefix, loc.url};
}

// What a scheme's header passes to register_url_scheme.
inline UrlScheme object_scheme(std::string_view scheme, Location (*open)(const std::string&)) {
  return UrlScheme{scheme, open};
}

}  // namespace ckpt::storage
