// ckpt/exec/executor.hpp — the executor policy concept: who runs a save, and when.
//
// An executor policy P is a tag type with
//   static constexpr bool copies_state;  // true: save() copies the state and returns before the write
//   class P::executor {                  // one per manager
//     explicit executor(std::chrono::duration<double> timeout);
//     void submit(std::string label, std::function<void()> job);  // runs job (now or in the background)
//     void wait();               // waits (at most timeout) for the job in flight, rethrows its failure
//     void wait_idle() noexcept; // waits for the job in flight, keeps its failure for wait()
//     void rethrow_if_failed();  // rethrows the failure of a finished job, without waiting
//   };
#pragma once

#include <chrono>
#include <concepts>
#include <functional>
#include <string>

namespace ckpt {

template <class P>
concept executor_policy = requires {
  { P::copies_state } -> std::convertible_to<bool>;
  typename P::executor;
} && std::constructible_from<typename P::executor, std::chrono::duration<double>> &&
    requires(typename P::executor& e, std::string label, std::function<void()> job) {
      e.submit(label, std::move(job));
      e.wait();
      e.wait_idle();
      e.rethrow_if_failed();
    };

}  // namespace ckpt
