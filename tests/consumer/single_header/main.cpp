// The user unit of the single-header consumer: compiled with CKPT_SEPARATE_COMPILATION,
// it saves and restores its own struct with ckpt's templates, and calls into the
// machinery that implementation.cpp compiled. A safetensors file is written and
// restored by detection: the formats registered in the implementation unit serve
// every unit.
// Exit code: 0 when every restored value equals the saved one.
#include <ckpt/ckpt.hpp>
#include <ckpt/formats.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

struct Small {
  std::int64_t step = 0;
  double learning_rate = 0.0;
  xt::xtensor<float, 2> weights;
  std::vector<std::int32_t> tokens;
};

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path("ckpt-consumer-run");
  try {
    fs::remove_all(dir);
    Small saved{42, 0.125, xt::xtensor<float, 2>{{1.0f, -2.5f}, {3.0f, 0.5f}}, {7, 8, 9}};
    const auto same = [&](const Small& r) {
      return r.step == saved.step && r.learning_rate == saved.learning_rate && r.weights == saved.weights &&
             r.tokens == saved.tokens;
    };
    ckpt::save(dir / "native", saved);
    const bool native_ok = same(ckpt::restore<Small>(dir / "native")) &&
                           ckpt::restore_tree(dir / "native").leaf("weights").shape() == std::vector<std::int64_t>{2, 2};
    ckpt::save<ckpt::safetensors>(dir / "state.safetensors", saved);
    const bool detected = ckpt::detect_format(dir / "state.safetensors") == "safetensors";
    const bool safetensors_ok = detected && same(ckpt::restore<Small>(dir / "state.safetensors"));
    std::printf("consumer: native %s, safetensors %s\n", native_ok ? "matches" : "DIFFERS",
                safetensors_ok ? "matches" : (detected ? "DIFFERS" : "NOT DETECTED"));
    return native_ok && safetensors_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 2;
  }
}
