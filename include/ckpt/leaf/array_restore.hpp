// ckpt/leaf/array_restore.hpp — the checks every contiguous-array codec makes on restore.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/leaf/codec.hpp>

namespace ckpt::detail {

// Checks the dtype converts and the rank matches (rank < 0: any) and, when `fixed` is given, the exact shape;
// returns the element count of the checkpoint's leaf.
CKPT_API std::size_t check_array_leaf(const LeafSource& src, dtype type, int rank, const Shape* fixed = nullptr);
#if CKPT_DEFINE_API
CKPT_API std::size_t check_array_leaf(const LeafSource& src, dtype type, int rank, const Shape* fixed) {
  src.expect_castable(type);
  const Shape& s = src.shape();
  if (rank >= 0 && static_cast<int>(s.size()) != rank) {
    Shape expected(static_cast<std::size_t>(rank), -1);
    throw ShapeMismatchError(src.checkpoint(), src.path(),
                             "rank " + std::to_string(s.size()) + " (shape " + shape_str(s) +
                                 ") in checkpoint, rank " + std::to_string(rank) + " in target");
  }
  if (fixed && *fixed != s) src.fail_shape(*fixed);
  return static_cast<std::size_t>(element_count(s));  // the index has checked it against the bytes
}
#endif

// A target that already holds an array of another shape is an error for restore_into.
// The shape as a span: a vector's restore passes its one length without building a
// Shape, a heap allocation per leaf that was a sixth of sizing 20,000 of them.
inline void check_dynamic_shape(const LeafSource& src, std::span<const std::int64_t> current, std::size_t current_size) {
  if (src.check_dynamic_shapes() && current_size != 0 && !std::ranges::equal(current, src.shape()))
    src.fail_shape(Shape(current.begin(), current.end()));
}

// Bools arrive as bytes; anything but 0 or 1 would be undefined behaviour as a bool.
template <class E>
void check_bool_bytes(const LeafSource& src, const E* data, std::size_t n) {
  if constexpr (std::is_same_v<E, bool>) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i)
      if (bytes[i] > 1) throw CorruptCheckpointError(src.checkpoint(), src.path(), "bool byte is neither 0 nor 1");
  }
}

// Reads n elements into data, converting from the checkpoint's dtype where allowed.
template <class E>
void read_elements(const LeafSource& src, E* data, std::size_t n) {
  src.read_as(dtype_v<E>, {reinterpret_cast<std::byte*>(data), n * sizeof(E)});
  check_bool_bytes(src, data, n);
}

}  // namespace ckpt::detail
