// ckpt/format/zarr/array.hpp — one zarr v2 array: its .zarray, its chunks, read and write.
//
// What t5x (through TensorStore), Orbax and Python's zarr store each array as: a
// directory holding `.zarray` (JSON: shape, chunks, dtype such as "<f4", compressor,
// fill_value, order, filters, dimension_separator) and one file per chunk, named by
// the chunk's grid position ("0.1", or "0/1"; "0" for a 0-d array). Edge chunks are
// stored full size; a missing chunk reads as fill_value.
//
// Everything read is untrusted: JSON is parsed with its nesting bounded, shapes are
// checked against the bytes on disk before anything is allocated, every decompression
// is bounded by the chunk's size, chunk keys are made of grid numbers only and no
// symbolic link is followed, so they never leave the array directory, and values
// quoted in messages are bounded (detail/untrusted.hpp).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

#include <ckpt/detail/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/io/codec.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/leaf/half.hpp>

namespace ckpt::zarr {

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
  std::vector<std::byte> fill;  // one element, little-endian; empty: zeros

  std::uint64_t bytes() const { return static_cast<std::uint64_t>(element_count(shape)) * dtype_size(type); }
  std::uint64_t chunk_bytes() const { return static_cast<std::uint64_t>(element_count(chunks)) * dtype_size(type); }
};

// numpy typestr (zarr's dtype) of a ckpt dtype; bfloat16 as TensorStore writes it.
inline std::string typestr(dtype d) {
  switch (d) {
    case dtype::bool_: return "|b1";
    case dtype::int8: return "|i1";
    case dtype::uint8: return "|u1";
    case dtype::int16: return "<i2";
    case dtype::int32: return "<i4";
    case dtype::int64: return "<i8";
    case dtype::uint16: return "<u2";
    case dtype::uint32: return "<u4";
    case dtype::uint64: return "<u8";
    case dtype::float16: return "<f2";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "<f4";
    case dtype::float64: return "<f8";
    case dtype::complex64: return "<c8";
    case dtype::complex128: return "<c16";
    case dtype::string: case dtype::none: break;
  }
  throw Error("zarr has no dtype for ckpt's " + std::string(dtype_name(d)));
}

inline std::optional<dtype> dtype_from_typestr(std::string_view s, bool& big_endian) {
  big_endian = false;
  if (s == "bfloat16" || s == "<V2" /* never written, but bfloat16 is 2 bytes */) return s == "bfloat16" ? std::optional(dtype::bfloat16) : std::nullopt;
  if (s.size() < 3) return std::nullopt;
  const char order = s[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') return std::nullopt;
  const std::string_view t = s.substr(1);
  std::optional<dtype> d;
  if (t == "b1") d = dtype::bool_;
  else if (t == "i1") d = dtype::int8; else if (t == "u1") d = dtype::uint8;
  else if (t == "i2") d = dtype::int16; else if (t == "u2") d = dtype::uint16;
  else if (t == "i4") d = dtype::int32; else if (t == "u4") d = dtype::uint32;
  else if (t == "i8") d = dtype::int64; else if (t == "u8") d = dtype::uint64;
  else if (t == "f2") d = dtype::float16; else if (t == "f4") d = dtype::float32; else if (t == "f8") d = dtype::float64;
  else if (t == "c8") d = dtype::complex64; else if (t == "c16") d = dtype::complex128;
  if (d && dtype_size(*d) > 1) big_endian = order == '>';
  return d;
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
  return std::nullopt;
}

inline json compressor_json(const ArrayMeta& m) {
  if (m.compressor == io::codec::none) return nullptr;
  return json{{"id", io::codec_name(m.compressor)}, {"level", m.level}};
}

// Parses JSON text from an untrusted file, naming the file in errors (nesting bounded:
// detail::parse_json).
inline json parse_json(std::span<const std::byte> bytes, const std::string& checkpoint, const std::string& path,
                       const std::string& what) {
  return ckpt::detail::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, checkpoint, path, what);
}

// An untrusted JSON value in a message: bounded, never a whole dump().
inline std::string describe(const json& j) { return ckpt::detail::describe(j); }

inline json read_json_file(const fs::path& file, const std::string& checkpoint, const std::string& path) {
  std::vector<std::byte> bytes;
  try {
    bytes = io::read_file(file, max_json_bytes);
  } catch (const Error& e) {
    throw CorruptCheckpointError(checkpoint, path, file.filename().string() + " cannot be read: " + e.what());
  }
  return parse_json(bytes, checkpoint, path, file.filename().string());
}

namespace detail {
template <class T>
void put(std::vector<std::byte>& out, T v) {
  out.resize(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
}

inline std::optional<double> json_number(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "NaN") return std::nan("");
    if (s == "Infinity") return INFINITY;
    if (s == "-Infinity") return -INFINITY;
  }
  return std::nullopt;
}
}  // namespace detail

// The fill value of .zarray as one element's bytes; empty means zeros.
inline std::vector<std::byte> decode_fill(const json& j, dtype d, const std::function<void(const std::string&)>& fail) {
  std::vector<std::byte> out;
  if (j.is_null()) return out;
  auto num = [&](const json& v) {
    auto x = detail::json_number(v);
    if (!x) fail("fill_value " + describe(j) + " is not a number");
    return *x;
  };
  auto integer = [&]<class I>(I) {
    if (j.is_boolean()) return detail::put<I>(out, static_cast<I>(j.get<bool>()));
    if (!j.is_number_integer() && !j.is_number_unsigned()) fail("fill_value " + describe(j) + " is not an integer");
    if (j.is_number_unsigned()) detail::put<I>(out, static_cast<I>(j.get<std::uint64_t>()));
    else detail::put<I>(out, static_cast<I>(j.get<std::int64_t>()));
  };
  switch (d) {
    case dtype::bool_:
      if (j.is_boolean()) detail::put<std::uint8_t>(out, j.get<bool>());
      else detail::put<std::uint8_t>(out, num(j) != 0);
      break;
    case dtype::int8: integer(std::int8_t{}); break;
    case dtype::int16: integer(std::int16_t{}); break;
    case dtype::int32: integer(std::int32_t{}); break;
    case dtype::int64: integer(std::int64_t{}); break;
    case dtype::uint8: integer(std::uint8_t{}); break;
    case dtype::uint16: integer(std::uint16_t{}); break;
    case dtype::uint32: integer(std::uint32_t{}); break;
    case dtype::uint64: integer(std::uint64_t{}); break;
    case dtype::float16: detail::put(out, float16(static_cast<float>(num(j)))); break;
    case dtype::bfloat16: detail::put(out, bfloat16(static_cast<float>(num(j)))); break;
    case dtype::float32: detail::put(out, static_cast<float>(num(j))); break;
    case dtype::float64: detail::put(out, num(j)); break;
    case dtype::complex64: case dtype::complex128: {
      double re = 0, im = 0;
      if (j.is_array()) {
        if (j.size() != 2) fail("complex fill_value must be [re, im]");
        re = num(j[0]);
        im = num(j[1]);
      } else {
        re = num(j);
      }
      if (d == dtype::complex64) detail::put(out, std::complex<float>(static_cast<float>(re), static_cast<float>(im)));
      else detail::put(out, std::complex<double>(re, im));
      break;
    }
    default: break;
  }
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
    fail(".zarray: zarr_format " + describe(f) + " is not 2");
  auto dims = [&](const json& a, const char* what) {
    Shape s;
    if (!a.is_array() || static_cast<std::int64_t>(a.size()) > max_rank) fail(std::string(".zarray: ") + what + " is not a list of at most 32 numbers");
    for (const auto& d : a) {
      if (!d.is_number_integer() && !d.is_number_unsigned()) fail(std::string(".zarray: ") + what + " holds a non-integer");
      if (d.is_number_unsigned() ? d.get<std::uint64_t>() > (std::uint64_t{1} << 62) : d.get<std::int64_t>() < 0)
        fail(std::string(".zarray: ") + what + " holds " + describe(d));
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
  if (!dt.is_string()) fail(".zarray: dtype " + describe(dt) + " is not supported (structured dtypes are not)");
  const auto d = dtype_from_typestr(dt.get<std::string>(), m.big_endian);
  if (!d) fail(".zarray: dtype " + describe(dt) + " is not supported");
  m.type = *d;
  const std::uint64_t es = dtype_size(m.type);
  if (static_cast<std::uint64_t>(element_count(m.shape)) > (std::uint64_t{1} << 62) / es ||
      static_cast<std::uint64_t>(element_count(m.chunks)) > (std::uint64_t{1} << 62) / es)
    fail(".zarray: shape or chunks overflow");
  const json& comp = get("compressor");
  if (!comp.is_null()) {
    if (!comp.is_object() || !comp.contains("id") || !comp["id"].is_string()) fail(".zarray: compressor is malformed");
    const auto c = codec_from_id(comp["id"].get<std::string>());
    if (!c) fail(".zarray: compressor " + describe(comp["id"]) + " is not supported (gzip, zlib, zstd or null are)");
    m.compressor = *c;
    if (comp.contains("level") && comp["level"].is_number_integer()) m.level = comp["level"].get<int>();
  }
  if (auto it = j.find("filters"); it != j.end() && !it->is_null() && !(it->is_array() && it->empty()))
    fail(".zarray: filters are not supported");
  if (auto it = j.find("order"); it != j.end()) {
    if (*it == "F") m.fortran = true;
    else if (*it != "C") fail(".zarray: order " + describe(*it) + " is neither C nor F");
  }
  if (auto it = j.find("dimension_separator"); it != j.end() && !it->is_null()) {
    if (*it == "/") m.separator = '/';
    else if (*it != ".") fail(".zarray: dimension_separator " + describe(*it) + " is neither \".\" nor \"/\"");
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

inline std::string chunk_key(const std::vector<std::int64_t>& idx, char sep) {
  if (idx.empty()) return "0";
  std::string k;
  for (std::size_t i = 0; i < idx.size(); ++i) k += (i ? std::string(1, sep) : "") + std::to_string(idx[i]);
  return k;
}

namespace detail {
// Opens a chunk without following a final symlink (a chunk must be a file of the
// checkpoint); returns -1 when absent.
inline int open_chunk(const fs::path& p, std::uint64_t& size) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    io::throw_errno("cannot open chunk", p);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(p.string(), "", "chunk is not a regular file");
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

inline void byteswap(std::span<std::byte> b, std::size_t elem, dtype d) {
  // complex numbers swap each half on its own
  const std::size_t w = (d == dtype::complex64 || d == dtype::complex128) ? elem / 2 : elem;
  for (std::size_t i = 0; i + w <= b.size(); i += w) std::reverse(b.begin() + static_cast<std::ptrdiff_t>(i), b.begin() + static_cast<std::ptrdiff_t>(i + w));
}
}  // namespace detail

// Refuses arrays whose declared size the files cannot plausibly hold, and grids of too
// many chunks, before anything is allocated or iterated. Returns "" or the reason.
inline std::string check_plausible(const fs::path& dir, const ArrayMeta& m) {
  std::uint64_t chunks = 1;
  for (std::size_t i = 0; i < m.shape.size(); ++i) {
    const auto n = static_cast<std::uint64_t>((m.shape[i] + m.chunks[i] - 1) / m.chunks[i]);
    if (n != 0 && chunks > max_chunks / n) return "its grid has more than " + std::to_string(max_chunks) + " chunks";
    chunks *= n;
  }
  // A chunk is decompressed whole, however little of it lies inside the array (edge
  // chunks are stored full size): chunks far larger than the array itself are refused,
  // or a 1 MiB chunk file could make a 10-element array allocate 64 GiB.
  const std::uint64_t array_bytes = m.bytes();
  const std::uint64_t chunk_limit = std::max(free_bytes, array_bytes > (std::uint64_t{1} << 60) ? array_bytes : 4 * array_bytes);
  if (m.chunk_bytes() > chunk_limit)
    return "chunks of " + shape_str(m.chunks) + " (" + std::to_string(m.chunk_bytes()) +
           " bytes) are far larger than the array's " + std::to_string(array_bytes) + " bytes";
  std::uint64_t stored = 0;
  std::error_code ec;
  std::size_t files = 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end; !ec && it != end; it.increment(ec)) {
    if (++files > max_chunks + 16) return "its directory holds too many files";
    if (it.depth() > max_rank) { it.disable_recursion_pending(); continue; }
    std::error_code e2;  // what links point at is not the array's: not counted
    if (fs::is_regular_file(it->symlink_status(e2))) stored += it->file_size(e2);
  }
  const std::uint64_t allowed = free_bytes + (stored > (std::uint64_t{1} << 40) ? (std::uint64_t{1} << 62) : stored * max_expansion);
  if (m.bytes() > allowed)
    return "shape " + shape_str(m.shape) + " needs " + std::to_string(m.bytes()) + " bytes, far more than its " +
           std::to_string(stored) + " bytes of files can hold";
  return "";
}

// Reads the whole array into dst (dst.size() == m.bytes()), C order, native byte order.
// `fail` throws naming the checkpoint and leaf.
inline void read_array(const fs::path& dir, const ArrayMeta& m, std::span<std::byte> dst,
                       const std::function<void(const std::string&)>& fail) {
  const std::size_t es = dtype_size(m.type);
  const std::size_t rank = m.shape.size();
  // prefill with fill_value: missing chunks read as it
  if (m.fill.empty()) {
    if (!dst.empty()) std::memset(dst.data(), 0, dst.size());  // an empty array's data() may be null
  } else
    for (std::size_t i = 0; i + es <= dst.size(); i += es) std::memcpy(dst.data() + i, m.fill.data(), es);
  if (element_count(m.shape) == 0) return;

  std::vector<std::int64_t> grid(rank), idx(rank, 0);
  for (std::size_t i = 0; i < rank; ++i) grid[i] = (m.shape[i] + m.chunks[i] - 1) / m.chunks[i];
  // strides in elements: of the array (C), and of a chunk (C or F)
  std::vector<std::uint64_t> astride(rank), cstride(rank);
  std::uint64_t a = 1, c = 1;
  for (std::size_t i = rank; i-- > 0;) { astride[i] = a; a *= static_cast<std::uint64_t>(m.shape[i]); }
  if (m.fortran) for (std::size_t i = 0; i < rank; ++i) { cstride[i] = c; c *= static_cast<std::uint64_t>(m.chunks[i]); }
  else for (std::size_t i = rank; i-- > 0;) { cstride[i] = c; c *= static_cast<std::uint64_t>(m.chunks[i]); }
  const std::uint64_t chunk_bytes = m.chunk_bytes();
  std::vector<std::byte> raw, comp;

  for (;;) {
    const std::string key = chunk_key(idx, m.separator);
    const fs::path file = dir / key;
    std::uint64_t size = 0;
    int fd = -1;
    try {
      // "0/1": open_chunk refuses a link as the chunk itself, the directories on the
      // way are checked here (a missing one: the chunk reads as fill_value)
      if (m.separator == '/' && rank > 1) {
        fs::path p = dir;
        for (const auto& part : fs::path(key).parent_path()) {
          p /= part;
          std::error_code e2;
          const auto st = fs::symlink_status(p, e2);
          if (fs::is_symlink(st)) throw Error(file.string(), "", "a directory on the way is a symbolic link");
          if (!fs::exists(st)) break;
        }
      }
      fd = detail::open_chunk(file, size);
    } catch (const Error& e) {
      fail(std::string("chunk ") + key + ": " + e.what());
    }
    if (fd >= 0) {
      io::File f(fd);
      const std::uint64_t max_comp = m.compressor == io::codec::none ? chunk_bytes : chunk_bytes + chunk_bytes / 8 + (1u << 20);
      if (size > max_comp) fail("chunk " + key + " is " + std::to_string(size) + " bytes, more than any encoding of its " + std::to_string(chunk_bytes));
      if (chunk_bytes > free_bytes + size * max_expansion)
        fail("chunk " + key + " would decompress to " + std::to_string(chunk_bytes) + " bytes from " + std::to_string(size));
      comp.resize(static_cast<std::size_t>(size));
      try {
        io::pread_exact(f, comp, 0, file);
      } catch (const Error& e) {
        fail(std::string("chunk ") + key + ": " + e.what());
      }
      raw.resize(static_cast<std::size_t>(chunk_bytes));
      if (const std::string bad = io::decompress(m.compressor, comp, raw); !bad.empty()) fail("chunk " + key + ": " + bad);
      if (m.big_endian) detail::byteswap(raw, es, m.type);
      // copy the part of the chunk inside the array
      std::vector<std::int64_t> start(rank), ext(rank), local(rank, 0);
      for (std::size_t i = 0; i < rank; ++i) {
        start[i] = idx[i] * m.chunks[i];
        ext[i] = std::min(m.chunks[i], m.shape[i] - start[i]);
      }
      if (rank == 0) {
        std::memcpy(dst.data(), raw.data(), es);
      } else {
        // C order: runs along the last dimension are contiguous on both sides
        const bool runs = !m.fortran || rank == 1;
        const std::int64_t inner = runs ? ext[rank - 1] : 1;
        const std::size_t outer_rank = runs ? rank - 1 : rank;
        for (;;) {
          std::uint64_t so = 0, doff = 0;
          for (std::size_t i = 0; i < rank; ++i) {
            so += static_cast<std::uint64_t>(local[i]) * cstride[i];
            doff += static_cast<std::uint64_t>(start[i] + local[i]) * astride[i];
          }
          std::memcpy(dst.data() + doff * es, raw.data() + so * es, static_cast<std::size_t>(inner) * es);
          std::size_t k = outer_rank;
          bool more = false;
          while (k-- > 0) {
            if (++local[k] < ext[k]) { more = true; break; }
            local[k] = 0;
          }
          if (!more) break;
        }
      }
    }
    // next chunk in the grid
    std::size_t k = rank;
    bool done = true;
    while (k-- > 0) {
      if (++idx[k] < grid[k]) { done = false; break; }
      idx[k] = 0;
    }
    if (done) break;
  }
}

// Writes the array at `dir` (created; must not exist): .zarray, then one file per chunk.
// src is C order; m must have chunks spanning every dimension but the first (meta_for).
inline void write_array(const fs::path& dir, const ArrayMeta& m, std::span<const std::byte> src) {
  fs::create_directory(dir);
  const std::string zarray = zarray_json(m).dump(4);
  io::write_file_synced(dir / ".zarray", std::as_bytes(std::span(zarray)));
  if (m.shape.empty()) {
    const auto out = io::compress(m.compressor, m.level, src);
    io::write_file_synced(dir / "0", out);
    return;
  }
  if (element_count(m.shape) == 0) return;
  const std::uint64_t chunk = m.chunk_bytes();
  const std::uint64_t n = static_cast<std::uint64_t>((m.shape[0] + m.chunks[0] - 1) / m.chunks[0]);
  std::vector<std::byte> edge;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t off = i * chunk;
    std::span<const std::byte> part = src.subspan(off, std::min<std::uint64_t>(chunk, src.size() - off));
    if (part.size() < chunk) {  // edge chunks are stored full size, padded with the fill value (0)
      edge.assign(part.begin(), part.end());
      edge.resize(chunk);
      part = edge;
    }
    std::vector<std::int64_t> idx(m.shape.size(), 0);
    idx[0] = static_cast<std::int64_t>(i);
    const fs::path file = dir / chunk_key(idx, m.separator);
    if (m.compressor == io::codec::none) io::write_file_synced(file, part);
    else io::write_file_synced(file, io::compress(m.compressor, m.level, part));
  }
}

// Opens an array directory: parses .zarray (or uses `given`) and checks it is plausible.
inline ArrayMeta open_array(const fs::path& dir, const std::string& checkpoint, const std::string& path) {
  auto fail = [&](const std::string& w) { throw CorruptCheckpointError(checkpoint, path, w); };
  ArrayMeta m = parse_zarray(read_json_file(dir / ".zarray", checkpoint, path), fail);
  if (const auto bad = check_plausible(dir, m); !bad.empty()) fail(bad);
  return m;
}

// A path segment usable as one directory name: no separators, not "." or "..".
inline bool safe_name(std::string_view s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 255) return false;
  for (char c : s)
    if (c == '/' || c == '\0' || c == '\\') return false;
  return true;
}

}  // namespace ckpt::zarr
