// ckpt/leaf/eigen.hpp — Eigen's dense matrices and arrays as leaves: Eigen::Matrix,
// Eigen::Array (vectors included), of dynamic or fixed size, in either storage order,
// and Eigen::Map of them.
//
// A leaf holds what numpy would: a vector (a dimension fixed to 1 at compile time) is
// one-dimensional, [n]; anything else is [rows, cols], its elements in row-major
// order. A row-major matrix, and any vector, is saved from its own memory and read
// straight into it; a column-major one (Eigen's default) is copied out in row-major
// order on save and read back in pieces on restore (leaf/strided.hpp). A Map is saved
// like the matrix it views (any strides) and restored into the memory it maps, whose
// shape must be the checkpoint's; a Map of const elements is saved only. Eigen::half
// and Eigen::bfloat16 elements are float16 and bfloat16 leaves.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include <Eigen/Core>

#include <ckpt/detail/static_error.hpp>
#include <ckpt/leaf/array_restore.hpp>
#include <ckpt/leaf/strided.hpp>

namespace ckpt {

// Eigen's 16-bit floats hold IEEE binary16 and bfloat16 bits, as ckpt's own do.
template <>
struct dtype_of_element<Eigen::half> {
  static_assert(sizeof(Eigen::half) == 2 && std::is_trivially_copyable_v<Eigen::half>,
                CKPT_INTERNAL_CHECK("Eigen::half must be 16 bits of IEEE binary16"));
  static constexpr dtype value = dtype::float16;
};
template <>
struct dtype_of_element<Eigen::bfloat16> {
  static_assert(sizeof(Eigen::bfloat16) == 2 && std::is_trivially_copyable_v<Eigen::bfloat16>,
                CKPT_INTERNAL_CHECK("Eigen::bfloat16 must be 16 bits of bfloat16"));
  static constexpr dtype value = dtype::bfloat16;
};

namespace detail {

// Throws when the checkpoint's shape does not fit dimensions fixed at compile time
// (Eigen::Dynamic: any) or their maximum (Eigen's MaxRows/MaxCols: at most).
template <std::size_t N>
void check_eigen_fixed_dims(const LeafSource& src, const std::array<std::int64_t, N>& fixed,
                            const std::array<std::int64_t, N>& max) {
  const Shape& s = src.shape();
  auto describe = [&](const std::array<std::int64_t, N>& dims) {
    std::string r = "[";
    for (std::size_t k = 0; k < N; ++k) r += (k ? "," : "") + (dims[k] == Eigen::Dynamic ? std::string("any") : std::to_string(dims[k]));
    return r + "]";
  };
  for (std::size_t k = 0; k < N; ++k) {
    if (fixed[k] != Eigen::Dynamic && s[k] != fixed[k])
      throw ShapeMismatchError(src.checkpoint(), src.path(),
                               "shape " + shape_str(s) + " in checkpoint, " + describe(fixed) +
                                   " in target (an Eigen type of fixed size)");
    if (max[k] != Eigen::Dynamic && s[k] > max[k])
      throw ShapeMismatchError(src.checkpoint(), src.path(),
                               "shape " + shape_str(s) + " in checkpoint, at most " + describe(max) +
                                   " in target (an Eigen type's maximum size)");
  }
}

// Matrix, Array and Map of either: D is the value's type.
template <class D>
struct eigen_dense_codec {
  using Scalar = std::remove_const_t<typename D::Scalar>;
  static_assert(element<Scalar>,
                CKPT_STATIC_ERROR("the element type of this Eigen matrix or array has no dtype",
                                  "Use bool, an integer, float, double, std::complex, Eigen::half or Eigen::bfloat16.",
                                  CKPT_NAMED_ABOVE));
  static constexpr bool is_vector = D::IsVectorAtCompileTime;
  static constexpr dtype type = dtype_v<Scalar>;
  static constexpr int rank = is_vector ? 1 : 2;
  using Dims = std::array<std::int64_t, rank>;

  static Dims dims(const D& d) {
    if constexpr (is_vector) return {static_cast<std::int64_t>(d.size())};
    else return {static_cast<std::int64_t>(d.rows()), static_cast<std::int64_t>(d.cols())};
  }
  // In elements, per dimension of dims(): a plain matrix's inner stride is 1 and its
  // outer stride the length of its inner dimension; a Map's are its own.
  static Dims strides(const D& d) {
    const auto inner = static_cast<std::int64_t>(d.innerStride()), outer = static_cast<std::int64_t>(d.outerStride());
    if constexpr (is_vector) return {inner};
    else if constexpr (static_cast<bool>(D::IsRowMajor)) return {outer, inner};
    else return {inner, outer};
  }

  static LeafBytes save(const D& d) {
    const Dims n = dims(d), s = strides(d);
    if (is_row_major(n, s))
      return LeafBytes::borrow(type, Shape(n.begin(), n.end()), d.data(), static_cast<std::size_t>(d.size()) * sizeof(Scalar));
    return strided_leaf<Scalar>(Shape(n.begin(), n.end()), d.data(), s);
  }

  // Reads the leaf into d, whose shape the caller has made the checkpoint's.
  static void read(D& d, const LeafSource& src) {
    const Dims n = dims(d), s = strides(d);
    if (is_row_major(n, s)) read_elements(src, d.data(), static_cast<std::size_t>(d.size()));
    else read_strided(src, d.data(), n, s);
  }

  static void check_fixed(const LeafSource& src) {
    if constexpr (is_vector)
      check_eigen_fixed_dims<1>(src, {D::SizeAtCompileTime}, {D::MaxSizeAtCompileTime});
    else
      check_eigen_fixed_dims<2>(src, {D::RowsAtCompileTime, D::ColsAtCompileTime},
                                {D::MaxRowsAtCompileTime, D::MaxColsAtCompileTime});
  }
};

// Matrix and Array: sized to the checkpoint's shape, then read into.
template <class D>
struct eigen_plain_codec : eigen_dense_codec<D> {
  using base = eigen_dense_codec<D>;
  static void restore(D& d, const LeafSource& src) {
    check_array_leaf(src, base::type, base::rank);
    base::check_fixed(src);
    const auto current = base::dims(d);
    check_dynamic_shape(src, current, static_cast<std::size_t>(d.size()));
    const Shape& s = src.shape();
    if constexpr (base::is_vector) d.resize(static_cast<Eigen::Index>(s[0]));
    else d.resize(static_cast<Eigen::Index>(s[0]), static_cast<Eigen::Index>(s[1]));
    base::read(d, src);
  }
};

}  // namespace detail

template <class S, int R, int C, int O, int MR, int MC>
struct leaf_codec<Eigen::Matrix<S, R, C, O, MR, MC>> : detail::eigen_plain_codec<Eigen::Matrix<S, R, C, O, MR, MC>> {};

template <class S, int R, int C, int O, int MR, int MC>
struct leaf_codec<Eigen::Array<S, R, C, O, MR, MC>> : detail::eigen_plain_codec<Eigen::Array<S, R, C, O, MR, MC>> {};

// A Map: restored into the memory it maps (restore_into), which it cannot resize.
template <class P, int MapOptions, class Stride>
  requires std::derived_from<std::remove_const_t<P>, Eigen::PlainObjectBase<std::remove_const_t<P>>>
struct leaf_codec<Eigen::Map<P, MapOptions, Stride>> : detail::eigen_dense_codec<Eigen::Map<P, MapOptions, Stride>> {
  using D = Eigen::Map<P, MapOptions, Stride>;
  using base = detail::eigen_dense_codec<D>;
  static void restore(D& d, const LeafSource& src) {
    if constexpr (std::is_const_v<P>) {
      throw Error(src.checkpoint(), src.path(), "cannot restore into an Eigen::Map of const elements");
    } else {
      detail::check_array_leaf(src, base::type, base::rank);
      base::check_fixed(src);
      const auto current = base::dims(d);
      if (!std::ranges::equal(current, src.shape()))
        throw ShapeMismatchError(src.checkpoint(), src.path(),
                                 "shape " + shape_str(src.shape()) + " in checkpoint, " +
                                     shape_str(Shape(current.begin(), current.end())) +
                                     " in target (an Eigen::Map, which cannot be resized)");
      base::read(d, src);
    }
  }
};

}  // namespace ckpt
