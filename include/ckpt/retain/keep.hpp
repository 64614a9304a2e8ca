// ckpt/retain/keep.hpp — which steps a manager keeps: small rules, each a pure function.
//
// Each rule takes the step records (any order) and returns the steps it protects;
// steps_to_keep() unites them the way Orbax's CheckpointManager does, plus the rule
// that the latest step is never pruned (t5x's SaveBestCheckpointer keeps it too):
//   - no max_to_keep: everything is kept;
//   - otherwise the max_to_keep most recent steps, or with best_metric the max_to_keep
//     best ones (steps without the metric are kept when keep_checkpoints_without_metrics,
//     and rank below every step that has it otherwise);
//   - every step with step % keep_period == 0;
//   - with keep_time_interval, the first step and each step saved at least that long
//     after the previous step kept this way;
//   - the latest step;
//   - the newest finite step (StepRecord::finite: ManagerOptions::guard_non_finite), so
//     that steps holding NaN saved after it never push it out. A step that is not finite
//     ranks below every finite one by best_metric, whatever its metrics, and is never
//     best(); without the guard every step is finite and these rules change nothing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <concepts>
#include <set>
#include <string>
#include <vector>

#include <ckpt/retain/record.hpp>

namespace ckpt::retain {

// What the retention rules read of a manager's options. The fields are declared once,
// in ckpt::ManagerOptions with Orbax's flat names; the rules take any type that has
// them, so retain/ stays free of the manager and its tests can pass a ManagerOptions.
template <class O>
concept retention_options = requires(const O& o) {
  { o.max_to_keep } -> std::convertible_to<std::optional<int>>;
  { o.keep_period } -> std::convertible_to<std::optional<std::int64_t>>;
  { o.keep_time_interval } -> std::convertible_to<std::optional<std::chrono::duration<double>>>;
  { o.best_metric } -> std::convertible_to<std::string>;
  { o.best_mode } -> std::convertible_to<BestMode>;
  { o.keep_checkpoints_without_metrics } -> std::convertible_to<bool>;
};

}  // namespace ckpt::retain

namespace ckpt::detail::retain {
inline std::vector<ckpt::retain::StepRecord> by_step(std::vector<ckpt::retain::StepRecord> records) {
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return records;
}
inline std::set<std::int64_t> last_n(const std::vector<std::int64_t>& ordered, int n) {
  std::set<std::int64_t> out;
  const std::size_t keep = static_cast<std::size_t>(std::max(n, 0));
  const std::size_t from = ordered.size() > keep ? ordered.size() - keep : 0;
  out.insert(ordered.begin() + static_cast<std::ptrdiff_t>(from), ordered.end());
  return out;
}
}  // namespace ckpt::detail::retain

namespace ckpt::retain {

inline std::set<std::int64_t> latest(const std::vector<StepRecord>& records) {
  if (records.empty()) return {};
  return {std::max_element(records.begin(), records.end(), [](auto& a, auto& b) { return a.step < b.step; })->step};
}

// The n most recent steps.
inline std::set<std::int64_t> most_recent(const std::vector<StepRecord>& records, int n) {
  std::vector<std::int64_t> steps;
  for (const auto& r : detail::retain::by_step(records)) steps.push_back(r.step);
  return detail::retain::last_n(steps, n);
}

// The newest step that is finite (all of them, unless ManagerOptions::guard_non_finite
// marked some).
inline std::set<std::int64_t> newest_finite(const std::vector<StepRecord>& records) {
  std::optional<std::int64_t> newest;
  for (const auto& r : records)
    if (r.finite && (!newest || r.step > *newest)) newest = r.step;
  if (!newest) return {};
  return {*newest};
}

// Steps ordered from worst to best by `metric` (ties: the later step is better).
// Steps that are not finite come first, by step; then steps without the metric, or
// these are returned apart in `without`.
inline std::vector<std::int64_t> rank_by_metric(const std::vector<StepRecord>& records, const std::string& metric,
                                                BestMode mode, std::vector<std::int64_t>* without = nullptr) {
  std::vector<StepRecord> with;
  std::vector<std::int64_t> none, non_finite;
  for (const auto& r : detail::retain::by_step(records)) {
    if (!r.finite) non_finite.push_back(r.step);
    else if (metric_of(r, metric)) with.push_back(r);
    else none.push_back(r.step);
  }
  std::stable_sort(with.begin(), with.end(), [&](const auto& a, const auto& b) {
    const double x = *metric_of(a, metric), y = *metric_of(b, metric);
    return mode == BestMode::max ? x < y : x > y;
  });
  std::vector<std::int64_t> ranked = non_finite;
  if (without) *without = none;
  else ranked.insert(ranked.end(), none.begin(), none.end());
  for (const auto& r : with) ranked.push_back(r.step);
  return ranked;
}

// The n best steps by metric; steps without it are all kept when keep_without,
// otherwise they rank below every step that has it.
inline std::set<std::int64_t> best_n(const std::vector<StepRecord>& records, const std::string& metric,
                                     BestMode mode, int n, bool keep_without) {
  if (!keep_without) return detail::retain::last_n(rank_by_metric(records, metric, mode), n);
  std::vector<std::int64_t> without;
  auto out = detail::retain::last_n(rank_by_metric(records, metric, mode, &without), n);
  out.insert(without.begin(), without.end());
  return out;
}

// The best step by metric, if any finite step has it.
inline std::optional<std::int64_t> best(const std::vector<StepRecord>& records, const std::string& metric,
                                        BestMode mode) {
  std::vector<StepRecord> finite;
  for (const auto& r : records)
    if (r.finite) finite.push_back(r);
  std::vector<std::int64_t> without;
  const auto ranked = rank_by_metric(finite, metric, mode, &without);
  if (ranked.empty()) return std::nullopt;
  return ranked.back();
}

// Steps that are multiples of period.
inline std::set<std::int64_t> every_period(const std::vector<StepRecord>& records, std::int64_t period) {
  std::set<std::int64_t> out;
  if (period <= 0) return out;
  for (const auto& r : records)
    if (r.step % period == 0) out.insert(r.step);
  return out;
}

// The first step, then each step saved at least `interval` after the last one kept so.
// Recomputing it on the survivors gives the same steps, since they are never pruned.
inline std::set<std::int64_t> time_interval(const std::vector<StepRecord>& records,
                                            std::chrono::duration<double> interval) {
  std::set<std::int64_t> out;
  std::optional<std::chrono::system_clock::time_point> last;
  for (const auto& r : detail::retain::by_step(records)) {
    // in double seconds: times come from step metadata files, and subtracting extreme
    // int64 nanosecond counts would overflow
    const auto secs = [](std::chrono::system_clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()); };
    if (!last || secs(r.time) - secs(*last) >= interval) {
      out.insert(r.step);
      last = r.time;
    }
  }
  return out;
}

template <retention_options O>
std::set<std::int64_t> steps_to_keep(const std::vector<StepRecord>& records, const O& o) {
  if (!o.max_to_keep) {
    std::set<std::int64_t> all;
    for (const auto& r : records) all.insert(r.step);
    return all;
  }
  auto keep = o.best_metric.empty()
                  ? most_recent(records, *o.max_to_keep)
                  : best_n(records, o.best_metric, o.best_mode, *o.max_to_keep, o.keep_checkpoints_without_metrics);
  if (o.keep_period) keep.merge(every_period(records, *o.keep_period));
  if (o.keep_time_interval) keep.merge(time_interval(records, *o.keep_time_interval));
  keep.merge(latest(records));
  keep.merge(newest_finite(records));
  return keep;
}

// The steps to prune, in ascending order.
template <retention_options O>
std::vector<std::int64_t> steps_to_delete(const std::vector<StepRecord>& records, const O& o) {
  const auto keep = steps_to_keep(records, o);
  std::vector<std::int64_t> out;
  for (const auto& r : detail::retain::by_step(records))
    if (!keep.contains(r.step)) out.push_back(r.step);
  return out;
}

}  // namespace ckpt::retain
