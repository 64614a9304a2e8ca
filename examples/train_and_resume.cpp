// train_and_resume — a small model trained with xtensor, checkpointed with ckpt's
// CheckpointManager.
//
//   train_and_resume DIR [STEPS]
//
// Trains a two-layer perceptron with Adam on a synthetic regression task for STEPS
// more steps (default 150). Every 50 steps it measures the loss on held-out data and
// hands the whole training state (parameters, Adam moments, step, random engine, data
// position, config) to the manager, which copies it and writes DIR/step_<n> in the
// background (async_save) while training goes on, keeping the two best steps by
// eval/loss plus the latest. Run it again with the same DIR: it restores the latest
// step and carries on where it stopped, with the same random stream and data order,
// so the losses continue as if it had never stopped. SIGTERM (a preemption notice)
// makes it save the current step and exit cleanly.
#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xview.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

namespace fs = std::filesystem;

struct Dense {
  xt::xtensor<float, 2> kernel;
  xt::xtensor<float, 1> bias;
};
struct Params {
  Dense hidden, out;
};
struct Adam {
  Params mu, nu;
  std::int64_t count = 0;
};
struct DataPosition {
  std::int64_t epoch = 0;
  std::int64_t offset = 0;          // next example in this epoch's order
  std::uint64_t shuffle_seed = 0;   // this epoch's order, drawn from the engine
};
struct TrainState {
  std::int64_t step = 0;
  Params params;
  Adam opt;
  std::mt19937_64 rng;  // draws each epoch's shuffle seed
  DataPosition data;
  std::map<std::string, float> config;
};

namespace {

constexpr std::size_t n_in = 8, n_hidden = 64, n_examples = 4096, batch = 64;

xt::xtensor<float, 2> matmul(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
  xt::xtensor<float, 2> c = xt::zeros<float>({a.shape(0), b.shape(1)});
  for (std::size_t i = 0; i < a.shape(0); ++i)
    for (std::size_t k = 0; k < a.shape(1); ++k) {
      const float aik = a(i, k);
      for (std::size_t j = 0; j < b.shape(1); ++j) c(i, j) += aik * b(k, j);
    }
  return c;
}

Dense zeros_like(const Dense& d) {
  return {xt::zeros_like(d.kernel), xt::zeros_like(d.bias)};
}

TrainState fresh_state() {
  TrainState s;
  xt::random::seed(1);
  s.params.hidden = {xt::random::randn<float>({n_in, n_hidden}) * 0.35f, xt::zeros<float>({n_hidden})};
  s.params.out = {xt::random::randn<float>({n_hidden, std::size_t{1}}) * 0.12f, xt::zeros<float>({std::size_t{1}})};
  s.opt.mu = {zeros_like(s.params.hidden), zeros_like(s.params.out)};
  s.opt.nu = s.opt.mu;
  s.rng.seed(2024);
  s.data.shuffle_seed = s.rng();
  s.config = {{"learning_rate", 3e-3f}, {"beta1", 0.9f}, {"beta2", 0.999f}, {"eps", 1e-8f}};
  return s;
}

// The task: y = sin(x . w) + 0.1 * |x|^2, from a fixed data set.
// The same w for every seed: seed 7 is the training set, another seed held-out data.
struct DataSet {
  xt::xtensor<float, 2> x;
  xt::xtensor<float, 1> y;
  explicit DataSet(unsigned seed = 7, std::size_t n = n_examples) {
    xt::random::seed(7);
    x = xt::random::randn<float>({n_examples, n_in});
    const xt::xtensor<float, 1> w = xt::random::randn<float>({n_in});
    if (seed != 7) {
      xt::random::seed(seed);
      x = xt::random::randn<float>({n, n_in});
    }
    y = xt::zeros<float>({n});
    for (std::size_t i = 0; i < n; ++i) {
      float dot = 0, sq = 0;
      for (std::size_t j = 0; j < n_in; ++j) {
        dot += x(i, j) * w(j);
        sq += x(i, j) * x(i, j);
      }
      y(i) = std::sin(dot) + 0.1f * sq;
    }
  }
};

std::vector<std::size_t> epoch_order(std::uint64_t shuffle_seed) {
  std::vector<std::size_t> order(n_examples);
  for (std::size_t i = 0; i < n_examples; ++i) order[i] = i;
  std::mt19937_64 shuffler(shuffle_seed);
  std::shuffle(order.begin(), order.end(), shuffler);
  return order;
}

template <class Tensor>
void adam_update(Tensor& p, Tensor& m, Tensor& v, const Tensor& g, const TrainState& s, float bc1, float bc2) {
  const float b1 = s.config.at("beta1"), b2 = s.config.at("beta2"), lr = s.config.at("learning_rate");
  m = b1 * m + (1 - b1) * g;
  v = b2 * v + (1 - b2) * g * g;
  p -= lr * (m / bc1) / (xt::sqrt(v / bc2) + s.config.at("eps"));
}

// One step of minibatch Adam; returns the batch's mean squared error.
float train_step(TrainState& s, const DataSet& data, std::vector<std::size_t>& order) {
  xt::xtensor<float, 2> x = xt::zeros<float>({batch, n_in});
  xt::xtensor<float, 2> y = xt::zeros<float>({batch, std::size_t{1}});
  for (std::size_t b = 0; b < batch; ++b) {
    if (s.data.offset == static_cast<std::int64_t>(n_examples)) {  // next epoch: new order
      s.data.offset = 0;
      ++s.data.epoch;
      s.data.shuffle_seed = s.rng();
      order = epoch_order(s.data.shuffle_seed);
    }
    const std::size_t i = order[static_cast<std::size_t>(s.data.offset++)];
    xt::row(x, b) = xt::row(data.x, i);
    y(b, 0) = data.y(i);
  }
  auto& h = s.params.hidden;
  auto& o = s.params.out;
  const xt::xtensor<float, 2> pre = matmul(x, h.kernel) + h.bias;
  const xt::xtensor<float, 2> act = xt::maximum(pre, 0.0f);
  const xt::xtensor<float, 2> pred = matmul(act, o.kernel) + o.bias;
  const xt::xtensor<float, 2> err = pred - y;
  const float loss = xt::mean(err * err)();

  const xt::xtensor<float, 2> d_pred = err * (2.0f / batch);
  const xt::xtensor<float, 2> g_ok = matmul(xt::transpose(act), d_pred);
  const xt::xtensor<float, 1> g_ob = xt::sum(d_pred, {0});
  const xt::xtensor<float, 2> d_act = matmul(d_pred, xt::transpose(o.kernel));
  const xt::xtensor<float, 2> d_pre = d_act * xt::cast<float>(pre > 0.0f);
  const xt::xtensor<float, 2> g_hk = matmul(xt::transpose(x), d_pre);
  const xt::xtensor<float, 1> g_hb = xt::sum(d_pre, {0});

  ++s.opt.count;
  const float bc1 = 1 - std::pow(s.config.at("beta1"), static_cast<float>(s.opt.count));
  const float bc2 = 1 - std::pow(s.config.at("beta2"), static_cast<float>(s.opt.count));
  adam_update(h.kernel, s.opt.mu.hidden.kernel, s.opt.nu.hidden.kernel, g_hk, s, bc1, bc2);
  adam_update(h.bias, s.opt.mu.hidden.bias, s.opt.nu.hidden.bias, g_hb, s, bc1, bc2);
  adam_update(o.kernel, s.opt.mu.out.kernel, s.opt.nu.out.kernel, g_ok, s, bc1, bc2);
  adam_update(o.bias, s.opt.mu.out.bias, s.opt.nu.out.bias, g_ob, s, bc1, bc2);
  ++s.step;
  return loss;
}

// Mean squared error on held-out examples; reads the parameters only.
float eval_loss(const Params& p, const DataSet& held_out) {
  const xt::xtensor<float, 2> act = xt::maximum(matmul(held_out.x, p.hidden.kernel) + p.hidden.bias, 0.0f);
  const xt::xtensor<float, 2> pred = matmul(act, p.out.kernel) + p.out.bias;
  const xt::xtensor<float, 1> err = xt::col(pred, 0) - held_out.y;
  return xt::mean(err * err)();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const std::int64_t steps = argc > 2 ? std::stoll(argv[2]) : 150;

  try {
    const DataSet data;
    const DataSet held_out(8, 512);
    // Policies are types (async saves), the numbers are options: save every 50 steps,
    // keep the 2 best by eval/loss plus the latest, name steps step_<n>.
    ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(
        dir, {.max_to_keep = 2,
              .best_metric = "eval/loss",
              .best_mode = ckpt::BestMode::min,
              .save_interval_steps = 50,
              .step_prefix = "step_"});

    TrainState state;
    if (const auto latest = mgr.latest_step()) {
      state = mgr.restore(*latest);
      const auto md = ckpt::metadata(mgr.step_directory(*latest));
      std::printf("resumed from %s at step %lld (epoch %lld, example %lld; %zu leaves)\n",
                  mgr.step_directory(*latest).c_str(), static_cast<long long>(state.step),
                  static_cast<long long>(state.data.epoch), static_cast<long long>(state.data.offset), md.size());
    } else {
      state = fresh_state();
      std::printf("no checkpoint in %s: starting from scratch\n", dir.c_str());
    }
    // The current epoch's order is rebuilt from its saved seed: identical after a restore.
    std::vector<std::size_t> order = epoch_order(state.data.shuffle_seed);

    const std::int64_t end = state.step + steps;
    float running = 0;
    while (state.step < end) {
      running += train_step(state, data, order);
      if (state.step % 10 == 0) {
        std::printf("step %4lld  loss %.4f\n", static_cast<long long>(state.step), running / 10);
        running = 0;
      }
      // should_save: on the interval, or anything after SIGTERM. save() blocks only
      // while it copies the state; the write runs beside the next steps.
      if (mgr.should_save(state.step)) {
        const float eval = eval_loss(state.params, held_out);
        mgr.save(state.step, state, {{"eval/loss", eval}},
                 {.items = {{"config", ckpt::json_item({{"hidden", n_hidden}, {"batch", batch}})}}});
        std::printf("saving %s (eval/loss %.4f)\n", mgr.step_directory(state.step).c_str(), eval);
      }
      if (mgr.reached_preemption(state.step)) {
        mgr.wait_until_finished();
        std::printf("SIGTERM: step %lld is saved, exiting\n", static_cast<long long>(state.step));
        return 0;
      }
    }
    mgr.wait_until_finished();
    std::printf("kept:");
    for (const auto step : mgr.all_steps())
      std::printf(" step_%lld (eval/loss %.4f)", static_cast<long long>(step), mgr.metrics(step).at("eval/loss"));
    std::printf("; best: step_%lld\n", static_cast<long long>(mgr.best_step().value_or(-1)));
  } catch (const ckpt::Error& e) {
    std::fprintf(stderr, "ckpt error: %s\n", e.what());
    return 1;
  }
  return 0;
}
