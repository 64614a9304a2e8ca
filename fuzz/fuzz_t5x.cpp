// fuzz/fuzz_t5x.cpp — the t5x reader: the input is the msgpack `checkpoint` file (its
// TensorStore specs and PLACEHOLDER:// strings included). Beside it lie the zarr arrays
// of fuzz::arrays_state() as ckpt writes them, one without its .zarray (its spec's
// metadata is then read instead).
#include "fuzz_common.hpp"

namespace {
const fuzz::fs::path& dir() {
  static const fuzz::fs::path d = [] {
    const auto p = fuzz::scratch() / "t5x";
    ckpt::save<ckpt::t5x>(p, fuzz::arrays_state(), {.force = true});
    fuzz::fs::remove(p / "c" / ".zarray");
    return p;
  }();
  return d;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  fuzz::write_file(d / "checkpoint", data, size);
  fuzz::open_and_read<ckpt::t5x>(d);
  return 0;
}
