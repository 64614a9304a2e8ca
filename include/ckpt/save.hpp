// ckpt/save.hpp — ckpt::save: a value becomes a committed checkpoint directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/format/format.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/io/staging_dir.hpp>  // StaleStaging (gc)
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/storage/storage.hpp>
#if CKPT_DEFINE_API
#include <ckpt/snapshot_edit.hpp>
#endif

namespace ckpt {

namespace detail {
using FormatWrite = void (*)(const Snapshot&, const std::filesystem::path&, const SaveOptions&);
using BeforeCommitFn = std::function<void(const std::filesystem::path&)>;

// Stages, writes with the format, lets before_commit add files, and publishes: the one
// path every directory format's save takes, whatever the type saved.
CKPT_API void save_staged(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                          FormatWrite write, const BeforeCommitFn& before_commit);
// Applies the options that change what is saved: save_dtype, then the transform.
CKPT_API void apply_save_options(Snapshot& snap, const SaveOptions& opts);

// Streamed leaves (LeafBytes::stream) go to writers that read them piece by piece
// (FormatEntry::writes_streams; see takes_streams). For any other writer, this copy of
// snap holds their bytes in memory: refused, before anything is read, when those
// bytes exceed opts.max_memory.
CKPT_API Snapshot read_streams(const Snapshot& snap, const std::filesystem::path& dir, const SaveOptions& opts,
                               std::string_view format);
inline bool has_streams(const Snapshot& snap) {
  for (const auto& l : snap.leaves)
    if (l.data.stream) return true;
  return false;
}
template <class Format>
inline constexpr bool writes_streams = requires { requires Format::writes_streams; };
// Whether a save of this format to dir reads streamed leaves itself. On an object store
// (s3://, mem://) the native writer sends each data object whole at its close, so a
// streamed leaf would be copied into memory anyway: it is read in first; other formats
// are written to a local scratch directory (storage/object_store.hpp) by their own writer.
inline bool takes_streams(const FormatEntry& format, const std::filesystem::path& dir) {
  return format.writes_streams && !(storage::is_url(dir) && format.write == &ckpt::native::write);
}
}  // namespace detail

// Writes an already-taken snapshot; what the async executor calls from its thread.
// before_commit(staging_dir) may add files (a manager's metrics, items) that then
// appear atomically with the checkpoint. Every failure is a ckpt::Error naming dir
// (a file in the staging directory is named by its name in the checkpoint).
template <format_policy Format = native, class BeforeCommit>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                   BeforeCommit&& before_commit) {
  if (detail::has_streams(snap) && (!detail::writes_streams<Format> || (storage::is_url(dir) && std::is_same_v<Format, native>)))
    return save_snapshot<Format>(dir, detail::read_streams(snap, dir, opts, Format::name), opts,
                                 std::forward<BeforeCommit>(before_commit));
  detail::save_staged(dir, snap, opts, &Format::write, detail::BeforeCommitFn(std::forward<BeforeCommit>(before_commit)));
}

template <format_policy Format = native>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts = {}) {
  if (detail::has_streams(snap) && (!detail::writes_streams<Format> || (storage::is_url(dir) && std::is_same_v<Format, native>)))
    return save_snapshot<Format>(dir, detail::read_streams(snap, dir, opts, Format::name), opts);
  if constexpr (requires { Format::save_file(dir, snap, opts); }) {
    // A URL is a directory: the format's directory layout, with a commit marker (Flax: a
    // `checkpoint` object, as in a manager's step).
    if (storage::is_url(dir)) return detail::save_staged(dir, snap, opts, &Format::write, nullptr);
    Format::save_file(dir, snap, opts);  // a single-file format (Flax msgpack) commits its file itself
  } else {
    detail::save_staged(dir, snap, opts, &Format::write, nullptr);
  }
}

// Writes a snapshot in a format chosen at run time, from the registry (the CLI's convert).
inline void save_snapshot(const FormatEntry& format, const std::filesystem::path& dir, const Snapshot& snap,
                          const SaveOptions& opts = {}) {
  if (detail::has_streams(snap) && !detail::takes_streams(format, dir))
    return save_snapshot(format, dir, detail::read_streams(snap, dir, opts, format.name), opts);
  if (format.save_file && !storage::is_url(dir)) format.save_file(dir, snap, opts);  // a URL is a directory
  else if (format.write) detail::save_staged(dir, snap, opts, format.write, nullptr);
  else throw Error(dir.string(), "", "ckpt cannot write the " + std::string(format.name) + " format");
}

// What killed saves left in dir: the .tmp-* staging directories whose writer is gone
// (no process holds their lock), deleted unless dry_run. A save deletes those of its
// own target by itself, a CheckpointManager those of its root when it starts; this is
// for the rest (`ckpt gc DIR`). Directories a replace moved an old checkpoint into
// ("-old-") are listed as kept, never deleted: one may be the only copy left.
inline io::StaleStaging gc(const std::filesystem::path& dir, bool dry_run = false) {
  return io::remove_stale_staging(dir, {}, dry_run);
}

// Saves value to dir, atomically: dir appears whole or not at all.
template <format_policy Format = native, class T>
void save(const std::filesystem::path& dir, const T& value, const SaveOptions& opts = {}) {
  node::require_tree<T>();
  Snapshot snap = take_snapshot(value);
  detail::apply_save_options(snap, opts);
  save_snapshot<Format>(dir, snap, opts);
}

#if CKPT_DEFINE_API
CKPT_API void detail::save_staged(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                                  FormatWrite write, const BeforeCommitFn& before_commit) {
  // s3://, mem://: published with a commit marker instead of a rename (storage/object_store.hpp)
  if (const storage::UrlScheme* scheme = storage::find_url_scheme(dir))
    return scheme->save(scheme->open(dir.native()), snap, opts, write, before_commit);
  std::error_code ec;
  if (!opts.force && std::filesystem::exists(dir, ec))
    throw Error(dir.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
  for (const auto& l : snap.leaves) {  // Sharded leaves: checked before anything is written
    if (!l.box) continue;
    if (write != &ckpt::native::write)
      throw Error(dir.string(), l.path.str(), "only the native format stores Sharded leaves (ckpt::mpi::save writes others)");
    ckpt::native::check_box(dir.string(), l);
  }
  io::StagingDir staging(dir);
  io::naming_target(staging.final_path(), staging.path(), [&] {
    write(snap, staging.path(), opts);
    if (before_commit) before_commit(staging.path());
  });
  staging.commit(opts.force);
}

CKPT_API Snapshot detail::read_streams(const Snapshot& snap, const std::filesystem::path& dir, const SaveOptions& opts,
                                       std::string_view format) {
  std::uint64_t bytes = 0;
  for (const auto& l : snap.leaves)
    if (l.data.stream) bytes += l.data.size();
  if (opts.max_memory != 0 && bytes > opts.max_memory)
    throw Error(dir.string(), "",
                "the " + std::string(format) + " writer" + (storage::is_url(dir) ? " to object storage" : "") +
                    " holds every leaf in memory (" + std::to_string(bytes) + " bytes here), more than max_memory (" +
                    std::to_string(opts.max_memory) + " bytes); the native and safetensors formats stream leaves");
  Snapshot copy;  // the leaves in memory borrowed, not copied: snap outlives the save
  copy.type_name = snap.type_name;
  copy.schema = snap.schema;
  copy.fingerprint = snap.fingerprint;
  copy.leaves.reserve(snap.leaves.size());
  for (const auto& l : snap.leaves) {
    SnapshotLeaf c{l.path, LeafBytes::borrow(l.data.type, l.data.shape, l.data.view.data(), l.data.view.size()), l.box};
    if (l.data.stream) {
      c.data.stream = l.data.stream;
      c.data.make_owned();
    }
    copy.leaves.push_back(std::move(c));
  }
  return copy;
}

CKPT_API void detail::apply_save_options(Snapshot& snap, const SaveOptions& opts) {
  if (opts.save_dtype) cast_floating_leaves(snap, *opts.save_dtype, opts.save_dtype_prefix);
  if (opts.transform) opts.transform(snap);
}
#endif

}  // namespace ckpt
