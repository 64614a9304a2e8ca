// ckpt/exec/worker_threads.hpp — helper threads that start on another CPU than their creator's.
//
// A restore or a save hands its work to a few fresh threads and works beside them. The
// kernel puts a new thread on its creator's CPU unless it finds another one idle, and on
// virtual machines it often does not (likely because an idle vCPU the host has
// descheduled looks preempted rather than idle). The new thread then waits for its
// creator to sleep or for the scheduler's tick, and the work it was made for runs on one
// CPU. On a 2-vCPU VM, two threads each given the same work often finished in twice the
// time of one, and a restore's helper threads by the same toss.
//
// So each thread is placed on one of the process's other CPUs as it is created (the k-th
// thread on the k-th CPU after the creator's, round the process's CPU set), before it
// runs, and lets go of that placement as its first act: afterwards the kernel moves it as
// it likes. Nothing is pinned for longer than a thread's start, and a process allowed one
// CPU (or a system without these calls) starts its threads as std::jthread does.
//
// BackgroundTask, below, is the same placement for one function the caller waits for
// later (std::async's shape): the tile hashing beside a Sharded save.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <utility>
#include <vector>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace ckpt::exec {

class WorkerThreads {
 public:
  WorkerThreads() {
#if defined(__linux__)
    // The CPUs this thread may run on, which the new threads inherit, in order from the
    // one after the creator's.
    CPU_ZERO(&mask_);
    const int here = sched_getcpu();
    if (here < 0 || sched_getaffinity(0, sizeof mask_, &mask_) != 0 || CPU_COUNT(&mask_) < 2) return;
    for (int k = 1; k <= CPU_SETSIZE; ++k) {
      const int cpu = (here + k) % CPU_SETSIZE;
      if (CPU_ISSET(cpu, &mask_)) cpus_.push_back(cpu);
    }
#endif
  }
  // Neither copied nor moved: the threads read the members below until they are joined.
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;
  // Joins every thread started (threads_ is declared last, so it goes first).
  ~WorkerThreads() = default;

  // Runs fn() on a new thread. fn must not throw (as with std::jthread, that terminates).
  template <class Fn>
  void start(Fn fn) {
    Start& record = *starts_.emplace_back(std::make_unique<Start>());
    try {
#if defined(__linux__)
      if (!cpus_.empty()) {
        record.planned = cpus_[threads_.size() % cpus_.size()];
        std::jthread& t = threads_.emplace_back([&record, mask = &mask_, fn = std::move(fn)]() mutable {
          record.placed.wait(false, std::memory_order_acquire);  // until the creator has placed it
          record.cpu = sched_getcpu();
          sched_setaffinity(0, sizeof *mask, mask);  // let go: any of the process's CPUs
          fn();
        });
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(record.planned, &one);
        pthread_setaffinity_np(t.native_handle(), sizeof one, &one);  // a hint: failing costs nothing
        record.placed.store(true, std::memory_order_release);
        record.placed.notify_one();
        return;
      }
#endif
      threads_.emplace_back(std::move(fn));
    } catch (...) {  // no thread was started
      starts_.pop_back();
      throw;
    }
  }

  // Waits for every thread started.
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  // After join(): the CPU the k-th thread was placed on (-1: started plainly) and the one
  // it started on, which is that CPU unless the placement failed.
  int planned_cpu(std::size_t k) const { return starts_.at(k)->planned; }
  int started_cpu(std::size_t k) const { return starts_.at(k)->cpu; }

 private:
  // What the k-th thread's start records (on the heap: the thread holds it by address).
  struct Start {
    std::atomic<bool> placed{false};
    int planned = -1;
    int cpu = -1;
  };
  std::vector<std::unique_ptr<Start>> starts_;
#if defined(__linux__)
  cpu_set_t mask_;         // the creator's CPUs, which each thread takes back
  std::vector<int> cpus_;  // the other CPUs first, the creator's last; empty: start threads plainly
#endif
  std::vector<std::jthread> threads_;
};

// One function run on a helper thread, placed as WorkerThreads places its threads,
// while the caller goes on: what std::async(std::launch::async, fn) gives, without a
// thread that waits on its creator's CPU. wait() joins it and rethrows what fn threw.
// Destroyed without wait() (the caller is unwinding), it joins and drops that error.
class BackgroundTask {
 public:
  BackgroundTask() = default;
  BackgroundTask(const BackgroundTask&) = delete;  // the thread holds `this`
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  // Starts fn() on the helper thread; once per task.
  template <class Fn>
  void start(Fn fn) {
    thread_.start([this, fn = std::move(fn)]() mutable {
      try {
        fn();
      } catch (...) {
        error_ = std::current_exception();
      }
    });
    started_ = true;
  }
  // Waits for fn to finish (at once when it was never started, or waited for already)
  // and rethrows what it threw.
  void wait() {
    if (!started_) return;
    started_ = false;
    thread_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  std::exception_ptr error_;
  bool started_ = false;
  WorkerThreads thread_;  // last: joined before error_ goes
};

}  // namespace ckpt::exec
