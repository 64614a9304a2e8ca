// fuzz/targets/orbax.hpp — the Orbax reader: the input is an item's _METADATA, then a NUL
// byte, then its _strings.json. Beside them lie the zarr arrays of fuzz::arrays_state()
// as ckpt writes them.
#pragma once

#include <cstring>

#include "../fuzz_common.hpp"

namespace fuzz::targets::orbax {

inline const fs::path& dir() {
  static const fs::path d = [] {
    const auto p = fuzz::scratch() / "orbax";
    ckpt::save<ckpt::orbax_without_ocdbt>(p, fuzz::arrays_state(), {.force = true});
    return p;
  }();
  return d;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  const char* p = reinterpret_cast<const char*>(data);
  const char* nul = static_cast<const char*>(std::memchr(p, 0, size));
  const std::size_t meta = nul ? static_cast<std::size_t>(nul - p) : size;
  fuzz::write_file(d / "default" / "_METADATA", p, meta);
  fuzz::write_file(d / "default" / "_strings.json", nul ? nul + 1 : p + size, nul ? size - meta - 1 : 0);
  fuzz::open_and_read<ckpt::orbax>(d);
  return 0;
}

inline const Register registered{"orbax", &run};

}  // namespace fuzz::targets::orbax
