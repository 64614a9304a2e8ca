// bench/bench_safetensors.cpp — safetensors against ckpt's native format, same state, same run.
//
// A benchmark, not a timed test: it prints a table and exits 0 whatever the figures.
// The state is a ~1 GB model of float32 matrices and vectors (GPT-2-like widths: large
// weights and many small norms), every float different so nothing compresses.
// Each round, alternating which goes first:
//   save:    ckpt::save (native, durable: fsync + rename) vs ckpt::save<safetensors>
//            (one model.safetensors in a directory, durable the same way);
//   restore: ckpt::restore<T> of each, from the page cache (native verifies its xxh3
//            checksums, as by default; safetensors has none to verify).
// Medians over the rounds; ratio = native time / safetensors time (>= 1: safetensors faster).
//
//   bench_safetensors [--size-mb N] [--rounds N] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <ckpt/formats.hpp>

namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

struct Layer {
  xt::xtensor<float, 2> attn_qkv, attn_out, mlp_in, mlp_out;
  xt::xtensor<float, 1> ln1_scale, ln1_bias, ln2_scale, ln2_bias, mlp_in_bias;
};
struct Model {
  xt::xtensor<float, 2> embedding;
  std::vector<Layer> layers;
  xt::xtensor<float, 1> final_scale;
  std::int64_t step = 0;
};

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
template <class X>
void fill(X& x, std::uint64_t& s) {
  for (auto& v : x) v = static_cast<float>(static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53 - 0.5);
}

Model make_model(std::size_t size_mb) {
  // 12 layers of 12 d^2 floats + a 50257 x d embedding ~ size_mb
  const double floats = static_cast<double>(size_mb) * 1024 * 1024 / 4;
  std::size_t d = 64;
  while ((12.0 * 12 * static_cast<double>((d + 64) * (d + 64)) + 50257.0 * static_cast<double>(d + 64)) < floats) d += 64;
  Model m;
  std::uint64_t s = 1;
  m.embedding = xt::xtensor<float, 2>::from_shape({50257, d});
  fill(m.embedding, s);
  for (int i = 0; i < 12; ++i) {
    Layer l;
    l.attn_qkv = xt::xtensor<float, 2>::from_shape({d, 3 * d});
    l.attn_out = xt::xtensor<float, 2>::from_shape({d, d});
    l.mlp_in = xt::xtensor<float, 2>::from_shape({d, 4 * d});
    l.mlp_out = xt::xtensor<float, 2>::from_shape({4 * d, d});
    for (auto* v : {&l.ln1_scale, &l.ln1_bias, &l.ln2_scale, &l.ln2_bias}) *v = xt::xtensor<float, 1>::from_shape({d});
    l.mlp_in_bias = xt::xtensor<float, 1>::from_shape({4 * d});
    fill(l.attn_qkv, s); fill(l.attn_out, s); fill(l.mlp_in, s); fill(l.mlp_out, s);
    fill(l.ln1_scale, s); fill(l.ln1_bias, s); fill(l.ln2_scale, s); fill(l.ln2_bias, s); fill(l.mlp_in_bias, s);
    m.layers.push_back(std::move(l));
  }
  m.final_scale = xt::xtensor<float, 1>::from_shape({d});
  fill(m.final_scale, s);
  m.step = 12345;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double seconds(F&& f) {
  const auto t0 = clk::now();
  f();
  return std::chrono::duration<double>(clk::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t size_mb = 1024;
  int rounds = 5;
  fs::path dir = fs::path("build/bench/bench-safetensors-data");
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--size-mb" && i + 1 < argc) size_mb = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--dir" && i + 1 < argc) dir = fs::path(argv[++i]) / "ckpt-bench-safetensors";  // its own folder: removed at the end
    else {
      std::fprintf(stderr, "usage: %s [--size-mb N] [--rounds N] [--dir PATH]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Model m = make_model(size_mb);
  const auto snap = ckpt::take_snapshot(m);
  std::printf("state: %zu leaves, %.1f MiB\n", snap.leaves.size(), static_cast<double>(snap.total_bytes()) / (1 << 20));

  std::vector<double> save_native, save_st, restore_native, restore_st;
  for (int r = 0; r < rounds; ++r) {
    const fs::path n = dir / ("native-" + std::to_string(r)), s = dir / ("st-" + std::to_string(r));
    auto do_native = [&] { save_native.push_back(seconds([&] { ckpt::save(n, m); })); };
    auto do_st = [&] { save_st.push_back(seconds([&] { ckpt::save<ckpt::safetensors>(s, m); })); };
    if (r % 2) { do_native(); do_st(); } else { do_st(); do_native(); }
    std::int64_t sink = 0;
    auto rn = [&] { restore_native.push_back(seconds([&] { sink += ckpt::restore<Model>(n).step; })); };
    auto rs = [&] { restore_st.push_back(seconds([&] { sink += ckpt::restore<Model>(s).step; })); };
    if (r % 2) { rn(); rs(); } else { rs(); rn(); }
    if (sink != 2 * 12345) std::fprintf(stderr, "restore mismatch\n");
    if (r == 0) {  // the two restores must agree bit for bit
      const Model a = ckpt::restore<Model>(n), b = ckpt::restore<Model>(s);
      if (!(a.embedding == b.embedding) || !(a.layers[11].mlp_out == b.layers[11].mlp_out)) std::fprintf(stderr, "DIFFER\n");
    }
    fs::remove_all(n);
    fs::remove_all(s);
  }
  const double gb = static_cast<double>(snap.total_bytes()) / 1e9;
  auto row = [&](const char* what, double native, double st) {
    std::printf("%-8s native %7.3f s (%5.2f GB/s)   safetensors %7.3f s (%5.2f GB/s)   native/safetensors %.2fx\n", what,
                native, gb / native, st, gb / st, native / st);
  };
  std::printf("medians over %d rounds:\n", rounds);
  row("save", median(save_native), median(save_st));
  row("restore", median(restore_native), median(restore_st));
  fs::remove_all(dir);
  return 0;
}
