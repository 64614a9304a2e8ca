// ckpt/storage/object_store.hpp — what a checkpoint is on an object store (S3, GCS,
// memory): the commit marker, written last, written once against storage::Storage for
// every format; and the streamed upload of a large object in parts, which S3 and GCS
// share.
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
#include <cstdint>
#include <deque>
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

// Commits: the marker, after every other object of the checkpoint is stored, and only
// where there is none (another save to the same place committed first: an Error).
inline void commit(const Location& loc) {
  const std::string text = "Checkpoint commit was successful to " + loc.url + "\n";
  const ConstBytes bytes = std::as_bytes(std::span(text));
  if (!loc.storage->put_if_absent(loc.key(commit_marker), std::span<const ConstBytes>(&bytes, 1)))
    throw Error(loc.url, "", "another save committed a checkpoint here while this one was written");
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
  bool put_if_absent(const std::string& key, std::span<const ConstBytes> pieces) override {
    return key == marker_ || base_->put_if_absent(key, pieces);
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

namespace detail {

// An object written as the appends come, for a store that uploads a large object in
// parts (S3's multipart upload, GCS's resumable one): one request at close() while it
// stays within `threshold`, else an upload whose parts (part_size each; the last one
// shorter) go up once enough bytes have come. Stable pieces are kept as spans until
// then; copied ones (a buffer about to be reused) are sent once connections x
// part_size of them are held, so a writer of a large object holds about that much
// memory.
//
// Store provides the Session type of an upload under way and
//   put_small(key, pieces, total)                 the object in one request
//   Session start_upload(key)
//   upload_parts(key, Session&, pieces, n, last)  the first n bytes of the pieces as
//                                                 the next parts (last: the object's end)
//   finish_upload(key, Session&)                  publishes the object
//   abort_upload(key, const Session&) noexcept    best effort: drops what went up
template <class Store>
class PartedUpload final : public ObjectWriter {
 public:
  struct Limits {
    std::uint64_t threshold = 0, part_size = 1;
    unsigned connections = 1;
  };
  PartedUpload(const Store& store, std::string key, Limits limits) : store_(store), key_(std::move(key)), lim_(limits) {}
  PartedUpload(const PartedUpload&) = delete;
  PartedUpload& operator=(const PartedUpload&) = delete;
  ~PartedUpload() override {
    if (!closed_ && session_) store_.abort_upload(key_, *session_);
  }

  void append(std::span<const ConstBytes> pieces, bool stable) override {
    for (const auto& p : pieces) {
      if (p.empty()) continue;
      if (stable) {
        pending_.push_back(p);
      } else {
        copies_.emplace_back(p.begin(), p.end());
        pending_.push_back(ConstBytes(copies_.back()));
        copied_ += p.size();
      }
      bytes_ += p.size();
    }
    if (bytes_ > lim_.threshold || copied_ >= lim_.part_size * lim_.connections) send(false);
  }

  void close() override {
    if (!session_) {
      store_.put_small(key_, pending_, bytes_);
    } else {
      send(true);
      store_.finish_upload(key_, *session_);
    }
    closed_ = true;
    pending_.clear();
    copies_.clear();
  }

 private:
  // Sends the whole parts held (and, when last, the rest); keeps a copy of the rest.
  void send(bool last) {
    const std::uint64_t n = last ? bytes_ : bytes_ / lim_.part_size * lim_.part_size;
    if (n == 0) return;
    if (!session_) session_ = store_.start_upload(key_);
    store_.upload_parts(key_, *session_, pending_, n, last);
    std::vector<std::byte> rest;
    rest.reserve(static_cast<std::size_t>(bytes_ - n));
    std::uint64_t at = 0;
    for (const auto& p : pending_) {
      const std::uint64_t end = at + p.size();
      if (end > n) {
        const auto from = static_cast<std::size_t>(std::max(at, n) - at);
        rest.insert(rest.end(), p.begin() + static_cast<std::ptrdiff_t>(from), p.end());
      }
      at = end;
    }
    pending_.clear();
    copies_.clear();
    bytes_ = copied_ = rest.size();
    if (!rest.empty()) {
      copies_.push_back(std::move(rest));
      pending_.push_back(ConstBytes(copies_.back()));
    }
  }

  const Store& store_;
  std::string key_;
  Limits lim_;
  std::vector<ConstBytes> pending_;
  std::deque<std::vector<std::byte>> copies_;  // a deque: growing it moves no copy
  std::uint64_t bytes_ = 0, copied_ = 0;
  std::optional<typename Store::Session> session_;
  bool closed_ = false;
};

// The bytes [begin, begin + len) of the concatenation of pieces, as pieces: a part of
// an upload, sent straight from the caller's memory.
inline std::vector<ConstBytes> slice(std::span<const ConstBytes> pieces, std::uint64_t begin, std::uint64_t len) {
  std::vector<ConstBytes> out;
  std::uint64_t at = 0;
  const std::uint64_t end = begin + len;
  for (const auto& p : pieces) {
    const std::uint64_t pend = at + p.size();
    if (pend > begin && at < end) {
      const std::uint64_t b = std::max(begin, at), e = std::min(end, pend);
      out.push_back(p.subspan(static_cast<std::size_t>(b - at), static_cast<std::size_t>(e - b)));
    }
    if (pend >= end) break;
    at = pend;
  }
  return out;
}

}  // namespace detail

// What a scheme's header passes to register_url_scheme.
inline UrlScheme object_scheme(std::string_view scheme, Location (*open)(const std::string&)) {
  return UrlScheme{scheme, open};
}

}  // namespace ckpt::storage
