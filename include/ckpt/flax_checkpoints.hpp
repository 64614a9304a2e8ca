// ckpt/flax_checkpoints.hpp — the definitions of ckpt::flax::save_checkpoint,
// restore_checkpoint and latest_checkpoint (declared with ckpt::flax in format/flax.hpp):
// the counterpart of flax.training.checkpoints (the legacy API).
//
// Files are named as Flax names them, <dir>/<prefix><step> ("checkpoint_100"), each a
// Flax msgpack file; a save publishes it as every ckpt save does (a hidden file, fsynced,
// renamed into place: io/staging_dir.hpp), then deletes all but the newest `keep`
// checkpoints (those whose step is a multiple of keep_every_n_steps are kept too).
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/format/flax.hpp>
#include <ckpt/manager/step_name.hpp>
#include <ckpt/restore.hpp>
#include <ckpt/save.hpp>

namespace ckpt {

inline std::vector<std::pair<std::int64_t, std::filesystem::path>> flax::list_checkpoints(const std::filesystem::path& dir,
                                                                                         const std::string& prefix) {
  return StepNaming{prefix}.list(dir);
}

inline std::optional<std::filesystem::path> flax::latest_checkpoint(const std::filesystem::path& dir,
                                                                   const std::string& prefix) {
  auto all = list_checkpoints(dir, prefix);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

template <class T>
std::filesystem::path flax::save_checkpoint(const std::filesystem::path& dir, const T& state, std::int64_t step,
                                            const CheckpointOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = dir / (o.prefix + std::to_string(step));
  auto existing = list_checkpoints(dir, o.prefix);
  if (!o.overwrite) {
    if (fs::exists(path, ec)) throw Error(path.string(), "", "checkpoint already exists (pass .overwrite = true)");
    if (!existing.empty() && step < existing.back().first)
      throw Error(path.string(), "", "trying to save an outdated checkpoint at step " + std::to_string(step) +
                                         ", the latest is step " + std::to_string(existing.back().first));
  }
  const Snapshot snap = take_snapshot(state);
  io::publish_file(path, o.overwrite, [&](const fs::path& tmp) { detail::flax::write_msgpack(snap, tmp, path.string()); });
  // retention: newer ones go when overwriting; then all but the newest `keep`
  existing = list_checkpoints(dir, o.prefix);
  if (o.overwrite)
    for (const auto& [s, p] : existing)
      if (s > step) fs::remove_all(p, ec);
  existing = list_checkpoints(dir, o.prefix);
  const std::size_t n = existing.size();
  for (std::size_t i = 0; i + std::max<std::size_t>(o.keep, 1) < n; ++i) {
    const auto s = existing[i].first;
    if (o.keep_every_n_steps > 0 && s % o.keep_every_n_steps == 0) continue;
    fs::remove_all(existing[i].second, ec);
  }
  return path;
}

// Restores from a checkpoint file, or from dir's latest (or given) step. Throws when
// there is none (Flax returns the target unchanged; ckpt makes it an error to see).
template <class T>
T flax::restore_checkpoint(const std::filesystem::path& ckpt_dir_or_file, std::optional<std::int64_t> step,
                           const std::string& prefix, const RestoreOptions& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(ckpt_dir_or_file, ec)) return restore<T>(ckpt_dir_or_file, opts);
  fs::path p;
  if (step) {
    p = ckpt_dir_or_file / (prefix + std::to_string(*step));
  } else {
    auto latest = latest_checkpoint(ckpt_dir_or_file, prefix);
    if (!latest) throw Error(ckpt_dir_or_file.string(), "", "no checkpoint named " + prefix + "<step> here");
    p = *latest;
  }
  return restore<T>(p, opts);
}

}  // namespace ckpt
