// The state both translation units compile: a plain 20-field struct of the kind a
// research program checkpoints (10 matrices, 5 floats, 5 counters).
#pragma once
#include <cstdint>
#include <xtensor/xtensor.hpp>

struct ResearchState {
  xt::xtensor<float, 2> w0, w1, w2, w3, w4, w5, w6, w7, w8, w9;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, loss = 0;
  std::int64_t step = 0, epoch = 0, seed = 0, tokens = 0, batch = 0;
};
