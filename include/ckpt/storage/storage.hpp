// ckpt/storage/storage.hpp — where checkpoint bytes live: the storage concept, the
// storage policy types, and the URL schemes (s3://, gs://, mem://) accepted wherever a
// directory is.
//
// Every backend stores *objects*: byte strings named by '/'-separated keys, written
// whole, read by ranges, listed by prefix and deleted. That is all formats and the
// manager need from S3 or process memory; a local directory tree is one more model of it
// (storage/posix.hpp). What differs is how a checkpoint is *published*:
//
//   posix   (the default) a staging directory renamed into place (io/staging_dir.hpp):
//           atomic, durable after fsync. A plain path, as always.
//   memory  objects in this process's memory, a commit marker object written last.
//   s3      objects in an S3-compatible store (libcurl, opt-in <ckpt/storage/s3.hpp>),
//           a commit marker object written last, as Orbax's COMMIT_FILE mode does.
//   gs      objects in Google Cloud Storage (libcurl, opt-in <ckpt/storage/gcs.hpp>),
//           the same commit marker.
//
// On object stores a checkpoint at <prefix> exists when <prefix>/commit_success.txt
// does; readers, the manager's step list and all_steps() ignore a prefix without it,
// and a manager's cleanup deletes such leftovers (storage/object_store.hpp).
//
// This header is in the core and stays cheap: the abstract class, the URL registry and
// the policy tags. A scheme's implementation registers itself from its own header
// (as formats do in format/registry.hpp), so a program that includes only
// <ckpt/ckpt.hpp> links no HTTP library and says which header to include when handed
// an s3:// URL.
#pragma once

#include <algorithm>
#include <concepts>
#include <deque>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/error.hpp>

namespace ckpt::storage {

using ConstBytes = std::span<const std::byte>;

// dst.size() bytes of object `key` at `offset`: one of many reads given to get_many.
struct ReadSegment {
  std::string key;
  std::uint64_t offset = 0;
  std::span<std::byte> dst;
};

// One object written front to back (Storage::create): a data file streamed from a
// state's memory, without first gathering it in one buffer. Nothing of it is visible
// under its key before close() returns, which makes it whole and durable, as put().
// Destroying a writer that was not closed drops what it wrote.
class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;
  // Appends the pieces. `stable`: they stay valid and unchanged until close() (a
  // leaf's own memory during a save), so a backend that sends the object whole at
  // close() keeps the spans rather than copying them; otherwise (a buffer about to be
  // reused) it copies what it does not write at once.
  virtual void append(std::span<const ConstBytes> pieces, bool stable) = 0;
  void append(ConstBytes bytes, bool stable) { append(std::span<const ConstBytes>(&bytes, 1), stable); }
  virtual void close() = 0;
  // Whether append() writes the bytes before it returns (a file), rather than at
  // close() (an upload): what a save's progress counts as done.
  virtual bool writes_at_once() const { return false; }
  // The object's final size, when the writer knows it before the first append: a file
  // reserves its blocks (io::preallocate). A hint; the appends decide the object.
  virtual void expect_size(std::uint64_t) {}
};

// The storage concept, as an abstract class (formats and the manager take one at run
// time; the policy types below choose it at compile time). Keys are '/'-separated,
// with no leading '/'. Every failure is a ckpt::Error naming the object.
class Storage {
 public:
  virtual ~Storage() = default;

  // "s3://bucket", "mem://name", "/abs/dir": what keys are relative to, for messages.
  virtual std::string root_url() const = 0;
  std::string url(std::string_view key) const { return root_url() + "/" + std::string(key); }

  // Writes (or replaces) the object whole: the concatenation of pieces. Readers see the
  // old object or the new one, never a mix. Durable when it returns (as durable as the
  // backend: S3 acknowledges after storing; memory lasts as long as the process).
  virtual void put(const std::string& key, std::span<const ConstBytes> pieces) = 0;
  void put(const std::string& key, ConstBytes bytes) { put(key, std::span<const ConstBytes>(&bytes, 1)); }

  // Writes the object only when there is none under `key`: false (and nothing written)
  // when there is. A commit marker is written so, so that of two saves racing to one
  // place one commits and the other learns that it did not. A store with conditional
  // writes (GCS: ifGenerationMatch=0) decides it in one request; the default asks, then
  // puts.
  virtual bool put_if_absent(const std::string& key, std::span<const ConstBytes> pieces) {
    if (size(key)) return false;
    put(key, pieces);
    return true;
  }

  // A writer of a new object `key`, filled by appends and published by close(). The
  // default gathers the pieces (copying those that are not stable) and puts them whole
  // at close(); the local directory writes a file as the appends come.
  virtual std::unique_ptr<ObjectWriter> create(const std::string& key);

  // Reads exactly dst.size() bytes at offset; an object too short is a CorruptCheckpointError.
  virtual void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const = 0;

  // Many reads, of one object or several. A backend whose requests are costly (S3)
  // coalesces neighbouring ranges into few large requests run in parallel; the default
  // reads them one by one.
  virtual void get_many(std::span<const ReadSegment> segments) const {
    for (const auto& s : segments) get(s.key, s.offset, s.dst);
  }

  // The object's size, or nullopt when it does not exist.
  virtual std::optional<std::uint64_t> size(const std::string& key) const = 0;

  // A whole small object, refusing one larger than max_bytes; nullopt when absent.
  virtual std::optional<std::vector<std::byte>> read_all(const std::string& key, std::uint64_t max_bytes) const {
    const auto n = size(key);
    if (!n) return std::nullopt;
    if (*n > max_bytes)
      throw CorruptCheckpointError(url(key), "", "object is " + std::to_string(*n) + " bytes, more than the " +
                                                     std::to_string(max_bytes) + " allowed");
    std::vector<std::byte> out(static_cast<std::size_t>(*n));
    get(key, 0, out);
    return out;
  }

  // Every key that starts with prefix, sorted (all pages of a paginated listing).
  virtual std::vector<std::string> list(const std::string& prefix) const = 0;

  // The same listing with each object's size: what a reader of a committed checkpoint
  // takes once, instead of asking each object's size (S3: the listing carries the sizes,
  // one request per thousand objects instead of one per object). The default asks.
  struct Listed {
    std::string key;
    std::uint64_t size = 0;
  };
  virtual std::vector<Listed> list_sizes(const std::string& prefix) const {
    std::vector<Listed> out;
    for (auto& k : list(prefix))
      if (const auto n = size(k)) out.push_back({std::move(k), *n});  // (one deleted since the listing is left out)
    return out;
  }

  // Deletes the objects; absent ones are not an error.
  virtual void remove(const std::vector<std::string>& keys) = 0;

  // The names one level below prefix that hold objects ("checkpoint_5" for the key
  // "run/checkpoint_5/manifest" under "run"), sorted: a manager's steps. A directory's
  // subdirectories (not symbolic links, not staging directories; an empty one too); the
  // default lists every key under prefix.
  virtual std::vector<std::string> children(const std::string& prefix) const;

  // Deletes everything under prefix: a checkpoint, a manager's step. The commit marker
  // goes first, so that no reader ever sees a committed checkpoint with objects missing
  // (a crash halfway leaves an uncommitted leftover, which a manager's cleanup removes);
  // a directory is renamed aside, then removed.
  virtual void remove_prefix(const std::string& prefix);

  // The directory that holds the objects when they are local files (PosixStorage), so
  // that a reader may keep file descriptors and use preadv or io_uring on them; none
  // for a remote or in-memory store.
  virtual std::optional<std::filesystem::path> local_directory() const { return std::nullopt; }

  // How many objects are best written at once (S3: its connection count), so that a
  // save spreads its data over at least that many objects (a directory: 1, the default;
  // SaveOptions::data_files asks for more).
  virtual unsigned parallelism() const { return 1; }
};

// The object that commits a checkpoint on an object store (Orbax's name for it).
inline constexpr std::string_view commit_marker = "commit_success.txt";

// Storage's default members are compiled once (CKPT_API): create() is its key function,
// so its virtual table and every inline virtual member go into the one unit that
// compiles ckpt, not into every unit that saves or restores.
#if CKPT_DEFINE_API
namespace detail {
// Storage::create's default: the pieces kept (stable ones as spans, the others copied)
// and put whole at close().
class GatheringWriter final : public ObjectWriter {
 public:
  GatheringWriter(Storage& storage, std::string key) : storage_(storage), key_(std::move(key)) {}
  void append(std::span<const ConstBytes> pieces, bool stable) override {
    for (const auto& p : pieces) {
      if (p.empty()) continue;
      if (stable) {
        pieces_.push_back(p);
      } else {
        copies_.emplace_back(p.begin(), p.end());
        pieces_.push_back(ConstBytes(copies_.back()));
      }
    }
  }
  void close() override { storage_.put(key_, pieces_); }

 private:
  Storage& storage_;
  std::string key_;
  std::vector<ConstBytes> pieces_;
  std::deque<std::vector<std::byte>> copies_;  // a deque: growing it moves no copy
};
}  // namespace detail

CKPT_API std::unique_ptr<ObjectWriter> Storage::create(const std::string& key) {
  return std::make_unique<detail::GatheringWriter>(*this, key);
}

CKPT_API std::vector<std::string> Storage::children(const std::string& prefix) const {
  const std::string dir = prefix.empty() ? std::string() : prefix + "/";
  std::vector<std::string> out;
  for (const auto& key : list(dir)) {
    const auto slash = key.find('/', dir.size());
    if (slash == std::string::npos) continue;  // an object directly under prefix
    std::string name = key.substr(dir.size(), slash - dir.size());
    if (out.empty() || out.back() != name) out.push_back(std::move(name));  // a name's keys are together
  }
  std::sort(out.begin(), out.end());  // ("a!/x" lists before "a/x", yet "a" < "a!")
  return out;
}

CKPT_API void Storage::remove_prefix(const std::string& prefix) {
  const std::string dir = prefix.empty() ? std::string() : prefix + "/";
  const std::string marker = dir + std::string(commit_marker);
  auto keys = list(dir);
  if (std::find(keys.begin(), keys.end(), marker) != keys.end()) remove({marker});
  std::erase(keys, marker);
  if (!keys.empty()) remove(keys);
}
#endif

// A checkpoint's place: the storage and the key prefix under it ("" for its root).
struct Location {
  std::shared_ptr<Storage> storage;
  std::string prefix;  // no leading or trailing '/'
  std::string url;     // as the user wrote it, for messages
  // prefix + "/" + name (or name alone at the root)
  std::string key(std::string_view name) const {
    return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
  }
  // The place of a checkpoint or step below this one.
  Location child(std::string_view name) const { return {storage, key(name), url + "/" + std::string(name)}; }
};

// "s3" for "s3://bucket/x"; "" for a plain path (posix). A scheme is letters, digits,
// '+', '-' or '.', at least two characters (so that "C://" style paths never match).
inline std::string_view url_scheme(std::string_view s) {
  const auto pos = s.find("://");
  if (pos == std::string_view::npos || pos < 2) return {};
  const auto scheme = s.substr(0, pos);
  const bool ok = std::all_of(scheme.begin(), scheme.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
  });
  return ok ? scheme : std::string_view{};
}
inline bool is_url(const std::filesystem::path& p) { return !url_scheme(p.native()).empty(); }

// "bucket" and "a/b" for "s3://bucket/a/b/"; the trailing '/' and repeated '/' dropped.
struct ParsedUrl {
  std::string scheme, bucket, prefix;
};
inline ParsedUrl parse_url(std::string_view url) {
  ParsedUrl out;
  out.scheme = std::string(url_scheme(url));
  std::string_view rest = url.substr(out.scheme.size() + 3);
  const auto slash = rest.find('/');
  out.bucket = std::string(rest.substr(0, slash));
  if (out.bucket.empty()) throw Error(std::string(url), "", "URL names no bucket (write " + out.scheme + "://bucket/prefix)");
  if (slash != std::string_view::npos) {
    for (std::string_view r = rest.substr(slash + 1); !r.empty();) {
      const auto next = r.find('/');
      const auto part = r.substr(0, next);
      if (part == "." || part == "..")
        throw Error(std::string(url), "", "a URL's key may not contain \".\" or \"..\" components");
      if (!part.empty()) out.prefix += (out.prefix.empty() ? "" : "/") + std::string(part);
      if (next == std::string_view::npos) break;
      r = r.substr(next + 1);
    }
  }
  return out;
}

// A registered URL scheme: how to reach its storage. What a checkpoint is on it (the
// commit marker, storage/object_store.hpp) is the same for every object store; the
// formats read and write through the Storage it opens.
struct UrlScheme {
  std::string_view scheme;
  Location (*open)(const std::string& url) = nullptr;
};

namespace detail {
inline std::vector<UrlScheme>& scheme_list() {
  static std::vector<UrlScheme> list;
  return list;
}
inline std::string header_for(std::string_view scheme) {
  if (scheme == "s3") return "<ckpt/storage/s3.hpp> (and link the CMake target ckpt::s3, which brings libcurl)";
  if (scheme == "gs") return "<ckpt/storage/gcs.hpp> (and link the CMake target ckpt::gcs, which brings libcurl)";
  if (scheme == "mem") return "<ckpt/storage/memory.hpp>";
  return "";
}
}  // namespace detail

inline bool register_url_scheme(const UrlScheme& s) {
  auto& list = detail::scheme_list();
  if (std::none_of(list.begin(), list.end(), [&](const UrlScheme& e) { return e.scheme == s.scheme; })) list.push_back(s);
  return true;
}

// The registered scheme of a URL; nullptr for a plain path. A URL whose scheme no
// header registered is an Error saying which header does.
inline const UrlScheme* find_url_scheme(const std::filesystem::path& p) {
  const std::string_view scheme = url_scheme(p.native());
  if (scheme.empty()) return nullptr;
  for (const auto& e : detail::scheme_list())
    if (e.scheme == scheme) return &e;
  const std::string header = detail::header_for(scheme);
  throw Error(p.string(), "",
              header.empty() ? "ckpt knows no storage for " + std::string(scheme) + ":// URLs (s3://, gs:// and mem:// exist)"
                             : std::string(scheme) + ":// URLs need " + header + " in this program");
}

// Opens the storage of a URL (after find_url_scheme said it is one).
inline Location open_location(const std::filesystem::path& url) {
  const UrlScheme* s = find_url_scheme(url);
  if (!s) throw Error(url.string(), "", "not a storage URL");
  return s->open(url.native());
}

}  // namespace ckpt::storage

namespace ckpt {

// --- storage policies: CheckpointManager<State, ..., ckpt::s3> ---
// A storage policy names its URL scheme; a manager given one takes a root without a
// scheme as that scheme's ("bucket/run" -> "s3://bucket/run").
struct posix {
  static constexpr std::string_view storage_scheme = "";
};

template <class P>
concept storage_policy = requires {
  { P::storage_scheme } -> std::convertible_to<std::string_view>;
};

// root as the policy's URL: unchanged when it already has the scheme; an Error when it
// has another one.
template <storage_policy P>
std::filesystem::path storage_root(const std::filesystem::path& root) {
  const std::string_view want = P::storage_scheme;
  const std::string_view have = storage::url_scheme(root.native());
  if (have == want) return root;
  if (have.empty()) return std::filesystem::path(std::string(want) + "://" + root.native());
  throw Error(root.string(), "",
              want.empty() ? "a " + std::string(have) + ":// URL given where the storage policy is ckpt::posix"
                           : "a " + std::string(have.empty() ? "local" : have) + " root given where the storage policy is " +
                                 std::string(want) + "://");
}

}  // namespace ckpt
