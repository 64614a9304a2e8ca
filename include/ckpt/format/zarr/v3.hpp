// ckpt/format/zarr/v3.hpp — zarr v3 arrays in a key-value store: `zarr.json` and the
// codec chain, read.
//
//   <name>/zarr.json   {"zarr_format": 3, "node_type": "array", "shape": [...],
//                       "data_type": "float32", "chunk_grid": {"name": "regular",
//                       "configuration": {"chunk_shape": [...]}}, "chunk_key_encoding":
//                       {"name": "default", "configuration": {"separator": "/"}},
//                       "fill_value": 0, "codecs": [...]}
//   <name>/c/0/1       chunk (0, 1) with the default encoding ("0.1" with "v2")
//
// Codecs, in the order they encode: `transpose` (array -> array), then `bytes` or
// `sharding_indexed` (array -> bytes), then any of `gzip`, `zstd`, `blosc`, `crc32c`
// (bytes -> bytes). Decoding runs the chain backwards. At most one compressing codec
// follows the array -> bytes codec, so every decompression knows its exact output size.
// A sharded chunk (a shard) holds inner chunks, each with its own codec chain, and an
// index of (offset, nbytes) per inner chunk encoded with the index codecs (`bytes`
// and optionally `crc32c`) at its end or start.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/format/zarr/kv_chunks.hpp>
#include <ckpt/io/crc32c.hpp>

namespace ckpt::detail::zarr::v3 {

inline constexpr int max_codecs = 16;
inline constexpr int max_shard_depth = 4;

struct Codec {
  enum kind_t { transpose, bytes, sharding, gzip, zstd, blosc, crc32c } kind = bytes;
  bool big_endian = false;                 // bytes
  std::vector<std::size_t> order;          // transpose: dim k of the encoded array is dim order[k]
  // sharding_indexed
  Shape inner_chunks;
  std::vector<Codec> inner, index_codecs;
  bool index_at_start = false;
};

struct Meta {
  dtype type = dtype::float32;
  Shape shape, chunks;
  bool default_keys = true;  // "c/0/1" (default) or "0.1" (v2)
  char separator = '/';
  std::vector<Codec> codecs;
  std::vector<std::byte> fill;
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(element_count(shape)) * dtype_size(type); }
  std::uint64_t chunk_bytes() const { return static_cast<std::uint64_t>(element_count(chunks)) * dtype_size(type); }
};

inline std::string chunk_key(const Meta& m, const std::vector<std::int64_t>& idx) {
  std::string k;
  if (m.default_keys) {
    k = "c";
    for (auto i : idx) k += m.separator + std::to_string(i);
    return k;
  }
  if (idx.empty()) return "0";
  for (std::size_t i = 0; i < idx.size(); ++i) k += (i ? std::string(1, m.separator) : "") + std::to_string(idx[i]);
  return k;
}

namespace detail {
inline const json* config_of(const json& c) {
  auto it = c.find("configuration");
  return it == c.end() ? nullptr : &*it;
}

inline std::vector<Codec> parse_codecs(const json& list, dtype type, const Shape& chunk_shape, int depth, const Fail& fail) {
  if (!list.is_array() || list.empty() || list.size() > max_codecs) fail("zarr.json: codecs is not a list of 1 to 16 codecs");
  if (depth > max_shard_depth) fail("zarr.json: sharding nests too deep");
  std::vector<Codec> out;
  int stage = 0;  // 0 array->array, 1 after array->bytes
  int compressors = 0;
  for (const auto& c : list) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) fail("zarr.json: a codec has no name");
    const std::string name = c["name"].get<std::string>();
    const json* cfg = config_of(c);
    Codec k;
    auto cfg_get = [&](const char* key) -> const json* {
      if (!cfg || !cfg->is_object()) return nullptr;
      auto it = cfg->find(key);
      return it == cfg->end() ? nullptr : &*it;
    };
    if (name == "transpose") {
      if (stage != 0) fail("zarr.json: transpose after the bytes codec");
      k.kind = Codec::transpose;
      const json* o = cfg_get("order");
      if (!o || !o->is_array() || o->size() != chunk_shape.size()) fail("zarr.json: transpose order does not match the rank");
      std::vector<bool> seen(chunk_shape.size(), false);
      for (const auto& d : *o) {
        if (!d.is_number_unsigned() || d.get<std::uint64_t>() >= chunk_shape.size() || seen[d.get<std::size_t>()])
          fail("zarr.json: transpose order is not a permutation");
        seen[d.get<std::size_t>()] = true;
        k.order.push_back(d.get<std::size_t>());
      }
    } else if (name == "bytes") {
      if (stage != 0) fail("zarr.json: two array -> bytes codecs");
      stage = 1;
      k.kind = Codec::bytes;
      if (const json* e = cfg_get("endian")) {
        if (*e == "big") k.big_endian = dtype_size(type) > 1;
        else if (*e != "little") fail("zarr.json: bytes endian is neither little nor big");
      }
    } else if (name == "sharding_indexed") {
      if (stage != 0) fail("zarr.json: two array -> bytes codecs");
      stage = 1;
      k.kind = Codec::sharding;
      const json* cs = cfg_get("chunk_shape");
      if (!cs || !cs->is_array() || cs->size() != chunk_shape.size()) fail("zarr.json: sharding chunk_shape does not match the rank");
      for (std::size_t i = 0; i < cs->size(); ++i) {
        const json& d = (*cs)[i];
        if (!d.is_number_unsigned() || d.get<std::int64_t>() < 1 || chunk_shape[i] % d.get<std::int64_t>() != 0)
          fail("zarr.json: sharding chunk_shape does not divide the chunk shape");
        k.inner_chunks.push_back(d.get<std::int64_t>());
      }
      const json* inner = cfg_get("codecs");
      if (!inner) fail("zarr.json: sharding has no codecs");
      k.inner = parse_codecs(*inner, type, k.inner_chunks, depth + 1, fail);
      const json* ic = cfg_get("index_codecs");
      if (!ic) fail("zarr.json: sharding has no index_codecs");
      k.index_codecs = parse_codecs(*ic, dtype::uint64, Shape(chunk_shape.size() + 1, 1), depth + 1, fail);
      for (const auto& x : k.index_codecs)
        if (x.kind != Codec::bytes && x.kind != Codec::crc32c)
          fail("zarr.json: sharding index codecs other than bytes and crc32c are not supported");
      if (const json* loc = cfg_get("index_location")) {
        if (*loc == "start") k.index_at_start = true;
        else if (*loc != "end") fail("zarr.json: index_location is neither start nor end");
      }
    } else if (name == "gzip" || name == "zstd" || name == "blosc" || name == "crc32c") {
      if (stage != 1) fail("zarr.json: codec " + name + " before the array -> bytes codec");
      k.kind = name == "gzip" ? Codec::gzip : name == "zstd" ? Codec::zstd : name == "blosc" ? Codec::blosc : Codec::crc32c;
      if (k.kind != Codec::crc32c && ++compressors > 1) fail("zarr.json: more than one compressing codec is not supported");
    } else {
      fail("zarr.json: codec " + quote_for_message(name) + " is not supported");
    }
    out.push_back(std::move(k));
  }
  if (stage != 1) fail("zarr.json: no bytes or sharding_indexed codec");
  return out;
}

// Fill values: numbers, "NaN"/"Infinity"/"-Infinity", hex bit patterns ("0x7fc00000"),
// booleans, [re, im] for complex.
inline std::vector<std::byte> parse_fill(const json& j, dtype t, const Fail& fail) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s.size() > 2 && s.rfind("0x", 0) == 0 && s.size() <= 2 + 2 * dtype_size(t)) {
      std::uint64_t bits = 0;
      for (std::size_t i = 2; i < s.size(); ++i) {
        const char c = s[i];
        const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) fail("zarr.json: fill_value is not a hex number");
        bits = bits << 4 | static_cast<std::uint64_t>(v);
      }
      std::vector<std::byte> out(dtype_size(t));
      for (std::size_t i = 0; i < out.size() && i < 8; ++i) out[i] = static_cast<std::byte>(bits >> (8 * i));
      return out;
    }
  }
  return decode_fill(j, t, fail);
}
}  // namespace detail

inline Meta parse_meta(const json& j, const Fail& fail) {
  if (!j.is_object()) fail("zarr.json is not a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 3) fail("zarr.json: zarr_format is not 3");
  if (!j.contains("node_type") || j["node_type"] != "array") fail("zarr.json: not an array");
  Meta m;
  auto dims = [&](const json* a, const char* what) {
    Shape s;
    if (!a || !a->is_array() || static_cast<std::int64_t>(a->size()) > max_rank) fail(std::string("zarr.json: ") + what + " is not a list of at most 32 numbers");
    for (const auto& d : *a) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (std::uint64_t{1} << 62)) fail(std::string("zarr.json: ") + what + " holds a bad dimension");
      s.push_back(d.get<std::int64_t>());
    }
    return s;
  };
  m.shape = dims(j.contains("shape") ? &j["shape"] : nullptr, "shape");
  const json* grid = j.contains("chunk_grid") ? &j["chunk_grid"] : nullptr;
  if (!grid || !grid->is_object() || !grid->contains("name") || grid->at("name") != "regular" || !grid->contains("configuration") ||
      !(*grid)["configuration"].is_object())
    fail("zarr.json: only regular chunk grids are supported");
  m.chunks = dims((*grid)["configuration"].contains("chunk_shape") ? &(*grid)["configuration"]["chunk_shape"] : nullptr, "chunk_shape");
  if (m.chunks.size() != m.shape.size()) fail("zarr.json: chunk_shape and shape differ in rank");
  for (auto c : m.chunks)
    if (c < 1) fail("zarr.json: a chunk dimension is 0");
  if (element_count(m.shape) < 0 || element_count(m.chunks) < 0) fail("zarr.json: shape or chunks overflow");
  if (!j.contains("data_type") || !j["data_type"].is_string()) fail("zarr.json: data_type is not a string (extension types are not supported)");
  const auto d = dtype_from_numpy_name(j["data_type"].get<std::string>());
  if (!d) fail("zarr.json: data_type " + quote_for_message(j["data_type"].get<std::string>()) + " is not supported");
  m.type = *d;
  const std::uint64_t es = dtype_size(m.type);
  if (static_cast<std::uint64_t>(element_count(m.shape)) > (std::uint64_t{1} << 62) / es ||
      static_cast<std::uint64_t>(element_count(m.chunks)) > (std::uint64_t{1} << 62) / es)
    fail("zarr.json: shape or chunks overflow");
  if (auto it = j.find("chunk_key_encoding"); it != j.end()) {
    if (!it->is_object() || !it->contains("name")) fail("zarr.json: chunk_key_encoding is malformed");
    const json& name = (*it)["name"];
    if (name == "v2") { m.default_keys = false; m.separator = '.'; }
    else if (name != "default") fail("zarr.json: chunk_key_encoding is neither default nor v2");
    if (it->contains("configuration") && (*it)["configuration"].is_object() && (*it)["configuration"].contains("separator")) {
      const json& s = (*it)["configuration"]["separator"];
      if (s == "/") m.separator = '/';
      else if (s == ".") m.separator = '.';
      else fail("zarr.json: chunk key separator is neither \"/\" nor \".\"");
    }
  }
  if (!j.contains("codecs")) fail("zarr.json has no codecs");
  m.codecs = detail::parse_codecs(j["codecs"], m.type, m.chunks, 0, fail);
  if (auto it = j.find("fill_value"); it != j.end()) m.fill = detail::parse_fill(*it, m.type, fail);
  return m;
}

namespace detail {
// Decodes one encoded chunk of `shape` (through `codecs`) into out: C order, native
// (little-endian) bytes, out.size() == elements * es. Returns "" or what is wrong.
inline std::string decode(std::span<const std::byte> in, const std::vector<Codec>& codecs, const Shape& shape, dtype type,
                          const std::vector<std::byte>& fill, std::span<std::byte> out, int depth);

inline std::string decode_shard(std::span<const std::byte> in, const Codec& s, const Shape& shape, dtype type,
                                const std::vector<std::byte>& fill, std::span<std::byte> out, int depth) {
  const std::size_t es = dtype_size(type);
  const std::uint64_t n_inner = grid_size(shape, s.inner_chunks);
  if (n_inner > max_chunks) return "shard holds too many inner chunks";
  std::uint64_t index_len = 16 * n_inner;
  for (const auto& c : s.index_codecs)
    if (c.kind == Codec::crc32c) index_len += 4;
  if (in.size() < index_len) return "shard of " + std::to_string(in.size()) + " bytes is shorter than its index";
  const auto index_enc = s.index_at_start ? in.first(static_cast<std::size_t>(index_len)) : in.last(static_cast<std::size_t>(index_len));
  std::vector<std::byte> index(static_cast<std::size_t>(16 * n_inner));
  Shape index_shape = s.inner_chunks;
  for (std::size_t i = 0; i < shape.size(); ++i) index_shape[i] = shape[i] / s.inner_chunks[i];
  index_shape.push_back(2);
  if (auto bad = decode(index_enc, s.index_codecs, index_shape, dtype::uint64, {}, index, depth + 1); !bad.empty())
    return "shard index: " + bad;
  fill_with(out, fill, es);
  const std::uint64_t inner_bytes = static_cast<std::uint64_t>(element_count(s.inner_chunks)) * es;
  std::vector<std::byte> chunk(static_cast<std::size_t>(inner_bytes));
  std::size_t i = 0;
  std::string err;
  for_each_chunk(shape, s.inner_chunks, [&](const std::vector<std::int64_t>& idx) {
    if (!err.empty()) return;
    std::uint64_t off = 0, nb = 0;
    std::memcpy(&off, index.data() + 16 * i, 8);
    std::memcpy(&nb, index.data() + 16 * i + 8, 8);
    ++i;
    if (off == ~std::uint64_t{0} && nb == ~std::uint64_t{0}) return;  // empty inner chunk: fill value
    if (off > in.size() || nb > in.size() - off) {
      err = "shard index entry " + std::to_string(i - 1) + " (" + std::to_string(off) + "+" + std::to_string(nb) + ") lies outside the shard";
      return;
    }
    if (auto bad = decode(in.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(nb)), s.inner, s.inner_chunks, type,
                          fill, chunk, depth + 1);
        !bad.empty()) {
      err = "inner chunk " + std::to_string(i - 1) + ": " + bad;
      return;
    }
    copy_chunk(out, shape, s.inner_chunks, idx, chunk, es);
  });
  return err;
}

inline std::string decode(std::span<const std::byte> in, const std::vector<Codec>& codecs, const Shape& shape, dtype type,
                          const std::vector<std::byte>& fill, std::span<std::byte> out, int depth) {
  if (depth > 2 * max_shard_depth) return "codecs nest too deep";
  const std::size_t es = dtype_size(type);
  // split the chain: array->array codecs, the array->bytes codec, bytes->bytes codecs
  std::size_t ab = 0;
  while (ab < codecs.size() && codecs[ab].kind == Codec::transpose) ++ab;
  // shape of the array the array->bytes codec sees (after the transposes)
  std::vector<Shape> shapes{shape};
  for (std::size_t i = 0; i < ab; ++i) {
    Shape t(shape.size());
    for (std::size_t k = 0; k < t.size(); ++k) t[k] = shapes.back()[codecs[i].order[k]];
    shapes.push_back(t);
  }
  // bytes -> bytes, backwards; the buffer's expected size is known up to the compressor
  std::vector<std::byte> buf(in.begin(), in.end()), next;
  const bool sharded = codecs[ab].kind == Codec::sharding;
  const std::uint64_t array_bytes = out.size();
  for (std::size_t i = codecs.size(); i-- > ab + 1;) {
    const Codec& c = codecs[i];
    if (c.kind == Codec::crc32c) {
      if (buf.size() < 4) return "crc32c: fewer than 4 bytes";
      std::uint32_t stored = 0;
      std::memcpy(&stored, buf.data() + buf.size() - 4, 4);
      buf.resize(buf.size() - 4);
      if (io::crc32c(buf) != stored) return "crc32c checksum mismatch";
      continue;
    }
    if (sharded) return "compressing a whole shard is not supported";
    // the size the compressor was given: the bytes codec's output plus inner crc32c footers
    std::uint64_t expect = array_bytes;
    for (std::size_t k = ab + 1; k < i; ++k)
      if (codecs[k].kind == Codec::crc32c) expect += 4;
    next.resize(static_cast<std::size_t>(expect));
    const io::codec which = c.kind == Codec::gzip ? io::codec::gzip : c.kind == Codec::zstd ? io::codec::zstd : io::codec::blosc;
    if (auto bad = io::decompress(which, buf, next); !bad.empty()) return std::string(io::codec_name(which)) + ": " + bad;
    buf.swap(next);
  }
  const Codec& a2b = codecs[ab];
  std::vector<std::byte> arr;
  if (a2b.kind == Codec::sharding) {
    arr.resize(out.size());
    if (auto bad = decode_shard(buf, a2b, shapes.back(), type, fill, arr, depth); !bad.empty()) return bad;
  } else {
    if (buf.size() != array_bytes)
      return "holds " + std::to_string(buf.size()) + " bytes, " + std::to_string(array_bytes) + " expected";
    arr.swap(buf);
    if (a2b.big_endian) ::ckpt::detail::zarr::byteswap(arr, es, type);
  }
  // array -> array, backwards
  for (std::size_t i = ab; i-- > 0;) {
    std::vector<std::byte> t(arr.size());
    untranspose(arr, t, shapes[i], codecs[i].order, es);
    arr.swap(t);
  }
  if (!out.empty()) std::memcpy(out.data(), arr.data(), out.size());
  return "";
}
}  // namespace detail

// A zarr v3 array `name` ("" for the store's root) in a key-value store.
struct KvArray {
  std::shared_ptr<const io::KvStore> kv;
  std::string name;
  Meta meta;

  std::string key(const std::string& k) const { return name.empty() ? k : name + "/" + k; }

  static KvArray open(std::shared_ptr<const io::KvStore> kv, const std::string& name, const std::string& checkpoint,
                      const std::string& path) {
    return open_kv_array<KvArray>(std::move(kv), name, "zarr.json", checkpoint, path,
                                  [](const json& j, const auto& fail) { return parse_meta(j, fail); });
  }

  // Decodes chunk idx (a shard, with the sharding codec) into raw (chunk_bytes, C order,
  // native byte order); scratch is a buffer reused across chunks. False when it is absent.
  bool load_chunk(const std::vector<std::int64_t>& idx, std::span<std::byte> raw, Scratch& scratch,
                  const Fail& fail) const {
    const std::string k = key(chunk_key(meta, idx));
    const auto size = kv->size(k);
    if (!size) return false;
    const std::uint64_t cb = meta.chunk_bytes();
    // generous (a shard of tiny inner chunks carries a 16-byte index entry each), still linear
    if (*size > 20 * cb + (std::uint64_t{1} << 20))
      fail("chunk " + k + " is " + std::to_string(*size) + " bytes, more than any encoding of its " + std::to_string(cb));
    const auto enc = scratch.get(static_cast<std::size_t>(*size));
    try {
      kv->read(k, 0, enc);
    } catch (const Error& e) {
      fail("chunk " + k + ": " + e.what());
    }
    if (auto bad = detail::decode(enc, meta.codecs, meta.chunks, meta.type, meta.fill, raw, 0); !bad.empty())
      fail("chunk " + k + ": " + bad);
    return true;
  }

  // The whole array (dst.size() == meta.bytes()), C order.
  void read(std::span<std::byte> dst, const Fail& fail) const { read_box(Shape(meta.shape.size(), 0), meta.shape, dst, fail); }

  // Reads the box at `origin` of `shape` into dst (C order), decoding only the chunks
  // (whole shards) that meet it.
  void read_box(const Shape& origin, const Shape& shape, std::span<std::byte> dst, const Fail& fail) const {
    Scratch enc;
    ckpt::detail::zarr::read_box(meta.chunks, meta.chunk_bytes(), dtype_size(meta.type), meta.fill, origin, shape, dst,
                   [&](const std::vector<std::int64_t>& idx, std::span<std::byte> raw) { return load_chunk(idx, raw, enc, fail); });
  }
};

}  // namespace ckpt::detail::zarr::v3
