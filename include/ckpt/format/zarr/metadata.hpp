// ckpt/format/zarr/metadata.hpp — one zarr v2 array's metadata: its .zarray, dtypes,
// fill values, compressors and the layout ckpt writes. zarr/chunks.hpp reads and
// writes the chunks it describes.
//
// What t5x (through TensorStore), Orbax and Python's zarr store each array as: a
// directory holding `.zarray` (JSON: shape, chunks, dtype such as "<f4", compressor,
// fill_value, order, filters, dimension_separator) and one file per chunk. The JSON
// is untrusted: its size is bounded, and every field is checked before use.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <functional>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/io/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/io/codec.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/leaf/half.hpp>

namespace ckpt::detail::zarr {

namespace fs = std::filesystem;
using json = nlohmann::json;

// An array with more bytes than this plus `max_expansion` times what its files hold is
// refused when opened: real data does not compress that well, a hostile .zarray does.
inline constexpr std::uint64_t free_bytes = std::uint64_t{256} << 20;
inline constexpr std::uint64_t max_expansion = 65536;
inline constexpr std::uint64_t max_chunks = std::uint64_t{1} << 22;
inline constexpr std::uint64_t max_json_bytes = std::uint64_t{16} << 20;
inline constexpr std::int64_t max_rank = 32;

struct ArrayMeta {
  dtype type = dtype::float32;
  Shape shape;
  Shape chunks;
  bool big_endian = false;
  bool fortran = false;
  char separator = '.';
  io::codec compressor = io::codec::none;
  int level = 1;
  // Writing only (never read from metadata): chunks that compressing shrinks by less
  // than this percentage are stored instead (io::compress_if_it_pays; zstd only).
  int min_saving_percent = 0;
  io::blosc_params blosc;       // compressor "blosc": cname, shuffle, blocksize
  std::vector<std::byte> fill;  // one element, little-endian; empty: zeros

  std::uint64_t bytes() const { return static_cast<std::uint64_t>(element_count(shape)) * dtype_size(type); }
  std::uint64_t chunk_bytes() const { return static_cast<std::uint64_t>(element_count(chunks)) * dtype_size(type); }
};

// numpy typestr (zarr's dtype) of a ckpt dtype, from the dtype table (bfloat16 as
// TensorStore writes it).
inline std::string typestr(dtype d) {
  if (info(d).zarr_v2.empty()) throw Error("zarr has no dtype for ckpt's " + std::string(dtype_name(d)));
  return std::string(info(d).zarr_v2);
}

// The dtype of a typestr in any byte order ('<', '>', '|', '='); big_endian says which.
inline std::optional<dtype> dtype_from_typestr(std::string_view s, bool& big_endian) {
  big_endian = false;
  if (s == "bfloat16") return dtype::bfloat16;
  if (s.size() < 3) return std::nullopt;
  const char order = s[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') return std::nullopt;
  for (const auto& e : dtype_table) {
    if (e.zarr_v2.size() < 2 || e.zarr_v2.substr(1) != s.substr(1) || (e.zarr_v2[0] != '<' && e.zarr_v2[0] != '|'))
      continue;
    big_endian = order == '>' && e.size > 1;
    return e.type;
  }
  return std::nullopt;
}

// TensorStore's and numpy's dtype names are ckpt's names ("float32", "bfloat16", "bool").
inline std::optional<dtype> dtype_from_numpy_name(std::string_view s) {
  auto d = dtype_from_name(s);
  if (d && is_numeric(*d)) return d;
  return std::nullopt;
}

inline std::optional<io::codec> codec_from_id(std::string_view id) {
  if (id == "gzip") return io::codec::gzip;
  if (id == "zlib") return io::codec::zlib;
  if (id == "zstd") return io::codec::zstd;
  if (id == "blosc") return io::codec::blosc;
  if (id == "lz4") return io::codec::lz4;
  if (id == "bz2") return io::codec::bz2;
  return std::nullopt;
}

inline json compressor_json(const ArrayMeta& m) {
  if (m.compressor == io::codec::none) return nullptr;
  if (m.compressor == io::codec::blosc)
    return json{{"id", "blosc"}, {"cname", m.blosc.cname}, {"clevel", m.level}, {"shuffle", m.blosc.shuffle},
                {"blocksize", m.blosc.blocksize}};
  if (m.compressor == io::codec::lz4) return json{{"id", "lz4"}, {"acceleration", m.level}};
  return json{{"id", io::codec_name(m.compressor)}, {"level", m.level}};
}

// The JSON document under key of a store (a missing one is an error naming it).
inline json read_json(const io::KvStore& kv, const std::string& key, const std::string& checkpoint, const std::string& path) {
  const std::string name = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
  std::optional<std::vector<std::byte>> bytes;
  try {
    bytes = kv.get(key, max_json_bytes);
  } catch (const Error& e) {
    throw CorruptCheckpointError(checkpoint, path, name + " cannot be read: " + e.what());
  }
  if (!bytes) throw CorruptCheckpointError(checkpoint, path, name + " cannot be read: " + key + " is missing");
  return ckpt::detail::parse_json(*bytes, checkpoint, path, name);
}

inline json read_json_file(const fs::path& file, const std::string& checkpoint, const std::string& path) {
  std::vector<std::byte> bytes;
  try {
    bytes = io::read_file(file, max_json_bytes);
  } catch (const Error& e) {
    throw CorruptCheckpointError(checkpoint, path, file.filename().string() + " cannot be read: " + e.what());
  }
  return ckpt::detail::parse_json(bytes, checkpoint, path, file.filename().string());
}

}  // namespace ckpt::detail::zarr

namespace ckpt::detail::zarr_array {
template <class T>
void put(std::vector<std::byte>& out, T v) {
  out.resize(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
}

inline std::optional<double> json_number(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "NaN") return std::nan("");
    if (s == "Infinity") return INFINITY;
    if (s == "-Infinity") return -INFINITY;
  }
  return std::nullopt;
}
}  // namespace ckpt::detail::zarr_array

namespace ckpt::detail::zarr {

// The fill value of .zarray as one element's bytes; empty means zeros.
inline std::vector<std::byte> decode_fill(const json& j, dtype d, const std::function<void(const std::string&)>& fail) {
  std::vector<std::byte> out;
  if (j.is_null()) return out;
  auto num = [&](const json& v) {
    auto x = detail::zarr_array::json_number(v);
    if (!x) fail("fill_value " + ckpt::detail::describe(j) + " is not a number");
    return *x;
  };
  auto integer = [&]<class I>(I) {
    if (j.is_boolean()) return detail::zarr_array::put<I>(out, static_cast<I>(j.get<bool>()));
    if (!j.is_number_integer() && !j.is_number_unsigned()) fail("fill_value " + ckpt::detail::describe(j) + " is not an integer");
    if (j.is_number_unsigned()) detail::zarr_array::put<I>(out, static_cast<I>(j.get<std::uint64_t>()));
    else detail::zarr_array::put<I>(out, static_cast<I>(j.get<std::int64_t>()));
  };
  visit_element_type(d, [&](auto tag) {
    using E = typename decltype(tag)::type;
    if constexpr (std::is_same_v<E, bool>) {
      if (j.is_boolean()) detail::zarr_array::put<std::uint8_t>(out, j.get<bool>());
      else detail::zarr_array::put<std::uint8_t>(out, num(j) != 0);
    } else if constexpr (std::is_integral_v<E>) {
      integer(E{});
    } else if constexpr (std::is_same_v<E, std::complex<float>> || std::is_same_v<E, std::complex<double>>) {
      double re = 0, im = 0;
      if (j.is_array()) {
        if (j.size() != 2) fail("complex fill_value must be [re, im]");
        re = num(j[0]);
        im = num(j[1]);
      } else {
        re = num(j);
      }
      using R = typename E::value_type;
      detail::zarr_array::put(out, E(static_cast<R>(re), static_cast<R>(im)));
    } else if constexpr (std::is_same_v<E, double>) {
      detail::zarr_array::put(out, num(j));
    } else if constexpr (!std::is_void_v<E>) {  // float, float16, bfloat16: from float
      detail::zarr_array::put(out, E(static_cast<float>(num(j))));
    }
  });
  return out;
}

inline json fill_json(dtype d) {
  if (d == dtype::bool_) return false;
  if (d == dtype::complex64 || d == dtype::complex128) return json::array({0.0, 0.0});
  if (d == dtype::float16 || d == dtype::bfloat16 || d == dtype::float32 || d == dtype::float64) return 0.0;
  return 0;
}

// Validates and decodes .zarray JSON; `fail` throws (naming checkpoint and leaf).
inline ArrayMeta parse_zarray(const json& j, const std::function<void(const std::string&)>& fail) {
  if (!j.is_object()) fail(".zarray is not a JSON object");
  auto get = [&](const char* k) -> const json& {
    auto it = j.find(k);
    if (it == j.end()) fail(std::string(".zarray has no \"") + k + "\"");
    return *it;
  };
  ArrayMeta m;
  if (const json& f = get("zarr_format"); !f.is_number_integer() || f.get<std::int64_t>() != 2)
    fail(".zarray: zarr_format " + ckpt::detail::describe(f) + " is not 2");
  auto dims = [&](const json& a, const char* what) {
    Shape s;
    if (!a.is_array() || static_cast<std::int64_t>(a.size()) > max_rank) fail(std::string(".zarray: ") + what + " is not a list of at most 32 numbers");
    for (const auto& d : a) {
      if (!d.is_number_integer() && !d.is_number_unsigned()) fail(std::string(".zarray: ") + what + " holds a non-integer");
      if (d.is_number_unsigned() ? d.get<std::uint64_t>() > (std::uint64_t{1} << 62) : d.get<std::int64_t>() < 0)
        fail(std::string(".zarray: ") + what + " holds " + ckpt::detail::describe(d));
      s.push_back(d.get<std::int64_t>());
    }
    return s;
  };
  m.shape = dims(get("shape"), "shape");
  m.chunks = dims(get("chunks"), "chunks");
  if (m.chunks.size() != m.shape.size()) fail(".zarray: chunks and shape differ in rank");
  for (auto c : m.chunks)
    if (c < 1) fail(".zarray: a chunk dimension is 0");
  if (element_count(m.shape) < 0 || element_count(m.chunks) < 0) fail(".zarray: shape or chunks overflow");
  const json& dt = get("dtype");
  if (!dt.is_string()) fail(".zarray: dtype " + ckpt::detail::describe(dt) + " is not supported (structured dtypes are not)");
  const auto d = dtype_from_typestr(dt.get<std::string>(), m.big_endian);
  if (!d) fail(".zarray: dtype " + ckpt::detail::describe(dt) + " is not supported");
  m.type = *d;
  const std::uint64_t es = dtype_size(m.type);
  if (static_cast<std::uint64_t>(element_count(m.shape)) > (std::uint64_t{1} << 62) / es ||
      static_cast<std::uint64_t>(element_count(m.chunks)) > (std::uint64_t{1} << 62) / es)
    fail(".zarray: shape or chunks overflow");
  const json& comp = get("compressor");
  if (!comp.is_null()) {
    if (!comp.is_object() || !comp.contains("id") || !comp["id"].is_string()) fail(".zarray: compressor is malformed");
    const auto c = codec_from_id(comp["id"].get<std::string>());
    if (!c) fail(".zarray: compressor " + ckpt::detail::describe(comp["id"]) + " is not supported (gzip, zlib, zstd, blosc, lz4, bz2 or null are)");
    m.compressor = *c;
    if (comp.contains("level") && comp["level"].is_number_integer()) m.level = comp["level"].get<int>();
    if (*c == io::codec::lz4)  // (not value(): it throws on a non-number, and the file is untrusted)
      m.level = comp.contains("acceleration") && comp["acceleration"].is_number_integer() ? comp["acceleration"].get<int>() : 1;
    if (*c == io::codec::blosc) {
      // numcodecs: shuffle -1 is AUTOSHUFFLE (bit shuffle for 1-byte items, else byte)
      if (comp.contains("clevel") && comp["clevel"].is_number_integer()) m.level = comp["clevel"].get<int>();
      if (auto it = comp.find("cname"); it != comp.end()) {
        if (!it->is_string() || !io::blosc_cname_known(it->get<std::string>())) fail(".zarray: blosc cname is not supported");
        m.blosc.cname = it->get<std::string>();
      }
      if (auto it = comp.find("shuffle"); it != comp.end() && it->is_number_integer()) m.blosc.shuffle = it->get<int>();
      if (m.blosc.shuffle < 0 || m.blosc.shuffle > 2) m.blosc.shuffle = dtype_size(m.type) == 1 ? 2 : 1;
      if (auto it = comp.find("blocksize"); it != comp.end() && it->is_number_unsigned())
        m.blosc.blocksize = std::min<std::size_t>(it->get<std::size_t>(), std::size_t{1} << 30);
    }
    m.blosc.typesize = dtype_size(m.type);
  }
  if (auto it = j.find("filters"); it != j.end() && !it->is_null() && !(it->is_array() && it->empty()))
    fail(".zarray: filters are not supported");
  if (auto it = j.find("order"); it != j.end()) {
    if (*it == "F") m.fortran = true;
    else if (*it != "C") fail(".zarray: order " + ckpt::detail::describe(*it) + " is neither C nor F");
  }
  if (auto it = j.find("dimension_separator"); it != j.end() && !it->is_null()) {
    if (*it == "/") m.separator = '/';
    else if (*it != ".") fail(".zarray: dimension_separator " + ckpt::detail::describe(*it) + " is neither \".\" nor \"/\"");
  }
  if (auto it = j.find("fill_value"); it != j.end()) m.fill = decode_fill(*it, m.type, fail);
  return m;
}

inline json zarray_json(const ArrayMeta& m) {
  return json{{"chunks", m.chunks},          {"compressor", compressor_json(m)}, {"dtype", typestr(m.type)},
              {"fill_value", fill_json(m.type)}, {"filters", nullptr},            {"order", "C"},
              {"shape", m.shape},            {"zarr_format", 2}};
}

// The layout ckpt writes: chunks along the first dimension of at most `target` bytes
// each (the whole array when smaller), C order.
inline ArrayMeta meta_for(dtype d, const Shape& shape, io::codec c, int level,
                          std::uint64_t target = std::uint64_t{64} << 20) {
  ArrayMeta m;
  m.type = d;
  m.shape = shape;
  m.compressor = c;
  m.level = level;
  for (auto s : shape) m.chunks.push_back(std::max<std::int64_t>(s, 1));
  if (!shape.empty()) {
    std::uint64_t row = dtype_size(d);
    for (std::size_t i = 1; i < m.chunks.size(); ++i) row *= static_cast<std::uint64_t>(m.chunks[i]);
    const auto rows = static_cast<std::int64_t>(std::max<std::uint64_t>(1, target / std::max<std::uint64_t>(row, 1)));
    m.chunks[0] = std::min(m.chunks[0], rows);
  }
  return m;
}

// A path segment usable as one directory name: no separators, not "." or "..".
inline bool safe_name(std::string_view s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 255) return false;
  for (char c : s)
    if (c == '/' || c == '\0' || c == '\\') return false;
  return true;
}

}  // namespace ckpt::detail::zarr
