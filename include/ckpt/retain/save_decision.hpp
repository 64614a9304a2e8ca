// ckpt/retain/save_decision.hpp — whether a step is due for a save (Orbax's should_save).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace ckpt::retain {

struct SaveDecision {
  std::int64_t save_interval_steps = 1;
  std::vector<std::int64_t> save_on_steps{};
};

// With no step saved yet, any step is due (Orbax). Otherwise a step is due when it is
// after the latest one and on the interval or in save_on_steps. A preemption makes
// every new step due, so that the last state before the process dies is kept.
inline bool should_save(std::int64_t step, std::optional<std::int64_t> latest, const SaveDecision& d,
                        bool preempted = false) {
  if (latest && step <= *latest) return false;
  if (!latest || preempted) return true;
  const bool on_interval = d.save_interval_steps > 0 && step % d.save_interval_steps == 0;
  return on_interval || std::find(d.save_on_steps.begin(), d.save_on_steps.end(), step) != d.save_on_steps.end();
}

}  // namespace ckpt::retain
