// fuzz/targets/flax.hpp — the Flax msgpack reader: the input is a flax.serialization file.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::flax {

inline int run(const std::uint8_t* data, std::size_t size) {
  static const fs::path file = fuzz::scratch() / "state.msgpack";
  fuzz::write_file(file, data, size);
  fuzz::open_and_read<ckpt::flax>(file);
  return 0;
}

inline const Register registered{"flax", &run};

}  // namespace fuzz::targets::flax
