// tests/durability/save_once.cpp — the program check_durability.py traces: one save,
// and the checks of what a crash could have left.
//
//   save_once save DIR ROUND [--force]   ckpt::save of state(ROUND) to DIR
//   save_once manager ROOT STEP          a CheckpointManager (max_to_keep 2) saves state(STEP)
//   save_once check DIR                  prints "absent", "round N" (a whole checkpoint of
//                                        state(N)) or "broken: why"
//   save_once check-root ROOT            prints "steps: S..." (every step restores to its
//                                        state, with its metrics and item) or "broken: why"
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>

namespace {
namespace fs = std::filesystem;

struct State {
  std::int64_t round = 0;
  std::vector<float> a;        // a data file
  std::vector<std::int32_t> b; // another data file (two writer threads)
  std::vector<double> c;       // inline
  std::string name;
};

State state(std::int64_t round) {
  State s;
  s.round = round;
  s.a.resize(20000);
  s.b.resize(9000);
  for (std::size_t i = 0; i < s.a.size(); ++i) s.a[i] = static_cast<float>(round * 100000 + static_cast<std::int64_t>(i));
  for (std::size_t i = 0; i < s.b.size(); ++i) s.b[i] = static_cast<std::int32_t>(round * 7 - static_cast<std::int64_t>(i));
  s.c = {0.5 * static_cast<double>(round), 1.0};
  s.name = "round " + std::to_string(round);
  return s;
}

bool same(const State& x, const State& y) {
  return x.round == y.round && x.a == y.a && x.b == y.b && x.c == y.c && x.name == y.name;
}

struct Pos {
  std::int64_t offset = 0;
};

int check(const fs::path& dir) {
  std::error_code ec;
  // Not a checkpoint at all (no directory, no commit marker) is what a crash before
  // the commit may leave; a commit marker over anything but a whole state is broken.
  if (!fs::exists(dir, ec) || !ckpt::native::is_committed(dir)) {
    std::printf("absent\n");
    return 0;
  }
  try {
    const State s = ckpt::restore<State>(dir);
    if (!same(s, state(s.round))) {
      std::printf("broken: restores bytes of no saved state (round field %lld)\n", static_cast<long long>(s.round));
      return 0;
    }
    std::printf("round %lld\n", static_cast<long long>(s.round));
  } catch (const std::exception& e) {
    std::printf("broken: %s\n", e.what());
  }
  return 0;
}

int check_root(const fs::path& root) {
  try {
    ckpt::CheckpointManager<State> mgr(root, {.read_only = true});
    std::string out = "steps:";
    for (const auto step : mgr.all_steps()) {
      if (!same(mgr.restore(step), state(step))) {
        std::printf("broken: step %lld restores other bytes\n", static_cast<long long>(step));
        return 0;
      }
      const auto m = mgr.metrics(step);
      if (!m.contains("loss") || m.at("loss") != static_cast<double>(step)) {
        std::printf("broken: step %lld has no metrics of its own\n", static_cast<long long>(step));
        return 0;
      }
      if (mgr.restore_item<Pos>(step, "pos").offset != step * 10) {
        std::printf("broken: step %lld's item is not its own\n", static_cast<long long>(step));
        return 0;
      }
      out += " " + std::to_string(step);
    }
    std::printf("%s\n", out.c_str());
  } catch (const std::exception& e) {
    std::printf("broken: %s\n", e.what());
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() >= 3 && a[0] == "save") {
      ckpt::save(a[1], state(std::stoll(a[2])), {.force = a.size() > 3 && a[3] == "--force", .data_files = 2});
      return 0;
    }
    if (a.size() == 3 && a[0] == "manager") {
      const std::int64_t step = std::stoll(a[2]);
      ckpt::CheckpointManager<State> mgr(a[1], {.max_to_keep = 2, .save_options = {.data_files = 2}});
      mgr.save(step, state(step), {{"loss", static_cast<double>(step)}},
               {.items = {{"pos", ckpt::tree_item(Pos{step * 10})}}});
      return 0;
    }
    if (a.size() == 2 && a[0] == "check") return check(a[1]);
    if (a.size() == 2 && a[0] == "check-root") return check_root(a[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save_once: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: save_once save DIR ROUND [--force] | manager ROOT STEP | check DIR | check-root ROOT\n");
  return 2;
}
