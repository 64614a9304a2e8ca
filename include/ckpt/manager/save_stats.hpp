// ckpt/manager/save_stats.hpp — the figures of one manager save: how long the caller
// was blocked, how long the write took, how many bytes, how fast, and (with
// ManagerOptions::guard_non_finite) how many NaN and infinite values it held. Given to
// ManagerOptions::on_save after the step commits, and stored in the step's
// _CHECKPOINT_METADATA under "save_stats" (docs/manager.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace ckpt {

struct SaveStats {
  std::int64_t step = 0;
  // save() on the caller's thread: waiting for the save in flight, the snapshot and
  // (async_save) the copy of the state.
  double blocking_seconds = 0;
  // Writing the step (data files, manifest, items, metadata, each fsynced), up to the
  // rename that commits it: on the background thread with async_save.
  double write_seconds = 0;
  // The state's bytes; those written to new files; those hard-linked from the previous
  // step (ManagerOptions::incremental), and how many leaves were.
  std::uint64_t bytes = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t bytes_linked = 0;
  std::size_t leaves_linked = 0;
  bool incremental = false;
  // ManagerOptions::guard_non_finite: the NaN and infinite elements of the state's
  // floating and complex leaves (counted as they were written; with MPI, summed over
  // the ranks), and the metrics given to save() as NaN or infinite. `guarded` is false
  // (and the counts 0) without the guard.
  bool guarded = false;
  std::uint64_t non_finite_values = 0;
  std::size_t non_finite_metrics = 0;

  // Whether nothing non-finite was seen (always true without the guard).
  bool finite() const noexcept { return non_finite_values == 0 && non_finite_metrics == 0; }

  // The state's bytes per second of write_seconds, in GB/s (1e9 bytes).
  double gb_per_second() const noexcept { return write_seconds > 0 ? static_cast<double>(bytes) / write_seconds / 1e9 : 0; }

  nlohmann::json to_json() const {
    nlohmann::json j = {{"blocking_seconds", blocking_seconds}, {"write_seconds", write_seconds},
                        {"bytes", bytes},                       {"bytes_written", bytes_written},
                        {"bytes_linked", bytes_linked},         {"leaves_linked", leaves_linked},
                        {"incremental", incremental},           {"gb_per_second", gb_per_second()}};
    if (guarded) {
      j["non_finite_values"] = non_finite_values;
      j["non_finite_metrics"] = non_finite_metrics;
    }
    return j;
  }
};

}  // namespace ckpt
