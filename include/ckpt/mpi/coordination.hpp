// ckpt/mpi/coordination.hpp — ckpt::mpi::ranks: the coordination policy of a
// CheckpointManager whose every method every rank of a communicator calls (the policy
// concept: manager/coordination.hpp).
//
// Rank 0 decides and the others take its decision: it scans the root and broadcasts
// the steps, its clock times each step, it reads the TensorBoard event files and sends
// their values, so should_save, retention and best_step come out the same on every
// rank. It alone locks the root, deletes steps and writes the step metadata. Failures
// are agreed on (Comm::run): when a rank throws, every rank throws. A step is written
// as ckpt::mpi::save writes a checkpoint (native, with incremental pieces; or t5x and
// Orbax parts), and restored by ckpt::mpi::restore / restore_into. Async saves run
// their collectives on a duplicate of the communicator (MPI_THREAD_MULTIPLE needed).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/manager/coordination.hpp>
#include <ckpt/manager/step_catalogue.hpp>
#include <ckpt/mpi/comm.hpp>
#include <ckpt/mpi/restore.hpp>
#include <ckpt/mpi/save.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::mpi {

class ranks {
 public:
  static constexpr bool is_coordination = true;
  template <class Format>
  static constexpr bool writes = std::is_same_v<Format, native> || detail::writes_parts<Format>;
  // A directory every rank sees, or an object store every rank reaches (mpi/save.hpp).
  static constexpr bool url_roots = true;
  // A per-rank data-iterator position is an item named for its rank ("dataset-3").
  static constexpr bool per_rank_items = true;

  // Implicit: a manager is constructed from the communicator, (comm, root, options).
  ranks(const Comm& comm) : comm_(comm) {}

  const Comm& comm() const noexcept { return comm_; }
  int rank() const noexcept { return comm_.rank(); }

  template <class F>
  void run(const std::string& where, F&& f) const {
    comm_.run(where, std::forward<F>(f));
  }
  template <class F>
  void on_rank0(const std::string& where, F&& f) const {
    comm_.run(where, [&] {
      if (comm_.rank() == 0) f();
    });
  }
  bool any(bool mine) const { return comm_.any(mine); }

  std::int64_t share(std::int64_t v) const { return comm_.broadcast(v, 0); }
  // (step, value) as 16 raw bytes each: NaN travels too.
  std::map<std::int64_t, double> share(const std::map<std::int64_t, double>& values) const {
    std::vector<std::byte> pairs;
    for (const auto& [step, value] : values) {
      const std::size_t at = pairs.size();
      pairs.resize(at + 16);
      std::memcpy(pairs.data() + at, &step, 8);
      std::memcpy(pairs.data() + at + 8, &value, 8);
    }
    comm_.broadcast(pairs, 0);
    std::map<std::int64_t, double> out;
    for (std::size_t at = 0; at + 16 <= pairs.size(); at += 16) {
      std::int64_t step = 0;
      double value = 0;
      std::memcpy(&step, pairs.data() + at, 8);
      std::memcpy(&value, pairs.data() + at + 8, 8);
      out[step] = value;
    }
    return out;
  }
  // The step list, as JSON: small, and the manager has it.
  ckpt::detail::manager::StepMap share(const ckpt::detail::manager::StepMap& steps) const {
    std::string text;
    if (comm_.rank() == 0) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& [step, i] : steps) {
        nlohmann::json m = nlohmann::json::object();
        for (const auto& [k, v] : i.metrics) m[k] = v;
        j.push_back({{"step", step},
                     {"name", i.name},
                     {"time", std::chrono::duration_cast<std::chrono::nanoseconds>(i.time.time_since_epoch()).count()},
                     {"metrics", m},
                     {"custom", i.custom_metadata},
                     {"items", i.items},
                     {"finite", i.finite}});
      }
      text = j.dump();
    }
    text = comm_.broadcast(text, 0);
    ckpt::detail::manager::StepMap out;
    for (const auto& s : nlohmann::json::parse(text)) {
      ckpt::detail::manager::StepInfo i;
      i.name = s["name"].get<std::string>();
      i.time = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(s["time"].get<std::int64_t>())));
      const nlohmann::json& m = s["metrics"];
      for (auto it = m.begin(); it != m.end(); ++it) i.metrics[it.key()] = it.value().template get<double>();
      i.custom_metadata = s["custom"];
      i.items = s["items"].get<std::map<std::string, std::string>>();
      i.finite = s["finite"].get<bool>();
      out.emplace(s["step"].get<std::int64_t>(), std::move(i));
    }
    return out;
  }

  std::vector<std::string> allgather(const std::string& mine) const {
    std::vector<std::string> out;
    for (const auto& b : comm_.allgather(std::as_bytes(std::span(mine))))
      out.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
    return out;
  }

  void allow_background(const std::string& where) const {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      throw Error(where, "", "async saves across ranks run MPI on a background thread: initialize MPI with "
                             "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  }
  // Collective: a duplicate of the communicator, freed (collectively) with the last copy.
  ranks background() const {
    auto dup = std::shared_ptr<MPI_Comm>(new MPI_Comm(MPI_COMM_NULL), [](MPI_Comm* c) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
      delete c;
    });
    MPI_Comm_dup(comm_.get(), dup.get());
    ranks out{Comm(*dup)};
    out.owned_ = std::move(dup);
    return out;
  }

  template <class Format>
  void save_step(const std::filesystem::path& dir, const Snapshot& snap, const SaveOptions& opts,
                 const ckpt::detail::manager::StepWrite& w) const {
    if constexpr (std::is_same_v<Format, native>) {
      std::optional<detail::IncrementalSave> incremental;
      if (w.incremental_base) incremental.emplace(detail::IncrementalSave{*w.incremental_base, {}});
      const auto took = [&] {  // this rank's share: what it wrote and what it linked
        if (incremental)
          w.took(incremental->written.bytes_written, incremental->written.bytes_linked, incremental->written.pieces_linked);
      };
      detail::save_snapshot(
          comm_, dir, snap, opts,
          [&](const storage::Location& staging) {  // rank 0, its figures known by now
            took();
            w.before_commit(staging);
          },
          w.in_staging,
          incremental ? &*incremental : nullptr);
      took();  // every rank
    } else {
      detail::save_zarr_parts<Format>(
          comm_, dir, snap, opts, w.before_commit, w.in_staging);
    }
  }

  template <class T, class... Args>
  T restore(const std::filesystem::path& dir, Args&&... args) const {
    return mpi::restore<T>(comm_, dir, std::forward<Args>(args)...);
  }
  template <class T>
  void restore_into(const std::filesystem::path& dir, T& target, const RestoreOptions& opts) const {
    mpi::restore_into(comm_, dir, target, opts);
  }

 private:
  Comm comm_;
  std::shared_ptr<MPI_Comm> owned_;  // the duplicate this copy and its copies share
};

}  // namespace ckpt::mpi
