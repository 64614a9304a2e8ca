// ckpt/detail/type_name.hpp — a type's name as the compiler spells it, for messages
// and for the "type" recorded in a manifest.
#pragma once

#include <string_view>

namespace ckpt::detail {

template <class T>
constexpr std::string_view type_name() noexcept {
  std::string_view s = __PRETTY_FUNCTION__;
  // GCC: "... [with T = Foo; std::string_view = ...]"; clang: "... [T = Foo]".
  const auto start = s.find("T = ");
  if (start == std::string_view::npos) return s;
  s.remove_prefix(start + 4);
  const auto end = s.find_first_of(";]");
  return s.substr(0, end);
}

}  // namespace ckpt::detail
