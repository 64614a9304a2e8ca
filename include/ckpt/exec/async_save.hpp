// ckpt/exec/async_save.hpp — executor policy: save() copies the state and returns; a
// background thread writes and commits.
//
// One save is in flight at most: the next submit waits for the previous one. A
// failure in the background is kept and rethrown, as a ckpt::Error naming the step,
// by the next save() or wait_until_finished(); the executor is usable again after it.
// wait() gives up after the timeout with a ckpt::Error (the save keeps running); the
// destructor waits for the save in flight, however long it takes, since the job
// reads memory the manager owns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <ckpt/error.hpp>
#include <ckpt/exec/executor.hpp>

namespace ckpt {

struct async_save {
  static constexpr bool copies_state = true;

  class executor {
   public:
    explicit executor(std::chrono::duration<double> timeout) : timeout_(timeout), thread_([this] { run(); }) {}
    executor(const executor&) = delete;
    executor& operator=(const executor&) = delete;
    ~executor() {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      thread_.join();  // the worker finishes the job in flight first
    }

    // Precondition: no job in flight (the manager calls wait() first); waits anyway.
    void submit(std::string label, std::function<void()> job) {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !busy_; });
      label_ = std::move(label);
      job_ = std::move(job);
      busy_ = true;
      cv_.notify_all();
    }

    void wait() {
      std::unique_lock lock(mu_);
      const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
      if (!cv_.wait_for(lock, limit, [&] { return !busy_; }))
        throw BackgroundSaveTimeoutError(label_, "", "asynchronous save did not finish within " + std::to_string(timeout_.count()) +
                                                         " s (async_timeout); it is still running");
      take_error(lock);
    }

    void wait_idle() noexcept {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !busy_; });
    }

    void rethrow_if_failed() {
      std::unique_lock lock(mu_);
      if (!busy_) take_error(lock);
    }

   private:
    void take_error(std::unique_lock<std::mutex>& lock) {
      if (!error_) return;
      auto e = std::exchange(error_, nullptr);
      lock.unlock();
      std::rethrow_exception(e);
    }

    void run() {
      std::unique_lock lock(mu_);
      for (;;) {
        cv_.wait(lock, [&] { return busy_ || stop_; });
        if (!busy_) return;  // stop requested, nothing in flight
        auto job = std::move(job_);
        const std::string label = label_;
        lock.unlock();
        std::exception_ptr error;
        try {
          job();
        } catch (const std::exception& e) {
          error = std::make_exception_ptr(BackgroundSaveError(label, "", std::string("asynchronous save failed: ") + e.what()));
        } catch (...) {
          error = std::make_exception_ptr(BackgroundSaveError(label, "", "asynchronous save failed: unknown exception"));
        }
        job = nullptr;  // release what the job holds (the snapshot) before saying it is done
        lock.lock();
        error_ = error;
        busy_ = false;
        cv_.notify_all();
      }
    }

    std::chrono::duration<double> timeout_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::function<void()> job_;
    std::string label_;
    std::exception_ptr error_;
    bool busy_ = false;
    bool stop_ = false;
    std::thread thread_;  // last: starts after every member above exists
  };
};
static_assert(executor_policy<async_save>);

}  // namespace ckpt
