// ckpt/format/zarr/kv_chunks.hpp — zarr arrays read through a key-value store (a
// directory, objects on S3 or in memory, an OCDBT database inside either): the pieces
// zarr v2 and v3 share, and zarr v2 itself (what t5x, Orbax and zarr_v2 write).
//
// A chunk decodes to a C-order buffer of the chunk's full shape; copy_chunk puts the
// part inside the array into place. Fortran-order chunks are a transpose.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <ckpt/format/zarr/chunk_copy.hpp>
#include <ckpt/format/zarr/chunks.hpp>
#include <ckpt/format/zarr/metadata.hpp>
#include <ckpt/io/kvstore.hpp>

namespace ckpt::detail::zarr {

using Fail = std::function<void(const std::string&)>;

// Sum of the sizes of every value under prefix: what the array's chunks can hold.
inline std::uint64_t stored_bytes(const io::KvStore& kv, const std::string& prefix) {
  std::uint64_t n = 0;
  for (const auto& k : kv.list(prefix, max_chunks + 16)) n += kv.size(k).value_or(0);
  return n;
}

inline std::string plausible(std::uint64_t bytes, std::uint64_t chunk_bytes, std::uint64_t grid, std::uint64_t stored) {
  if (grid > max_chunks) return "its grid has more than " + std::to_string(max_chunks) + " chunks";
  const std::uint64_t allowed = free_bytes + (stored > (std::uint64_t{1} << 40) ? (std::uint64_t{1} << 62) : stored * max_expansion);
  if (bytes > allowed)
    return "it needs " + std::to_string(bytes) + " bytes, far more than its " + std::to_string(stored) + " stored bytes can hold";
  if (chunk_bytes > allowed) return "a chunk of " + std::to_string(chunk_bytes) + " bytes is far larger than its stored bytes";
  return "";
}

// Refuses metadata whose sizes the array's stored values cannot plausibly hold (a
// hostile .zarray), before anything is allocated. fail throws.
template <class Array>
void check_plausible(const Array& a, const Fail& fail) {
  // A chunk is decompressed whole, however little of it lies inside the array (edge
  // chunks are stored full size): chunks far larger than the array itself are refused,
  // or a 1 MiB chunk could make a 10-element array allocate 64 GiB.
  const std::uint64_t array_bytes = a.meta.bytes();
  const std::uint64_t chunk_limit = std::max(free_bytes, array_bytes > (std::uint64_t{1} << 60) ? array_bytes : 4 * array_bytes);
  if (a.meta.chunk_bytes() > chunk_limit)
    fail("chunks of " + shape_str(a.meta.chunks) + " (" + std::to_string(a.meta.chunk_bytes()) +
         " bytes) are far larger than the array's " + std::to_string(array_bytes) + " bytes");
  const auto bad = plausible(a.meta.bytes(), a.meta.chunk_bytes(), grid_size(a.meta.shape, a.meta.chunks),
                             stored_bytes(*a.kv, a.name.empty() ? "" : a.name + "/"));
  if (!bad.empty()) fail(bad);
}

// Opens array `name` of a key-value store, zarr v2 or v3 alike: reads its metadata
// document `doc` (.zarray, zarr.json) bounded, parses it with `parse(json, fail)`, and
// refuses sizes its stored bytes cannot plausibly hold, before anything is allocated.
template <class Array, class Parse>
Array open_kv_array(std::shared_ptr<const io::KvStore> kv, const std::string& name, const std::string& doc,
                    const std::string& checkpoint, const std::string& path, Parse parse) {
  auto fail = [&](const std::string& w) { throw CorruptCheckpointError(checkpoint, path, w); };
  Array a{std::move(kv), name, {}};
  std::optional<std::vector<std::byte>> text;
  try {
    text = a.kv->get(a.key(doc), max_json_bytes);
  } catch (const Error& e) {
    fail(doc + " cannot be read: " + e.what());
  }
  if (!text) fail("array " + a.key(doc) + " is missing");
  a.meta = parse(ckpt::detail::parse_json(*text, checkpoint, path, doc), fail);
  check_plausible(a, fail);
  return a;
}

// A zarr v2 array `name` ("a.b", or "" for the store's root) in a key-value store.
struct KvArrayV2 {
  std::shared_ptr<const io::KvStore> kv;
  std::string name;
  ArrayMeta meta;

  std::string key(const std::string& k) const { return name.empty() ? k : name + "/" + k; }

  static KvArrayV2 open(std::shared_ptr<const io::KvStore> kv, const std::string& name, const std::string& checkpoint,
                        const std::string& path) {
    return open_kv_array<KvArrayV2>(std::move(kv), name, ".zarray", checkpoint, path,
                                    [](const json& j, const auto& fail) { return parse_zarray(j, fail); });
  }

  // An array whose metadata the caller has (t5x's TensorStore spec, when .zarray is absent).
  static KvArrayV2 with_meta(std::shared_ptr<const io::KvStore> kv, const std::string& name, ArrayMeta meta,
                             const std::string& checkpoint, const std::string& path) {
    KvArrayV2 a{std::move(kv), name, std::move(meta)};
    check_plausible(a, [&](const std::string& w) { throw CorruptCheckpointError(checkpoint, path, w); });
    return a;
  }

  // Reads chunk idx into raw (chunk_bytes: decoded, native byte order, in the array's
  // C or Fortran order); comp is a buffer reused across chunks. False when it is absent.
  bool load_chunk(const std::vector<std::int64_t>& idx, std::span<std::byte> raw, Scratch& comp,
                  const Fail& fail) const {
    const std::string ck = chunk_key(idx, meta.separator);  // messages name the chunk as the array's
    const std::string k = key(ck);
    try {
      const auto size = kv->size(k);
      if (!size) return false;
      const std::uint64_t cb = meta.chunk_bytes();
      const std::uint64_t max_comp = meta.compressor == io::codec::none ? cb : cb + cb / 8 + (1u << 20);
      if (*size > max_comp) fail("chunk " + ck + " is " + std::to_string(*size) + " bytes, more than any encoding of its " + std::to_string(cb));
      if (cb > free_bytes + *size * max_expansion)
        fail("chunk " + ck + " would decompress to " + std::to_string(cb) + " bytes from " + std::to_string(*size));
      if (meta.compressor == io::codec::none) {
        if (*size != cb) fail("chunk " + ck + " holds " + std::to_string(*size) + " bytes, " + std::to_string(cb) + " expected");
        kv->read(k, 0, raw);  // straight into place
      } else {
        const auto enc = comp.get(static_cast<std::size_t>(*size));
        kv->read(k, 0, enc);
        if (const std::string bad = io::decompress(meta.compressor, enc, raw); !bad.empty()) fail("chunk " + ck + ": " + bad);
      }
    } catch (const CorruptCheckpointError&) {
      throw;
    } catch (const Error& e) {
      fail("chunk " + ck + ": " + e.what());
    }
    if (meta.big_endian) detail::zarr::byteswap(raw, dtype_size(meta.type), meta.type);
    return true;
  }

  // The whole array (dst.size() == meta.bytes()), C order.
  void read(std::span<std::byte> dst, const Fail& fail) const { read_box(Shape(meta.shape.size(), 0), meta.shape, dst, fail); }

  // Reads the box at `origin` of `shape` into dst (C order), decoding only the chunks that meet it.
  void read_box(const Shape& origin, const Shape& shape, std::span<std::byte> dst, const Fail& fail) const {
    Scratch comp;
    std::vector<std::byte> t;
    detail::zarr::read_box(meta.chunks, meta.chunk_bytes(), dtype_size(meta.type), meta.fill, origin, shape, dst,
                   [&](const std::vector<std::int64_t>& idx, std::span<std::byte> raw) {
                     if (!load_chunk(idx, raw, comp, fail)) return false;
                     if (meta.fortran) fortran_to_c_order(raw, meta.chunks, dtype_size(meta.type), t);
                     return true;
                   });
  }
};

}  // namespace ckpt::detail::zarr
