// The ```cpp block of docs/torch.md that needs libtorch (tests/readme/check_snippets.py):
// compiled where CMake found libtorch and the compiler is GCC (CKPT_README_TORCH).
#if CKPT_README_TORCH
#include <cstdint>
#include <random>

#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <ckpt/torch.hpp>

struct Net : torch::nn::Module { /* register_module(...) */ };

struct TrainState {
  std::int64_t step = 0;
  Net model;
  torch::optim::Adam opt{model.parameters(), torch::optim::AdamOptions(1e-3)};
  std::mt19937_64 rng;
};

void resume_and_train(TrainState& state) {
  ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr("/ckpt/run", {.max_to_keep = 2});
  if (mgr.latest_step()) mgr.restore_latest_into(state);   // into the model's own tensors
  // ... train; mgr.save(state.step, state);
}
#endif
