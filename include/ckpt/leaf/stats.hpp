// ckpt/leaf/stats.hpp — statistics of a leaf's values, gathered piece by piece: element
// count, NaN and Inf counts, min, max, mean, standard deviation and L2 norm.
//
// One pass over the bytes as they are read (a leaf larger than memory is read through a
// buffer), and statistics of several leaves or pieces combine (merge) into those of the
// whole: `ckpt stats` sums a subtree's leaves this way.
//
// Numerically: the values are taken in blocks; each block's mean and sum of squared
// deviations come from two passes over the block in double, and blocks combine by Chan,
// Golub and LeVeque's pairwise update (Welford's for blocks). Everything is kept in
// units of a power of two at least the largest magnitude seen, so that neither the sum
// of squares of float64 values near their maximum overflows nor tiny values underflow
// needlessly; the scaling by a power of two is exact.
//
// Which values count: min, max, mean, std and the L2 norm are of the finite elements;
// NaNs and infinities are counted apart. Booleans are 0 and 1, integers and float16 /
// bfloat16 their values as doubles, complex elements their magnitude |z| (so the L2 norm
// is the complex vector's). Strings, none and the storage-only float8 types hold no
// values that are summed (supported() is false).
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include <ckpt/leaf/dtype.hpp>

namespace ckpt {

// Whether ValueStats sums a dtype's values (every numeric dtype but the float8 ones).
constexpr bool stats_supported(dtype d) noexcept {
  const dtype_kind k = info(d).kind;
  return k == dtype_kind::boolean || k == dtype_kind::signed_integer || k == dtype_kind::unsigned_integer ||
         k == dtype_kind::floating || k == dtype_kind::complex;
}

// Decodes the whole elements of `bytes` (dtype d, as stored: little-endian) into re[i]
// (and, for complex dtypes, im[i]; im may be null for real ones, or is set to 0).
// Returns the number of elements. A dtype without values (stats_supported false) decodes none.
inline std::size_t decode_values(dtype d, std::span<const std::byte> bytes, double* re, double* im) {
  if (!stats_supported(d)) return 0;
  const std::size_t z = dtype_size(d), n = bytes.size() / z;
  visit_element_type(d, [&](auto tag) {
    using E = typename decltype(tag)::type;
    if constexpr (!std::is_void_v<E>) {
      for (std::size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<E, bool>) {  // any byte but 0 is true; reading 2 as a bool would be UB
          re[i] = std::to_integer<int>(bytes[i]) != 0 ? 1.0 : 0.0;
        } else {
          E v;
          std::memcpy(&v, bytes.data() + i * sizeof(E), sizeof(E));
          if constexpr (requires { v.imag(); }) {
            re[i] = static_cast<double>(v.real());
            if (im) im[i] = static_cast<double>(v.imag());
            continue;
          } else if constexpr (std::is_same_v<E, float16> || std::is_same_v<E, bfloat16>) {
            re[i] = static_cast<double>(static_cast<float>(v));
          } else {
            re[i] = static_cast<double>(v);
          }
        }
        if (im) im[i] = 0;
      }
    }
  });
  return n;
}

namespace detail::stats {
// Elements of `lanes` components of type U, one counted when any component has every
// exponent bit set (`mask`): IEEE 754's NaN and infinities. A bit test, not a decode, so
// that a writer counts at the speed it hashes.
template <class U, std::size_t lanes>
std::uint64_t count_exponent_all_ones(std::span<const std::byte> bytes, U mask) noexcept {
  const std::size_t n = bytes.size() / (sizeof(U) * lanes);
  std::uint64_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    U v[lanes];
    std::memcpy(v, bytes.data() + i * sizeof(v), sizeof(v));
    bool bad = false;
    for (std::size_t k = 0; k < lanes; ++k) bad |= (v[k] & mask) == mask;
    count += bad ? 1 : 0;
  }
  return count;
}
}  // namespace detail::stats

// The NaN and infinite elements among the whole elements of `bytes` (dtype d, as
// stored: little-endian), as ValueStats counts them apart (nan() + inf()); a complex
// element counts once when either part is. 0 for a dtype that cannot hold them. What
// the writers count as they write (SaveOptions::non_finite).
inline std::uint64_t count_non_finite(dtype d, std::span<const std::byte> bytes) noexcept {
  using detail::stats::count_exponent_all_ones;
  switch (d) {
    case dtype::float16: return count_exponent_all_ones<std::uint16_t, 1>(bytes, 0x7c00);
    case dtype::bfloat16: return count_exponent_all_ones<std::uint16_t, 1>(bytes, 0x7f80);
    case dtype::float32: return count_exponent_all_ones<std::uint32_t, 1>(bytes, 0x7f800000u);
    case dtype::float64: return count_exponent_all_ones<std::uint64_t, 1>(bytes, 0x7ff0000000000000ull);
    case dtype::complex64: return count_exponent_all_ones<std::uint32_t, 2>(bytes, 0x7f800000u);
    case dtype::complex128: return count_exponent_all_ones<std::uint64_t, 2>(bytes, 0x7ff0000000000000ull);
    default: return 0;
  }
}

class ValueStats {
 public:
  // Values decoded at a time (on the stack: 32 KiB).
  static constexpr std::size_t block = 2048;

  // Adds the whole elements of `bytes`, of dtype d (a piece of a leaf: pieces must hold
  // whole elements). Nothing for a dtype without values.
  void add(dtype d, std::span<const std::byte> bytes) {
    if (!stats_supported(d)) return;
    const std::size_t z = dtype_size(d);
    const bool cplx = info(d).kind == dtype_kind::complex;
    double re[block], im[block];
    for (std::size_t at = 0; at + z <= bytes.size(); at += block * z) {
      const auto part = bytes.subspan(at, std::min(block * z, bytes.size() - at));
      const std::size_t n = decode_values(d, part, re, cplx ? im : nullptr);
      if (cplx)
        for (std::size_t i = 0; i < n; ++i) re[i] = std::hypot(re[i], im[i]);
      add_values(std::span<const double>(re, n));
    }
  }

  // Adds values already decoded (magnitudes, differences, ...).
  void add_values(std::span<const double> v) {
    for (std::size_t at = 0; at < v.size(); at += block) add_block(v.subspan(at, std::min(block, v.size() - at)));
  }

  // Combines the statistics of other values into these (as if they had been added here).
  void merge(const ValueStats& o) {
    nan_ += o.nan_;
    inf_ += o.inf_;
    if (o.n_ == 0) return;
    if (n_ == 0) {
      const auto nan = nan_, inf = inf_;
      *this = o;
      nan_ = nan, inf_ = inf;
      return;
    }
    lo_ = std::min(lo_, o.lo_);
    hi_ = std::max(hi_, o.hi_);
    // Both in units of the larger scale; the smaller's figures shrink by an exact power of two.
    const int e = std::max(exp_, o.exp_);
    const double fa = std::ldexp(1.0, std::max(exp_ - e, -2000)), fb = std::ldexp(1.0, std::max(o.exp_ - e, -2000));
    const double ma = mean_ * fa, mb = o.mean_ * fb;
    const double na = static_cast<double>(n_), nb = static_cast<double>(o.n_), n = na + nb;
    const double delta = mb - ma;
    mean_ = ma + delta * (nb / n);
    m2_ = m2_ * fa * fa + o.m2_ * fb * fb + delta * delta * (na * nb / n);
    ssq_ = ssq_ * fa * fa + o.ssq_ * fb * fb;
    exp_ = e;
    n_ += o.n_;
  }

  std::uint64_t elements() const noexcept { return n_ + nan_ + inf_; }
  std::uint64_t finite() const noexcept { return n_; }
  std::uint64_t nan() const noexcept { return nan_; }
  std::uint64_t inf() const noexcept { return inf_; }
  // Of the finite values; NaN when there is none.
  double min() const noexcept { return n_ ? lo_ : std::numeric_limits<double>::quiet_NaN(); }
  double max() const noexcept { return n_ ? hi_ : std::numeric_limits<double>::quiet_NaN(); }
  double mean() const noexcept { return n_ ? std::ldexp(mean_, exp_) : std::numeric_limits<double>::quiet_NaN(); }
  // The population standard deviation (divided by n, as numpy's std).
  double stddev() const noexcept {
    return n_ ? std::ldexp(std::sqrt(std::max(m2_, 0.0) / static_cast<double>(n_)), exp_)
              : std::numeric_limits<double>::quiet_NaN();
  }
  // sqrt of the sum of squares of the finite values (0 when there is none).
  double l2() const noexcept { return n_ ? std::ldexp(std::sqrt(ssq_), exp_) : 0.0; }

 private:
  void add_block(std::span<const double> v) {
    double f[block];
    std::size_t k = 0;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, big = 0;
    for (const double x : v) {
      if (std::isnan(x)) ++nan_;
      else if (std::isinf(x)) ++inf_;
      else {
        f[k++] = x;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
        big = std::max(big, std::fabs(x));
      }
    }
    if (k == 0) return;
    ValueStats b;
    b.n_ = k;
    b.lo_ = lo;
    b.hi_ = hi;
    int e = zero_exp;
    if (big > 0) {
      std::frexp(big, &e);  // big < 2^e: the block in units of 2^e lies within (-1, 1)
      e = std::max(e, -1000);  // 2^-e must stay a finite double (subnormal values)
    }
    b.exp_ = e;
    const double s = big > 0 ? std::ldexp(1.0, -e) : 0.0;
    double sum = 0;
    for (std::size_t i = 0; i < k; ++i) sum += (f[i] = f[i] * s);
    b.mean_ = sum / static_cast<double>(k);
    double m2 = 0, ssq = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const double d = f[i] - b.mean_;
      m2 += d * d;
      ssq += f[i] * f[i];
    }
    b.m2_ = m2;
    b.ssq_ = ssq;
    merge(b);
  }

  // The scale of values that are all zero: below every double's, so that any other scale wins.
  static constexpr int zero_exp = -1100;

  std::uint64_t n_ = 0, nan_ = 0, inf_ = 0;  // n_: finite values
  double lo_ = 0, hi_ = 0;
  int exp_ = zero_exp;
  double mean_ = 0, m2_ = 0, ssq_ = 0;  // in units of 2^exp_ (squares: of 2^(2 exp_))
};

}  // namespace ckpt
