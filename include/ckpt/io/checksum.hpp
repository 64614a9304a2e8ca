// ckpt/io/checksum.hpp — xxh3-64 checksums: fast enough to verify at memory speed.
//
// On x86-64, Debian's libxxhash picks the widest vector unit at run time (SSE2,
// AVX2 or AVX-512: the *_dispatch functions). A header-only inline xxh3 would be
// compiled for the build's baseline (SSE2) and hash at about half the speed, which
// is what decides whether verifying a restore keeps up with reading it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#if defined(__x86_64__)
#define XXH_STATIC_LINKING_ONLY    // XXH3_state_t
#define XXH_DISPATCH_DISABLE_REPLACE  // call the *_dispatch functions by name, rename nothing
#include <xxhash.h>
#include <xxh_x86dispatch.h>
#define CKPT_XXH3(fn) fn##_dispatch
#else
#define XXH_INLINE_ALL
#include <xxhash.h>
#undef XXH_INLINE_ALL
#define CKPT_XXH3(fn) fn
#endif

namespace ckpt::io {

inline std::uint64_t xxh3(std::span<const std::byte> bytes) noexcept {
  return CKPT_XXH3(XXH3_64bits)(bytes.data(), bytes.size());
}

// Seeded form, to chain checksums over pieces (io/tile_checksums.hpp).
inline std::uint64_t xxh3(std::span<const std::byte> bytes, std::uint64_t seed) noexcept {
  return CKPT_XXH3(XXH3_64bits_withSeed)(bytes.data(), bytes.size(), seed);
}

// Incremental form, for data read in pieces.
class Xxh3Stream {
 public:
  Xxh3Stream() noexcept { XXH3_64bits_reset(&state_); }
  void update(std::span<const std::byte> bytes) noexcept {
    CKPT_XXH3(XXH3_64bits_update)(&state_, bytes.data(), bytes.size());
  }
  std::uint64_t digest() const noexcept { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace ckpt::io

#undef CKPT_XXH3
