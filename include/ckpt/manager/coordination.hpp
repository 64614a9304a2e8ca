// ckpt/manager/coordination.hpp — the coordination policy of a CheckpointManager: how
// the processes that share one manager agree, and how they write and read a step.
//
// CheckpointManager (manager/checkpoint_manager.hpp) is written once against this
// policy. ckpt::one_process, the default, is one process that is rank 0 of itself:
// every agreement is a no-op. ckpt::mpi::ranks (mpi/coordination.hpp) is every rank of
// an MPI communicator, each calling every manager method. A coordination C has
//
//   static constexpr bool is_coordination = true;
//   template <class Format> static constexpr bool writes;  // can it write steps of Format
//   static constexpr bool url_roots;        // may the root be s3://, mem:// (else a directory)
//   static constexpr bool per_rank_items;   // "<dataset_item>-<rank>" items are dataset items too
//   int rank() const;                       // rank 0 decides, locks, deletes, writes metadata
//   void run(where, f) const;               // f on every process; a failure anywhere throws everywhere
//   void on_rank0(where, f) const;          // f on rank 0 only; its failure throws everywhere
//   T share(T value) const;                 // rank 0's value on every process (a StepMap, a
//                                           // time stamp, TensorBoard values: map<int64, double>)
//   bool any(bool mine) const;              // true everywhere when true anywhere (SIGTERM)
//   std::vector<std::string> allgather(const std::string&) const;  // every process's, by rank
//   void allow_background(where) const;     // throws when saves cannot run on another thread
//   C background() const;                   // what the async saves run on (MPI: a duplicate)
//   void save_step<Format>(dir, snapshot, opts, const StepWrite&) const;  // writes, commits
//   T restore<T>(dir, args...) const;       // ckpt::restore's arguments after dir
//   void restore_into(dir, T&, opts) const;
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/format/native.hpp>
#include <ckpt/manager/incremental.hpp>
#include <ckpt/manager/save_stats.hpp>
#include <ckpt/migrate.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>
#include <ckpt/save.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

template <class P>
concept coordination_policy = requires {
  requires P::is_coordination;
};

namespace detail::manager {

// What a manager asks a coordination's save_step to do besides writing the snapshot.
struct StepWrite {
  // Native steps with ManagerOptions::incremental: the latest committed step, whose
  // unchanged leaves are linked (empty: none yet). Unset: write everything.
  std::optional<std::filesystem::path> incremental_base;
  // On every process, into the staging directory once its share is written: its items.
  std::function<void(const storage::Location& staging)> in_staging;
  // On rank 0, after in_staging and before the commit: the step metadata, with the
  // figures so far.
  std::function<void(const storage::Location& staging)> before_commit;
  // This process's figures; an incremental write fills in its share before
  // before_commit runs.
  SaveStats* stats = nullptr;

  void took(std::uint64_t written, std::uint64_t linked, std::size_t leaves_linked) const {
    stats->incremental = true;
    stats->bytes_written = written;
    stats->bytes_linked = linked;
    stats->leaves_linked = leaves_linked;
  }
};

}  // namespace detail::manager

// The default coordination: this process alone.
struct one_process {
  static constexpr bool is_coordination = true;
  template <class Format>
  static constexpr bool writes = true;
  static constexpr bool url_roots = true;
  static constexpr bool per_rank_items = false;

  int rank() const noexcept { return 0; }
  template <class F>
  void run(const std::string& /*where*/, F&& f) const {
    f();
  }
  template <class F>
  void on_rank0(const std::string& /*where*/, F&& f) const {
    f();
  }
  template <class T>
  T share(T value) const {
    return value;
  }
  bool any(bool mine) const noexcept { return mine; }
  std::vector<std::string> allgather(const std::string& mine) const { return {mine}; }
  void allow_background(const std::string& /*where*/) const noexcept {}
  one_process background() const noexcept { return {}; }

  // ckpt::save's path, with the manager's files added before the commit; an
  // incremental native step links what the latest step holds unchanged.
  template <class Format>
  void save_step(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                 const detail::manager::StepWrite& w) const {
    const auto hooks = [&](const storage::Location& staging) {
      w.in_staging(staging);
      w.before_commit(staging);
    };
    if constexpr (std::is_same_v<Format, native>) {
      if (w.incremental_base) {
        detail::incremental::save_staged(dir, snap, opts, *w.incremental_base,
                                         [&](const std::filesystem::path& staging, const detail::incremental::WriteResult& r) {
                                           w.took(r.bytes_written, r.bytes_linked, r.leaves_linked);
                                           hooks(storage::directory_location(staging, storage::Publish::in_place));
                                         });
        return;
      }
    }
    save_snapshot<Format>(dir, snap, opts, hooks);
  }

  template <class T, class... Args>
  T restore(const std::filesystem::path& dir, Args&&... args) const {
    return ckpt::restore<T>(dir, std::forward<Args>(args)...);
  }
  template <class T>
  void restore_into(const std::filesystem::path& dir, T& target, const RestoreOptions& opts) const {
    ckpt::restore_into(dir, target, opts);
  }
};

}  // namespace ckpt
