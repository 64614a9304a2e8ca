// evolve_state — a TrainState through three versions of the program.
//
//   evolve_state DIR
//
// Version 1 of a trainer saved checkpoints of TrainStateV1. Version 2 renamed the
// optimizer's moments, moved the learning rate into a schedule and widened the
// kernel to float64; version 3 flattened the kernel. One chain of migrations,
// checked by the compiler, restores a checkpoint written by any of the three into
// TrainStateV3. The example writes one checkpoint per version and restores each.
#include <ckpt/ckpt.hpp>
#include <ckpt/migrate.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

// ---- version 1 ----
struct AdamV1 {
  xt::xtensor<float, 2> mu, nu;
  std::int64_t count = 0;
};
struct TrainStateV1 {
  std::int64_t step = 0;
  xt::xtensor<float, 2> kernel;
  AdamV1 opt;
  float learning_rate = 0;
  std::string run_name;  // dropped in version 2
};

// ---- version 2 ----
struct AdamV2 {
  xt::xtensor<float, 2> first_moment, second_moment;  // were mu, nu
  std::int64_t count = 0;
};
struct Schedule {
  float peak = 0;            // was learning_rate
  std::int64_t warmup = 0;   // new: computed from the old step
};
struct TrainStateV2 {
  std::int64_t step = 0;
  xt::xtensor<double, 2> kernel;  // float32 -> float64: converts by itself
  AdamV2 opt;
  Schedule schedule;
};

// ---- version 3 ----
struct TrainStateV3 {
  std::int64_t step = 0;
  xt::xtensor<double, 1> kernel;  // flattened: needs a transform
  AdamV2 opt;
  Schedule schedule;
};

// Every leaf of the new version has a source, or this does not compile.
const auto v1_to_v2 = ckpt::migration<TrainStateV1, TrainStateV2>(
    ckpt::rename<"opt.mu", "opt.first_moment">, ckpt::rename<"opt.nu", "opt.second_moment">,
    ckpt::rename<"learning_rate", "schedule.peak">,
    ckpt::fill<"schedule.warmup">([](const TrainStateV1& old) { return std::max<std::int64_t>(old.step / 10, 100); }));

const auto v2_to_v3 = ckpt::migration<TrainStateV2, TrainStateV3>(ckpt::transform<"kernel">(
    [](const xt::xtensor<double, 2>& k) { return xt::xtensor<double, 1>(xt::flatten(k)); }));

const auto to_newest = ckpt::chain(v1_to_v2, v2_to_v3);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  try {
    TrainStateV1 v1;
    v1.step = 2000;
    v1.kernel = {{1, 2, 3}, {4, 5, 6}};
    v1.opt = {xt::ones<float>({2, 3}) * 0.1f, xt::ones<float>({2, 3}) * 0.01f, 2000};
    v1.learning_rate = 3e-4f;
    v1.run_name = "first";
    ckpt::save(dir / "written_by_v1", v1, {.force = true});

    const TrainStateV2 v2 = ckpt::restore<TrainStateV2>(dir / "written_by_v1", v1_to_v2);
    ckpt::save(dir / "written_by_v2", v2, {.force = true});
    const TrainStateV3 v3 = ckpt::restore<TrainStateV3>(dir / "written_by_v2", to_newest);
    ckpt::save(dir / "written_by_v3", v3, {.force = true});

    for (const char* name : {"written_by_v1", "written_by_v2", "written_by_v3"}) {
      const TrainStateV3 s = ckpt::restore<TrainStateV3>(dir / name, to_newest);
      std::printf("%s -> v3: step %lld, kernel [%zu] = %g..%g, peak lr %g, warmup %lld, adam count %lld\n", name,
                  static_cast<long long>(s.step), s.kernel.size(), s.kernel(0), s.kernel(s.kernel.size() - 1),
                  static_cast<double>(s.schedule.peak), static_cast<long long>(s.schedule.warmup),
                  static_cast<long long>(s.opt.count));
    }
  } catch (const ckpt::Error& e) {
    std::fprintf(stderr, "ckpt error: %s\n", e.what());
    return 1;
  }
  return 0;
}
