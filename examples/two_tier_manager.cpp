// two_tier_manager — a fast tier in memory and a slow one on disk, as Orbax's
// emergency checkpointing keeps a recent step in RAM and older ones on persistent storage.
//
//   two_tier_manager DIR
//
// Every 2 steps the state goes to memory (ckpt::memory, only the latest kept): cheap, and
// lost with the process. Every 10 steps it also goes to DIR (the default ckpt::posix,
// asynchronously). Resuming takes the newest step either tier holds. The example trains
// to step 25, "resumes" in-process (memory holds step 24), then simulates a crash (the
// memory tier is gone) and resumes again from disk (step 20).
#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/storage/memory.hpp>
#include <xtensor/xtensor.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>

struct TrainState {
  std::int64_t step = 0;
  xt::xtensor<float, 2> kernel;
};

template <class Fast, class Slow>
std::optional<TrainState> restore_newest(Fast& fast, Slow& slow) {
  fast.reload();
  const auto f = fast.latest_step(), s = slow.latest_step();
  if (!f && !s) return std::nullopt;
  if (f && (!s || *f >= *s)) {
    std::printf("restoring step %lld from memory\n", static_cast<long long>(*f));
    return fast.restore(*f);
  }
  std::printf("restoring step %lld from disk\n", static_cast<long long>(*s));
  return slow.restore(*s);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  ckpt::CheckpointManager<TrainState, ckpt::memory> fast("two-tier/run", {.max_to_keep = 1, .save_interval_steps = 2});
  ckpt::CheckpointManager<TrainState, ckpt::async_save> slow(std::filesystem::path(argv[1]) / "run",
                                                             {.max_to_keep = 2, .save_interval_steps = 10});
  TrainState state;
  state.kernel = xt::zeros<float>({256, 256});
  for (std::int64_t step = 0; step <= 25; ++step) {
    state.step = step;
    state.kernel += 1.0f;
    fast.save(step, state);
    slow.save(step, state);
  }
  slow.wait_until_finished();

  auto resumed = restore_newest(fast, slow);
  if (!resumed || resumed->step != 24) return 1;
  ckpt::memory_storage_clear("two-tier");  // the process died: RAM is gone
  resumed = restore_newest(fast, slow);
  if (!resumed || resumed->step != 20 || resumed->kernel(0, 0) != 21.0f) return 1;
  std::printf("resumed at step %lld\n", static_cast<long long>(resumed->step));
  return 0;
}
