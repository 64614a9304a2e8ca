// fuzz/fuzz_orbax.cpp — the Orbax reader: the input is an item's _METADATA, then a NUL
// byte, then its _strings.json. Beside them lie the zarr arrays of fuzz::arrays_state()
// as ckpt writes them.
#include <cstring>

#include "fuzz_common.hpp"

namespace {
const fuzz::fs::path& dir() {
  static const fuzz::fs::path d = [] {
    const auto p = fuzz::scratch() / "orbax";
    ckpt::save<ckpt::orbax>(p, fuzz::arrays_state(), {.force = true});
    return p;
  }();
  return d;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  const char* p = reinterpret_cast<const char*>(data);
  const char* nul = static_cast<const char*>(std::memchr(p, 0, size));
  const std::size_t meta = nul ? static_cast<std::size_t>(nul - p) : size;
  fuzz::write_file(d / "default" / "_METADATA", p, meta);
  fuzz::write_file(d / "default" / "_strings.json", nul ? nul + 1 : p + size, nul ? size - meta - 1 : 0);
  fuzz::open_and_read<ckpt::orbax>(d);
  return 0;
}
