// train_and_resume — a small model trained with xtensor, checkpointed with ckpt.
//
//   train_and_resume DIR [STEPS]
//
// Trains a two-layer perceptron with Adam on a synthetic regression task for STEPS
// more steps (default 150), saving the whole training state (parameters, Adam
// moments, step, random engine, data position, config) every 50 steps into
// DIR/step_<n>. Run it again with the same DIR: it finds the newest checkpoint,
// restores it and carries on where it stopped, with the same random stream and
// data order, so the losses continue as if it had never stopped.
#include <ckpt/ckpt.hpp>

#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xview.hpp>

#include <charconv>
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
struct DataSet {
  xt::xtensor<float, 2> x;
  xt::xtensor<float, 1> y;
  DataSet() {
    xt::random::seed(7);
    x = xt::random::randn<float>({n_examples, n_in});
    const xt::xtensor<float, 1> w = xt::random::randn<float>({n_in});
    y = xt::zeros<float>({n_examples});
    for (std::size_t i = 0; i < n_examples; ++i) {
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

void adam_update(xt::xtensor<float, 2>& p, xt::xtensor<float, 2>& m, xt::xtensor<float, 2>& v,
                 const xt::xtensor<float, 2>& g, const TrainState& s, float bc1, float bc2) {
  const float b1 = s.config.at("beta1"), b2 = s.config.at("beta2"), lr = s.config.at("learning_rate");
  m = b1 * m + (1 - b1) * g;
  v = b2 * v + (1 - b2) * g * g;
  p -= lr * (m / bc1) / (xt::sqrt(v / bc2) + s.config.at("eps"));
}
void adam_update(xt::xtensor<float, 1>& p, xt::xtensor<float, 1>& m, xt::xtensor<float, 1>& v,
                 const xt::xtensor<float, 1>& g, const TrainState& s, float bc1, float bc2) {
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

// The newest DIR/step_<n> that is a complete checkpoint (has its commit marker).
std::optional<std::pair<std::int64_t, fs::path>> latest_checkpoint(const fs::path& dir) {
  std::optional<std::pair<std::int64_t, fs::path>> best;
  if (!fs::is_directory(dir)) return best;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !fs::exists(e.path() / "commit")) continue;
    std::int64_t step = 0;
    const auto [p, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
    if (ec == std::errc() && p == name.data() + name.size() && (!best || step > best->first)) best = {{step, e.path()}};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const std::int64_t steps = argc > 2 ? std::stoll(argv[2]) : 150;
  const std::int64_t save_every = 50;

  try {
    const DataSet data;
    TrainState state;
    if (auto latest = latest_checkpoint(dir)) {
      state = ckpt::restore<TrainState>(latest->second);
      const auto md = ckpt::metadata(latest->second);
      std::printf("resumed from %s at step %lld (epoch %lld, example %lld; %zu leaves)\n",
                  latest->second.c_str(), static_cast<long long>(state.step),
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
      if (state.step % save_every == 0) {
        const fs::path where = dir / ("step_" + std::to_string(state.step));
        ckpt::save(where, state, {.force = true});
        std::printf("saved %s\n", where.c_str());
      }
    }
  } catch (const ckpt::Error& e) {
    std::fprintf(stderr, "ckpt error: %s\n", e.what());
    return 1;
  }
  return 0;
}
