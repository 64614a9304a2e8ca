// ckpt/detail/field_names.hpp — the names of an aggregate's fields, read at compile time.
//
// Boost 1.81's PFR has no get_name, so ckpt carries the technique of later PFR:
// take the address of field I of an object that is never used at run time (an
// inactive union member), pass it as a template argument, and read the field's name back out of __PRETTY_FUNCTION__.
// The pointer is wrapped in a one-member struct because clang 14-16 reject raw
// pointers to subobjects as template arguments. Where the name sits inside the
// pretty function is learned from a probe struct, and static_asserted on it.
#pragma once

#include <ckpt/detail/static_error.hpp>

#include <array>
#include <cstddef>
#include <string_view>
#include <utility>

#include <type_traits>

#include <boost/pfr/core.hpp>

namespace ckpt::detail {

// ---- field count and access ---------------------------------------------------
// GCC 12 crashes (internal compiler error) inside boost::pfr::tuple_size and
// boost::pfr::get for aggregates with a std::array-of-class member, so ckpt counts
// fields itself: the largest N for which T{f1, ..., fN} compiles, where each fi
// converts to any field type but T (so T's copy constructor never counts). Access
// uses PFR's structured-binding tie with that count.
// A copyable aggregate's fields take references (a reference field needs one); an
// aggregate that is not copy-constructible may hold a field that is neither copyable nor
// movable (a torch::optim::Adam), which only a prvalue initializes, as in Boost.PFR.
template <class T>
struct any_field {
  template <class U>
    requires(!std::is_same_v<std::remove_cvref_t<U>, T>)
  operator U&() const;
  template <class U>
    requires(!std::is_same_v<std::remove_cvref_t<U>, T>)
  operator U&&() const;
};

template <class T>
struct any_field_value {
  template <class U>
    requires(!std::is_same_v<std::remove_cvref_t<U>, T>)
  operator U() const;
};

template <class T, std::size_t... I>
constexpr bool brace_initializable_with(std::index_sequence<I...>) {
  if constexpr (std::is_copy_constructible_v<T>) return requires { T{(void(I), any_field<T>{})...}; };
  else return requires { T{(void(I), any_field_value<T>{})...}; };
}

// A field with no default constructor (an Eigen::Map, a reference) after the first N + 1
// also makes T{f1, ..., fN+1} fail, and then T{f1, ..., fN} fails too: the count goes on
// past it (an aggregate only; one whose braces never compile is counted as no fields).
template <class T, std::size_t N = 0>
consteval std::size_t count_aggregate_fields() {
  if constexpr (N > 100) {
    return N;
  } else if constexpr (brace_initializable_with<T>(std::make_index_sequence<N + 1>{})) {
    return count_aggregate_fields<T, N + 1>();
  } else if constexpr (std::is_aggregate_v<T> && !brace_initializable_with<T>(std::make_index_sequence<N>{})) {
    constexpr std::size_t n = count_aggregate_fields<T, N + 1>();
    return n > 100 ? 0 : n;  // no count fits: no fields, as before
  } else {
    return N;
  }
}

template <class T>
inline constexpr std::size_t aggregate_field_count = count_aggregate_fields<std::remove_cv_t<T>>();

// Field I of an aggregate (const-ness follows obj). The one call into another
// library's detail namespace, on purpose: boost::pfr::get<I> counts the fields with
// PFR's fields_count, on which GCC 12 crashes for aggregates holding a std::array of
// class type; tie_as_tuple with our own count (aggregate_field_count) avoids it.
// Boost >= 1.81 is required, whose PFR has these names (docs/design.md, tree/).
template <std::size_t I, class Obj>
constexpr auto& aggregate_field(Obj& obj) {
  return boost::pfr::detail::sequence_tuple::get<I>(boost::pfr::detail::tie_as_tuple(
      obj, boost::pfr::detail::size_t_<aggregate_field_count<Obj>>{}));
}

// ---- field names ----------------------------------------------------------------

template <class T>
struct field_address {
  const T* ptr;
};
template <class T>
field_address(const T*) -> field_address<T>;

// An object whose T member is never active and never touched at run time: only the
// addresses of its members are used, as constants. A union with a constexpr
// constructor is constant-initialized for any T (no constructor of T runs), and,
// unlike an undefined extern, it also works for local types and types in anonymous
// namespaces, on GCC and clang alike.
template <class T>
union fake_storage {
  char unused;
  T value;
  constexpr fake_storage() : unused() {}
  ~fake_storage() {}
};
template <class T>
inline fake_storage<T> fake_object{};

template <auto Address>
consteval std::string_view pretty_function_of() {
  return __PRETTY_FUNCTION__;
}

template <class T, std::size_t I>
consteval std::string_view raw_field_signature() {
  return pretty_function_of<field_address{&aggregate_field<I>(fake_object<T>.value)}>();
}

struct field_name_probe {
  int ckpt_probe_field_name;
};

inline constexpr std::string_view probe_name = "ckpt_probe_field_name";
// Characters after the field's name in the pretty function (e.g. ")}]" on GCC, "}]" on clang).
inline constexpr std::size_t name_suffix_length = [] {
  constexpr std::string_view s = raw_field_signature<field_name_probe, 0>();
  return s.size() - (s.rfind(probe_name) + probe_name.size());
}();

constexpr bool is_identifier_char(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

template <class T, std::size_t I>
consteval std::string_view field_name_of() {
  constexpr std::string_view s = raw_field_signature<T, I>();
  std::size_t end = s.size() - name_suffix_length;
  std::size_t begin = end;
  while (begin > 0 && is_identifier_char(s[begin - 1])) --begin;
  return s.substr(begin, end - begin);
}

template <class T, std::size_t... I>
consteval auto field_names_of(std::index_sequence<I...>) {
  return std::array<std::string_view, sizeof...(I)>{field_name_of<T, I>()...};
}

// The names of T's fields, in declaration order.
template <class T>
inline constexpr auto aggregate_field_names =
    field_names_of<T>(std::make_index_sequence<aggregate_field_count<T>>{});

struct field_name_probe2 {
  double alpha;
  int beta_2;
  field_name_probe gamma;
};
static_assert(field_name_of<field_name_probe, 0>() == probe_name &&
                  aggregate_field_names<field_name_probe2>[0] == "alpha" &&
                  aggregate_field_names<field_name_probe2>[1] == "beta_2" &&
                  aggregate_field_names<field_name_probe2>[2] == "gamma",
              CKPT_STATIC_ERROR("this compiler spells __PRETTY_FUNCTION__ in a way ckpt's field-name reader does "
                                "not understand; field names of aggregates cannot be read",
                                "Use GCC >= 12 or clang >= 14, or name the fields yourself with ckpt_fields / "
                                "BOOST_HANA_DEFINE_STRUCT, and report the compiler.",
                                ""));

}  // namespace ckpt::detail
