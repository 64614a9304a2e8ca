// ckpt/manager.hpp — CheckpointManager: numbered steps in one root directory, with
// save policies, retention, metrics, items beside the state, async saves and preemption.
//
//   ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(
//       "/tmp/run", {.max_to_keep = 3, .best_metric = "eval/loss", .best_mode = ckpt::BestMode::min,
//                    .save_interval_steps = 100});
//   for (...) { train(state); mgr.save(step, state, {{"eval/loss", loss}}); }
//   mgr.wait_until_finished();
//   TrainState s = mgr.restore();   // the latest step
//
// Policies are types (the executor: sync_save or async_save; the format: native),
// the numbers are ManagerOptions. Each step is a directory <root>/<prefix><step>
// holding a checkpoint of the state (readable by ckpt::restore on its own), the file
// _CHECKPOINT_METADATA (metrics, times, custom metadata; see manager/step_metadata.hpp)
// and items/ (see manager/items.hpp); it is written as .tmp-<name>-<random> and renamed
// into place, so it is whole or absent. What is silent here follows Orbax's
// CheckpointManager; docs/manager.md explains every choice.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>
#include <ckpt/exec/async_save.hpp>
#include <ckpt/exec/executor.hpp>
#include <ckpt/exec/sync_save.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/manager/items.hpp>
#include <ckpt/manager/lock.hpp>
#include <ckpt/manager/preemption.hpp>
#include <ckpt/manager/step_metadata.hpp>
#include <ckpt/manager/step_name.hpp>
#include <ckpt/options.hpp>
#include <ckpt/migrate.hpp>
#include <ckpt/restore.hpp>
#include <ckpt/retain/keep.hpp>
#include <ckpt/retain/record.hpp>
#include <ckpt/retain/save_decision.hpp>
#include <ckpt/save.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/snapshot_edit.hpp>

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
};

struct SaveArgs {
  // Save whatever the policy says, overwriting the step if it exists.
  bool force = false;
  // Values saved beside the state, restorable alone (see manager/items.hpp).
  Items items{};
  // Any JSON, stored with the step: custom_metadata(step).
  nlohmann::json custom_metadata{};
};

namespace manager_detail {

template <class P>
concept any_policy = executor_policy<P> || format_policy<P>;

// The first policy of Ps satisfying the concept, or Default.
template <template <class> class Is, class Default, class... Ps>
struct pick;
template <template <class> class Is, class Default>
struct pick<Is, Default> {
  using type = Default;
};
template <template <class> class Is, class Default, class P, class... Ps>
struct pick<Is, Default, P, Ps...> {
  using type = std::conditional_t<Is<P>::value, P, typename pick<Is, Default, Ps...>::type>;
};
template <class P>
struct is_executor : std::bool_constant<executor_policy<P>> {};
template <class P>
struct is_format : std::bool_constant<format_policy<P>> {};

}  // namespace manager_detail

template <class State, class... Policies>
class CheckpointManager {
  static_assert((manager_detail::any_policy<Policies> && ...),
                "ckpt::CheckpointManager<State, Policies...>: every policy must be an executor policy "
                "(ckpt::sync_save, ckpt::async_save) or a format policy (ckpt::native)");
  static_assert((0 + ... + (executor_policy<Policies> ? 1 : 0)) <= 1,
                "ckpt::CheckpointManager: give at most one executor policy (ckpt::sync_save or ckpt::async_save)");
  static_assert((0 + ... + (format_policy<Policies> ? 1 : 0)) <= 1,
                "ckpt::CheckpointManager: give at most one format policy (ckpt::native)");

 public:
  using state_type = State;
  using executor_policy_type = typename manager_detail::pick<manager_detail::is_executor, sync_save, Policies...>::type;
  using format_type = typename manager_detail::pick<manager_detail::is_format, native, Policies...>::type;

  explicit CheckpointManager(std::filesystem::path root, ManagerOptions options = {})
      : root_(std::move(root)),
        options_(std::move(options)),
        naming_{options_.step_prefix, options_.step_format_fixed_length},
        executor_(options_.async_timeout) {
    node::require_tree<State>();
    validate();
    std::error_code ec;
    const bool exists = std::filesystem::is_directory(root_, ec);
    if (!exists && !options_.read_only) {
      if (!options_.create)
        throw Error(root_.string(), "", "no such directory (and ManagerOptions::create is false)");
      std::filesystem::create_directories(root_, ec);
      if (ec) throw Error(root_.string(), "", "cannot create the root directory: " + ec.message());
    }
    if (!options_.read_only) {
      lock_.emplace(root_);
      if (options_.cleanup_tmp_directories) cleanup();
      if (options_.save_on_preemption) preemption_.emplace();
    }
    scan();
  }

  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;
  // Waits for an async save in flight (its failure, if any, is lost: call
  // wait_until_finished() first to see it).
  ~CheckpointManager() { executor_.wait_idle(); }

  const std::filesystem::path& directory() const noexcept { return root_; }
  const ManagerOptions& options() const noexcept { return options_; }
  std::filesystem::path step_directory(std::int64_t step) const { return root_ / naming_.name(step); }

  // Saves state as `step` when the policy says so (should_save) or args.force; false
  // when skipped. A step that exists is an Error unless forced (then it is replaced).
  // With async_save, returns once the state is copied; the write and the retention
  // that follows it run in the background, and their failure is thrown (as an Error)
  // by the next save() or wait_until_finished().
  bool save(std::int64_t step, const State& state, Metrics metrics = {}, SaveArgs args = {}) {
    executor_.rethrow_if_failed();
    if (options_.read_only) return false;
    if (step < 0) throw Error(root_.string(), "", "step must be >= 0, not " + std::to_string(step));
    for (const auto& [name, item] : args.items) manager_detail::check_item_name(step_directory(step), name);
    if (!args.force) {
      if (has_step_or_pending(step))
        throw Error(step_directory(step).string(), "",
                    "step " + std::to_string(step) + " already exists (pass ckpt::SaveArgs{.force = true} to replace it)");
      if (!should_save(step)) return false;
    }
    executor_.wait();

    auto job = std::make_shared<PendingSave>();
    job->step = step;
    job->force = args.force;
    job->snapshot = take_snapshot(state);
    const SaveOptions& so = options_.save_options;  // as ckpt::save does
    if (so.save_dtype) cast_floating_leaves(job->snapshot, *so.save_dtype, so.save_dtype_prefix);
    if (so.transform) so.transform(job->snapshot);
    job->items = std::move(args.items);
    if constexpr (executor_policy_type::copies_state) {
      job->snapshot.make_owned(buffer_);
      for (auto& [name, item] : job->items) item.make_owned();
    }
    job->metadata.step = step;
    job->metadata.format = format_type::name;
    job->metadata.init_timestamp_nsecs = manager_detail::now_nsecs();
    for (auto& [name, value] : metrics)  // JSON has no NaN nor infinities: such a metric is "none"
      if (std::isfinite(value)) job->metadata.metrics.emplace(name, value);
    job->metadata.custom_metadata = std::move(args.custom_metadata);
    for (const auto& [name, item] : job->items)
      job->metadata.items[name] = std::string(manager_detail::kind_name(item.type()));
    {
      std::lock_guard lock(mu_);
      pending_ = step;
    }
    executor_.submit(step_directory(step).string(), [this, job] { run_save(*job); });
    return true;
  }

  // Waits for the async save in flight; throws its failure, or an Error after async_timeout.
  void wait_until_finished() { executor_.wait(); }

  // Whether save(step) would save: no step yet, or a step after the latest (counting one
  // in flight) that is on the interval or in save_on_steps, or any new step after SIGTERM.
  bool should_save(std::int64_t step) const {
    if (options_.read_only) return false;
    std::optional<std::int64_t> last;
    {
      std::lock_guard lock(mu_);
      if (!steps_.empty()) last = steps_.rbegin()->first;
      if (pending_ && (!last || *pending_ > *last)) last = pending_;
    }
    return retain::should_save(step, last, {options_.save_interval_steps, options_.save_on_steps},
                               reached_preemption(step));
  }

  // Whether SIGTERM arrived since this process's first save_on_preemption manager started.
  bool reached_preemption(std::int64_t /*step*/) const noexcept {
    return preemption_.has_value() && manager_detail::PreemptionWatch::received();
  }

  // Committed steps, ascending (an async save in flight appears once it commits).
  std::vector<std::int64_t> all_steps() const {
    std::lock_guard lock(mu_);
    std::vector<std::int64_t> out;
    for (const auto& [step, info] : steps_) out.push_back(step);
    return out;
  }
  std::optional<std::int64_t> latest_step() const {
    std::lock_guard lock(mu_);
    if (steps_.empty()) return std::nullopt;
    return steps_.rbegin()->first;
  }
  // The best committed step by best_metric (ties: the later); none without best_metric.
  std::optional<std::int64_t> best_step() const {
    if (options_.best_metric.empty()) return std::nullopt;
    return retain::best(records(), options_.best_metric, options_.best_mode);
  }

  Metrics metrics(std::int64_t step) const { return info(step).metrics; }
  nlohmann::json custom_metadata(std::int64_t step) const { return info(step).custom_metadata; }
  // Names of the items saved with the step.
  std::vector<std::string> item_names(std::int64_t step) const {
    std::vector<std::string> out;
    for (const auto& [name, kind] : info(step).items) out.push_back(name);
    return out;
  }

  // Restores a step (the latest when none is given) into a new State.
  State restore(std::optional<std::int64_t> step = {}, const RestoreOptions& opts = {}) {
    return ckpt::restore<State>(dir_to_read(step), opts);
  }
  void restore_into(std::int64_t step, State& state, const RestoreOptions& opts = {}) {
    ckpt::restore_into(dir_to_read(step), state, opts);
  }
  // Steps written by an older version of State, through a migration or a chain
  // (migrate.hpp): restore(step, m) and restore(std::nullopt, chain) for the latest.
  template <class Old, class... R>
  State restore(std::optional<std::int64_t> step, const Migration<Old, State, R...>& m, const RestoreOptions& opts = {}) {
    return ckpt::restore<State>(dir_to_read(step), m, opts);
  }
  template <class... M>
    requires(sizeof...(M) >= 1)
  State restore(std::optional<std::int64_t> step, const Chain<M...>& c, const RestoreOptions& opts = {}) {
    return ckpt::restore<State>(dir_to_read(step), c, opts);
  }

  // A tree item saved with the step (restorable without the state).
  template <class T>
  T restore_item(std::int64_t step, std::string_view name, const RestoreOptions& opts = {}) {
    return ckpt::restore<T>(item_dir(step, name, Item::kind::tree), opts);
  }
  template <class T>
  void restore_item_into(std::int64_t step, std::string_view name, T& value, const RestoreOptions& opts = {}) {
    ckpt::restore_into(item_dir(step, name, Item::kind::tree), value, opts);
  }
  // A JSON item saved with the step.
  nlohmann::json item_json(std::int64_t step, std::string_view name) {
    const auto file = item_dir(step, name, Item::kind::json);
    std::vector<std::byte> bytes;
    try {
      bytes = io::read_file(file, std::uint64_t{1} << 30);
    } catch (const Error& e) {
      throw CorruptCheckpointError(file.string(), "", std::string("item cannot be read: ") + e.what());
    }
    return detail::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, file.string(), "",
                              "item");
  }

  // Deletes a step (moved to todelete_subdir when set), even the latest.
  void delete_step(std::int64_t step) {
    if (options_.read_only) throw Error(root_.string(), "", "read-only manager: cannot delete step " + std::to_string(step));
    executor_.wait_idle();
    std::string name;
    {
      std::lock_guard lock(mu_);
      const auto it = steps_.find(step);
      if (it == steps_.end()) throw Error(root_.string(), "", "no step " + std::to_string(step) + " to delete");
      name = it->second.name;
      steps_.erase(it);
    }
    remove_step_dir(name);
  }

  // Reads the root directory again (steps saved or deleted by someone else).
  void reload() {
    executor_.wait_idle();
    scan();
  }

 private:
  struct StepInfo {
    std::string name;
    std::chrono::system_clock::time_point time{};
    Metrics metrics{};
    nlohmann::json custom_metadata{};
    std::map<std::string, std::string> items{};
  };
  struct PendingSave {
    std::int64_t step = 0;
    bool force = false;
    Snapshot snapshot;
    Items items;
    manager_detail::StepMetadata metadata;
  };

  void validate() const {
    const auto bad = [&](const std::string& what) { throw Error(root_.string(), "", "ManagerOptions: " + what); };
    if (options_.max_to_keep && *options_.max_to_keep < 0) bad("max_to_keep must be >= 0");
    if (options_.keep_period && *options_.keep_period <= 0) bad("keep_period must be > 0");
    if (options_.keep_time_interval && options_.keep_time_interval->count() < 0)
      bad("keep_time_interval must be >= 0");
    if (options_.save_interval_steps <= 0) bad("save_interval_steps must be > 0");
    if (options_.step_format_fixed_length < 0 || options_.step_format_fixed_length > 19)
      bad("step_format_fixed_length must be in [0, 19]");
    if (options_.step_prefix.find('/') != std::string::npos || options_.step_prefix.starts_with("."))
      bad("step_prefix must not contain '/' nor start with '.'");
    if (!options_.todelete_subdir.empty()) {
      const std::filesystem::path sub(options_.todelete_subdir);
      bool dots = false;
      for (const auto& part : sub) dots = dots || part == "..";
      if (sub.is_absolute() || dots) bad("todelete_subdir must be a relative path without '..'");
    }
    if (options_.async_timeout.count() <= 0) bad("async_timeout must be > 0");
  }

  // Removes what interrupted saves and deletes leave: .tmp-* directories no live writer
  // holds (a plain ckpt::save into the root may be running) and step directories
  // without a commit marker. Symbolic links are left alone.
  void cleanup() {
    io::remove_stale_staging(root_);
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root_, ec)) {
      const std::string name = e.path().filename().string();
      std::error_code e2;
      if (e.is_symlink(e2) || !e.is_directory(e2)) continue;
      const bool tmp = name.starts_with(io::staging_prefix);
      const bool torn = !tmp && naming_.parse(name) && !format_type::is_committed(e.path());
      if (torn) {
        std::error_code rm;
        std::filesystem::remove_all(e.path(), rm);
        if (rm) throw Error(e.path().string(), "", "cannot remove a leftover directory: " + rm.message());
      }
    }
    if (ec) throw Error(root_.string(), "", "cannot list the root directory: " + ec.message());
  }

  void scan() {
    std::map<std::int64_t, StepInfo> found;
    std::error_code ec;
    if (std::filesystem::is_directory(root_, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(root_, ec)) {
        const std::string name = e.path().filename().string();
        const auto step = naming_.parse(name);
        // A step is a directory of the root: a symbolic link to one elsewhere is not listed.
        std::error_code e2;
        if (!step || e.is_symlink(e2) || !e.is_directory(e2) || !format_type::is_committed(e.path())) continue;
        // Two spellings of one step (another fixed length): the canonical one wins.
        if (found.contains(*step) && name != naming_.name(*step)) continue;
        found[*step] = load_info(e.path(), name);
      }
      if (ec) throw Error(root_.string(), "", "cannot list the root directory: " + ec.message());
    }
    std::lock_guard lock(mu_);
    steps_ = std::move(found);
  }

  // A step's metadata. A step saved by ckpt::save (no metadata file) or with an
  // unreadable one still counts, without metrics, timed by its directory.
  static StepInfo load_info(const std::filesystem::path& dir, std::string name) {
    StepInfo info;
    info.name = std::move(name);
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir / manager_detail::step_metadata_file, ec)) {
      try {
        auto m = manager_detail::read_step_metadata(dir);
        info.time = m.init_time();
        info.metrics = std::move(m.metrics);
        info.custom_metadata = std::move(m.custom_metadata);
        info.items = std::move(m.items);
        return info;
      } catch (const Error&) {
      }
    }
    const auto mtime = std::filesystem::last_write_time(dir, ec);
    if (!ec)
      info.time = std::chrono::time_point_cast<std::chrono::system_clock::duration>(
          std::chrono::file_clock::to_sys(mtime));
    return info;
  }

  bool has_step_or_pending(std::int64_t step) const {
    std::lock_guard lock(mu_);
    return steps_.contains(step) || pending_ == step;
  }

  StepInfo info(std::int64_t step) const {
    std::lock_guard lock(mu_);
    const auto it = steps_.find(step);
    if (it == steps_.end()) throw Error(root_.string(), "", "no step " + std::to_string(step) + steps_list());
    return it->second;
  }

  std::string steps_list() const {  // under mu_
    if (steps_.empty()) return " (no steps)";
    std::string s = " (steps:";
    std::size_t n = 0;
    for (const auto& [step, info] : steps_) {
      if (++n > 20) return s + " ...)";
      s += " " + std::to_string(step);
    }
    return s + ")";
  }

  std::vector<retain::StepRecord> records() const {
    std::lock_guard lock(mu_);
    std::vector<retain::StepRecord> out;
    for (const auto& [step, info] : steps_) out.push_back({step, info.time, info.metrics});
    return out;
  }

  // The directory of a step to read: waits for a save in flight so that it is listed.
  std::filesystem::path dir_to_read(std::optional<std::int64_t> step) {
    executor_.wait_idle();
    std::lock_guard lock(mu_);
    if (!step) {
      if (steps_.empty()) throw Error(root_.string(), "", "no checkpoint to restore (no committed step)");
      step = steps_.rbegin()->first;
    }
    const auto it = steps_.find(*step);
    if (it == steps_.end()) throw Error(root_.string(), "", "no step " + std::to_string(*step) + steps_list());
    const auto dir = root_ / it->second.name;
    std::error_code ec;
    if (std::filesystem::is_symlink(dir, ec))  // replaced by a link since it was listed
      throw Error(dir.string(), "", "the step directory is a symbolic link, not a step of this root");
    return dir;
  }

  std::filesystem::path item_dir(std::int64_t step, std::string_view name, Item::kind kind) {
    const auto dir = dir_to_read(step);
    manager_detail::check_item_name(dir, name);
    const auto i = info(step);
    const auto it = i.items.find(std::string(name));
    const std::string want(manager_detail::kind_name(kind));
    if (it == i.items.end())
      throw Error(dir.string(), "", "no item \"" + std::string(name) + "\" saved with this step");
    if (it->second != want)
      throw Error(dir.string(), "", "item \"" + std::string(name) + "\" is a " + it->second + " item, not a " + want +
                                        " item");
    const auto base = dir / manager_detail::items_dir;
    const auto rel = kind == Item::kind::tree ? std::filesystem::path(manager_detail::items_dir) / std::string(name)
                                              : std::filesystem::path(manager_detail::items_dir);
    if (io::has_symlink_below(dir, rel))  // items/ and a tree item's directory belong to the step
      throw CorruptCheckpointError(dir.string(), "", "item \"" + std::string(name) + "\" is missing or a symbolic link");
    return kind == Item::kind::tree ? base / std::string(name) : base / (std::string(name) + ".json");
  }

  // The save itself: on the caller's thread (sync_save) or the background one (async_save).
  void run_save(PendingSave& job) {
    const std::string name = naming_.name(job.step);
    try {
      SaveOptions opts = options_.save_options;
      opts.force = job.force;
      save_snapshot<format_type>(root_ / name, job.snapshot, opts, [&](const std::filesystem::path& staging) {
        manager_detail::write_items<format_type>(staging, job.items, opts);
        job.metadata.commit_timestamp_nsecs = manager_detail::now_nsecs();
        manager_detail::write_step_metadata(staging, job.metadata);
      });
    } catch (...) {
      std::lock_guard lock(mu_);
      pending_.reset();
      throw;
    }
    {
      std::lock_guard lock(mu_);
      StepInfo info;
      info.name = name;
      info.time = job.metadata.init_time();
      info.metrics = job.metadata.metrics;
      info.custom_metadata = job.metadata.custom_metadata;
      info.items = job.metadata.items;
      steps_[job.step] = std::move(info);
      pending_.reset();
    }
    prune();
  }

  void prune() {
    const retain::RetentionOptions r{options_.max_to_keep,  options_.keep_period,
                                     options_.keep_time_interval, options_.best_metric,
                                     options_.best_mode,    options_.keep_checkpoints_without_metrics};
    for (std::int64_t step : retain::steps_to_delete(records(), r)) {
      std::string name;
      {
        std::lock_guard lock(mu_);
        const auto it = steps_.find(step);
        if (it == steps_.end()) continue;
        name = it->second.name;
        steps_.erase(it);
      }
      remove_step_dir(name);
    }
  }

  // Deletion is a rename first (to a .tmp- name, or into todelete_subdir), so that a
  // crash halfway through never leaves a committed-looking step with files missing.
  void remove_step_dir(const std::string& name) {
    const auto dir = root_ / name;
    if (!options_.todelete_subdir.empty()) {
      const auto bin = root_ / options_.todelete_subdir;
      std::error_code ec;
      std::filesystem::create_directories(bin, ec);
      if (ec) throw Error(bin.string(), "", "cannot create todelete_subdir: " + ec.message());
      auto target = bin / name;
      if (std::filesystem::exists(target, ec)) target = bin / (name + "-" + io::detail::random_suffix());
      if (::rename(dir.c_str(), target.c_str()) != 0) io::throw_errno("cannot move a pruned step", dir);
      io::sync_dir(root_);
      return;
    }
    const auto doomed = root_ / (std::string(io::staging_prefix) + name + "-deleting-" + io::detail::random_suffix());
    // Locked before it gets its .tmp- name, so that `ckpt gc` leaves the deletion to us.
    const io::File hold = io::detail::open_dir_for_lock(dir);
    if (hold) (void)::flock(hold.fd(), LOCK_EX | LOCK_NB);
    if (::rename(dir.c_str(), doomed.c_str()) != 0) {
      if (errno == ENOENT) return;  // already gone
      io::throw_errno("cannot delete step", dir);
    }
    std::error_code ec;
    std::filesystem::remove_all(doomed, ec);
    if (ec) throw Error(doomed.string(), "", "cannot delete a pruned step: " + ec.message());
  }

  std::filesystem::path root_;
  ManagerOptions options_;
  manager_detail::StepNaming naming_;
  std::optional<manager_detail::RootLock> lock_;
  std::optional<manager_detail::PreemptionWatch> preemption_;
  mutable std::mutex mu_;
  std::map<std::int64_t, StepInfo> steps_;  // committed steps (guarded by mu_)
  std::optional<std::int64_t> pending_;     // the step being saved (guarded by mu_)
  SnapshotBuffer buffer_;                   // async: the one copy of the state, reused
  typename executor_policy_type::executor executor_;  // last: destroyed first, waiting for the save in flight
};

}  // namespace ckpt
