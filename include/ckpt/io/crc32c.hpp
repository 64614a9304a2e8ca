// ckpt/io/crc32c.hpp — CRC-32C (Castagnoli), and the masked form TensorFlow and LevelDB store.
//
// TensorFlow's tensor bundles, LevelDB tables and TFRecord files (TensorBoard events)
// checksum with CRC-32C; Orbax's OCDBT does too. Debian has no packaged C/C++ crc32c
// library for bookworm (libcrc32c-dev is absent), so this is a small one: the SSE4.2
// crc32 instruction when the CPU has it (chosen at run time: the build's baseline
// lacks it), else an 8-table software version (~1 byte per cycle).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CKPT_CRC32C_X86 1
#endif

namespace ckpt::detail::crc32c {

inline constexpr std::uint32_t poly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ poly : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
  return t;
}
inline constexpr auto tables = make_tables();

// crc is the running (inverted) state.
inline std::uint32_t software(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = tables[7][lo & 0xffu] ^ tables[6][(lo >> 8) & 0xffu] ^ tables[5][(lo >> 16) & 0xffu] ^ tables[4][lo >> 24] ^
          tables[3][hi & 0xffu] ^ tables[2][(hi >> 8) & 0xffu] ^ tables[1][(hi >> 16) & 0xffu] ^ tables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = tables[0][(crc ^ *p++) & 0xffu] ^ (crc >> 8);
  return crc;
}

#ifdef CKPT_CRC32C_X86
__attribute__((target("sse4.2"))) inline std::uint32_t hardware(std::uint32_t crc, const unsigned char* p,
                                                                 std::size_t n) noexcept {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
inline bool have_sse42() noexcept {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif
}  // namespace ckpt::detail::crc32c

namespace ckpt::io {

// Extends a finished crc32c value (0 for none yet) with more bytes.
inline std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> bytes) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::uint32_t state = ~crc;
#ifdef CKPT_CRC32C_X86
  if (ckpt::detail::crc32c::have_sse42()) return ~ckpt::detail::crc32c::hardware(state, p, bytes.size());
#endif
  return ~ckpt::detail::crc32c::software(state, p, bytes.size());
}

inline std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept { return crc32c_extend(0, bytes); }
// The same, continuing from `init` (the crc32c of the bytes before), as OCDBT's readers call it.
inline std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t init) noexcept {
  return crc32c_extend(init, bytes);
}

// LevelDB/TensorFlow store crcs masked, so that a crc of data holding crcs stays well-mixed.
constexpr std::uint32_t crc32c_mask(std::uint32_t crc) noexcept { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
constexpr std::uint32_t crc32c_unmask(std::uint32_t masked) noexcept {
  const std::uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace ckpt::io

#undef CKPT_CRC32C_X86
