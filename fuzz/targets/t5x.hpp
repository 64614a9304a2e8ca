// fuzz/targets/t5x.hpp — the t5x reader: the input is the msgpack `checkpoint` file (its
// TensorStore specs and PLACEHOLDER:// strings included). Beside it lie the zarr arrays
// of fuzz::arrays_state() as ckpt writes them, one without its .zarray (its spec's
// metadata is then read instead).
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::t5x {

inline const fs::path& dir() {
  static const fs::path d = [] {
    const auto p = fuzz::scratch() / "t5x";
    ckpt::save<ckpt::t5x>(p, fuzz::arrays_state(), {.force = true});
    fuzz::fs::remove(p / "c" / ".zarray");
    return p;
  }();
  return d;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  fuzz::write_file(d / "checkpoint", data, size);
  fuzz::open_and_read<ckpt::t5x>(d);
  return 0;
}

inline const Register registered{"t5x", &run};

}  // namespace fuzz::targets::t5x
