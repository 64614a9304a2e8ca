// ckpt/retain/save_decision.hpp — whether a step is due for a save (Orbax's should_save).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <vector>

namespace ckpt::retain {

// What should_save reads of a manager's options (ckpt::ManagerOptions declares the
// fields, with Orbax's names; see retain/keep.hpp).
template <class O>
concept save_decision_options = requires(const O& o) {
  { o.save_interval_steps } -> std::convertible_to<std::int64_t>;
  { o.save_on_steps } -> std::convertible_to<std::vector<std::int64_t>>;
};

// With no step saved yet, any step is due (Orbax). Otherwise a step is due when it is
// after the latest one and on the interval or in save_on_steps. A preemption makes
// every new step due, so that the last state before the process dies is kept.
template <save_decision_options O>
bool should_save(std::int64_t step, std::optional<std::int64_t> latest, const O& d,
                        bool preempted = false) {
  if (latest && step <= *latest) return false;
  if (!latest || preempted) return true;
  const bool on_interval = d.save_interval_steps > 0 && step % d.save_interval_steps == 0;
  return on_interval || std::find(d.save_on_steps.begin(), d.save_on_steps.end(), step) != d.save_on_steps.end();
}

}  // namespace ckpt::retain
