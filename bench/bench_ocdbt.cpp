// bench/bench_ocdbt.cpp — restoring an Orbax OCDBT checkpoint written by ckpt against
// restoring the same state from ckpt's native format, in the same run.
//
// A benchmark, not a timed test: it prints a table and exits 0 whatever the figures.
// The state is ~--size-mb of float32 arrays (random, so zstd stores them nearly raw, as
// it does real weights) in --leaves leaves plus a few small ones. Both checkpoints are
// written once, then restored --rounds times each, alternating which goes first, from
// the page cache; the table reports medians and orbax/native throughput (target >= 0.8).
//
//   bench_ocdbt [--size-mb N] [--leaves N] [--rounds N] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ckpt/formats.hpp>

namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

struct State {
  std::int64_t step = 0;
  std::vector<std::vector<float>> layers;
  std::vector<float> bias;
  double lr = 0;
};

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t size_mb = 1024, leaves = 48;
  int rounds = 5;
  fs::path dir = fs::temp_directory_path() / "ckpt_bench_ocdbt";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--size-mb") size_mb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--leaves") leaves = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--dir") dir = fs::path(argv[i + 1]) / "ckpt-bench-ocdbt";  // its own folder: removed at the end
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  State s;
  s.step = 1000;
  s.lr = 3e-4;
  s.bias.assign(4096, 0.5f);
  const std::size_t per_leaf = (size_mb << 20) / sizeof(float) / std::max<std::size_t>(leaves, 1);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.02f);
  s.layers.resize(leaves);
  for (auto& l : s.layers) {
    l.resize(per_leaf);
    for (auto& x : l) x = nd(rng);
  }
  const double total_mb = static_cast<double>(per_leaf * leaves * sizeof(float)) / (1 << 20);

  auto t0 = clk::now();
  ckpt::save(dir / "native", s);
  const double save_native = seconds_since(t0);
  t0 = clk::now();
  ckpt::save<ckpt::orbax>(dir / "orbax", s);
  const double save_orbax = seconds_since(t0);
  // the same layout without compression: what OCDBT + zarr cost by themselves
  t0 = clk::now();
  ckpt::save<ckpt::basic_orbax<ckpt::io::codec::none>>(dir / "orbax_raw", s);
  const double save_raw = seconds_since(t0);

  std::vector<double> tn, to, tr;
  bool ok = true;
  const char* names[3] = {"native", "orbax", "orbax_raw"};
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms the page cache
    for (int k = 0; k < 3; ++k) {
      const int which = (r + k) % 3;  // rotate which goes first
      t0 = clk::now();
      State back = ckpt::restore<State>(dir / names[which]);
      const double t = seconds_since(t0);
      ok = ok && back.layers.size() == s.layers.size() && back.layers.back() == s.layers.back() && back.step == s.step;
      if (r > 0) (which == 0 ? tn : which == 1 ? to : tr).push_back(t);
    }
  }
  const double mn = median(tn), mo = median(to), mr = median(tr);
  std::printf("bench_ocdbt: %.0f MiB in %zu leaves, %d rounds, medians, page cache warm\n", total_mb, leaves, rounds);
  std::printf("  %-34s %9s %11s\n", "", "seconds", "MiB/s");
  std::printf("  %-34s %9.3f %11.0f\n", "save native (durable)", save_native, total_mb / save_native);
  std::printf("  %-34s %9.3f %11.0f\n", "save orbax OCDBT+zarr2/zstd1", save_orbax, total_mb / save_orbax);
  std::printf("  %-34s %9.3f %11.0f\n", "save orbax OCDBT+zarr2/raw", save_raw, total_mb / save_raw);
  std::printf("  %-34s %9.3f %11.0f\n", "restore<T> native", mn, total_mb / mn);
  std::printf("  %-34s %9.3f %11.0f\n", "restore<T> orbax OCDBT zstd1", mo, total_mb / mo);
  std::printf("  %-34s %9.3f %11.0f\n", "restore<T> orbax OCDBT raw", mr, total_mb / mr);
  std::printf("  orbax/native restore throughput: zstd1 (Orbax's default) %.2fx, uncompressed %.2fx (target >= 0.8x)%s\n",
              mn / mo, mn / mr, ok ? "" : "  RESTORED DATA DIFFERS");
  fs::remove_all(dir);
  return 0;
}
