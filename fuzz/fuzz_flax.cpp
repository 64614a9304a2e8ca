// fuzz/fuzz_flax.cpp — the Flax msgpack reader: the input is a flax.serialization file.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz::fs::path file = fuzz::scratch() / "state.msgpack";
  fuzz::write_file(file, data, size);
  fuzz::open_and_read<ckpt::flax_msgpack>(file);
  return 0;
}
