// fuzz/targets/safetensors.hpp — the safetensors reader: the input is a .safetensors file
// (8-byte header length, JSON header, data buffer).
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::safetensors {

inline int run(const std::uint8_t* data, std::size_t size) {
  static const fs::path file = fuzz::scratch() / "model.safetensors";
  fuzz::write_file(file, data, size);
  fuzz::open_and_read<ckpt::safetensors>(file);
  return 0;
}

inline const Register registered{"safetensors", &run};

}  // namespace fuzz::targets::safetensors
