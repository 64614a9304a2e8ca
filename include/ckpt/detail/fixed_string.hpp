// ckpt/detail/fixed_string.hpp — a string usable as a template argument, so that
// compile-time errors can carry a field's name inside a type the compiler prints.
#pragma once

#include <cstddef>
#include <string_view>

namespace ckpt::detail {

template <std::size_t N>
struct fixed_string {
  char value[N + 1]{};
  constexpr fixed_string(const char (&s)[N + 1]) {  // NOLINT: implicit from a literal
    for (std::size_t i = 0; i <= N; ++i) value[i] = s[i];
  }
  constexpr fixed_string(std::string_view s, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) value[i] = s[i];
  }
  constexpr std::string_view view() const { return {value, N}; }
};
template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N - 1>;

}  // namespace ckpt::detail
