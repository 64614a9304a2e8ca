// ckpt/torch.hpp — libtorch: torch::Tensor leaves, torch::nn::Module and optimizer nodes.
//
//   #include <ckpt/ckpt.hpp>
//   #include <ckpt/torch.hpp>
//   struct TrainState { std::int64_t step = 0; Net model; torch::optim::Adam opt; std::mt19937_64 rng; };
//   ckpt::save(dir, state);            // model.layers.0.weight, opt.state.0.exp_avg, opt.param_groups.0.lr
//   ckpt::restore_into(dir, state);    // into the module's own tensors; training resumes bit for bit
//
// Needs libtorch (CMake target ckpt::torch, pkg-config ckpt-torch); docs/torch.md.
#pragma once

#include <ckpt/leaf/torch_tensor.hpp>
#include <ckpt/tree/torch_module.hpp>
#include <ckpt/tree/torch_optimizer.hpp>
