// fuzz/targets/zarr3.hpp — the zarr v3 reader: the input is an array's zarr.json, then a
// NUL byte, then the bytes of its chunk, written under the keys of chunk 0 in both
// chunk key encodings ("c/0/0" and "0", "0.0", "0.0.0"). The array lies in a group.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::zarr3 {

inline const fs::path& dir() {
  static const fs::path d = [] {
    const auto p = fuzz::scratch() / "zarr3";
    fs::create_directories(p / "arr" / "c" / "0");
    fuzz::write_file(p / "zarr.json", R"({"zarr_format": 3, "node_type": "group", "attributes": {}})");
    return p;
  }();
  return d;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  const auto [zarr_json, chunk] = fuzz::split_at_nul(data, size);
  fuzz::write_file(d / "arr" / "zarr.json", zarr_json);
  for (const char* key : {"c/0/0", "0", "0.0", "0.0.0"}) fuzz::write_file(d / "arr" / key, chunk);
  fuzz::open_and_read<ckpt::zarr_v3>(d);
  return 0;
}

inline const Register registered{"zarr3", &run};

}  // namespace fuzz::targets::zarr3
