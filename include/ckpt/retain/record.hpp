// ckpt/retain/record.hpp — what retention decisions look at: one record per step.
//
// Retention is computed from these records alone (no file system), so every rule can
// be tested as a pure function and the manager only carries out the result.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ckpt {

// Named scalar metrics stored with a step, e.g. {{"eval/loss", 0.31}, {"eval/accuracy", 0.9}}.
using Metrics = std::map<std::string, double>;

// Whether a larger (max) or a smaller (min) best_metric is better.
enum class BestMode { max, min };

namespace retain {

struct StepRecord {
  std::int64_t step = 0;
  std::chrono::system_clock::time_point time{};  // when its save started
  Metrics metrics{};
  // False for a step holding NaN or infinities (ManagerOptions::guard_non_finite): it
  // is never the best, and the newest finite step is kept beside it (retain/keep.hpp).
  bool finite = true;
};

// The step's value of `metric`, when it has a finite one (NaN counts as none).
inline std::optional<double> metric_of(const StepRecord& r, const std::string& metric) {
  const auto it = r.metrics.find(metric);
  if (it == r.metrics.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
}

// The records with `metric` taken from `logged` (step -> value, e.g. TensorBoard's)
// instead of the values save() was given: a step with no logged value has none.
inline void use_logged_metric(std::vector<StepRecord>& records, const std::string& metric,
                              const std::map<std::int64_t, double>& logged) {
  for (auto& r : records) {
    r.metrics.erase(metric);
    if (const auto it = logged.find(r.step); it != logged.end()) r.metrics[metric] = it->second;
  }
}

}  // namespace retain
}  // namespace ckpt
