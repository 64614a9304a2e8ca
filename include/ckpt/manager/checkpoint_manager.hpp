// ckpt/manager/checkpoint_manager.hpp — CheckpointManager: numbered steps in one root directory, with
// save policies, retention, metrics, items beside the state, async saves and preemption,
// for one process or for every rank of an MPI job.
//
//   ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(
//       "/tmp/run", {.max_to_keep = 3, .best_metric = "eval/loss", .best_mode = ckpt::BestMode::min,
//                    .save_interval_steps = 100});
//   for (...) { train(state); mgr.save(step, state, {{"eval/loss", loss}}); }
//   mgr.wait_until_finished();
//   TrainState s = mgr.restore();   // the latest step
//
// Policies are types (the executor: sync_save or async_save; the format: native; the
// storage: posix, s3, memory; the coordination: one_process, or ckpt::mpi::ranks, which
// ckpt::mpi::CheckpointManager names), the numbers are ManagerOptions. The coordination
// (manager/coordination.hpp) is how the processes sharing the manager agree: with MPI,
// every rank calls every method, rank 0 decides (the step list, the times, the values
// ranked by) and the others take its decisions, rank 0 alone locks, deletes and writes
// the step metadata, and a failure on one rank is thrown on all; alone, each of these
// is a no-op. The root is a storage::Location, and the step list, clean-up and
// deletion are written against the storage concept (manager/step_catalogue.hpp). Each
// step is a directory <root>/<prefix><step> holding a checkpoint of the state (readable
// by ckpt::restore on its own), the file _CHECKPOINT_METADATA (metrics, times, custom
// metadata; see manager/step_metadata.hpp) and items/ (see manager/items.hpp); it is
// written as .tmp-<name>-<random> and renamed into place (on an object store: committed
// by a marker written last), so it is whole or absent. What is silent here follows
// Orbax's CheckpointManager; docs/manager.md explains every choice.
#pragma once

#include <algorithm>
#include <atomic>
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

#include <ckpt/io/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/exec/async_save.hpp>
#include <ckpt/exec/executor.hpp>
#include <ckpt/exec/sync_save.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/manager/coordination.hpp>
#include <ckpt/manager/incremental.hpp>
#include <ckpt/manager/items.hpp>
#include <ckpt/manager/options.hpp>
#include <ckpt/manager/lock.hpp>
#include <ckpt/manager/preemption.hpp>
#include <ckpt/manager/step_catalogue.hpp>
#include <ckpt/manager/step_deletion.hpp>
#include <ckpt/manager/step_metadata.hpp>
#include <ckpt/manager/step_name.hpp>
#include <ckpt/options.hpp>
#include <ckpt/migrate.hpp>
#include <ckpt/restore.hpp>
#include <ckpt/retain/keep.hpp>
#include <ckpt/retain/record.hpp>
#include <ckpt/retain/save_decision.hpp>
#include <ckpt/retain/tensorboard.hpp>
#include <ckpt/save.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

namespace detail::manager {

template <class P>
concept any_policy = executor_policy<P> || format_policy<P> || storage_policy<P> || coordination_policy<P>;

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
template <class P>
struct is_storage : std::bool_constant<storage_policy<P>> {};
template <class P>
struct is_coordination : std::bool_constant<coordination_policy<P>> {};

}  // namespace detail::manager

template <class State, class... Policies>
class CheckpointManager {
  static_assert((detail::manager::any_policy<Policies> && ...),
                CKPT_STATIC_ERROR("a policy of ckpt::CheckpointManager<State, Policies...> is neither an executor "
                                  "nor a format nor a storage nor a coordination policy",
                                  "Give executor policies (ckpt::sync_save, ckpt::async_save), format policies "
                                  "(ckpt::native, or any type meeting ckpt::format_policy), storage policies "
                                  "(ckpt::posix, ckpt::memory, ckpt::s3) and coordination policies "
                                  "(ckpt::one_process, ckpt::mpi::ranks) only.",
                                  CKPT_NAMED_ABOVE));
  static_assert((0 + ... + (executor_policy<Policies> ? 1 : 0)) <= 1,
                CKPT_STATIC_ERROR("ckpt::CheckpointManager was given more than one executor policy",
                                  "Give at most one of ckpt::sync_save and ckpt::async_save.", CKPT_NAMED_ABOVE));
  static_assert((0 + ... + (format_policy<Policies> ? 1 : 0)) <= 1,
                CKPT_STATIC_ERROR("ckpt::CheckpointManager was given more than one format policy",
                                  "Give at most one format policy (ckpt::native by default).", CKPT_NAMED_ABOVE));
  static_assert((0 + ... + (storage_policy<Policies> ? 1 : 0)) <= 1,
                CKPT_STATIC_ERROR("ckpt::CheckpointManager was given more than one storage policy",
                                  "Give at most one of ckpt::posix, ckpt::memory and ckpt::s3.", CKPT_NAMED_ABOVE));
  static_assert((0 + ... + (coordination_policy<Policies> ? 1 : 0)) <= 1,
                CKPT_STATIC_ERROR("ckpt::CheckpointManager was given more than one coordination policy",
                                  "Give at most one of ckpt::one_process and ckpt::mpi::ranks.", CKPT_NAMED_ABOVE));

 public:
  using state_type = State;
  using executor_policy_type = typename detail::manager::pick<detail::manager::is_executor, sync_save, Policies...>::type;
  using format_type = typename detail::manager::pick<detail::manager::is_format, native, Policies...>::type;
  using storage_type = typename detail::manager::pick<detail::manager::is_storage, posix, Policies...>::type;
  using coordination_type = typename detail::manager::pick<detail::manager::is_coordination, one_process, Policies...>::type;

 private:
  static_assert(coordination_type::template writes<format_type>,
                CKPT_STATIC_ERROR("ckpt::mpi::CheckpointManager writes the native, t5x and Orbax formats; this "
                                  "format cannot be written by several processes",
                                  "Leave the format policy out (ckpt::native), or give ckpt::t5x or ckpt::orbax.",
                                  CKPT_NAMED_ABOVE));
  static_assert(coordination_type::url_roots || std::is_same_v<storage_type, posix>,
                CKPT_STATIC_ERROR("ckpt::mpi::CheckpointManager writes into a directory every rank sees; it takes "
                                  "no storage policy",
                                  "Leave the storage policy out (ckpt::posix).", CKPT_NAMED_ABOVE));

 public:
  explicit CheckpointManager(std::filesystem::path root, ManagerOptions options = {})
    requires std::default_initializable<coordination_type>
      : CheckpointManager(coordination_type{}, std::move(root), std::move(options)) {}

  // ckpt::mpi::CheckpointManager's (comm, root, options): every rank constructs it.
  CheckpointManager(coordination_type coordination, std::filesystem::path root, ManagerOptions options = {})
      : coord_(std::move(coordination)),
        root_(std::is_same_v<storage_type, posix> ? std::move(root) : storage_root<storage_type>(root)),
        options_(std::move(options)),
        naming_{options_.step_prefix, options_.step_format_fixed_length},
        executor_(options_.async_timeout) {
    node::require_tree<State>();
    coord_.run(root_.string(), [&] { open_root(); });
    if constexpr (executor_policy_type::copies_state) background_.emplace(coord_.background());
    if (options_.save_on_preemption && !options_.read_only) preemption_.emplace();
    scan();
  }

  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;
  // Waits for an async save in flight (its failure, if any, is lost: call
  // wait_until_finished() first to see it). Collective with MPI.
  ~CheckpointManager() { executor_.wait_idle(); }

  const std::filesystem::path& directory() const noexcept { return root_; }
  const ManagerOptions& options() const noexcept { return options_; }
  const coordination_type& coordination() const noexcept { return coord_; }
  // ckpt::mpi::CheckpointManager's communicator.
  decltype(auto) comm() const noexcept
    requires requires(const coordination_type& c) { c.comm(); }
  {
    return coord_.comm();
  }
  std::filesystem::path step_directory(std::int64_t step) const { return root_ / naming_.name(step); }

  // Saves state as `step` when the policy says so (should_save) or args.force; false
  // when skipped. A step that exists is an Error unless forced (then it is replaced).
  // With async_save, returns once the state is copied; the write and the retention
  // that follows it run in the background, and their failure is thrown (as an Error)
  // by the next save() or wait_until_finished(). With MPI, every rank passes its own
  // state and items (an item several ranks pass is written once, by the lowest).
  bool save(std::int64_t step, const State& state, Metrics metrics = {}, SaveArgs args = {}) {
    const auto called = std::chrono::steady_clock::now();  // SaveStats::blocking_seconds
    executor_.rethrow_if_failed();
    if (options_.read_only) return false;
    if (step < 0) throw Error(root_.string(), "", "step must be >= 0, not " + std::to_string(step));
    // An invalid name on one rank fails every rank here, before the gather of the names
    // (a rank that threw alone would leave the others waiting in it).
    coord_.run(step_directory(step).string(), [&] {
      for (const auto& [name, item] : args.items) detail::manager::check_item_name(step_directory(step), name);
    });
    if (!args.force) {
      if (has_step_or_pending(step))
        throw StepExistsError(step_directory(step).string(), "",
                              "step " + std::to_string(step) + " already exists (pass ckpt::SaveArgs{.force = true} to replace it)");
      if (!should_save(step)) return false;
    }
    executor_.wait();

    auto job = std::make_shared<PendingSave>();
    job->step = step;
    job->force = args.force;
    job->snapshot = take_snapshot(state);
    detail::apply_save_options(job->snapshot, options_.save_options);  // as ckpt::save does
    if constexpr (executor_policy_type::copies_state) job->snapshot.make_owned(buffer_);
    job->metadata.step = step;
    job->metadata.format = format_type::name;
    job->metadata.init_timestamp_nsecs = coord_.share(detail::manager::now_nsecs());  // rank 0's clock
    std::int64_t non_finite_metrics = 0;
    for (auto& [name, value] : metrics) {  // JSON has no NaN nor infinities: such a metric is "none"
      if (std::isfinite(value)) job->metadata.metrics.emplace(name, value);
      else ++non_finite_metrics;
    }
    job->metadata.custom_metadata = std::move(args.custom_metadata);
    assign_items(*job, std::move(args.items));
    {
      std::lock_guard lock(mu_);
      pending_ = step;
    }
    job->stats.step = step;
    job->stats.bytes = job->snapshot.total_bytes();
    job->stats.bytes_written = job->stats.bytes;  // an incremental save sets its own
    if (options_.guard_non_finite) {  // rank 0's metrics decide, as they are the ones stored
      job->stats.guarded = true;
      job->stats.non_finite_metrics = static_cast<std::size_t>(coord_.share(non_finite_metrics));
    }
    job->stats.blocking_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
    executor_.submit(step_directory(step).string(), [this, job] { run_save(*job); });
    return true;
  }

  // Waits for the async save in flight; throws its failure, or an Error after
  // async_timeout. With MPI each rank's save finishes only with every rank's.
  void wait_until_finished() { executor_.wait(); }

  // Whether save(step) would save: no step yet, or a step after the latest (counting one
  // in flight) that is on the interval or in save_on_steps, or any new step after
  // SIGTERM. Collective with MPI when save_on_preemption is set.
  bool should_save(std::int64_t step) const {
    if (options_.read_only) return false;
    std::optional<std::int64_t> last;
    {
      std::lock_guard lock(mu_);
      if (!steps_.empty()) last = steps_.rbegin()->first;
      if (pending_ && (!last || *pending_ > *last)) last = pending_;
    }
    return retain::should_save(step, last, options_, reached_preemption(step));
  }

  // Whether SIGTERM arrived since this process's first save_on_preemption manager
  // started; with MPI, on any rank (Orbax's reached_preemption; collective then).
  bool reached_preemption(std::int64_t /*step*/) const noexcept(noexcept(std::declval<const coordination_type&>().any(true))) {
    return preemption_.has_value() && coord_.any(detail::manager::PreemptionWatch::received());
  }

  // Committed steps, ascending (an async save in flight appears once it commits).
  std::vector<std::int64_t> all_steps() const {
    std::lock_guard lock(mu_);
    return detail::manager::step_numbers(steps_);
  }
  std::optional<std::int64_t> latest_step() const {
    std::lock_guard lock(mu_);
    return detail::manager::newest_step(steps_);
  }
  // The newest committed step not marked non-finite by guard_non_finite: the one to
  // restore after a divergence (the latest step, when nothing is marked).
  std::optional<std::int64_t> latest_finite_step() const {
    const auto kept = retain::newest_finite(records());
    if (kept.empty()) return std::nullopt;
    return *kept.begin();
  }
  // Whether the step was saved finite: false when guard_non_finite found NaN or
  // infinities in it (a step saved without the guard counts as finite).
  bool is_finite(std::int64_t step) const { return info(step).finite; }
  // The best committed step by best_metric (ties: the later); none without
  // best_metric. Collective with MPI when best_metric_from_tensorboard is set.
  std::optional<std::int64_t> best_step() const {
    if (options_.best_metric.empty()) return std::nullopt;
    return retain::best(ranked_records(coord_), options_.best_metric, options_.best_mode);
  }

  Metrics metrics(std::int64_t step) const { return info(step).metrics; }
  nlohmann::json custom_metadata(std::int64_t step) const { return info(step).custom_metadata; }
  // Names of the items saved with the step (by every rank).
  std::vector<std::string> item_names(std::int64_t step) const {
    std::vector<std::string> out;
    for (const auto& [name, kind] : info(step).items) out.push_back(name);
    return out;
  }

  // Restores a step (the latest when none is given) into a new State. With MPI
  // (collective): the saved layout (ckpt::mpi::restore<State>; same process count).
  State restore(std::optional<std::int64_t> step = {}, const RestoreOptions& opts = {}) {
    return coord_.template restore<State>(dir_to_read(step), opts);
  }
  // With MPI (collective): into this rank's layout (any process count).
  void restore_into(std::int64_t step, State& state, const RestoreOptions& opts = {}) {
    coord_.restore_into(dir_to_read(step), state, opts);
  }
  void restore_latest_into(State& state, const RestoreOptions& opts = {}) {
    coord_.restore_into(dir_to_read(std::nullopt), state, opts);
  }
  // Steps written by an older version of State, through a migration or a chain
  // (migrate.hpp): restore(step, m) and restore(std::nullopt, chain) for the latest.
  template <class Old, class... R>
  State restore(std::optional<std::int64_t> step, const Migration<Old, State, R...>& m, const RestoreOptions& opts = {}) {
    return coord_.template restore<State>(dir_to_read(step), m, opts);
  }
  template <class... M>
    requires(sizeof...(M) >= 1)
  State restore(std::optional<std::int64_t> step, const Chain<M...>& c, const RestoreOptions& opts = {}) {
    return coord_.template restore<State>(dir_to_read(step), c, opts);
  }

  // A tree item saved with the step (restorable without the state). Not collective:
  // with MPI, a rank may read its own item or another's.
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
    return detail::manager::read_item_json(item_dir(step, name, Item::kind::json), [&](const std::filesystem::path& f) {
      const std::string key = location_.key(f.lexically_relative(root_).generic_string());
      auto bytes = location_.storage->read_all(key, std::uint64_t{1} << 30);
      if (!bytes) throw Error(f.string(), "", "no such file");
      return std::move(*bytes);
    });
  }

  // Deletes a step (moved to todelete_subdir when set), even the latest. With MPI
  // (collective): rank 0 deletes it.
  void delete_step(std::int64_t step) {
    if (options_.read_only)
      throw ReadOnlyError(root_.string(), "", "read-only manager: cannot delete step " + std::to_string(step));
    executor_.wait_idle();
    std::string name;
    {
      std::lock_guard lock(mu_);
      const auto it = steps_.find(step);
      if (it == steps_.end())
        throw NoSuchStepError(root_.string(), "", "no step " + std::to_string(step) + " to delete");
      name = it->second.name;
      steps_.erase(it);
    }
    coord_.on_rank0(root_.string(), [&] { remove_step(name); });
  }

  // Reads the root directory again (steps saved or deleted by someone else). With
  // MPI (collective): rank 0 reads it and tells every rank.
  void reload() {
    executor_.wait_idle();
    scan();
  }

 private:
  struct PendingSave {
    std::int64_t step = 0;
    bool force = false;
    Snapshot snapshot;
    Items items;  // the ones this process writes
    detail::manager::StepMetadata metadata;
    SaveStats stats;  // this process's figures
  };

  // Every process: checks the options and opens the root; rank 0 creates the root
  // directory, locks it and cleans up what interrupted saves left.
  void open_root() {
    detail::manager::validate(options_, root_);
    if constexpr (executor_policy_type::copies_state) coord_.allow_background(root_.string());
    const bool writer = coord_.rank() == 0 && !options_.read_only;
    if (storage::is_url(root_)) {  // s3://, mem://: no directory to create, no lock to take
      if (!coordination_type::url_roots)
        throw Error(root_.string(), "", "the ranks save into a directory they all see: give a path, not a URL");
      if (!std::is_same_v<coordination_type, one_process> && storage::url_scheme(root_.native()) == "mem")
        throw Error(root_.string(), "", "a mem:// store lives in one process, which the other ranks cannot reach: "
                                        "give a directory they all see, or an s3:// or gs:// URL");
      const auto unsupported = [&](const char* what) {
        throw Error(root_.string(), "", std::string("ManagerOptions: ") + what + " needs a local root directory");
      };
      if (!options_.todelete_subdir.empty()) unsupported("todelete_subdir");
      if (options_.best_metric_from_tensorboard) unsupported("best_metric_from_tensorboard");
      if (options_.keep_dataset_checkpoints) unsupported("keep_dataset_checkpoints");
      if (options_.incremental) unsupported("incremental (unchanged data files are hard-linked)");
      location_ = storage::open_location(root_);
    } else {
      std::error_code ec;
      if (writer && !std::filesystem::is_directory(root_, ec)) {
        if (!options_.create) throw Error(root_.string(), "", "no such directory (and ManagerOptions::create is false)");
        std::filesystem::create_directories(root_, ec);
        if (ec) throw Error(root_.string(), "", "cannot create the root directory: " + ec.message());
      }
      location_ = storage::directory_location(root_);
      // An flock against a second writing manager. An object store has no lock: one
      // writing manager per root is the caller's duty there, as with Orbax on GCS.
      if (writer) lock_.emplace(root_);
    }
    if (writer && options_.cleanup_tmp_directories)
      detail::manager::cleanup_root(location_, naming_, &format_type::is_committed);
  }

  // Rank 0 scans the root; every process takes its list.
  void scan() {
    detail::manager::StepMap found;
    coord_.on_rank0(root_.string(),
                    [&] { found = detail::manager::scan_root(location_, naming_, &format_type::is_committed); });
    found = coord_.share(std::move(found));
    std::lock_guard lock(mu_);
    steps_ = std::move(found);
  }

  // Learns every process's item names and kinds; keeps in job.items those this
  // process is the lowest rank to pass, and lists all of them in the step metadata. An
  // item passed by several ranks with different kinds is an error, the same on every rank.
  void assign_items(PendingSave& job, Items items) {
    std::string mine;
    for (const auto& [name, item] : items) mine += name + '\t' + std::string(detail::manager::kind_name(item.type())) + '\n';
    const auto all = coord_.allgather(mine);
    std::map<std::string, std::pair<std::string, int>> first;  // name -> kind, lowest rank
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      const std::string& text = all[static_cast<std::size_t>(r)];
      for (std::size_t at = 0; at < text.size();) {
        const std::size_t tab = text.find('\t', at), nl = text.find('\n', at);
        if (tab == std::string::npos || nl == std::string::npos || tab > nl) break;
        const std::string name = text.substr(at, tab - at), kind = text.substr(tab + 1, nl - tab - 1);
        const auto [it, fresh] = first.emplace(name, std::pair(kind, r));
        if (!fresh && it->second.first != kind)
          throw Error(step_directory(job.step).string(), "",
                      "item \"" + name + "\" is a " + it->second.first + " item on rank " +
                          std::to_string(it->second.second) + " and a " + kind + " item on rank " + std::to_string(r));
        at = nl + 1;
      }
    }
    for (const auto& [name, kind_rank] : first) job.metadata.items[name] = kind_rank.first;
    for (auto& [name, item] : items)
      if (first.at(name).second == coord_.rank()) {
        if constexpr (executor_policy_type::copies_state) item.make_owned();
        job.items.emplace(name, std::move(item));
      }
  }

  bool has_step_or_pending(std::int64_t step) const {
    std::lock_guard lock(mu_);
    return steps_.contains(step) || pending_ == step;
  }

  detail::manager::StepInfo info(std::int64_t step) const {
    std::lock_guard lock(mu_);
    return detail::manager::step_info(steps_, step, root_);
  }

  std::vector<retain::StepRecord> records() const {
    std::lock_guard lock(mu_);
    return detail::manager::step_records(steps_);
  }

  // records(), with best_metric read from TensorBoard when asked (outside the lock: it
  // reads files): rank 0 reads the event files and sends every process the values, so
  // all rank alike (collective then).
  std::vector<retain::StepRecord> ranked_records(const coordination_type& c) const {
    auto out = records();
    if (!options_.best_metric_from_tensorboard) return out;
    std::map<std::int64_t, double> logged;
    c.on_rank0(root_.string(), [&] { logged = tensorboard::read_metric(root_, options_.best_metric); });
    retain::use_logged_metric(out, options_.best_metric, c.share(std::move(logged)));
    return out;
  }

  // The directory of a step to read: waits for a save in flight so that it is listed.
  std::filesystem::path dir_to_read(std::optional<std::int64_t> step) {
    executor_.wait_idle();
    std::lock_guard lock(mu_);
    return detail::manager::step_dir_to_read(steps_, step, root_);
  }

  std::filesystem::path item_dir(std::int64_t step, std::string_view name, Item::kind kind) {
    const auto dir = dir_to_read(step);
    return detail::manager::item_path(dir, info(step).items, name, kind, location_.storage->local_directory().has_value());
  }

  // The save itself: on the caller's thread (sync_save) or the background one
  // (async_save; with MPI, on the duplicate communicator).
  void run_save(PendingSave& job) {
    const coordination_type& c = background_ ? *background_ : coord_;
    const std::string name = naming_.name(job.step);
    const auto started = std::chrono::steady_clock::now();
    const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
    try {
      SaveOptions opts = options_.save_options;
      opts.force = job.force;
      std::atomic<std::uint64_t> non_finite{0};  // the writers' count (with MPI: over every rank)
      if (options_.guard_non_finite) opts.non_finite = &non_finite;
      detail::manager::StepWrite write;
      write.stats = &job.stats;
      if constexpr (std::is_same_v<format_type, native>) {
        if (options_.incremental) {  // the latest committed step, the same on every rank
          std::lock_guard lock(mu_);
          write.incremental_base = steps_.empty() ? std::filesystem::path() : root_ / steps_.rbegin()->second.name;
        }
      }
      write.in_staging = [&](const storage::Location& staging) {
        SaveOptions item_opts = opts;
        item_opts.non_finite = nullptr;  // the guard judges the state, not the items beside it
        detail::manager::write_items<format_type>(staging, job.items, item_opts);
      };
      // The metadata goes in last, with the figures of the write so far.
      write.before_commit = [&](const storage::Location& staging) {
        job.stats.write_seconds = seconds();
        count_non_finite(job, non_finite);
        job.metadata.save_stats = job.stats.to_json();
        job.metadata.commit_timestamp_nsecs = detail::manager::now_nsecs();
        detail::manager::write_step_metadata(staging, job.metadata);
      };
      c.template save_step<format_type>(root_ / name, job.snapshot, opts, write);
      if (c.rank() != 0) {
        job.stats.write_seconds = seconds();  // the collective write, up to the commit
        count_non_finite(job, non_finite);
      }
    } catch (...) {
      std::lock_guard lock(mu_);
      pending_.reset();
      throw;
    }
    {
      std::lock_guard lock(mu_);
      detail::manager::StepInfo info;
      info.name = name;
      info.time = job.metadata.init_time();
      info.metrics = job.metadata.metrics;
      info.custom_metadata = job.metadata.custom_metadata;
      info.items = job.metadata.items;
      info.finite = job.stats.finite();
      steps_[job.step] = std::move(info);
      pending_.reset();
    }
    prune(c);
    if (options_.on_save) options_.on_save(job.stats);  // on every rank, its own figures
  }

  // guard_non_finite: the writers' count into the figures and the step metadata, before
  // the commit (rank 0) or once the collective write is done (the other ranks).
  static void count_non_finite(PendingSave& job, const std::atomic<std::uint64_t>& counted) {
    if (!job.stats.guarded) return;
    job.stats.non_finite_values = counted.load();
    job.metadata.finite = job.stats.finite();
    job.metadata.finite_given = true;
  }

  // Retention: the same decision on every rank (same records); rank 0 deletes.
  void prune(const coordination_type& c) {
    std::vector<std::string> doomed;
    for (std::int64_t step : retain::steps_to_delete(ranked_records(c), options_)) {
      std::lock_guard lock(mu_);
      if (const auto it = steps_.find(step); it != steps_.end()) {
        doomed.push_back(it->second.name);
        steps_.erase(it);
      }
    }
    c.on_rank0(root_.string(), [&] {
      for (const auto& n : doomed) remove_step(n);
    });
    if (options_.keep_dataset_checkpoints) prune_dataset_items(c, *options_.keep_dataset_checkpoints);
  }

  // keep_dataset_checkpoints: the dataset items are `dataset_item` and, across ranks,
  // the per-rank ones, `dataset_item` + "-" + a rank number ("dataset-3"); all but the
  // newest `keep` steps holding any of them lose them all. Every rank decides the same
  // from the same records; rank 0 rewrites the steps' metadata and then removes the
  // items' files (drop_step_items).
  bool is_dataset_item(const std::string& item) const {
    const std::string& d = options_.dataset_item;
    if (item == d) return true;
    if (!coordination_type::per_rank_items) return false;
    if (item.size() <= d.size() + 1 || item.compare(0, d.size(), d) != 0 || item[d.size()] != '-') return false;
    return std::all_of(item.begin() + static_cast<std::ptrdiff_t>(d.size() + 1), item.end(),
                       [](char ch) { return ch >= '0' && ch <= '9'; });
  }
  void prune_dataset_items(const coordination_type& c, int keep) {
    std::vector<detail::manager::StepItems> older;
    {
      std::lock_guard lock(mu_);
      older = detail::manager::dataset_items_past(steps_, keep, [&](const std::string& item) { return is_dataset_item(item); });
    }
    if (older.empty()) return;
    c.on_rank0(root_.string(), [&] {
      for (const auto& s : older) detail::manager::drop_step_items(root_ / s.name, s.items);
    });
    std::lock_guard lock(mu_);
    for (const auto& s : older) detail::manager::forget_items(steps_, s);
  }

  void remove_step(const std::string& name) { detail::manager::remove_step(location_, options_.todelete_subdir, name); }

  coordination_type coord_;
  std::optional<coordination_type> background_;  // async saves' agreements run here, apart from the caller's
  std::filesystem::path root_;
  storage::Location location_;  // the root on its storage: a directory, or a prefix on S3 or in memory
  ManagerOptions options_;
  StepNaming naming_;
  std::optional<detail::manager::RootLock> lock_;  // rank 0's
  std::optional<detail::manager::PreemptionWatch> preemption_;
  mutable std::mutex mu_;
  std::map<std::int64_t, detail::manager::StepInfo> steps_;  // committed steps (guarded by mu_)
  std::optional<std::int64_t> pending_;     // the step being saved (guarded by mu_)
  SnapshotBuffer buffer_;                   // async: the one copy of the state, reused
  typename executor_policy_type::executor executor_;  // last: destroyed first, waiting for the save in flight
};

}  // namespace ckpt
