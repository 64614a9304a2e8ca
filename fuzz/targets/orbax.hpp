// fuzz/targets/orbax.hpp — the Orbax reader: the input is an item's _METADATA, then a NUL
// byte, then its _strings.json. Beside them lie the zarr arrays of fuzz::arrays_state()
// as ckpt writes them.
#pragma once

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
  const auto [metadata, strings] = fuzz::split_at_nul(data, size);
  fuzz::write_file(d / "default" / "_METADATA", metadata);
  fuzz::write_file(d / "default" / "_strings.json", strings);
  fuzz::open_and_read<ckpt::orbax>(d);
  return 0;
}

inline const Register registered{"orbax", &run};

}  // namespace fuzz::targets::orbax
