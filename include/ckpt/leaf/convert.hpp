// ckpt/leaf/convert.hpp — converting elements from the checkpoint's dtype to the target's.
//
// Casts that lose nothing happen by themselves (bfloat16 -> float32, int32 -> int64,
// float32 -> complex64). Integer narrowing happens when every value fits, and is an
// error naming the first value that does not. Floating narrowing (float64 -> float32,
// float32 -> bfloat16) happens only when asked for (RestoreOptions::restore_dtype /
// SaveOptions::save_dtype): a cast nobody asked for is never silent.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/leaf/dtype.hpp>

namespace ckpt {

constexpr bool is_signed_integer(dtype d) { return info(d).kind == dtype_kind::signed_integer; }
constexpr bool is_integer(dtype d) { return is_signed_integer(d) || info(d).kind == dtype_kind::unsigned_integer; }
constexpr bool is_real_floating(dtype d) { return info(d).kind == dtype_kind::floating; }
constexpr bool is_complex(dtype d) { return info(d).kind == dtype_kind::complex; }
constexpr bool is_floating(dtype d) { return is_real_floating(d) || is_complex(d); }

// Significand bits a floating dtype keeps exactly (for int -> float and float -> float).
constexpr int mantissa_bits(dtype d) { return info(d).mantissa_bits; }
constexpr int exponent_range(dtype d) { return info(d).max_exponent; }  // to compare ranges
constexpr int value_bits(dtype d) {  // bits of magnitude an integer dtype holds
  return static_cast<int>(dtype_size(d) * 8) - (is_signed_integer(d) ? 1 : 0);
}

enum class cast_kind {
  exact,      // same dtype
  lossless,   // every value converts exactly
  checked,    // integer narrowing: allowed when every value fits
  narrowing,  // floating narrowing: allowed only when asked for
  forbidden,
};

constexpr cast_kind classify_cast(dtype from, dtype to) {
  if (from == to) return cast_kind::exact;
  if (!is_numeric(from) || !is_numeric(to) || from == dtype::bool_ || to == dtype::bool_) return cast_kind::forbidden;
  if (info(from).kind == dtype_kind::opaque || info(to).kind == dtype_kind::opaque) return cast_kind::forbidden;
  if (is_integer(from) && is_integer(to)) {
    const bool widening = is_signed_integer(from) ? is_signed_integer(to) && dtype_size(to) >= dtype_size(from)
                                                  : value_bits(to) >= value_bits(from);
    return widening ? cast_kind::lossless : cast_kind::checked;
  }
  if (is_integer(from) && is_floating(to))
    return value_bits(from) <= mantissa_bits(to) ? cast_kind::lossless : cast_kind::narrowing;
  if (is_floating(from) && is_integer(to)) return cast_kind::forbidden;
  if (is_complex(from) && !is_complex(to)) return cast_kind::forbidden;  // would drop the imaginary part
  const bool wider = mantissa_bits(to) >= mantissa_bits(from) && exponent_range(to) >= exponent_range(from);
  return wider ? cast_kind::lossless : cast_kind::narrowing;
}

// Whether a leaf of dtype `from` may fill a target of dtype `to`; `requested` is the
// dtype the caller asked for, which allows floating narrowing into it.
constexpr bool cast_allowed(dtype from, dtype to, std::optional<dtype> requested) {
  switch (classify_cast(from, to)) {
    case cast_kind::exact: case cast_kind::lossless: case cast_kind::checked: return true;
    case cast_kind::narrowing: return requested == to;
    case cast_kind::forbidden: return false;
  }
  return false;
}

namespace detail {
// The type of a kind that holds every value of the kind exactly: a conversion widens
// the source to it, then narrows it into the target, so that the code is one loop per
// dtype and one per (kind, dtype) rather than one per pair of dtypes. Integers do not
// go through double: int64 -> float32 rounds once, as a direct cast does.
template <class E>
using wide_t = std::conditional_t<
    std::is_integral_v<E>, std::conditional_t<std::is_signed_v<E>, std::int64_t, std::uint64_t>,
    std::conditional_t<std::is_same_v<E, std::complex<float>> || std::is_same_v<E, std::complex<double>>,
                       std::complex<double>, double>>;

template <class E>
constexpr bool is_complex_v = std::is_same_v<E, std::complex<float>> || std::is_same_v<E, std::complex<double>>;

// Whether an integer value fits in the integer type To (always true for others).
template <class To, class From>
bool fits(From v) {
  if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) {
    if constexpr (std::is_signed_v<From> == std::is_signed_v<To>) {
      return v >= std::numeric_limits<To>::min() && v <= std::numeric_limits<To>::max();
    } else if constexpr (std::is_signed_v<From>) {
      return v >= 0 && static_cast<std::make_unsigned_t<From>>(v) <= std::numeric_limits<To>::max();
    } else {
      return v <= static_cast<std::make_unsigned_t<To>>(std::numeric_limits<To>::max());
    }
  } else {
    (void)v;
    return true;
  }
}

// One value of a wide type as a To. 16-bit floats convert from float (double -> float16
// rounds through float, as it always has); float and double pass through double exactly.
template <class To, class Wide>
To narrow_one(Wide v) {
  if constexpr (std::is_same_v<To, bfloat16> || std::is_same_v<To, float16>) {
    return To(static_cast<float>(v));
  } else if constexpr (is_complex_v<To>) {
    using T = typename To::value_type;
    if constexpr (is_complex_v<Wide>) return To(static_cast<T>(v.real()), static_cast<T>(v.imag()));
    else return To(static_cast<T>(v), 0);
  } else {
    return static_cast<To>(v);
  }
}

// Conversions go a block at a time through local arrays, so that the loops have a fixed
// trip count and no aliasing: the compiler vectorizes them at -O2. The arrays start
// zeroed, and the tail of the last block converts stale values, never indeterminate ones.
inline constexpr std::size_t convert_block = 256;

// Widens m <= convert_block elements of type From at src into wide.
template <class From>
void widen(const std::byte* src, std::size_t m, From (&in)[convert_block], wide_t<From> (&wide)[convert_block]) {
  std::memcpy(in, src, m * sizeof(From));
  for (std::size_t i = 0; i < convert_block; ++i) {
    if constexpr (std::is_same_v<From, bfloat16> || std::is_same_v<From, float16>) wide[i] = static_cast<float>(in[i]);
    else wide[i] = static_cast<wide_t<From>>(in[i]);
  }
}

// Narrows the first m wide values into dtype `to` at dst; returns the index of the first
// value that does not fit. Pairs classify_cast forbids are never reached; they return at once.
template <class Wide>
std::optional<std::size_t> narrow(const Wide (&wide)[convert_block], std::size_t m, dtype to, std::byte* dst) {
  return visit_element_type(to, [&](auto ttag) -> std::optional<std::size_t> {
    using To = typename decltype(ttag)::type;
    if constexpr (std::is_void_v<To> || std::is_same_v<To, bool> || (is_complex_v<Wide> && !is_complex_v<To>) ||
                  (!std::is_integral_v<Wide> && std::is_integral_v<To>)) {
      return std::size_t{0};
    } else {
      To out[convert_block];
      bool all_fit = true;  // checked without a branch, in the same loop
      for (std::size_t i = 0; i < convert_block; ++i) {
        out[i] = narrow_one<To>(wide[i]);
        all_fit &= (i >= m) | fits<To>(wide[i]);
      }
      std::size_t fit = m;
      if (!all_fit) fit = static_cast<std::size_t>(std::find_if_not(wide, wide + m, fits<To, Wide>) - wide);
      std::memcpy(dst, out, fit * sizeof(To));
      return fit < m ? std::optional<std::size_t>(fit) : std::nullopt;
    }
  });
}

// float32 -> bfloat16, the save_dtype hot path. Blocks through local arrays, so that the
// loop has a fixed trip count and no aliasing: the compiler vectorizes it at -O2.
inline void float32_to_bfloat16(const std::byte* src, std::byte* dst, std::size_t n) {
  constexpr std::size_t block = 2048;
  std::uint32_t in[block] = {};  // the tail of the last block converts stale values, never indeterminate ones
  std::uint16_t out[block] = {};
  for (std::size_t first = 0; first < n; first += block) {
    const std::size_t m = std::min(block, n - first);
    std::memcpy(in, src + 4 * first, 4 * m);
    for (std::size_t i = 0; i < block; ++i) {
      const std::uint32_t x = in[i];
      const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
      const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
      out[i] = static_cast<std::uint16_t>(nan ? ((x >> 16) | 0x40u) : rounded);
    }
    std::memcpy(dst + 2 * first, out, 2 * m);
  }
}
}  // namespace detail

// Converts n elements; returns the index of the first value that does not fit (for
// integer narrowing), in which case dst is partly written.
CKPT_API std::optional<std::size_t> convert_elements(dtype from, const std::byte* src, dtype to, std::byte* dst,
                                                     std::size_t n);

#if CKPT_DEFINE_API
CKPT_API std::optional<std::size_t> convert_elements(dtype from, const std::byte* src, dtype to, std::byte* dst,
                                                     std::size_t n) {
  if (from == dtype::float32 && to == dtype::bfloat16) {
    detail::float32_to_bfloat16(src, dst, n);
    return std::nullopt;
  }
  return visit_element_type(from, [&](auto ftag) -> std::optional<std::size_t> {
    using From = typename decltype(ftag)::type;
    if constexpr (std::is_void_v<From> || std::is_same_v<From, bool>) {
      return std::size_t{0};
    } else {
      constexpr std::size_t block = detail::convert_block;
      From in[block] = {};
      detail::wide_t<From> wide[block] = {};
      const std::size_t to_size = dtype_size(to);
      for (std::size_t first = 0; first < n; first += block) {
        const std::size_t m = std::min(block, n - first);
        detail::widen<From>(src + first * sizeof(From), m, in, wide);
        if (auto bad = detail::narrow(wide, m, to, dst + first * to_size)) return first + *bad;
      }
      return std::nullopt;
    }
  });
}

#endif

}  // namespace ckpt
