// ckpt/manager/preemption.hpp — notice SIGTERM (a preemption notice) instead of dying of it.
//
// While at least one manager with save_on_preemption lives, SIGTERM sets a flag
// (a lock-free atomic: async-signal-safe) and is passed on to the handler installed
// before, if that was a function; a default (terminate) or ignore disposition is not
// passed on, since the point is to live until the next save. The last watcher to go
// restores the previous disposition, unless someone replaced ours meanwhile. The flag
// is cleared when the first watcher installs the handler.
#pragma once

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <ckpt/error.hpp>

namespace ckpt::detail::manager {

namespace preemption {
static_assert(std::atomic<bool>::is_always_lock_free, "SIGTERM handling needs a lock-free atomic flag");

inline std::atomic<bool> received{false};
inline struct sigaction previous {};
inline std::mutex mu;
inline int watchers = 0;

inline void on_sigterm(int sig, siginfo_t* info, void* context) {
  received.store(true, std::memory_order_relaxed);
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  }
}
}  // namespace preemption

class PreemptionWatch {
 public:
  PreemptionWatch() {
    std::lock_guard lock(preemption::mu);
    if (preemption::watchers == 0) {
      struct sigaction ours {};
      ours.sa_sigaction = &preemption::on_sigterm;
      ours.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&ours.sa_mask);
      preemption::received.store(false);
      if (::sigaction(SIGTERM, &ours, &preemption::previous) != 0)
        throw Error(std::string("cannot install the SIGTERM handler: ") + std::strerror(errno));
    }
    ++preemption::watchers;
  }
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;
  ~PreemptionWatch() {
    std::lock_guard lock(preemption::mu);
    if (--preemption::watchers > 0) return;
    struct sigaction current {};
    if (::sigaction(SIGTERM, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
        current.sa_sigaction == &preemption::on_sigterm)
      ::sigaction(SIGTERM, &preemption::previous, nullptr);
  }

  static bool received() noexcept { return preemption::received.load(std::memory_order_relaxed); }
};

}  // namespace ckpt::detail::manager
