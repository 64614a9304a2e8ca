// ckpt/exec/progress_tracker.hpp — counts the bytes and leaves a save or restore has
// done and calls the user's ProgressFn (ckpt/progress.hpp) at a bounded rate.
//
// add() may be called from any thread; the callback runs under a mutex, so never on
// two threads at once, and at most every min_interval (the first and the last call
// always happen). Once the callback returns false, every add() throws CancelledError,
// which the save's staging directory turns into "no checkpoint".
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include <ckpt/error.hpp>
#include <ckpt/progress.hpp>

namespace ckpt::exec {

class ProgressTracker {
 public:
  static constexpr std::chrono::milliseconds min_interval{50};

  // fn may be empty (then add() only counts). Calls fn once with nothing done.
  ProgressTracker(ProgressFn fn, std::uint64_t bytes_total, std::size_t leaves_total, std::string checkpoint)
      : fn_(std::move(fn)), checkpoint_(std::move(checkpoint)) {
    state_.bytes_total = bytes_total;
    state_.leaves_total = leaves_total;
    if (fn_) {
      std::lock_guard lock(mu_);
      call(std::chrono::steady_clock::now());
    }
  }
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  bool active() const noexcept { return static_cast<bool>(fn_); }

  // Records work done; may call the callback. Throws CancelledError once cancelled.
  void add(std::uint64_t bytes, std::size_t leaves) {
    if (cancelled_.load(std::memory_order_relaxed)) throw_cancelled();
    if (!fn_) return;
    std::lock_guard lock(mu_);
    state_.bytes_done += bytes;
    state_.leaves_done += leaves;
    const auto now = std::chrono::steady_clock::now();
    const bool all = state_.bytes_done >= state_.bytes_total && state_.leaves_done >= state_.leaves_total;
    if ((all && !final_sent_) || now - last_ >= min_interval) {
      final_sent_ = all;
      call(now);
    }
  }
  // Reports everything as done (if the last call did not already say so).
  void finish() {
    if (cancelled_.load(std::memory_order_relaxed)) throw_cancelled();
    if (!fn_) return;
    std::lock_guard lock(mu_);
    if (final_sent_) return;
    state_.bytes_done = state_.bytes_total;
    state_.leaves_done = state_.leaves_total;
    final_sent_ = true;
    call(std::chrono::steady_clock::now());
  }
  // Throws CancelledError if the callback has asked to stop.
  void check() const {
    if (cancelled_.load(std::memory_order_relaxed)) throw_cancelled();
  }

 private:
  void call(std::chrono::steady_clock::time_point now) {  // mu_ held
    last_ = now;
    if (!fn_(state_)) {
      cancelled_ = true;
      throw_cancelled();
    }
  }
  [[noreturn]] void throw_cancelled() const {
    throw CancelledError(checkpoint_, "", "cancelled by the progress callback");
  }

  ProgressFn fn_;
  std::string checkpoint_;
  std::mutex mu_;
  Progress state_;
  std::chrono::steady_clock::time_point last_{};
  bool final_sent_ = false;
  std::atomic<bool> cancelled_{false};
};

}  // namespace ckpt::exec
