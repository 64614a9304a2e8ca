// ckpt/save.hpp — ckpt::save: a value becomes a committed checkpoint directory.
#pragma once

#include <filesystem>

#include <ckpt/format/native.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/snapshot_edit.hpp>

namespace ckpt {

// Writes an already-taken snapshot; what the async executor calls from its thread.
// before_commit(staging_dir) may add files (a manager's metrics, items) that then
// appear atomically with the checkpoint. Every failure is a ckpt::Error naming dir
// (a file in the staging directory is named by its name in the checkpoint).
template <format_policy Format = native, class BeforeCommit>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                   BeforeCommit&& before_commit) {
  std::error_code ec;
  if (!opts.force && std::filesystem::exists(dir, ec))
    throw Error(dir.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
  io::StagingDir staging(dir);
  io::naming_target(staging.final_path(), staging.path(), [&] {
    Format::write(snap, staging.path(), opts);
    before_commit(staging.path());
  });
  staging.commit(opts.force);
}

template <format_policy Format = native>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts = {}) {
  if constexpr (requires { Format::save_file(dir, snap, opts); }) {
    Format::save_file(dir, snap, opts);  // a single-file format (Flax msgpack) commits its file itself
  } else {
    save_snapshot<Format>(dir, snap, opts, [](const std::filesystem::path&) {});
  }
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
  if (opts.save_dtype) cast_floating_leaves(snap, *opts.save_dtype, opts.save_dtype_prefix);
  if (opts.transform) opts.transform(snap);
  save_snapshot<Format>(dir, snap, opts);
}

}  // namespace ckpt
