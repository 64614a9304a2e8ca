// ckpt/leaf/sequence.hpp — one-dimensional arrays: std::vector, std::array and std::span
// of elements; std::vector<bool>, which has no contiguous bools, is copied.
#pragma once

#include <array>
#include <span>
#include <vector>

#include <ckpt/leaf/array_restore.hpp>

namespace ckpt {

template <element E, class A>
struct leaf_codec<std::vector<E, A>> {
  static constexpr dtype type = dtype_v<E>;
  static constexpr int rank = 1;
  static LeafBytes save(const std::vector<E, A>& v) {
    return LeafBytes::borrow(type, {static_cast<std::int64_t>(v.size())}, v.data(), v.size() * sizeof(E));
  }
  static void restore(std::vector<E, A>& v, const LeafSource& src) {
    const std::size_t n = detail::check_array_leaf(src, type, rank);
    const auto length = static_cast<std::int64_t>(v.size());
    detail::check_dynamic_shape(src, std::span(&length, 1), v.size());
    v.resize(n);
    detail::read_elements(src, v.data(), n);
  }
};

template <class A>
struct leaf_codec<std::vector<bool, A>> {
  static constexpr dtype type = dtype::bool_;
  static constexpr int rank = 1;
  static LeafBytes save(const std::vector<bool, A>& v) {
    std::vector<std::byte> bytes(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bytes[i] = std::byte{v[i] ? std::uint8_t{1} : std::uint8_t{0}};
    return LeafBytes::own(type, {static_cast<std::int64_t>(v.size())}, std::move(bytes));
  }
  static void restore(std::vector<bool, A>& v, const LeafSource& src) {
    const std::size_t n = detail::check_array_leaf(src, type, rank);
    const auto length = static_cast<std::int64_t>(v.size());
    detail::check_dynamic_shape(src, std::span(&length, 1), v.size());
    std::vector<std::byte> bytes(n);
    src.read_as(dtype::bool_, bytes);
    detail::check_bool_bytes(src, reinterpret_cast<const bool*>(bytes.data()), n);
    v.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) v[i] = bytes[i] != std::byte{0};
  }
};

template <element E, std::size_t N>
struct leaf_codec<std::array<E, N>> {
  static constexpr dtype type = dtype_v<E>;
  static constexpr int rank = 1;
  static LeafBytes save(const std::array<E, N>& v) {
    return LeafBytes::borrow(type, {static_cast<std::int64_t>(N)}, v.data(), N * sizeof(E));
  }
  static void restore(std::array<E, N>& v, const LeafSource& src) {
    const Shape fixed{static_cast<std::int64_t>(N)};
    detail::check_array_leaf(src, type, rank, &fixed);
    detail::read_elements(src, v.data(), N);
  }
};

// A span saves the memory it views; restoring into a span fills that memory, whose
// size must match.
template <element E, std::size_t Extent>
struct leaf_codec<std::span<E, Extent>> {
  static constexpr dtype type = dtype_v<E>;
  static constexpr int rank = 1;
  static LeafBytes save(const std::span<E, Extent>& v) {
    return LeafBytes::borrow(type, {static_cast<std::int64_t>(v.size())}, v.data(), v.size_bytes());
  }
  static void restore(std::span<E, Extent>& v, const LeafSource& src) {
    if constexpr (std::is_const_v<E>) {
      throw Error(src.checkpoint(), src.path(), "cannot restore into a span of const elements");
    } else {
      const Shape fixed{static_cast<std::int64_t>(v.size())};
      detail::check_array_leaf(src, type, rank, &fixed);
      detail::read_elements(src, v.data(), v.size());
    }
  }
};

}  // namespace ckpt
