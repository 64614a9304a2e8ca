// ckpt/leaf/dtype.hpp — the element types a leaf can hold, with numpy's names.
//
// The names are numpy's ("float32", "bfloat16", "complex64", "bool") so that a
// checkpoint reads the same from Python. `string` holds UTF-8 bytes (std::string
// leaves, random-engine states) and `none` marks an empty std::optional.
#pragma once

#include <array>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ckpt/leaf/half.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

enum class dtype : std::uint8_t {
  bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
  float16, bfloat16, float32, float64, complex64, complex128,
  string, none,
  // Storage-only (safetensors F8_E4M3 / F8_E5M2, TF's FLOAT8 types; ml_dtypes' names):
  // saved, listed and copied byte for byte; no C++ element type converts to or from
  // them. Appended so that the older enumerators keep their values.
  float8_e4m3fn, float8_e5m2,
};

// `opaque`: fixed-size elements ckpt stores but does not compute with (the float8 types).
enum class dtype_kind : std::uint8_t { boolean, signed_integer, unsigned_integer, floating, complex, string, none, opaque };

// Everything ckpt and the formats it speaks know about one dtype. The one table of
// dtypes: formats and the command-line tool look names up here instead of keeping
// switches of their own, so a new dtype is a new row (and, for a numeric one, its C++
// element type in element_types below).
struct dtype_info {
  dtype type;
  std::string_view name;         // numpy's name, also zarr v3's and the native manifest's
  std::size_t size;              // bytes per element; 1 for string (length = bytes), 0 for none
  dtype_kind kind;
  int mantissa_bits;             // significand bits a floating dtype keeps exactly (casts)
  int max_exponent;              // its largest binary exponent (casts compare ranges)
  std::string_view zarr_v2;      // numpy typestr, little-endian ("<f4"), "" when zarr v2 has none
  std::string_view safetensors;  // safetensors' name ("F32"), "" when it has none
  int tf_datatype;               // TensorFlow's DataType enum value, 0 when it has none
};

// clang-format off
inline constexpr dtype_info dtype_table[] = {
  // type              name          size  kind                          mant  exp   zarr v2     safetensors  TF
  {dtype::bool_,      "bool",        1,   dtype_kind::boolean,          0,    0,    "|b1",      "BOOL",      10},
  {dtype::int8,       "int8",        1,   dtype_kind::signed_integer,   0,    0,    "|i1",      "I8",        6},
  {dtype::int16,      "int16",       2,   dtype_kind::signed_integer,   0,    0,    "<i2",      "I16",       5},
  {dtype::int32,      "int32",       4,   dtype_kind::signed_integer,   0,    0,    "<i4",      "I32",       3},
  {dtype::int64,      "int64",       8,   dtype_kind::signed_integer,   0,    0,    "<i8",      "I64",       9},
  {dtype::uint8,      "uint8",       1,   dtype_kind::unsigned_integer, 0,    0,    "|u1",      "U8",        4},
  {dtype::uint16,     "uint16",      2,   dtype_kind::unsigned_integer, 0,    0,    "<u2",      "U16",       17},
  {dtype::uint32,     "uint32",      4,   dtype_kind::unsigned_integer, 0,    0,    "<u4",      "U32",       22},
  {dtype::uint64,     "uint64",      8,   dtype_kind::unsigned_integer, 0,    0,    "<u8",      "U64",       23},
  {dtype::float16,    "float16",     2,   dtype_kind::floating,         11,   15,   "<f2",      "F16",       19},
  {dtype::bfloat16,   "bfloat16",    2,   dtype_kind::floating,         8,    127,  "bfloat16", "BF16",      14},
  {dtype::float32,    "float32",     4,   dtype_kind::floating,         24,   127,  "<f4",      "F32",       1},
  {dtype::float64,    "float64",     8,   dtype_kind::floating,         53,   1023, "<f8",      "F64",       2},
  {dtype::complex64,  "complex64",   8,   dtype_kind::complex,          24,   127,  "<c8",      "C64",       8},
  {dtype::complex128, "complex128",  16,  dtype_kind::complex,          53,   1023, "<c16",     "",          18},
  {dtype::string,     "string",      1,   dtype_kind::string,           0,    0,    "",         "",          7},
  {dtype::none,       "none",        0,   dtype_kind::none,             0,    0,    "",         "",          0},
  {dtype::float8_e4m3fn, "float8_e4m3fn", 1, dtype_kind::opaque,       0,    0,    "",         "F8_E4M3",   25},
  {dtype::float8_e5m2, "float8_e5m2", 1,   dtype_kind::opaque,           0,    0,    "",         "F8_E5M2",   24},
};
// clang-format on

// The C++ element type of each numeric dtype, in the order of the enum.
using element_types = std::tuple<bool, std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
                                 std::uint16_t, std::uint32_t, std::uint64_t, float16, bfloat16, float, double,
                                 std::complex<float>, std::complex<double>>;

namespace detail {
constexpr bool dtype_table_is_in_enum_order() {
  for (std::size_t i = 0; i < std::size(dtype_table); ++i)
    if (static_cast<std::size_t>(dtype_table[i].type) != i) return false;
  return true;
}
static_assert(dtype_table_is_in_enum_order(), CKPT_INTERNAL_CHECK("dtype_table must list the dtypes in the order of the enum"));
static_assert(std::tuple_size_v<element_types> == static_cast<std::size_t>(dtype::string),
              CKPT_INTERNAL_CHECK("element_types must list one C++ type per numeric dtype, in the order of the enum"));
}  // namespace detail

constexpr const dtype_info& info(dtype d) noexcept { return dtype_table[static_cast<std::size_t>(d)]; }

inline constexpr auto all_dtypes = [] {
  std::array<dtype, std::size(dtype_table)> a{};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = dtype_table[i].type;
  return a;
}();

constexpr std::string_view dtype_name(dtype d) noexcept { return info(d).name; }

constexpr std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
  for (const auto& e : dtype_table)
    if (e.name == name) return e.type;
  return std::nullopt;
}

// Bytes per element; 1 for string (a string leaf's length is its byte count), 0 for none.
constexpr std::size_t dtype_size(dtype d) noexcept { return info(d).size; }

// True for the element types stored as fixed-size numbers (every dtype but string and none).
constexpr bool is_numeric(dtype d) noexcept { return d != dtype::string && d != dtype::none; }

// Calls f(element_tag<E>{}) with the C++ element type E of a numeric dtype, or
// f(element_tag<void>{}) for string and none: byte-level code is written once and
// instantiated once per dtype.
template <class E>
struct element_tag {
  using type = E;
};
template <class F>
decltype(auto) visit_element_type(dtype d, F&& f) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    using R = decltype(f(element_tag<void>{}));
    if constexpr (std::is_void_v<R>) {
      if (!((static_cast<std::size_t>(d) == I ? (f(element_tag<std::tuple_element_t<I, element_types>>{}), true) : false) || ...))
        f(element_tag<void>{});
    } else {
      std::optional<R> r;
      (void)((static_cast<std::size_t>(d) == I ? (r.emplace(f(element_tag<std::tuple_element_t<I, element_types>>{})), true) : false) || ...);
      return r ? std::move(*r) : f(element_tag<void>{});
    }
  }(std::make_index_sequence<std::tuple_size_v<element_types>>{});
}

// The dtype of a C++ element type, or no value when it has none.
template <class E>
struct dtype_of_element {};

namespace detail {
template <class E>
constexpr std::optional<dtype> integer_dtype() {
  if constexpr (std::is_signed_v<E>) {
    switch (sizeof(E)) { case 1: return dtype::int8; case 2: return dtype::int16; case 4: return dtype::int32; case 8: return dtype::int64; }
  } else {
    switch (sizeof(E)) { case 1: return dtype::uint8; case 2: return dtype::uint16; case 4: return dtype::uint32; case 8: return dtype::uint64; }
  }
  return std::nullopt;
}
}  // namespace detail

template <class E>
  requires(std::is_integral_v<E> && !std::is_same_v<E, bool> && detail::integer_dtype<E>().has_value())
struct dtype_of_element<E> {
  static constexpr dtype value = *detail::integer_dtype<E>();
};
// bool, the floating and complex types: their position in element_types.
namespace detail {
template <class E>
constexpr std::size_t element_index() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t found = sizeof...(I);
    (void)((std::is_same_v<E, std::tuple_element_t<I, element_types>> ? (found = I, true) : false) || ...);
    return found;
  }(std::make_index_sequence<std::tuple_size_v<element_types>>{});
}
}  // namespace detail
template <class E>
  requires((std::is_same_v<E, bool> || !std::is_integral_v<E>) && !std::is_enum_v<E> &&
           detail::element_index<E>() < std::tuple_size_v<element_types>)
struct dtype_of_element<E> {
  static constexpr dtype value = static_cast<dtype>(detail::element_index<E>());
};
template <class E>
  requires std::is_enum_v<E>
struct dtype_of_element<E> : dtype_of_element<std::underlying_type_t<E>> {};

// An element type: one whose values are stored as a numpy dtype, byte for byte.
template <class E>
concept element = requires { dtype_of_element<std::remove_cv_t<E>>::value; };

template <element E>
inline constexpr dtype dtype_v = dtype_of_element<std::remove_cv_t<E>>::value;

}  // namespace ckpt
