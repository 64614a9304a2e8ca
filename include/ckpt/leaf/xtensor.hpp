// ckpt/leaf/xtensor.hpp — xtensor containers: xt::xarray (rank known at run time),
// xt::xtensor (fixed rank) and xt::xtensor_fixed (fixed shape), row-major.
//
// Restore sizes the container to the checkpoint's shape, then reads the bytes straight
// into its storage: no intermediate buffer.
//
// Only xtensor's forward declarations are included: the codecs are partial
// specializations, instantiated when a program saves a container it has included
// itself. Parsing xarray.hpp, xtensor.hpp and xfixed.hpp costs a second or more per unit.
#pragma once

#include <tuple>

#include <xtensor/xtensor_forward.hpp>

#include <ckpt/leaf/array_restore.hpp>

namespace ckpt {

namespace detail {

template <class C>
Shape xt_shape(const C& c) {
  Shape s;
  for (auto d : c.shape()) s.push_back(static_cast<std::int64_t>(d));
  return s;
}

template <class C, int Rank>
struct xt_codec_base {
  using value_type = typename C::value_type;
  static_assert(element<value_type>,
                "ckpt: the element type of this xtensor container has no dtype; "
                "use bool, an integer, float, double, std::complex, ckpt::bfloat16 or ckpt::float16");
  static_assert(C::static_layout == xt::layout_type::row_major,
                "ckpt: xtensor containers must be row-major (C order) to be saved byte for byte");
  static constexpr dtype type = dtype_v<value_type>;
  static constexpr int rank = Rank;
  static LeafBytes save(const C& c) {
    return LeafBytes::borrow(type, xt_shape(c), c.data(), c.size() * sizeof(value_type));
  }
};

}  // namespace detail

template <class EC, xt::layout_type L, class SC, class Tag>
struct leaf_codec<xt::xarray_container<EC, L, SC, Tag>>
    : detail::xt_codec_base<xt::xarray_container<EC, L, SC, Tag>, -1> {
  using C = xt::xarray_container<EC, L, SC, Tag>;
  static void restore(C& c, const LeafSource& src) {
    const std::size_t n = detail::check_array_leaf(src, leaf_codec::type, -1);
    // A default-constructed xarray is 0-d with one element: it counts as unshaped.
    detail::check_dynamic_shape(src, detail::xt_shape(c), c.dimension() == 0 ? 0 : c.size());
    typename C::shape_type shape(src.shape().begin(), src.shape().end());
    c.resize(shape);
    detail::read_elements(src, c.data(), n);
  }
};

template <class EC, std::size_t N, xt::layout_type L, class Tag>
struct leaf_codec<xt::xtensor_container<EC, N, L, Tag>>
    : detail::xt_codec_base<xt::xtensor_container<EC, N, L, Tag>, static_cast<int>(N)> {
  using C = xt::xtensor_container<EC, N, L, Tag>;
  static void restore(C& c, const LeafSource& src) {
    const std::size_t n = detail::check_array_leaf(src, leaf_codec::type, static_cast<int>(N));
    detail::check_dynamic_shape(src, detail::xt_shape(c), c.size());
    typename C::shape_type shape;
    for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(src.shape()[i]);
    c.resize(shape);
    detail::read_elements(src, c.data(), n);
  }
};

template <class ET, class S, xt::layout_type L, bool SH, class Tag>
struct leaf_codec<xt::xfixed_container<ET, S, L, SH, Tag>>
    : detail::xt_codec_base<xt::xfixed_container<ET, S, L, SH, Tag>,
                            static_cast<int>(std::tuple_size_v<typename xt::xfixed_container<ET, S, L, SH, Tag>::shape_type>)> {
  using C = xt::xfixed_container<ET, S, L, SH, Tag>;
  static void restore(C& c, const LeafSource& src) {
    const Shape fixed = detail::xt_shape(c);
    detail::check_array_leaf(src, leaf_codec::type, leaf_codec::rank, &fixed);
    detail::read_elements(src, c.data(), c.size());
  }
};

}  // namespace ckpt
