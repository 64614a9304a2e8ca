// torch_train — a small libtorch network trained with Adam, checkpointed by ckpt's
// CheckpointManager, killed and resumed, its weights exported for PyTorch.
//
//   torch_train DIR [STEPS] [--kill-at STEP]
//
// Trains a two-layer perceptron (torch::nn::Linear, BatchNorm1d, Linear) with
// torch::optim::Adam on a synthetic regression task until step STEPS (default 200),
// saving the whole training state (step, model, optimizer, random engine) every 20
// steps with an async manager that keeps the 2 latest. Run it again with the same DIR:
// it restores the latest step into a fresh model and optimizer and carries on, ending
// bit for bit where an uninterrupted run ends. --kill-at STEP kills the process
// (SIGKILL, no cleanup) right after that step's save is handed to the manager, as a
// preemption without notice would.
//
// At the end it exports the model's weights under PyTorch's state_dict names to
// DIR/export/model.safetensors, which docs/torch.md loads into the same architecture
// in Python. It prints the final loss and a checksum of the weights.
#include <ckpt/ckpt.hpp>
#include <ckpt/format/pytorch.hpp>
#include <ckpt/format/safetensors.hpp>
#include <ckpt/manager.hpp>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <ckpt/torch.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace fs = std::filesystem;

// In Python: torch.nn.Sequential(Linear(8, 64), BatchNorm1d(64), ReLU(), Linear(64, 1)).
struct Net : torch::nn::Module {
  Net()
      : layers(register_module("layers", torch::nn::Sequential(torch::nn::Linear(8, 64), torch::nn::BatchNorm1d(64),
                                                               torch::nn::Functional(at::relu),
                                                               torch::nn::Linear(64, 1)))) {}
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers;
};

// The training state, a plain aggregate: ckpt reflects its fields, the optimizer among them.
struct TrainState {
  std::int64_t step = 0;
  Net model;
  torch::optim::Adam opt{model.parameters(), torch::optim::AdamOptions(3e-3)};
  std::mt19937_64 rng{7};  // draws every batch
};

namespace {

// y = sum of sin(x_i * (i + 1)) / 8: a smooth target the network learns.
double train_step(TrainState& s) {
  std::uniform_real_distribution<float> u(-1, 1);
  at::Tensor x = at::empty({64, 8}, at::kFloat);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data_ptr<float>()[i] = u(s.rng);
  const at::Tensor y = (x * at::arange(1, 9, at::kFloat)).sin().mean(1, /*keepdim=*/true);
  s.opt.zero_grad();
  const at::Tensor loss = (s.model.forward(x) - y).pow(2).mean();
  loss.backward();
  s.opt.step();
  ++s.step;
  return loss.item<double>();
}

// Writes the model's weights where Python reads them.
void export_weights(const fs::path& dir, const Net& model) {
  ckpt::save<ckpt::safetensors>(dir / "export", model, {.force = true});
  ckpt::save<ckpt::pytorch>(dir / "export" / "model.pt", model, {.force = true});  // torch.load's own file
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [STEPS] [--kill-at STEP]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  std::int64_t steps = 200, kill_at = -1;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--kill-at") == 0 && i + 1 < argc) kill_at = std::stoll(argv[++i]);
    else steps = std::stoll(argv[i]);
  }
  torch::set_num_threads(1);  // one thread: the same sums in the same order, run after run
  torch::manual_seed(0);
  TrainState state;
  ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(dir / "checkpoints",
                                                            {.max_to_keep = 2, .save_interval_steps = 20});
  if (mgr.latest_step()) {
    mgr.restore_latest_into(state);
    std::printf("resumed at step %lld\n", static_cast<long long>(state.step));
  }
  double loss = 0;
  while (state.step < steps) {
    loss = train_step(state);
    if (mgr.save(state.step, state, {{"train/loss", loss}}) && state.step == kill_at) {
      mgr.wait_until_finished();  // the save is on disk; now die without cleanup
      std::printf("killed at step %lld\n", static_cast<long long>(state.step));
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  }
  mgr.wait_until_finished();
  export_weights(dir, state.model);
  double sum = 0;
  for (const auto& p : state.model.parameters()) sum += p.to(at::kDouble).abs().sum().item<double>();
  std::printf("step %lld loss %.6f weights %.17g\n", static_cast<long long>(state.step), loss, sum);
  return 0;
}
