// ckpt/leaf/scalar.hpp — single numbers: bool, integers, floats, enums, complex, half types.
#pragma once

#include <cstring>

#include <ckpt/leaf/codec.hpp>

namespace ckpt {

template <element E>
struct leaf_codec<E> {
  static constexpr dtype type = dtype_v<E>;
  static constexpr int rank = 0;
  static LeafBytes save(const E& v) { return LeafBytes::borrow(type, {}, &v, sizeof(E)); }
  static void restore(E& v, const LeafSource& src) {
    src.expect_castable(type);
    if (!src.shape().empty()) src.fail_shape({});
    src.read_as(type, {reinterpret_cast<std::byte*>(&v), sizeof(E)});
    if constexpr (std::is_same_v<E, bool>) {  // any byte but 0 or 1 would be UB as a bool
      unsigned char c;
      std::memcpy(&c, &v, 1);
      if (c > 1) throw CorruptCheckpointError(src.checkpoint(), src.path(), "bool byte is neither 0 nor 1");
    }
  }
};

}  // namespace ckpt
