// bench_manager — how long CheckpointManager<State, async_save>::save() blocks the
// training thread for a ~1 GB state, against a plain memcpy of the same bytes, and
// the peak memory while async saves run, against the state's size.
//
//   bench_manager [DIR] [MiB] [SAVES]     (defaults: $TMPDIR or /tmp, 1024, 6)
//
// Not a test: it prints figures (docs/benchmarks.md, "Manager"). The target of
// issue 3: save() blocks at most 1.5x one memcpy of the state, and peak memory during
// an async save is at most the state plus one snapshot.
//
// memcpy is measured twice, honestly: into a buffer already faulted in (what save()
// does from its second call on, since the snapshot buffer is reused) and into a fresh
// allocation (what the first save() does: the kernel must map and zero every page).
#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "positional_args.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Not in an anonymous namespace: clang reads field names through an extern object,
// which needs types with linkage.
struct Layer {
  std::vector<float> w;
};
struct BigState {
  std::int64_t step = 0;
  std::vector<Layer> layers;
};

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A field of /proc/self/status, in KiB ("VmHWM", "VmRSS").
long status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0).
bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f);
}

void copy_state(const BigState& s, std::byte* dst) {
  std::size_t at = 0;
  for (const auto& l : s.layers) {
    std::memcpy(dst + at, l.w.data(), l.w.size() * sizeof(float));
    at += l.w.size() * sizeof(float);
  }
}

}  // namespace

int main(int argc, char** argv) {
  refuse_flags(argc, argv, "[DIR] [MiB] [SAVES]     (defaults: $TMPDIR or /tmp, 1024, 6)");
  const char* tmp = std::getenv("TMPDIR");
  const fs::path base = argc > 1 ? fs::path(argv[1]) : fs::path(tmp && *tmp ? tmp : "/tmp");
  const std::size_t mib = argc > 2 ? std::stoul(argv[2]) : 1024;
  const int saves = argc > 3 ? std::stoi(argv[3]) : 6;
  const std::size_t layers = 16;
  const std::size_t per_layer = mib * (std::size_t{1} << 20) / layers / sizeof(float);
  const fs::path root = base / "ckpt-bench-manager";
  fs::remove_all(root);

  BigState state;
  state.layers.resize(layers);
  for (std::size_t i = 0; i < layers; ++i) {
    state.layers[i].w.resize(per_layer);
    for (std::size_t j = 0; j < per_layer; ++j) state.layers[i].w[j] = static_cast<float>(i * 31 + j % 1009);
  }
  const std::size_t bytes = layers * per_layer * sizeof(float);
  const double gib = static_cast<double>(bytes) / (1 << 30);
  std::printf("state: %zu leaves, %.3f GiB; root %s; %u hardware threads\n", layers, gib, root.c_str(),
              std::thread::hardware_concurrency());

  // --- async saves: time each save() call (the wait for the previous save is not counted)
  const bool peak_ok = reset_peak();
  const long rss_state_kib = status_kib("VmRSS");
  std::vector<double> blocked, total;
  {
    ckpt::CheckpointManager<BigState, ckpt::async_save> mgr(root, {.max_to_keep = 1});
    for (int i = 1; i <= saves; ++i) {
      state.step = i;
      state.layers[0].w[0] = static_cast<float>(i);  // the training step changes the state
      mgr.wait_until_finished();
      const auto t0 = Clock::now();
      mgr.save(i, state);
      blocked.push_back(seconds_since(t0));
      mgr.wait_until_finished();
      total.push_back(seconds_since(t0));
    }
  }
  const long hwm_kib = status_kib("VmHWM");
  fs::remove_all(root);

  // --- memcpy of the same bytes: into a faulted-in buffer, and into a fresh one
  std::vector<double> warm, fresh;
  {
    auto buf = std::make_unique_for_overwrite<std::byte[]>(bytes);
    std::memset(buf.get(), 1, bytes);
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      copy_state(state, buf.get());
      warm.push_back(seconds_since(t0));
    }
  }
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    auto buf = std::make_unique_for_overwrite<std::byte[]>(bytes);
    copy_state(state, buf.get());
    fresh.push_back(seconds_since(t0));
  }

  const double warm_s = median(warm), fresh_s = median(fresh);
  const std::vector<double> reused(blocked.begin() + 1, blocked.end());
  const double reused_s = reused.empty() ? blocked[0] : median(reused);
  std::printf("\nmemcpy of the state, into a faulted-in buffer   %8.1f ms  (%.2f GB/s)\n", warm_s * 1e3,
              static_cast<double>(bytes) / warm_s / 1e9);
  std::printf("memcpy of the state, into a fresh allocation    %8.1f ms  (%.2f GB/s)\n", fresh_s * 1e3,
              static_cast<double>(bytes) / fresh_s / 1e9);
  std::printf("async save() blocked, first call (new buffer)   %8.1f ms  = %.2fx fresh memcpy, %.2fx warm memcpy\n",
              blocked[0] * 1e3, blocked[0] / fresh_s, blocked[0] / warm_s);
  std::printf("async save() blocked, later calls (median of %zu) %7.1f ms  = %.2fx warm memcpy  %s\n", reused.size(),
              reused_s * 1e3, reused_s / warm_s, reused_s <= 1.5 * warm_s ? "(target <= 1.5x: met)" : "(target <= 1.5x: MISSED)");
  std::printf("whole save, write + fsync + commit (median)     %8.1f ms  (%.2f GB/s)\n", median(total) * 1e3,
              static_cast<double>(bytes) / median(total) / 1e9);
  std::printf("blocked per call:");
  for (double b : blocked) std::printf(" %.1f", b * 1e3);
  std::printf(" ms\n");
  if (peak_ok && hwm_kib > 0) {
    const double state_mib = static_cast<double>(bytes) / (1 << 20);
    const double peak_mib = static_cast<double>(hwm_kib) / 1024;
    std::printf("\npeak RSS during the async saves %.0f MiB; RSS with the state alone %.0f MiB; state %.0f MiB\n",
                peak_mib, static_cast<double>(rss_state_kib) / 1024, state_mib);
    std::printf("peak / (state + one snapshot) = %.3f  %s\n", peak_mib / (static_cast<double>(rss_state_kib) / 1024 + state_mib),
                peak_mib <= static_cast<double>(rss_state_kib) / 1024 + state_mib * 1.02 ? "(target: met)"
                                                                                         : "(target: MISSED)");
  } else {
    std::printf("\n(peak RSS: /proc/self/clear_refs unavailable)\n");
  }
  return 0;
}
