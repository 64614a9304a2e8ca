// ckpt/io/checksum.hpp — xxh3-64 checksums: fast enough to verify at memory speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#define XXH_INLINE_ALL
#include <xxhash.h>
#undef XXH_INLINE_ALL

namespace ckpt::io {

inline std::uint64_t xxh3(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// Incremental form, for data read in pieces.
class Xxh3Stream {
 public:
  Xxh3Stream() noexcept { XXH3_64bits_reset(&state_); }
  void update(std::span<const std::byte> bytes) noexcept { XXH3_64bits_update(&state_, bytes.data(), bytes.size()); }
  std::uint64_t digest() const noexcept { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace ckpt::io
