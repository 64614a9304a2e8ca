// ckpt/leaf/half.hpp — ckpt::bfloat16 and ckpt::float16: 16-bit storage types.
//
// They exist so that checkpoints holding JAX's bfloat16 or IEEE half arrays can be
// saved and restored without a third-party half library. They store the bits and
// convert to and from float with round-to-nearest-even; arithmetic goes through float.
#pragma once

#include <ckpt/detail/static_error.hpp>

#include <bit>
#include <cstdint>

namespace ckpt {

namespace detail {
// IEEE binary32 <-> binary16 with round-to-nearest-even, subnormals, inf and NaN.
constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf or NaN; keep NaN quiet and non-zero
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t e = abs >> 23;
    const std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // in 14..24
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return std::bit_cast<float>(sign);
  std::uint32_t ee = 113;  // normalise the subnormal
  while ((m & 0x400u) == 0) { m <<= 1; --ee; }
  return std::bit_cast<float>(sign | (ee << 23) | ((m & 0x3ffu) << 13));
}

constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}
}  // namespace detail

// Brain floating point: the top 16 bits of a float32 (JAX's and TPUs' bfloat16).
struct bfloat16 {
  std::uint16_t bits = 0;
  constexpr bfloat16() noexcept = default;
  constexpr bfloat16(float f) noexcept : bits(detail::float_to_bfloat16_bits(f)) {}  // NOLINT: implicit like float
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept { bfloat16 r; r.bits = b; return r; }
  constexpr operator float() const noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
  friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept { return float(a) == float(b); }
};

// IEEE 754 binary16 (numpy's float16).
struct float16 {
  std::uint16_t bits = 0;
  constexpr float16() noexcept = default;
  constexpr float16(float f) noexcept : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like float
  static constexpr float16 from_bits(std::uint16_t b) noexcept { float16 r; r.bits = b; return r; }
  constexpr operator float() const noexcept { return detail::half_bits_to_float(bits); }
  friend constexpr bool operator==(float16 a, float16 b) noexcept { return float(a) == float(b); }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2, CKPT_INTERNAL_CHECK("16-bit float types must be 2 bytes"));
static_assert(float(float16(1.0f)) == 1.0f && float(float16(65504.0f)) == 65504.0f,
              CKPT_INTERNAL_CHECK("float16 must round-trip 1 and 65504"));
static_assert(float(bfloat16(1.0f)) == 1.0f && float(bfloat16(-2.5f)) == -2.5f,
              CKPT_INTERNAL_CHECK("bfloat16 must round-trip 1 and -2.5"));

}  // namespace ckpt
