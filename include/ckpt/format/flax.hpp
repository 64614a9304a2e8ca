// ckpt/format/flax.hpp — ckpt::flax: the single-file checkpoints of flax.serialization,
// and ckpt::flax::save_checkpoint / restore_checkpoint / latest_checkpoint, the counterpart
// of Flax's legacy flax.training.checkpoints API (file naming, tmp-then-rename, keep),
// declared here and defined in <ckpt/flax_checkpoints.hpp>.
//
// A Flax checkpoint is one FILE: `save<flax>("/tmp/run/ckpt.msgpack", state)`
// writes it atomically (a hidden sibling file, fsynced, renamed). Python reads it with
// `flax.serialization.msgpack_restore(open(p, "rb").read())`.
// Written as Flax writes: arrays (rank >= 1) as ext 1, rank-0 leaves as numpy scalars
// (ext 3), strings as str, empty nodes as {}, arrays over 2**30 bytes chunked.
#pragma once

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/interop/msgpack_tree.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

namespace detail::flax {
namespace fs = std::filesystem;

// progress (SaveOptions::progress) counts the object's bytes, msgpack framing included.
inline void write_msgpack(const Snapshot& snap, storage::ObjectWriter& out, const std::string& checkpoint,
                          const ProgressFn& progress_fn = {}) {
  const detail::interop::SnapNode root = detail::interop::snapshot_tree(snap, checkpoint);
  detail::interop::PieceWriter w;
  if (root.leaf == nullptr && root.children.empty()) w.pk().pack_map(0);
  else detail::interop::write_tree(w, root, checkpoint);
  exec::ProgressTracker progress(progress_fn, w.size(), snap.leaves.size(), checkpoint);
  w.write_to(out, &progress);
  out.close();
  progress.finish();
}
// The same into a new local file (the temporary file io::publish_file renames).
inline void write_msgpack(const Snapshot& snap, const fs::path& file, const std::string& checkpoint,
                          const ProgressFn& progress_fn = {}) {
  write_msgpack(snap, *storage::file_writer(file), checkpoint, progress_fn);
}

// Whether the value under key starts as a msgpack map does. Never throws.
inline bool looks_like_msgpack_map(const io::KvStore& kv, const std::string& key) {
  try {
    const auto n = kv.size(key);
    if (!n || *n == 0) return false;
    // (a few bytes, not one: some S3 servers answer the range "bytes=0-0" with the whole object)
    std::byte b[16];
    kv.read(key, 0, std::span(b, static_cast<std::size_t>(std::min<std::uint64_t>(*n, sizeof b))));
    const auto c = static_cast<unsigned char>(b[0]);
    return (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf;
  } catch (const Error&) {
    return false;
  }
}

// The same for a file the caller names, which may be a symbolic link.
inline bool looks_like_msgpack_map(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return false;
  try {
    io::File f = io::File::open_read(file, true);  // detection only; open() refuses links where they do not belong
    if (f.size(file) == 0) return false;
    std::byte b[1];
    io::pread_exact(f, b, 0, file);
    const auto c = static_cast<unsigned char>(b[0]);
    return (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf;
  } catch (const Error&) {
    return false;
  }
}

// Adds the parsed msgpack tree root (kept alive by keep) to b, under prefix. With
// t5x_unwrap, a top-level {"version": n, "optimizer": tree} reads as tree, and info
// records the version.
inline void read_msgpack_tree(detail::interop::IndexBuilder& b, const std::shared_ptr<detail::interop::MsgpackKeep>& keep,
                              const msgpack::object* root, const std::string& context, const Path& prefix,
                              IndexInfo* info, detail::interop::SpecialLeaf special, bool t5x_unwrap) {
  if (t5x_unwrap && root->type == msgpack::type::MAP) {
    const detail::mp::Reader r(b.checkpoint(), context);
    if (const auto* v = r.find(*root, "version"); v && v->type == msgpack::type::POSITIVE_INTEGER) {
      if (info) info->format_version = v->via.u64;
      if (const auto* opt = r.find(*root, "optimizer")) root = opt;
    } else if (info) {
      info->format = "orbax-msgpack";
    }
  }
  detail::interop::MsgpackTreeReader reader(b, *keep, context, std::move(special));
  Path p = prefix;
  reader.walk(*root, p);
}

// Adds the tree of the msgpack value under key of a checkpoint's store to b.
inline void read_msgpack_into(detail::interop::IndexBuilder& b, const io::KvStore& kv, const std::string& key, const Path& prefix,
                              IndexInfo* info, detail::interop::SpecialLeaf special = {}, bool t5x_unwrap = false) {
  auto keep = std::make_shared<detail::interop::MsgpackKeep>();
  b.keep(keep);
  const std::string context = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
  const msgpack::object* root = &detail::interop::load_msgpack(kv, key, *keep, b.checkpoint(), context);
  read_msgpack_tree(b, keep, root, context, prefix, info, std::move(special), t5x_unwrap);
}

inline std::shared_ptr<const Index> open_msgpack(std::shared_ptr<const io::KvStore> kv, const std::string& key,
                                                 const std::string& checkpoint, const std::string& format,
                                                 detail::interop::SpecialLeaf special = {}, bool t5x_unwrap = false) {
  IndexInfo info;
  info.format = format;
  detail::interop::IndexBuilder b(checkpoint);
  b.keep(kv);
  read_msgpack_into(b, *kv, key, Path(), &info, std::move(special), t5x_unwrap);
  return b.build(std::move(info));
}

// A Flax checkpoint file the caller names (it may be a symbolic link).
inline std::shared_ptr<const Index> open_msgpack_file(const fs::path& file, const std::string& checkpoint,
                                                      const std::string& format) {
  IndexInfo info;
  info.format = format;
  detail::interop::IndexBuilder b(checkpoint);
  auto keep = std::make_shared<detail::interop::MsgpackKeep>();
  b.keep(keep);
  const std::string context = file.filename().string();
  const msgpack::object* root =
      &detail::interop::load_msgpack_file(file, *keep, checkpoint, context, std::uint64_t{1} << 40, true);
  read_msgpack_tree(b, keep, root, context, Path(), &info, {}, false);
  return b.build(std::move(info));
}
}  // namespace detail::flax

// Options of flax::save_checkpoint, as flax.training.checkpoints names them.
struct FlaxCheckpointOptions {
  std::string prefix = "checkpoint_";
  // How many of the newest checkpoints to keep.
  std::size_t keep = 1;
  // Also keep every checkpoint whose step is a multiple of this (0: none).
  std::int64_t keep_every_n_steps = 0;
  // Allow saving a step at or before the latest one; newer checkpoints are removed.
  bool overwrite = false;
};

struct flax {
  static constexpr const char* name = "flax";
  // Inside a step directory (the manager's layout): the file `checkpoint`, as t5x names it.
  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& o) {
    detail::flax::write_msgpack(s, *loc.storage->create(loc.key("checkpoint")), loc.url, o.progress);
  }
  // save<flax>(path, state): path is the file itself.
  static void save_file(const std::filesystem::path& file, const Snapshot& s, const SaveOptions& o) {
    io::publish_file(file, o.force, [&](const std::filesystem::path& tmp) {
      detail::flax::write_msgpack(s, tmp, file.string(), o.progress);
    });
  }
  // A step directory (or prefix) holding `checkpoint`, or the file itself.
  static bool detect_in(const io::KvStore& kv) { return detail::flax::looks_like_msgpack_map(kv, "checkpoint"); }
  static bool detect(const std::filesystem::path& p) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) return detect_in(io::DirectoryKv(p));
    return detail::flax::looks_like_msgpack_map(p);
  }
  // The file is renamed into place whole.
  static bool is_committed(const std::filesystem::path& p) { return detect(p); }
  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& checkpoint) {
    return detail::flax::open_msgpack(std::move(kv), "checkpoint", checkpoint, "flax");
  }
  static std::shared_ptr<const Index> open(const std::filesystem::path& p) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) return open_in(std::make_shared<io::DirectoryKv>(p), p.string());
    return detail::flax::open_msgpack_file(p, p.string(), "flax");  // the caller's own path
  }

  // flax.training.checkpoints: <dir>/<prefix><step> files (<ckpt/flax_checkpoints.hpp>).
  using CheckpointOptions = FlaxCheckpointOptions;
  // (step, path) of every checkpoint <prefix><integer> in dir, by step.
  static std::vector<std::pair<std::int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& dir,
                                                                                      const std::string& prefix);
  // The newest checkpoint in dir, if any.
  static std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir,
                                                                const std::string& prefix = "checkpoint_");
  template <class T>
  static std::filesystem::path save_checkpoint(const std::filesystem::path& dir, const T& state, std::int64_t step,
                                               const CheckpointOptions& o = {});
  template <class T>
  static T restore_checkpoint(const std::filesystem::path& ckpt_dir_or_file, std::optional<std::int64_t> step = std::nullopt,
                              const std::string& prefix = "checkpoint_", const RestoreOptions& opts = {});
};
static_assert(format_policy<flax>, CKPT_INTERNAL_CHECK("flax must meet format_policy"));
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool flax_registered = register_format<flax>(40);
#endif

// The earlier name of the policy.
using flax_msgpack [[deprecated("ckpt::flax_msgpack is now ckpt::flax")]] = flax;

}  // namespace ckpt
