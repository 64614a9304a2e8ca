// fuzz/targets/native.hpp — the native reader: the input is a manifest (with a commit
// marker written to match it, so that the parser is reached) and, parsed on its own,
// a commit marker. Beside it lie zero-filled data files data-0..data-3.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::native {

inline const fs::path& dir() {
  static const fs::path d = [] {
    const auto p = fuzz::scratch() / "native";
    fuzz::fs::create_directories(p);
    const std::vector<char> zeros(std::size_t{256} << 10, 0);
    for (int k = 0; k < 4; ++k) fuzz::write_file(p / ("data-" + std::to_string(k)), zeros.data(), zeros.size());
    return p;
  }();
  return d;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  const auto& d = dir();
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_ckpt_errors([&] { (void)ckpt::detail::native::decode_commit(in, d.string()); });
  fuzz::write_file(d / "manifest", data, size);
  const auto bytes = std::as_bytes(std::span(data, size));
  fuzz::write_file(d / "commit", ckpt::detail::native::encode_commit({size, ckpt::io::xxh3(bytes)}));
  fuzz::open_and_read<ckpt::native>(d);
  return 0;
}

inline const Register registered{"native", &run};

}  // namespace fuzz::targets::native
