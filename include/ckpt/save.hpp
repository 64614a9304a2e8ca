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
#include <ckpt/storage/object_store.hpp>
#include <ckpt/storage/storage.hpp>
#if CKPT_DEFINE_API
#include <ckpt/snapshot_edit.hpp>
#include <ckpt/storage/posix.hpp>
#endif

namespace ckpt {

namespace detail {
// What a caller (a manager) adds to the checkpoint before its commit, through the
// storage as the format does: its metadata, its items.
using BeforeCommitFn = std::function<void(const storage::Location&)>;

// The publish step every save takes, whatever the format and the type saved: on a local
// disk, a staging directory the format fills, before_commit adds files to, and that is
// renamed into place; on an object store (s3://, mem://), the format's objects written
// through the storage, then before_commit's files, then the commit marker
// (storage/object_store.hpp). Either way the format writes through the storage concept
// (FormatEntry::write_to), before_commit too: nothing is written to a local disk for
// an object store.
CKPT_API void save_staged(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                          const FormatEntry& format, const BeforeCommitFn& before_commit);
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
// Whether a save of this format to dir reads streamed leaves itself. On an object store
// (s3://, mem://) an object is sent whole when it is closed, so a streamed leaf would be
// held in memory anyway: it is read in first, whatever the format.
inline bool takes_streams(const FormatEntry& format, const std::filesystem::path& dir) {
  return format.writes_streams && !storage::is_url(dir);
}
}  // namespace detail

// Writes an already-taken snapshot; what the async executor calls from its thread.
// before_commit(location) may add objects (a manager's metrics, items) through the
// storage, which then appear atomically with the checkpoint. Every failure is a ckpt::Error naming dir
// (a file in the staging directory is named by its name in the checkpoint).
template <format_policy Format = native, class BeforeCommit>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                   BeforeCommit&& before_commit) {
  const FormatEntry format = detail::writer_entry<Format>();
  if (detail::has_streams(snap) && !detail::takes_streams(format, dir))
    return save_snapshot<Format>(dir, detail::read_streams(snap, dir, opts, Format::name), opts,
                                 std::forward<BeforeCommit>(before_commit));
  detail::save_staged(dir, snap, opts, format, detail::BeforeCommitFn(std::forward<BeforeCommit>(before_commit)));
}

template <format_policy Format = native>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts = {}) {
  save_snapshot(detail::writer_entry<Format>(), dir, snap, opts);
}

// Writes a snapshot in a format chosen at run time, from the registry (the CLI's convert).
inline void save_snapshot(const FormatEntry& format, const std::filesystem::path& dir, const Snapshot& snap,
                          const SaveOptions& opts = {}) {
  if (detail::has_streams(snap) && !detail::takes_streams(format, dir))
    return save_snapshot(format, dir, detail::read_streams(snap, dir, opts, format.name), opts);
  // A single-file format (Flax msgpack, a .safetensors file) commits its file itself; a
  // URL is a directory: the format's directory layout, with a commit marker.
  if (format.save_file && !storage::is_url(dir)) format.save_file(dir, snap, opts);
  else if (format.write_to) detail::save_staged(dir, snap, opts, format, nullptr);
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
                                  const FormatEntry& format, const BeforeCommitFn& before_commit) {
  for (const auto& l : snap.leaves) {  // Sharded leaves: checked before anything is written
    if (!l.box) continue;
    if (!format.check_box)
      throw Error(dir.string(), l.path.str(),
                  "the " + std::string(format.name) + " format does not store Sharded leaves (ckpt::mpi::save writes them)");
    format.check_box(dir.string(), l);
  }
  if (storage::find_url_scheme(dir)) {  // s3://, mem://: a commit marker written last
    const storage::Location loc = storage::open_location(dir);
    storage::begin_publish(loc, opts.force);
    const storage::Location writing = storage::writing_location(loc);
    format.write_to(snap, writing, opts);
    if (before_commit) before_commit(writing);
    storage::commit(loc);
    return;
  }
  std::error_code ec;
  if (!opts.force && std::filesystem::exists(dir, ec))
    throw Error(dir.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
  io::StagingDir staging(dir);
  io::naming_target(staging.final_path(), staging.path(), [&] {
    const storage::Location writing = storage::directory_location(staging.path(), storage::Publish::in_place);
    format.write_to(snap, writing, opts);
    if (before_commit) before_commit(writing);
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
