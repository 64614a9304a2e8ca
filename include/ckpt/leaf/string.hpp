// ckpt/leaf/string.hpp — std::string leaves: dtype "string", shape [], UTF-8 bytes.
#pragma once

#include <string>

#include <ckpt/leaf/codec.hpp>

namespace ckpt {

template <>
struct leaf_codec<std::string> {
  static constexpr dtype type = dtype::string;
  static constexpr int rank = 0;
  static LeafBytes save(const std::string& s) { return LeafBytes::borrow(type, {}, s.data(), s.size()); }
  static void restore(std::string& s, const LeafSource& src) {
    src.expect_dtype(type);
    if (!src.shape().empty()) src.fail_shape({});
    s.resize(static_cast<std::size_t>(src.byte_length()));
    src.read_as(dtype::string, {reinterpret_cast<std::byte*>(s.data()), s.size()});
  }
};

}  // namespace ckpt
