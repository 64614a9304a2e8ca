// ckpt/leaf/random_engine.hpp — the standard random engines, saved as their textual
// state (operator<<), so that a restored engine continues the same sequence.
#pragma once

#include <random>
#include <sstream>
#include <string>

#include <ckpt/leaf/codec.hpp>

namespace ckpt {

namespace detail {
template <class Engine>
struct engine_codec {
  static constexpr dtype type = dtype::string;
  static constexpr int rank = 0;
  static LeafBytes save(const Engine& e) {
    std::ostringstream os;
    os << e;
    const std::string s = os.str();
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return LeafBytes::own(type, {}, std::vector<std::byte>(p, p + s.size()));
  }
  static void restore(Engine& e, const LeafSource& src) {
    src.expect_dtype(type);
    if (!src.shape().empty()) src.fail_shape({});
    if (src.shape_only()) return;  // an abstract target keeps its default engine
    std::string text(static_cast<std::size_t>(src.byte_length()), '\0');
    src.read_into({reinterpret_cast<std::byte*>(text.data()), text.size()});
    std::istringstream is(text);
    Engine restored;
    is >> restored;
    if (is.fail())
      throw CorruptCheckpointError(src.checkpoint(), src.path(), "not the textual state of this random engine");
    e = restored;
  }
};
}  // namespace detail

template <class U, U a, U c, U m>
struct leaf_codec<std::linear_congruential_engine<U, a, c, m>>
    : detail::engine_codec<std::linear_congruential_engine<U, a, c, m>> {};

template <class U, std::size_t w, std::size_t n, std::size_t m, std::size_t r, U a, std::size_t u, U d,
          std::size_t s, U b, std::size_t t, U c, std::size_t l, U f>
struct leaf_codec<std::mersenne_twister_engine<U, w, n, m, r, a, u, d, s, b, t, c, l, f>>
    : detail::engine_codec<std::mersenne_twister_engine<U, w, n, m, r, a, u, d, s, b, t, c, l, f>> {};

template <class U, std::size_t w, std::size_t s, std::size_t r>
struct leaf_codec<std::subtract_with_carry_engine<U, w, s, r>>
    : detail::engine_codec<std::subtract_with_carry_engine<U, w, s, r>> {};

template <class E, std::size_t p, std::size_t r>
struct leaf_codec<std::discard_block_engine<E, p, r>> : detail::engine_codec<std::discard_block_engine<E, p, r>> {};

template <class E, std::size_t w, class U>
struct leaf_codec<std::independent_bits_engine<E, w, U>>
    : detail::engine_codec<std::independent_bits_engine<E, w, U>> {};

template <class E, std::size_t k>
struct leaf_codec<std::shuffle_order_engine<E, k>> : detail::engine_codec<std::shuffle_order_engine<E, k>> {};

}  // namespace ckpt
