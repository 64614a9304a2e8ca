// ckpt/leaf/eigen_tensor.hpp — Eigen's tensors (the unsupported Tensor module) as
// leaves: Eigen::Tensor of any rank, Eigen::TensorFixedSize and Eigen::TensorMap, in
// either layout.
//
// A leaf holds the tensor's dimensions as numpy's shape, in the same order, and its
// elements in row-major order. A RowMajor tensor is saved from its own memory and read
// straight into it; a ColMajor one (Eigen's default) is copied out in row-major order
// on save and read back in pieces on restore (leaf/strided.hpp). A TensorMap is
// restored into the memory it maps, whose dimensions must be the checkpoint's.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include <unsupported/Eigen/CXX11/Tensor>

#include <ckpt/leaf/eigen.hpp>

namespace ckpt::detail {

// Tensor, TensorFixedSize and TensorMap: T is the value's type.
template <class T>
struct eigen_tensor_codec {
  using Scalar = std::remove_const_t<typename T::Scalar>;
  static_assert(element<Scalar>,
                CKPT_STATIC_ERROR("the element type of this Eigen tensor has no dtype",
                                  "Use bool, an integer, float, double, std::complex, Eigen::half or Eigen::bfloat16.",
                                  CKPT_NAMED_ABOVE));
  static constexpr dtype type = dtype_v<Scalar>;
  static constexpr int rank = static_cast<int>(T::NumIndices);
  using Dims = std::array<std::int64_t, static_cast<std::size_t>(rank)>;

  static Dims dims(const T& t) {
    Dims d{};
    for (int k = 0; k < rank; ++k) d[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(t.dimension(k));
    return d;
  }
  static Dims strides(const Dims& d) {
    Dims s{};
    std::int64_t step = 1;
    if constexpr (static_cast<int>(T::Layout) == static_cast<int>(Eigen::RowMajor)) {
      for (std::size_t k = d.size(); k-- > 0; step *= d[k]) s[k] = step;
    } else {
      for (std::size_t k = 0; k < d.size(); step *= d[k], ++k) s[k] = step;
    }
    return s;
  }

  static LeafBytes save(const T& t) {
    const Dims d = dims(t), s = strides(d);
    if (is_row_major(d, s))
      return LeafBytes::borrow(type, Shape(d.begin(), d.end()), t.data(), static_cast<std::size_t>(t.size()) * sizeof(Scalar));
    return strided_leaf<Scalar>(Shape(d.begin(), d.end()), t.data(), s);
  }

  // Reads the leaf into t, whose dimensions the caller has made the checkpoint's.
  static void read(T& t, const LeafSource& src) {
    const Dims d = dims(t), s = strides(d);
    if (is_row_major(d, s)) read_elements(src, t.data(), static_cast<std::size_t>(t.size()));
    else read_strided(src, t.data(), d, s);
  }

  // Throws unless the checkpoint's shape is `d`: a tensor of fixed size, or a TensorMap.
  static void expect_dims(const LeafSource& src, const Dims& d, const char* why) {
    if (!std::ranges::equal(d, src.shape()))
      throw ShapeMismatchError(src.checkpoint(), src.path(),
                               "shape " + shape_str(src.shape()) + " in checkpoint, " + shape_str(Shape(d.begin(), d.end())) +
                                   " in target (" + why + ")");
  }
};

}  // namespace ckpt::detail

namespace ckpt {

template <class S, int N, int O, class I>
struct leaf_codec<Eigen::Tensor<S, N, O, I>> : detail::eigen_tensor_codec<Eigen::Tensor<S, N, O, I>> {
  using T = Eigen::Tensor<S, N, O, I>;
  using base = detail::eigen_tensor_codec<T>;
  static void restore(T& t, const LeafSource& src) {
    detail::check_array_leaf(src, base::type, N);
    const auto current = base::dims(t);
    // A default-constructed tensor of rank 1 or more has no elements: it counts as unshaped.
    detail::check_dynamic_shape(src, current, N == 0 ? 0 : static_cast<std::size_t>(t.size()));
    Eigen::array<I, static_cast<std::size_t>(N)> d{};
    for (int k = 0; k < N; ++k) d[static_cast<std::size_t>(k)] = static_cast<I>(src.shape()[static_cast<std::size_t>(k)]);
    t.resize(d);
    base::read(t, src);
  }
};

template <class S, class Sizes, int O, class I>
struct leaf_codec<Eigen::TensorFixedSize<S, Sizes, O, I>> : detail::eigen_tensor_codec<Eigen::TensorFixedSize<S, Sizes, O, I>> {
  using T = Eigen::TensorFixedSize<S, Sizes, O, I>;
  using base = detail::eigen_tensor_codec<T>;
  static void restore(T& t, const LeafSource& src) {
    detail::check_array_leaf(src, base::type, base::rank);
    base::expect_dims(src, base::dims(t), "an Eigen tensor of fixed size");
    base::read(t, src);
  }
};

// A TensorMap: restored into the memory it maps (restore_into), which it cannot resize.
template <class P, int MapOptions, template <class> class MakePointer>
struct leaf_codec<Eigen::TensorMap<P, MapOptions, MakePointer>>
    : detail::eigen_tensor_codec<Eigen::TensorMap<P, MapOptions, MakePointer>> {
  using T = Eigen::TensorMap<P, MapOptions, MakePointer>;
  using base = detail::eigen_tensor_codec<T>;
  static void restore(T& t, const LeafSource& src) {
    if constexpr (std::is_const_v<std::remove_pointer_t<decltype(t.data())>>) {
      throw Error(src.checkpoint(), src.path(), "cannot restore into an Eigen::TensorMap of const elements");
    } else {
      detail::check_array_leaf(src, base::type, base::rank);
      base::expect_dims(src, base::dims(t), "an Eigen::TensorMap, which cannot be resized");
      base::read(t, src);
    }
  }
};

}  // namespace ckpt
