// ckpt/exec/sync_save.hpp — the default executor policy: save() writes and commits before it returns.
//
// Nothing is copied: the format writes straight from the caller's memory. A failure
// is thrown from save() itself.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <ckpt/exec/executor.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

struct sync_save {
  static constexpr bool copies_state = false;

  class executor {
   public:
    explicit executor(std::chrono::duration<double> /*timeout*/) {}
    void submit(const std::string& /*label*/, const std::function<void()>& job) { job(); }
    void wait() {}
    void wait_idle() noexcept {}
    void rethrow_if_failed() {}
  };
};
static_assert(executor_policy<sync_save>, CKPT_INTERNAL_CHECK("sync_save must meet executor_policy"));

}  // namespace ckpt
