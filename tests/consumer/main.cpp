// A program outside ckpt that uses it the way a consumer would: include the
// one public header, save a small struct, restore it, compare.
// Exit code: 0 when the restored value equals the saved one.
#include <ckpt/ckpt.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

struct Small {
  std::int64_t step = 0;
  double learning_rate = 0.0;
  std::vector<float> weights;
  std::string name;
};

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path("ckpt-consumer-run");
  try {
    fs::remove_all(dir);
    const Small saved{42, 0.125, {1.0f, -2.5f, 3.0f}, "consumer"};
    ckpt::save(dir.string(), saved);
    const auto restored = ckpt::restore<Small>(dir.string());
    const bool same = restored.step == saved.step && restored.learning_rate == saved.learning_rate &&
                      restored.weights == saved.weights && restored.name == saved.name;
    std::printf("consumer: %s\n", same ? "restored value matches" : "restored value DIFFERS");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 2;
  }
}
