// ckpt/manager/options.hpp — what a CheckpointManager is told: ManagerOptions (its
// numbers, with Orbax's names and in Orbax's order) and SaveArgs (one save's extras).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>
#include <ckpt/manager/items.hpp>
#include <ckpt/manager/save_stats.hpp>
#include <ckpt/options.hpp>
#include <ckpt/retain/record.hpp>

namespace ckpt {

// The numbers of a manager, with Orbax's names and in Orbax's order.
struct ManagerOptions {
  // Keep at most this many steps (the best ones with best_metric, else the most
  // recent), plus those kept by keep_period / keep_time_interval, plus the latest.
  // Unset: keep everything.
  std::optional<int> max_to_keep{};
  // Never prune a step that is a multiple of this.
  std::optional<std::int64_t> keep_period{};
  // Never prune the first step, nor any step saved at least this long after the
  // previous step kept this way.
  std::optional<std::chrono::duration<double>> keep_time_interval{};
  // Rank steps by this metric for max_to_keep and best_step() ("" : by step).
  std::string best_metric{};
  BestMode best_mode = BestMode::max;
  // With best_metric: keep steps saved without the metric (else they rank worst).
  bool keep_checkpoints_without_metrics = true;
  // save() saves steps that are multiples of this (and the first one ever) ...
  std::int64_t save_interval_steps = 1;
  // ... and these.
  std::vector<std::int64_t> save_on_steps{};
  // Step directory names: "" gives 42, "checkpoint_" gives checkpoint_42 ...
  std::string step_prefix{};
  // ... and 6 gives 000042 (0: as many digits as needed).
  int step_format_fixed_length = 0;
  // Create the root directory if it does not exist.
  bool create = true;
  // At start, remove the .tmp-* directories of saves that are gone (no process holds
  // their lock) and step directories without a commit marker (what interrupted saves
  // leave).
  bool cleanup_tmp_directories = true;
  // Never write: no lock, no cleanup, save() returns false, delete_step() throws.
  bool read_only = false;
  // Move pruned steps into <root>/<todelete_subdir>/ instead of deleting them.
  std::string todelete_subdir{};
  // How long wait_until_finished() and the next save() wait for an async save.
  std::chrono::duration<double> async_timeout = std::chrono::seconds(600);
  // Notice SIGTERM: the next save() then saves whatever the interval says.
  bool save_on_preemption = true;
  // How each step's state is written (.force is ignored: see SaveArgs). By default
  // large leaves go to one data file per hardware thread (at most 8), written in parallel.
  SaveOptions save_options{.data_files = 0};
  // With best_metric named "{run_name}/{tag_name}" ("train/accuracy"): rank steps by the
  // values the TensorBoard event files in <root>/../{run_name} hold for tag_name, as
  // t5x's SaveBestCheckpointer does; they override values given to save(). Steps with no
  // value follow keep_checkpoints_without_metrics; the latest step is always kept.
  bool best_metric_from_tensorboard = false;
  // Keep the item `dataset_item` (a data-iterator position) only in this many of the
  // newest steps holding it: older steps lose the item but stay (t5x's
  // keep_dataset_checkpoints). Unset: never removed.
  std::optional<int> keep_dataset_checkpoints{};
  std::string dataset_item = "dataset";
  // ---- incremental saves and save figures (docs/manager.md) ----
  // Native format only: a large leaf whose bytes did not change since the latest step
  // is hard-linked from it instead of written again (manager/incremental.hpp). Every
  // step stays a whole checkpoint. Off by default: it hashes every large leaf first.
  bool incremental = false;
  // Guard against non-finite checkpoints: a step whose metrics given to save() are NaN
  // or infinite, or whose floating or complex leaves hold NaN or infinities (counted by
  // the native writer as it writes the bytes: no second pass), is saved but marked
  // ("finite": false in _CHECKPOINT_METADATA, SaveStats::finite()): it is never
  // best_step(), ranks below every finite step for max_to_keep, and never makes
  // retention delete the newest finite step (latest_finite_step()). Leaves are counted
  // with the native format only; other formats' steps are judged by their metrics.
  bool guard_non_finite = false;
  // Called after each step commits, with its figures (also stored in the step's
  // _CHECKPOINT_METADATA as "save_stats"); on the background thread with async_save.
  std::function<void(const SaveStats&)> on_save{};
};

struct SaveArgs {
  // Save whatever the policy says, overwriting the step if it exists.
  bool force = false;
  // Values saved beside the state, restorable alone (see manager/items.hpp).
  Items items{};
  // Any JSON, stored with the step: custom_metadata(step).
  nlohmann::json custom_metadata{};
};

namespace detail::manager {
// Options that make no sense are an Error at construction, not a surprise later.
inline void validate(const ManagerOptions& options, const std::filesystem::path& root) {
  const auto bad = [&](const std::string& what) { throw Error(root.string(), "", "ManagerOptions: " + what); };
  if (options.max_to_keep && *options.max_to_keep < 0) bad("max_to_keep must be >= 0");
  if (options.keep_period && *options.keep_period <= 0) bad("keep_period must be > 0");
  if (options.keep_time_interval && options.keep_time_interval->count() < 0)
    bad("keep_time_interval must be >= 0");
  if (options.save_interval_steps <= 0) bad("save_interval_steps must be > 0");
  if (options.step_format_fixed_length < 0 || options.step_format_fixed_length > 19)
    bad("step_format_fixed_length must be in [0, 19]");
  if (options.step_prefix.find('/') != std::string::npos || options.step_prefix.starts_with("."))
    bad("step_prefix must not contain '/' nor start with '.'");
  if (!options.todelete_subdir.empty()) {
    const std::filesystem::path sub(options.todelete_subdir);
    bool dots = false;
    for (const auto& part : sub) dots = dots || part == "..";
    if (sub.is_absolute() || dots) bad("todelete_subdir must be a relative path without '..'");
  }
  if (options.async_timeout.count() <= 0) bad("async_timeout must be > 0");
  if (options.best_metric_from_tensorboard) {
    const auto slash = options.best_metric.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == options.best_metric.size())
      bad("best_metric_from_tensorboard needs best_metric named {run_name}/{tag_name}, e.g. \"train/accuracy\"");
  }
  if (options.keep_dataset_checkpoints && *options.keep_dataset_checkpoints < 0)
    bad("keep_dataset_checkpoints must be >= 0");
  if (options.keep_dataset_checkpoints) check_item_name(root, options.dataset_item);
}
}  // namespace detail::manager

}  // namespace ckpt
