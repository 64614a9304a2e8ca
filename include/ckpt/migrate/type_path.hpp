// ckpt/migrate/type_path.hpp — paths into a type, resolved at compile time.
//
// A type path names a node of a type the way checkpoint paths name a value's:
// fields by name, tuple items by index, and "*" for any item of a vector or map
// ("layers.*.w"). Migrations check their rules against both types with these.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include <ckpt/detail/fixed_string.hpp>
#include <ckpt/tree/node.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt::migrate {

using detail::fixed_string;

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
template <fixed_string A, fixed_string B>
consteval auto join() {
  constexpr std::string_view a = A.view(), b = B.view();
  constexpr std::size_t n = a.empty() ? b.size() : a.size() + 1 + b.size();
  fixed_string<n> out{};
  std::size_t k = 0;
  for (char c : a) out.value[k++] = c;
  if (!a.empty()) out.value[k++] = '.';
  for (char c : b) out.value[k++] = c;
  return out;
}

// A plain loop, not string_view::find: GCC 12 with -fsanitize=undefined cannot
// evaluate find's null-pointer check in a constant expression.
constexpr std::size_t find_char(std::string_view p, char c) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] == c) return i;
  return std::string_view::npos;
}
constexpr std::string_view head_of(std::string_view p) { return p.substr(0, find_char(p, '.')); }
constexpr std::string_view tail_of(std::string_view p) {
  const auto dot = find_char(p, '.');
  return dot == std::string_view::npos ? std::string_view{} : p.substr(dot + 1);
}
template <fixed_string P>
consteval auto tail() {
  constexpr std::string_view t = tail_of(P.view());
  return detail::make_fixed_string<t.size()>(t);
}

// The decimal text of I, as a path segment (tuple items).
template <std::size_t I>
consteval auto index_segment() {
  constexpr std::size_t digits = [] {
    std::size_t d = 1;
    for (std::size_t v = I; v >= 10; v /= 10) ++d;
    return d;
  }();
  fixed_string<digits> out{};
  std::size_t v = I;
  for (std::size_t k = digits; k-- > 0; v /= 10) out.value[k] = static_cast<char>('0' + v % 10);
  return out;
}

inline constexpr std::size_t no_field = static_cast<std::size_t>(-1);

template <class T>
constexpr std::size_t field_index(std::string_view name) {
  std::size_t found = no_field;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((reflect::field_name<T, I>() == name ? (found = I, 0) : 0), ...);
  }(std::make_index_sequence<reflect::field_count<T>()>{});
  return found;
}

constexpr std::size_t index_of_segment(std::string_view s) {
  if (s.empty()) return no_field;
  std::size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return no_field;
    v = v * 10 + static_cast<std::size_t>(c - '0');
  }
  return v;
}

// Whether p names a node of T.
template <class T>
constexpr bool has_path(std::string_view p) {
  if (p.empty()) return true;
  const std::string_view head = head_of(p), rest = tail_of(p);
  constexpr node::kind k = node::kind_v<T>;
  if constexpr (k == node::kind::structure) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ((reflect::field_name<T, I>() == head && has_path<reflect::field_type<T, I>>(rest)) || ...);
    }(std::make_index_sequence<reflect::field_count<T>()>{});
  } else if constexpr (k == node::kind::optional) {
    return has_path<typename node::optional_traits<T>::value_type>(p);
  } else if constexpr (k == node::kind::sequence) {
    return head == "*" && has_path<typename node::sequence_traits<T>::value_type>(rest);
  } else if constexpr (k == node::kind::map) {
    return head == "*" && has_path<typename node::map_traits<T>::mapped_type>(rest);
  } else if constexpr (k == node::kind::tuple) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ((index_of_segment(head) == I && has_path<std::tuple_element_t<I, T>>(rest)) || ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else {
    return false;
  }
}

// The node of `obj` at P, which must name struct fields, tuple items or optionals only
// (no "*"): what a rename's source is read from.
template <fixed_string P, class T>
constexpr const auto& get_at(const T& obj) {
  constexpr std::string_view p = P.view();
  if constexpr (p.empty()) {
    return obj;
  } else {
    constexpr node::kind k = node::kind_v<T>;
    if constexpr (k == node::kind::structure) {
      constexpr std::size_t i = field_index<T>(head_of(p));
      static_assert(i != no_field, CKPT_INTERNAL_CHECK("get_at was given a path that check_rule let through"));
      return get_at<tail<P>()>(reflect::get_field<i>(obj));
    } else if constexpr (k == node::kind::tuple) {
      constexpr std::size_t i = index_of_segment(head_of(p));
      return get_at<tail<P>()>(std::get<i>(obj));
    } else if constexpr (k == node::kind::optional) {
      if (!obj) throw Error("", std::string(p), "migration: the old value at this path is an empty optional");
      return get_at<P>(*obj);
    } else {
      static_assert(node::always_false<T>,
                    CKPT_STATIC_ERROR("a migration path goes through something other than a struct field, a tuple "
                                      "item or an optional",
                                      "Point the rule at a leaf or a struct reached through fields, tuple items and "
                                      "optionals; use ckpt::transform on the container instead.",
                                      CKPT_NAMED_ABOVE));
      return obj;
    }
  }
}

template <fixed_string P, class T>
using type_at = std::remove_cvref_t<decltype(get_at<P>(std::declval<const T&>()))>;

}  // namespace ckpt::migrate
