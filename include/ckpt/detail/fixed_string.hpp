// ckpt/detail/fixed_string.hpp — a string usable as a template argument, so that
// compile-time errors can carry a field's name inside a type the compiler prints.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>

namespace ckpt::detail {

template <std::size_t N>
struct fixed_string {
  char value[N + 1]{};
  constexpr fixed_string() = default;
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

// A fixed_string from a constant string_view: fixed_string_of<sv>() (sv must be constexpr).
template <std::size_t N>
constexpr fixed_string<N> make_fixed_string(std::string_view s) {
  return fixed_string<N>(s, 0);
}

// A string as a type the compiler prints legibly in an error: GCC prints a string
// class argument as "text"; clang 14 prints that as numbers, but prints chars.
template <fixed_string S>
struct text {};
template <char... C>
struct text_chars {};

template <fixed_string S>
consteval auto printable_text() {
#if defined(__clang__)
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return text_chars<S.value[I]...>{};
  }(std::make_index_sequence<S.view().size()>{});
#else
  return text<S>{};
#endif
}
template <fixed_string S>
using printable = decltype(printable_text<S>());

}  // namespace ckpt::detail
