// bench_incremental — CheckpointManager saves with ManagerOptions::incremental against
// full saves of the same state, in the same run (issue 11).
//
//   bench_incremental [DIR] [MiB] [ROUNDS]     (defaults: $TMPDIR or /tmp, 376, 5)
//
// The state: 48 leaves of equal size (a GPT-2-like 376 MB by default). Each round
// changes 10% of the leaves (5 of 48), then saves the step with two sync managers on
// two roots, in alternating order: one full, one incremental. Then rounds that change
// every leaf measure what incremental costs when nothing can be linked (the hash pass).
// Reported: medians, the ratio incremental / full (target <= 0.35x for 90% unchanged),
// and how much the incremental root grew per step on disk (target <= 0.15x the state),
// counting each inode once, as du does.
#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "positional_args.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct IncLayer {
  std::vector<float> w;
};
struct IncState {
  std::int64_t step = 0;
  std::vector<IncLayer> layers;
};

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::uint64_t disk_bytes(const fs::path& dir) {
  std::set<std::pair<dev_t, ino_t>> seen;
  std::uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    if (seen.insert({st.st_dev, st.st_ino}).second) n += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return n;
}

void touch(IncLayer& l, std::int64_t step) {
  for (std::size_t j = 0; j < l.w.size(); j += 1024) l.w[j] = static_cast<float>(step) + static_cast<float>(j);
}

}  // namespace

int main(int argc, char** argv) {
  refuse_flags(argc, argv, "[DIR] [MiB] [ROUNDS]     (defaults: $TMPDIR or /tmp, 376, 5)");
  const char* tmp = std::getenv("TMPDIR");
  const fs::path base = argc > 1 ? fs::path(argv[1]) : fs::path(tmp && *tmp ? tmp : "/tmp");
  const std::size_t mib = argc > 2 ? std::stoul(argv[2]) : 376;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 5;
  const std::size_t layers = 48, changed_per_round = 5;
  const std::size_t per_layer = mib * (std::size_t{1} << 20) / layers / sizeof(float);
  const fs::path full_root = base / "ckpt-bench-incremental-full", inc_root = base / "ckpt-bench-incremental-inc";
  fs::remove_all(full_root);
  fs::remove_all(inc_root);

  IncState state;
  state.layers.resize(layers);
  for (std::size_t i = 0; i < layers; ++i) {
    state.layers[i].w.resize(per_layer);
    for (std::size_t j = 0; j < per_layer; ++j) state.layers[i].w[j] = static_cast<float>(i * 31 + j % 1009);
  }
  const double bytes = static_cast<double>(layers * per_layer * sizeof(float));
  std::printf("state: %zu leaves, %.0f MB; %zu leaves (%.0f%%) change per step; roots under %s; %u hardware threads\n",
              layers, bytes / 1e6, changed_per_round, 100.0 * changed_per_round / layers, base.c_str(),
              std::thread::hardware_concurrency());

  std::vector<double> full_s, inc_s, full_all_s, inc_all_s, growth;
  {
    ckpt::CheckpointManager<IncState> full(full_root, {.max_to_keep = 2});
    std::vector<ckpt::SaveStats> inc_stats;
    ckpt::CheckpointManager<IncState> inc(
        inc_root, {.max_to_keep = 2, .incremental = true, .on_save = [&](const ckpt::SaveStats& s) { inc_stats.push_back(s); }});
    std::int64_t step = 0;
    auto timed = [&](auto& mgr) {
      const auto t0 = Clock::now();
      mgr.save(step, state);
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    // Warm-up: both roots hold a step, the page cache and allocator are in steady state.
    for (int i = 0; i < 2; ++i) {
      state.step = ++step;
      timed(full);
      timed(inc);
    }
    for (int r = 0; r < rounds; ++r) {
      state.step = ++step;
      for (std::size_t k = 0; k < changed_per_round; ++k) touch(state.layers[(r * changed_per_round + k) % layers], step);
      if (r % 2) {
        full_s.push_back(timed(full));
        inc_s.push_back(timed(inc));
      } else {
        inc_s.push_back(timed(inc));
        full_s.push_back(timed(full));
      }
      // Growth: the new step's bytes not shared with the steps before it (max_to_keep
      // removed one step meanwhile, so measure the new step against its predecessor).
      const fs::path now = inc.step_directory(step), prev = inc.step_directory(step - 1);
      growth.push_back(static_cast<double>(disk_bytes(inc_root)) -
                       (fs::exists(prev) ? static_cast<double>(disk_bytes(prev)) : 0.0));
    }
    for (int r = 0; r < rounds; ++r) {
      state.step = ++step;
      for (auto& l : state.layers) touch(l, step);
      if (r % 2) {
        full_all_s.push_back(timed(full));
        inc_all_s.push_back(timed(inc));
      } else {
        inc_all_s.push_back(timed(inc));
        full_all_s.push_back(timed(full));
      }
    }
    std::printf("last incremental save: %.0f MB written, %.0f MB linked (%zu leaves), %.2f GB/s of state\n",
                static_cast<double>(inc_stats.back().bytes_written) / 1e6,
                static_cast<double>(inc_stats.back().bytes_linked) / 1e6, inc_stats.back().leaves_linked,
                inc_stats.back().gb_per_second());
  }
  fs::remove_all(full_root);
  fs::remove_all(inc_root);

  const double f = median(full_s), i = median(inc_s), fa = median(full_all_s), ia = median(inc_all_s);
  const double g = median(growth);
  std::printf("\n%-48s %10s %10s\n", "", "median s", "vs full");
  std::printf("%-48s %10.3f %10s\n", "full save (baseline), 90% unchanged", f, "1.00x");
  std::printf("%-48s %10.3f %9.2fx  %s\n", "incremental save, 90% unchanged", i, i / f,
              i <= 0.35 * f ? "(target <= 0.35x: met)" : "(target <= 0.35x: MISSED)");
  std::printf("%-48s %10.3f %10s\n", "full save (baseline), all changed", fa, "1.00x");
  std::printf("%-48s %10.3f %9.2fx  (the cost of hashing first)\n", "incremental save, all changed", ia, ia / fa);
  std::printf("disk growth per incremental step (median): %.1f MB = %.3fx the state  %s\n", g / 1e6, g / bytes,
              g <= 0.15 * bytes ? "(target <= 0.15x: met)" : "(target <= 0.15x: MISSED)");
  std::printf("(times: ratio = incremental median / full median, same run, alternating order, %d rounds)\n", rounds);
  return 0;
}
