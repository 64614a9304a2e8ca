// ckpt/leaf/dtype.hpp — the element types a leaf can hold, with numpy's names.
//
// The names are numpy's ("float32", "bfloat16", "complex64", "bool") so that a
// checkpoint reads the same from Python. `string` holds UTF-8 bytes (std::string
// leaves, random-engine states) and `none` marks an empty std::optional.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include <ckpt/leaf/half.hpp>

namespace ckpt {

enum class dtype : std::uint8_t {
  bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
  float16, bfloat16, float32, float64, complex64, complex128,
  string, none,
  // Storage-only (safetensors F8_E4M3 / F8_E5M2, ml_dtypes' names): saved, listed and
  // copied byte for byte; no C++ element type converts to or from them. Appended so
  // that the values of the older enumerators stay what schemas were hashed with.
  float8_e4m3fn, float8_e5m2,
};

inline constexpr dtype all_dtypes[] = {
    dtype::bool_,   dtype::int8,     dtype::int16,   dtype::int32,   dtype::int64,     dtype::uint8,
    dtype::uint16,  dtype::uint32,   dtype::uint64,  dtype::float16, dtype::bfloat16,  dtype::float32,
    dtype::float64, dtype::complex64, dtype::complex128, dtype::string, dtype::none,
    dtype::float8_e4m3fn, dtype::float8_e5m2};

constexpr std::string_view dtype_name(dtype d) noexcept {
  switch (d) {
    case dtype::bool_: return "bool";
    case dtype::int8: return "int8";
    case dtype::int16: return "int16";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::uint8: return "uint8";
    case dtype::uint16: return "uint16";
    case dtype::uint32: return "uint32";
    case dtype::uint64: return "uint64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
    case dtype::complex64: return "complex64";
    case dtype::complex128: return "complex128";
    case dtype::string: return "string";
    case dtype::none: return "none";
    case dtype::float8_e4m3fn: return "float8_e4m3fn";
    case dtype::float8_e5m2: return "float8_e5m2";
  }
  return "?";
}

constexpr std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
  for (dtype d : all_dtypes)
    if (dtype_name(d) == name) return d;
  return std::nullopt;
}

// Bytes per element; 1 for string (a string leaf's length is its byte count), 0 for none.
constexpr std::size_t dtype_size(dtype d) noexcept {
  switch (d) {
    case dtype::bool_: case dtype::int8: case dtype::uint8: case dtype::string: return 1;
    case dtype::float8_e4m3fn: case dtype::float8_e5m2: return 1;
    case dtype::int16: case dtype::uint16: case dtype::float16: case dtype::bfloat16: return 2;
    case dtype::int32: case dtype::uint32: case dtype::float32: return 4;
    case dtype::int64: case dtype::uint64: case dtype::float64: case dtype::complex64: return 8;
    case dtype::complex128: return 16;
    case dtype::none: return 0;
  }
  return 0;
}

// True for the element types stored as fixed-size numbers (every dtype but string and none).
constexpr bool is_numeric(dtype d) noexcept { return d != dtype::string && d != dtype::none; }

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
template <> struct dtype_of_element<bool> { static constexpr dtype value = dtype::bool_; };
template <> struct dtype_of_element<float> { static constexpr dtype value = dtype::float32; };
template <> struct dtype_of_element<double> { static constexpr dtype value = dtype::float64; };
template <> struct dtype_of_element<float16> { static constexpr dtype value = dtype::float16; };
template <> struct dtype_of_element<bfloat16> { static constexpr dtype value = dtype::bfloat16; };
template <> struct dtype_of_element<std::complex<float>> { static constexpr dtype value = dtype::complex64; };
template <> struct dtype_of_element<std::complex<double>> { static constexpr dtype value = dtype::complex128; };
template <class E>
  requires std::is_enum_v<E>
struct dtype_of_element<E> : dtype_of_element<std::underlying_type_t<E>> {};

// An element type: one whose values are stored as a numpy dtype, byte for byte.
template <class E>
concept element = requires { dtype_of_element<std::remove_cv_t<E>>::value; };

template <element E>
inline constexpr dtype dtype_v = dtype_of_element<std::remove_cv_t<E>>::value;

}  // namespace ckpt
