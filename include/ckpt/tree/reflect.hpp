// ckpt/tree/reflect.hpp — the fields of a struct: their names and their values.
//
// Three ways for a struct to have fields, tried in this order:
//  1. a customization point, for classes with private members or third-party types:
//       class Model {
//         xt::xtensor<float, 2> w_; int step_ = 0;
//         friend constexpr auto ckpt_fields(ckpt::type_tag<Model>) {
//           return ckpt::fields(ckpt::field("w", &Model::w_), ckpt::field("step", &Model::step_));
//         }
//       };
//     (found by argument-dependent lookup: declare it in the type's namespace);
//  2. Boost.Hana: BOOST_HANA_DEFINE_STRUCT or BOOST_HANA_ADAPT_STRUCT;
//  3. plain aggregates, through Boost.PFR's structured-binding access, with field
//     names read at compile time (detail/field_names.hpp).
#pragma once

#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/at.hpp>

#include <ckpt/detail/field_names.hpp>

namespace ckpt {

template <class T>
struct type_tag {};

// One field of a class that reflects itself through ckpt_fields.
template <class C, class M>
struct field_ref {
  std::string_view name;
  M C::*member;
};

template <class C, class M>
constexpr field_ref<C, M> field(std::string_view name, M C::*member) {
  return {name, member};
}

template <class... F>
constexpr std::tuple<F...> fields(F... f) {
  return {f...};
}

namespace reflect {

template <class T>
concept has_custom_fields = requires { ckpt_fields(type_tag<T>{}); };

template <class T>
concept hana_struct = !has_custom_fields<T> && boost::hana::Struct<T>::value;

template <class T>
concept pfr_aggregate = !has_custom_fields<T> && !hana_struct<T> && std::is_class_v<T> &&
                        std::is_aggregate_v<T> && !std::is_polymorphic_v<T>;

// A struct ckpt knows the fields of.
template <class T>
concept reflectable = has_custom_fields<T> || hana_struct<T> || pfr_aggregate<T>;

template <reflectable T>
consteval std::size_t field_count() {
  if constexpr (has_custom_fields<T>)
    return std::tuple_size_v<decltype(ckpt_fields(type_tag<T>{}))>;
  else if constexpr (hana_struct<T>)
    return decltype(boost::hana::length(boost::hana::accessors<T>()))::value;
  else
    return detail::aggregate_field_count<T>;
}

template <reflectable T, std::size_t I>
constexpr std::string_view field_name() {
  if constexpr (has_custom_fields<T>) {
    return std::get<I>(ckpt_fields(type_tag<T>{})).name;
  } else if constexpr (hana_struct<T>) {
    using Pair = std::remove_cvref_t<decltype(boost::hana::at_c<I>(boost::hana::accessors<T>()))>;
    using Name = std::remove_cvref_t<decltype(boost::hana::first(std::declval<Pair>()))>;
    return boost::hana::to<const char*>(Name{});
  } else {
    return detail::aggregate_field_names<T>[I];
  }
}

// Field I of obj (const-ness follows obj).
template <std::size_t I, class Obj>
constexpr auto& get_field(Obj& obj) {
  using T = std::remove_const_t<Obj>;
  if constexpr (has_custom_fields<T>) {
    return obj.*(std::get<I>(ckpt_fields(type_tag<T>{})).member);
  } else if constexpr (hana_struct<T>) {
    return boost::hana::second(boost::hana::at_c<I>(boost::hana::accessors<T>()))(obj);
  } else {
    return detail::aggregate_field<I>(obj);
  }
}

template <reflectable T, std::size_t I>
using field_type = std::remove_cvref_t<decltype(get_field<I>(std::declval<T&>()))>;

// Calls f(name, field) for every field of obj, in declaration order.
template <class Obj, class F>
constexpr void for_each_field(Obj& obj, F&& f) {
  using T = std::remove_const_t<Obj>;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(field_name<T, I>(), get_field<I>(obj)), ...);
  }(std::make_index_sequence<field_count<T>()>{});
}

}  // namespace reflect
}  // namespace ckpt
