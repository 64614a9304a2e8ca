// ckpt/save.hpp — ckpt::save: a value becomes a committed checkpoint directory.
#pragma once

#include <filesystem>

#include <ckpt/format/native.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

// Writes an already-taken snapshot; what the async executor calls from its thread.
template <format_policy Format = native>
void save_snapshot(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts = {}) {
  std::error_code ec;
  if (!opts.force && std::filesystem::exists(dir, ec))
    throw Error(dir.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
  io::StagingDir staging(dir);
  Format::write(snap, staging.path(), opts);
  staging.commit(opts.force);
}

// Saves value to dir, atomically: dir appears whole or not at all.
template <format_policy Format = native, class T>
void save(const std::filesystem::path& dir, const T& value, const SaveOptions& opts = {}) {
  node::require_tree<T>();
  save_snapshot<Format>(dir, take_snapshot(value), opts);
}

}  // namespace ckpt
