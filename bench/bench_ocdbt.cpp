// bench/bench_ocdbt.cpp — restoring an Orbax OCDBT checkpoint written by ckpt against
// restoring the same state from ckpt's native format, in the same run.
//
// A benchmark, not a timed test: it prints a table and exits 0 whatever the figures.
// The state is ~--size-mb of float32 arrays (random, so zstd stores them nearly raw, as
// it does real weights) in --leaves leaves plus a few small ones. Both checkpoints are
// written once, then restored --rounds times each, alternating which goes first, from
// the page cache; the table reports medians and orbax/native throughput (target >= 0.8).
// Each is restored two ways: restore<T>, which allocates the state (on a VM whose page
// faults are slow, that alone can take most of the time, for every format alike), and
// restore_into a state allocated and touched once beforehand, where what is left is
// reading and decoding: the figure that shows what zstd costs.
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

  // What is compared: ckpt's native format; ckpt::orbax as it writes by default (zstd
  // level 1, but chunks zstd shrinks by less than 12% stored: these float32 arrays);
  // every chunk compressed, as Orbax itself writes; and no compressor at all.
  struct Variant {
    const char* name;
    const char* label;
    void (*save)(const fs::path&, const State&);
    std::vector<double> restore, into;
    double save_seconds = 0;
    std::uint64_t disk_bytes = 0;
  };
  Variant variants[] = {
      {"native", "native", [](const fs::path& d, const State& st) { ckpt::save(d, st); }, {}, {}},
      {"orbax", "orbax OCDBT zstd1 (ckpt default)", [](const fs::path& d, const State& st) { ckpt::save<ckpt::orbax>(d, st); }, {}, {}},
      {"orbax_all", "orbax OCDBT zstd1, all compressed",
       [](const fs::path& d, const State& st) {
         ckpt::save<ckpt::basic_orbax<ckpt::io::codec::zstd, 1, ckpt::orbax_layout::ocdbt, 0>>(d, st);
       },
       {}, {}},
      {"orbax_raw", "orbax OCDBT uncompressed",
       [](const fs::path& d, const State& st) { ckpt::save<ckpt::basic_orbax<ckpt::io::codec::none>>(d, st); }, {}, {}},
  };
  constexpr int n_variants = 4;
  for (auto& v : variants) {
    const auto t0 = clk::now();
    v.save(dir / v.name, s);
    v.save_seconds = seconds_since(t0);
    for (const auto& f : fs::recursive_directory_iterator(dir / v.name))
      if (f.is_regular_file()) v.disk_bytes += f.file_size();
  }

  bool ok = true;
  State into = s;  // restore_into's target: allocated and touched once, reused
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms the page cache
    for (int k = 0; k < n_variants; ++k) {
      Variant& v = variants[(r + k) % n_variants];  // rotate which goes first
      auto t0 = clk::now();
      State back = ckpt::restore<State>(dir / v.name);
      const double t = seconds_since(t0);
      ok = ok && back.layers.size() == s.layers.size() && back.layers.back() == s.layers.back() && back.step == s.step;
      for (auto& l : into.layers) l.front() = -1.f;  // a stale value the restore must overwrite
      t0 = clk::now();
      ckpt::restore_into(dir / v.name, into);
      const double ti = seconds_since(t0);
      ok = ok && into.layers.front() == s.layers.front() && into.layers.back() == s.layers.back();
      if (r > 0) {
        v.restore.push_back(t);
        v.into.push_back(ti);
      }
    }
  }
  std::printf("bench_ocdbt: %.0f MiB in %zu leaves, %d rounds, medians, page cache warm\n", total_mb, leaves, rounds);
  std::printf("  %-36s %8s %8s %8s %8s %8s %8s\n", "", "save s", "disk MiB", "restore", "MiB/s", "into", "MiB/s");
  for (auto& v : variants)
    std::printf("  %-36s %8.3f %8.0f %8.3f %8.0f %8.3f %8.0f\n", v.label, v.save_seconds,
                static_cast<double>(v.disk_bytes) / (1 << 20), median(v.restore), total_mb / median(v.restore),
                median(v.into), total_mb / median(v.into));
  const double n_restore = median(variants[0].restore), n_into = median(variants[0].into);
  for (int k = 1; k < n_variants; ++k)
    std::printf("  %-36s restore<T> %.2fx native, restore_into %.2fx native (target >= 0.8x)\n", variants[k].label,
                n_restore / median(variants[k].restore), n_into / median(variants[k].into));
  if (!ok) std::printf("  RESTORED DATA DIFFERS\n");
  fs::remove_all(dir);
  return 0;
}
