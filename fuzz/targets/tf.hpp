// fuzz/targets/tf.hpp — the TensorFlow bundle reader: the input replaces the .index
// table or the data shard of a checkpoint TensorFlow wrote (tests/data/tf; first byte:
// which file, see FileSet).
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::tf {

inline const FileSet& bundle() {
  static const FileSet s(
      copy_to_scratch(fixture("tf/serving_bundles/saved_model_half_plus_two_cpu/00000123/variables"), "tf"));
  return s;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const FileSet& set = bundle();
  set.with_input(data, size, [&] { fuzz::open_and_read<ckpt::tensorflow>(set.dir() / "variables"); });
  return 0;
}

inline const Register registered{"tf", &run};

}  // namespace fuzz::targets::tf
