// The baseline: the same struct and the dependency headers ckpt's native path needs
// (xtensor, Boost.PFR, msgpack-cxx, xxHash, <filesystem>), writing every field with a
// plain loop, with no ckpt. ckpt's extra compile cost is measured against this.
#include <boost/pfr.hpp>
#include <msgpack.hpp>
#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <type_traits>

#include "state.hpp"

int main(int argc, char** argv) {
  ResearchState s;
  s.w0 = xt::ones<float>({4, 4});
  const char* file = argc > 1 ? argv[1] : "/tmp/ckpt-compile-time.bin";
  std::FILE* f = std::fopen(file, "wb");
  if (!f) return 1;
  msgpack::sbuffer header;
  msgpack::packer<msgpack::sbuffer> pk(header);
  XXH64_hash_t h = 0;
  boost::pfr::for_each_field(s, [&](const auto& field) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(field)>>) {
      pk.pack(field);
      std::fwrite(&field, sizeof field, 1, f);
    } else {
      pk.pack(field.shape()[0]);
      std::fwrite(field.data(), sizeof(float), field.size(), f);
      h ^= XXH3_64bits(field.data(), field.size() * sizeof(float));
    }
  });
  std::fwrite(header.data(), 1, header.size(), f);
  std::fclose(f);
  return std::filesystem::exists(file) && h != 1 ? 0 : 1;
}
