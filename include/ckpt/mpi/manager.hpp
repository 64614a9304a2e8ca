// ckpt/mpi/manager.hpp — ckpt::mpi::CheckpointManager: numbered steps saved by every rank.
//
//   ckpt::mpi::CheckpointManager<TrainState, ckpt::async_save> mgr(comm, "/shared/run",
//       {.max_to_keep = 2, .save_interval_steps = 100});
//   if (mgr.should_save(step)) mgr.save(step, state, {{"eval/loss", loss}});   // every rank
//
// The same methods as ckpt::CheckpointManager (manager/checkpoint_manager.hpp), every
// one called by every rank (they are collective). Every rank makes the same decisions:
// rank 0 reads the root and broadcasts the steps; should_save, retention and the step
// records are computed from the same data everywhere (a step's time is rank 0's clock).
// Rank 0 alone takes the root lock, deletes steps and writes the step metadata. Async
// saves: each rank blocks only for its snapshot copy; the background saves of all ranks
// run ckpt::mpi::save on a duplicate of the communicator (MPI_THREAD_MULTIPLE needed),
// committing once every rank's bytes are durable. A SIGTERM on any rank makes
// reached_preemption (and so should_save) true on every rank at the same step.
//
// A format policy (ckpt::t5x, ckpt::orbax, ckpt::orbax_without_ocdbt) makes each step
// that format, written by the ranks as ckpt::mpi::save<Format> does; restore those with
// restore_into (they do not record which rank held which box). best_metric_from_tensorboard:
// rank 0 reads the event files and every rank ranks by its values. on_save: on every
// rank, with that rank's figures (rank 0's go into _CHECKPOINT_METADATA). incremental
// (native steps): each rank links the pieces it writes that the latest step holds
// unchanged (mpi/save.hpp). keep_dataset_checkpoints: the item `dataset_item` and the
// per-rank items named `dataset_item-<rank>` ("dataset-3") are kept in the newest steps
// only, as one process keeps `dataset_item`.
//
// Items (SaveArgs::items): each rank passes its own, and each rank writes the ones only
// it has into the step's items/, before the commit; an item several ranks pass (a
// config, the same everywhere) is written once, by the lowest of them. So a per-rank
// data-iterator position is an item named for its rank ("dataset-3"). Any rank reads
// any item back (restore_item, item_json: not collective).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/manager.hpp>
#include <ckpt/mpi/comm.hpp>
#include <ckpt/mpi/restore.hpp>
#include <ckpt/mpi/save.hpp>
#include <ckpt/retain/tensorboard.hpp>
#include <ckpt/storage/posix.hpp>

namespace ckpt::mpi {

template <class State, class... Policies>
class CheckpointManager {
 public:
  using format_type = typename ckpt::detail::manager::pick<ckpt::detail::manager::is_format, native, Policies...>::type;
  static_assert(std::is_same_v<format_type, native> || detail::writes_parts<format_type>,
                CKPT_STATIC_ERROR("ckpt::mpi::CheckpointManager writes the native, t5x and Orbax formats; this "
                                  "format cannot be written by several processes",
                                  "Leave the format policy out (ckpt::native), or give ckpt::t5x or ckpt::orbax.",
                                  CKPT_NAMED_ABOVE));
  using state_type = State;
  using executor_policy_type =
      typename ckpt::detail::manager::pick<ckpt::detail::manager::is_executor, sync_save, Policies...>::type;

  CheckpointManager(const Comm& comm, std::filesystem::path root, ManagerOptions options = {})
      : comm_(comm),
        root_(std::move(root)),
        location_(storage::directory_location(root_)),
        options_(std::move(options)),
        naming_{options_.step_prefix, options_.step_format_fixed_length},
        executor_(options_.async_timeout) {
    node::require_tree<State>();
    const std::string name = root_.string();
    comm_.run(name, [&] {
      ckpt::detail::manager::validate(options_, root_);
      if constexpr (executor_policy_type::copies_state) {
        int provided = 0;
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_MULTIPLE)
          throw Error(name, "", "async saves across ranks run MPI on a background thread: initialize MPI with "
                                "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
      }
      if (comm_.rank() != 0 || options_.read_only) return;
      std::error_code ec;
      if (!std::filesystem::is_directory(root_, ec)) {
        if (!options_.create) throw Error(name, "", "no such directory (and ManagerOptions::create is false)");
        std::filesystem::create_directories(root_, ec);
        if (ec) throw Error(name, "", "cannot create the root directory: " + ec.message());
      }
      lock_.emplace(root_);
      if (options_.cleanup_tmp_directories)
        ckpt::detail::manager::cleanup_root(location_, naming_, &format_type::is_committed);
    });
    if constexpr (executor_policy_type::copies_state) {
      MPI_Comm_dup(comm_.get(), &background_raw_);
      background_.emplace(background_raw_);
    }
    if (options_.save_on_preemption && !options_.read_only) preemption_.emplace();
    scan();
  }

  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;
  // Collective: waits for the save in flight on every rank (its failure, if any, is lost:
  // call wait_until_finished() first to see it).
  ~CheckpointManager() {
    executor_.wait_idle();
    if (background_raw_ != MPI_COMM_NULL) MPI_Comm_free(&background_raw_);
  }

  const std::filesystem::path& directory() const noexcept { return root_; }
  const ManagerOptions& options() const noexcept { return options_; }
  const Comm& comm() const noexcept { return comm_; }
  std::filesystem::path step_directory(std::int64_t step) const { return root_ / naming_.name(step); }

  // Collective. Saves when should_save(step) or args.force, as ckpt::CheckpointManager::save.
  bool save(std::int64_t step, const State& state, Metrics metrics = {}, SaveArgs args = {}) {
    const auto called = std::chrono::steady_clock::now();
    executor_.rethrow_if_failed();
    if (options_.read_only) return false;
    if (step < 0) throw Error(root_.string(), "", "step must be >= 0, not " + std::to_string(step));
    if (!args.force) {
      if (has_step_or_pending(step))
        throw StepExistsError(step_directory(step).string(), "",
                              "step " + std::to_string(step) + " already exists (pass ckpt::SaveArgs{.force = true} to replace it)");
      if (!should_save(step)) return false;
    }
    executor_.wait();

    auto job = std::make_shared<Job>();
    job->step = step;
    job->force = args.force;
    job->snapshot = take_snapshot(state);
    ckpt::detail::apply_save_options(job->snapshot, options_.save_options);
    if constexpr (executor_policy_type::copies_state) job->snapshot.make_owned(buffer_);
    job->metadata.step = step;
    job->metadata.format = format_type::name;
    job->metadata.init_timestamp_nsecs = comm_.broadcast(ckpt::detail::manager::now_nsecs(), 0);  // one clock
    for (auto& [name, value] : metrics)
      if (std::isfinite(value)) job->metadata.metrics.emplace(name, value);
    job->metadata.custom_metadata = std::move(args.custom_metadata);
    assign_items(*job, std::move(args.items));
    job->stats.step = step;
    job->stats.bytes = job->snapshot.total_bytes();
    job->stats.bytes_written = job->stats.bytes;  // an incremental save sets its own
    job->stats.blocking_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
    {
      std::lock_guard lock(mu_);
      pending_ = step;
    }
    executor_.submit(step_directory(step).string(), [this, job] { run_save(*job); });
    return true;
  }

  // Collective in effect: each rank's background save finishes only with every rank's.
  void wait_until_finished() { executor_.wait(); }

  // Collective when save_on_preemption is set (the ranks agree on a SIGTERM).
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

  // Collective: true on every rank when a SIGTERM reached any rank (Orbax's reached_preemption).
  bool reached_preemption(std::int64_t /*step*/) const {
    if (!preemption_) return false;
    return comm_.any(ckpt::detail::manager::PreemptionWatch::received());
  }

  std::vector<std::int64_t> all_steps() const {
    std::lock_guard lock(mu_);
    return ckpt::detail::manager::step_numbers(steps_);
  }
  std::optional<std::int64_t> latest_step() const {
    std::lock_guard lock(mu_);
    return ckpt::detail::manager::newest_step(steps_);
  }
  // Collective when best_metric_from_tensorboard is set (rank 0 reads the event files).
  std::optional<std::int64_t> best_step() const {
    if (options_.best_metric.empty()) return std::nullopt;
    return retain::best(ranked_records(comm_), options_.best_metric, options_.best_mode);
  }
  Metrics metrics(std::int64_t step) const { return info(step).metrics; }
  nlohmann::json custom_metadata(std::int64_t step) const { return info(step).custom_metadata; }

  // Names of the items saved with the step, by every rank.
  std::vector<std::string> item_names(std::int64_t step) const {
    std::vector<std::string> out;
    for (const auto& [name, kind] : info(step).items) out.push_back(name);
    return out;
  }
  // An item saved with the step, by whichever rank: not collective (ckpt::restore of its
  // directory), so a rank may read its own item or another's.
  template <class T>
  T restore_item(std::int64_t step, std::string_view name, const RestoreOptions& opts = {}) {
    return ckpt::restore<T>(item_dir(step, name, Item::kind::tree), opts);
  }
  template <class T>
  void restore_item_into(std::int64_t step, std::string_view name, T& value, const RestoreOptions& opts = {}) {
    ckpt::restore_into(item_dir(step, name, Item::kind::tree), value, opts);
  }
  nlohmann::json item_json(std::int64_t step, std::string_view name) {
    return ckpt::detail::manager::read_item_json(item_dir(step, name, Item::kind::json), [](const std::filesystem::path& f) {
      return io::read_file(f, std::uint64_t{1} << 30);
    });
  }

  // Collective: the step's saved layout (ckpt::mpi::restore<State>; same process count).
  State restore(std::optional<std::int64_t> step = {}, const RestoreOptions& opts = {}) {
    return mpi::restore<State>(comm_, dir_to_read(step), opts);
  }
  // Collective: steps written by an older version of State, in their saved layout,
  // through a migration or a chain (ckpt::mpi::restore<New>(comm, dir, m)).
  template <class Old, class... R>
  State restore(std::optional<std::int64_t> step, const Migration<Old, State, R...>& m, const RestoreOptions& opts = {}) {
    return mpi::restore<State>(comm_, dir_to_read(step), m, opts);
  }
  template <class... M>
    requires(sizeof...(M) >= 1)
  State restore(std::optional<std::int64_t> step, const Chain<M...>& c, const RestoreOptions& opts = {}) {
    return mpi::restore<State>(comm_, dir_to_read(step), c, opts);
  }
  // Collective: into this rank's layout (ckpt::mpi::restore_into; any process count).
  void restore_into(std::int64_t step, State& state, const RestoreOptions& opts = {}) {
    mpi::restore_into(comm_, dir_to_read(step), state, opts);
  }
  void restore_latest_into(State& state, const RestoreOptions& opts = {}) {
    mpi::restore_into(comm_, dir_to_read(std::nullopt), state, opts);
  }

  // Collective: rank 0 deletes the step.
  void delete_step(std::int64_t step) {
    if (options_.read_only)
      throw ReadOnlyError(root_.string(), "", "read-only manager: cannot delete step " + std::to_string(step));
    executor_.wait_idle();
    std::string name;
    {
      std::lock_guard lock(mu_);
      const auto it = steps_.find(step);
      if (it == steps_.end()) throw NoSuchStepError(root_.string(), "", "no step " + std::to_string(step) + " to delete");
      name = it->second.name;
      steps_.erase(it);
    }
    comm_.run(root_.string(), [&] {
      if (comm_.rank() == 0) ckpt::detail::manager::remove_step(location_, options_.todelete_subdir, name);
    });
  }

  // Collective: rank 0 reads the root again and tells every rank.
  void reload() {
    executor_.wait_idle();
    scan();
  }

 private:
  struct Job {
    std::int64_t step = 0;
    bool force = false;
    Snapshot snapshot;
    ckpt::detail::manager::StepMetadata metadata;
    Items items;  // the ones this rank writes
    SaveStats stats;  // this rank's figures
  };

  // Collective: learns every rank's item names and kinds; keeps in job.items those this
  // rank is the lowest to pass, and lists all of them in the step metadata. An item
  // passed by several ranks with different kinds is an error, the same on every rank.
  void assign_items(Job& job, Items items) {
    const std::string where = step_directory(job.step).string();
    std::string mine;
    // An invalid name on one rank fails every rank here, before the gather below (a
    // rank that threw alone would leave the others waiting in it).
    comm_.run(where, [&] {
      for (const auto& [name, item] : items) ckpt::detail::manager::check_item_name(where, name);
    });
    for (const auto& [name, item] : items)
      mine += name + '\t' + std::string(ckpt::detail::manager::kind_name(item.type())) + '\n';
    const auto all = comm_.allgather(std::as_bytes(std::span(mine)));
    std::map<std::string, std::pair<std::string, int>> first;  // name -> kind, lowest rank
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      const std::string text(reinterpret_cast<const char*>(all[static_cast<std::size_t>(r)].data()),
                             all[static_cast<std::size_t>(r)].size());
      for (std::size_t at = 0; at < text.size();) {
        const std::size_t tab = text.find('\t', at), nl = text.find('\n', at);
        if (tab == std::string::npos || nl == std::string::npos || tab > nl) break;
        const std::string name = text.substr(at, tab - at), kind = text.substr(tab + 1, nl - tab - 1);
        const auto [it, fresh] = first.emplace(name, std::pair(kind, r));
        if (!fresh && it->second.first != kind)
          throw Error(where, "", "item \"" + name + "\" is a " + it->second.first + " item on rank " +
                                     std::to_string(it->second.second) + " and a " + kind + " item on rank " + std::to_string(r));
        at = nl + 1;
      }
    }
    for (const auto& [name, kind_rank] : first) job.metadata.items[name] = kind_rank.first;
    for (auto& [name, item] : items)
      if (first.at(name).second == comm_.rank()) {
        if constexpr (executor_policy_type::copies_state) item.make_owned();
        job.items.emplace(name, std::move(item));
      }
  }

  // Rank 0 scans the root; every rank takes its list (as JSON: small, and the manager has it).
  void scan() {
    std::string text;
    comm_.run(root_.string(), [&] {
      if (comm_.rank() != 0) return;
      nlohmann::json j = nlohmann::json::array();
      for (const auto& [step, i] : ckpt::detail::manager::scan_root(location_, naming_, &format_type::is_committed)) {
        nlohmann::json m = nlohmann::json::object();
        for (const auto& [k, v] : i.metrics) m[k] = v;
        j.push_back({{"step", step},
                     {"name", i.name},
                     {"time", std::chrono::duration_cast<std::chrono::nanoseconds>(i.time.time_since_epoch()).count()},
                     {"metrics", m},
                     {"custom", i.custom_metadata},
                     {"items", i.items}});
      }
      text = j.dump();
    });
    text = comm_.broadcast(text, 0);
    std::map<std::int64_t, ckpt::detail::manager::StepInfo> steps;
    for (const auto& s : nlohmann::json::parse(text)) {
      ckpt::detail::manager::StepInfo i;
      i.name = s["name"].get<std::string>();
      i.time = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(s["time"].get<std::int64_t>())));
      const nlohmann::json& m = s["metrics"];
      for (auto it = m.begin(); it != m.end(); ++it) i.metrics[it.key()] = it.value().template get<double>();
      i.custom_metadata = s["custom"];
      i.items = s["items"].get<std::map<std::string, std::string>>();
      steps.emplace(s["step"].get<std::int64_t>(), std::move(i));
    }
    std::lock_guard lock(mu_);
    steps_ = std::move(steps);
  }

  bool has_step_or_pending(std::int64_t step) const {
    std::lock_guard lock(mu_);
    return steps_.contains(step) || pending_ == step;
  }
  ckpt::detail::manager::StepInfo info(std::int64_t step) const {
    std::lock_guard lock(mu_);
    return ckpt::detail::manager::step_info(steps_, step, root_);
  }
  std::filesystem::path item_dir(std::int64_t step, std::string_view name, Item::kind kind) {
    const auto dir = dir_to_read(step);
    return ckpt::detail::manager::item_path(dir, info(step).items, name, kind, true);
  }
  std::vector<retain::StepRecord> records() const {
    std::lock_guard lock(mu_);
    return ckpt::detail::manager::step_records(steps_);
  }
  // records(), with best_metric read from TensorBoard when asked: rank 0 reads the event
  // files and sends every rank its (step, value) pairs, so all rank alike (collective then).
  std::vector<retain::StepRecord> ranked_records(const Comm& comm) const {
    auto out = records();
    if (!options_.best_metric_from_tensorboard) return out;
    std::vector<std::byte> pairs;  // (step, value) as 16 raw bytes each: NaN travels too
    comm.run(root_.string(), [&] {
      if (comm.rank() != 0) return;
      for (const auto& [step, value] : tensorboard::read_metric(root_, options_.best_metric)) {
        const std::size_t at = pairs.size();
        pairs.resize(at + 16);
        std::memcpy(pairs.data() + at, &step, 8);
        std::memcpy(pairs.data() + at + 8, &value, 8);
      }
    });
    comm.broadcast(pairs, 0);
    std::map<std::int64_t, double> logged;
    for (std::size_t at = 0; at + 16 <= pairs.size(); at += 16) {
      std::int64_t step = 0;
      double value = 0;
      std::memcpy(&step, pairs.data() + at, 8);
      std::memcpy(&value, pairs.data() + at + 8, 8);
      logged[step] = value;
    }
    retain::use_logged_metric(out, options_.best_metric, logged);
    return out;
  }
  std::filesystem::path dir_to_read(std::optional<std::int64_t> step) {
    executor_.wait_idle();
    std::lock_guard lock(mu_);
    return ckpt::detail::manager::step_dir_to_read(steps_, step, root_);  // with the symbolic-link check
  }

  // On the caller's thread (sync_save) or the background one (async_save, on the duplicate communicator).
  void run_save(Job& job) {
    const Comm& comm = background_ ? *background_ : comm_;
    const std::string name = naming_.name(job.step);
    const auto started = std::chrono::steady_clock::now();
    const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
    try {
      SaveOptions opts = options_.save_options;
      opts.force = job.force;
      auto before_commit = [&](const std::filesystem::path& staging) {  // rank 0: its figures go in the metadata
        job.stats.write_seconds = seconds();
        job.metadata.save_stats = job.stats.to_json();
        job.metadata.commit_timestamp_nsecs = ckpt::detail::manager::now_nsecs();
        ckpt::detail::manager::write_step_metadata(staging, job.metadata);
      };
      auto in_staging = [&](const std::filesystem::path& staging) {  // every rank, its own items
        ckpt::detail::manager::write_items<format_type>(staging, job.items, opts);
      };
      if constexpr (std::is_same_v<format_type, native>) {
        std::optional<detail::IncrementalSave> incremental;
        if (options_.incremental) {
          incremental.emplace();
          std::lock_guard lock(mu_);  // the latest committed step, the same on every rank
          if (!steps_.empty()) incremental->base = root_ / steps_.rbegin()->second.name;
        }
        auto take_figures = [&] {  // this rank's share: what it wrote and what it linked
          if (!incremental) return;
          job.stats.incremental = true;
          job.stats.bytes_written = incremental->written.bytes_written;
          job.stats.bytes_linked = incremental->written.bytes_linked;
          job.stats.leaves_linked = incremental->written.pieces_linked;
        };
        detail::save_snapshot(
            comm, root_ / name, job.snapshot, opts,
            [&](const std::filesystem::path& staging) {  // rank 0, its figures known by now
              take_figures();
              before_commit(staging);
            },
            in_staging, incremental ? &*incremental : nullptr);
        take_figures();  // every rank
      } else
        detail::save_zarr_parts<format_type>(comm, root_ / name, job.snapshot, opts, before_commit, in_staging);
      job.stats.write_seconds = seconds();  // every rank: up to the commit
    } catch (...) {
      std::lock_guard lock(mu_);
      pending_.reset();
      throw;
    }
    {
      std::lock_guard lock(mu_);
      ckpt::detail::manager::StepInfo i;
      i.name = name;
      i.time = job.metadata.init_time();
      i.metrics = job.metadata.metrics;
      i.custom_metadata = job.metadata.custom_metadata;
      i.items = job.metadata.items;
      steps_[job.step] = std::move(i);
      pending_.reset();
    }
    // Retention: the same decision on every rank (same records); rank 0 deletes.
    std::vector<std::string> doomed;
    for (std::int64_t step : retain::steps_to_delete(ranked_records(comm), options_)) {
      std::lock_guard lock(mu_);
      if (const auto it = steps_.find(step); it != steps_.end()) {
        doomed.push_back(it->second.name);
        steps_.erase(it);
      }
    }
    comm.run(root_.string(), [&] {
      if (comm.rank() == 0)
        for (const auto& n : doomed) ckpt::detail::manager::remove_step(location_, options_.todelete_subdir, n);
    });
    if (options_.keep_dataset_checkpoints) prune_dataset_items(comm, *options_.keep_dataset_checkpoints);
    if (options_.on_save) options_.on_save(job.stats);  // on every rank, its own figures
  }

  // keep_dataset_checkpoints across ranks. The dataset items are `dataset_item` (one
  // every rank shares) and the per-rank ones, `dataset_item` + "-" + a rank number
  // ("dataset-3"); all but the newest `keep` steps holding any of them lose them all.
  // Every rank decides the same from the same records; rank 0 rewrites the steps'
  // metadata and removes the items' files (drop_step_items).
  bool is_dataset_item(const std::string& item) const {
    const std::string& d = options_.dataset_item;
    if (item == d) return true;
    if (item.size() <= d.size() + 1 || item.compare(0, d.size(), d) != 0 || item[d.size()] != '-') return false;
    return std::all_of(item.begin() + static_cast<std::ptrdiff_t>(d.size() + 1), item.end(),
                       [](char c) { return c >= '0' && c <= '9'; });
  }
  void prune_dataset_items(const Comm& comm, int keep) {
    std::vector<ckpt::detail::manager::StepItems> older;
    {
      std::lock_guard lock(mu_);
      older = ckpt::detail::manager::dataset_items_past(steps_, keep,
                                                        [&](const std::string& item) { return is_dataset_item(item); });
    }
    if (older.empty()) return;
    comm.run(root_.string(), [&] {
      if (comm.rank() == 0)
        for (const auto& s : older) ckpt::detail::manager::drop_step_items(root_ / s.name, s.items);
    });
    std::lock_guard lock(mu_);
    for (const auto& s : older) ckpt::detail::manager::forget_items(steps_, s);
  }

  Comm comm_;
  std::filesystem::path root_;
  storage::Location location_;  // root_ seen through the storage concept (a shared file system)
  ManagerOptions options_;
  StepNaming naming_;
  std::optional<ckpt::detail::manager::RootLock> lock_;  // rank 0's
  std::optional<ckpt::detail::manager::PreemptionWatch> preemption_;
  MPI_Comm background_raw_ = MPI_COMM_NULL;
  std::optional<Comm> background_;  // async saves' collectives run here, apart from the caller's
  mutable std::mutex mu_;
  std::map<std::int64_t, ckpt::detail::manager::StepInfo> steps_;
  std::optional<std::int64_t> pending_;
  SnapshotBuffer buffer_;
  typename executor_policy_type::executor executor_;  // last: destroyed first, waiting for the save in flight
};

}  // namespace ckpt::mpi
