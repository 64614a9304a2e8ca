// fuzz/targets/step_metadata.hpp — a manager step's _CHECKPOINT_METADATA: the input is the
// file of step 1 in a root; it is read on its own and by a read-only CheckpointManager
// (whose constructor scans every step's metadata), whose answers are then used.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::step_metadata {

inline const fs::path& root() {
  static const fs::path d = [] {
    const auto p = fuzz::scratch() / "root";
    ckpt::save(p / "1", fuzz::arrays_state(), {.force = true});
    return p;
  }();
  return d;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const auto& r = root();
  fuzz::write_file(r / "1" / "_CHECKPOINT_METADATA", data, size);
  fuzz::expect_only_ckpt_errors([&] { (void)ckpt::detail::manager::read_step_metadata(r / "1"); });
  fuzz::expect_only_ckpt_errors([&] {
    ckpt::CheckpointManager<fuzz::Arrays> mgr(r, {.read_only = true});
    for (const auto step : mgr.all_steps()) {
      for (const auto& [k, v] : mgr.metrics(step)) (void)k, (void)v;
      // what a user does with custom metadata: look into it, print it
      const auto custom = mgr.custom_metadata(step);
      (void)custom.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      (void)mgr.item_names(step);
    }
    (void)mgr.best_step();
    (void)mgr.restore().step;
  });
  return 0;
}

inline const Register registered{"step_metadata", &run};

}  // namespace fuzz::targets::step_metadata
