// fuzz/targets/tensorboard.hpp — the TensorBoard event reader (best-metric retention reads
// a metric from event files): the input is an events.out.tfevents file (TFRecord frames
// of Event protos), read strictly and leniently.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::tensorboard {

inline int run(const std::uint8_t* data, std::size_t size) {
  static const fs::path dir = [] {
    const auto d = fuzz::scratch() / "tensorboard" / "eval";
    fs::create_directories(d);
    return d;
  }();
  fuzz::write_file(dir / "events.out.tfevents.1.fuzz", data, size);
  for (const bool strict : {true, false})
    fuzz::expect_only_ckpt_errors([&] { (void)ckpt::tensorboard::read_scalars(dir, "loss", strict); });
  fuzz::expect_only_ckpt_errors(
      [&] { (void)ckpt::tensorboard::read_metric(dir.parent_path() / "checkpoints", "eval/loss"); });
  return 0;
}

inline const Register registered{"tensorboard", &run};

}  // namespace fuzz::targets::tensorboard
