// fuzz/targets/zarr.hpp — the zarr v2 reader: the input is an array's .zarray text, then a
// NUL byte, then the bytes of its chunk (written as chunk 0 of rank 0 to 3 arrays: "0",
// "0.0", "0.0.0"). The array lies in a group, as ckpt::zarr_v2 reads it.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::zarr {

inline const fs::path& dir() {
  static const fs::path d = [] {
    const auto p = fuzz::scratch() / "zarr";
    fuzz::fs::create_directories(p / "arr");
    fuzz::write_file(p / ".zgroup", R"({"zarr_format": 2})");
    return p;
  }();
  return d;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  const auto [zarray, chunk] = fuzz::split_at_nul(data, size);
  fuzz::write_file(d / "arr" / ".zarray", zarray);
  for (const char* key : {"0", "0.0", "0.0.0"}) fuzz::write_file(d / "arr" / key, chunk);
  fuzz::open_and_read<ckpt::zarr_v2>(d);
  return 0;
}

inline const Register registered{"zarr", &run};

}  // namespace fuzz::targets::zarr
