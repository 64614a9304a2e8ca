// ckpt/format/zarr/kv_chunks.hpp — zarr arrays whose chunks live in a key-value store
// (a directory or an OCDBT database): the pieces zarr v2 and v3 share, and zarr v2
// read through a store (what Orbax writes into OCDBT).
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

#include <ckpt/format/zarr/chunks.hpp>
#include <ckpt/format/zarr/metadata.hpp>
#include <ckpt/io/kvstore.hpp>

namespace ckpt::zarr {

using Fail = std::function<void(const std::string&)>;

// Copies chunk `idx` (C order, full chunk shape, `es` bytes per element) into dst, the
// C-order array of `shape`.
inline void copy_chunk(std::span<std::byte> dst, const Shape& shape, const Shape& chunks, const std::vector<std::int64_t>& idx,
                       std::span<const std::byte> chunk, std::size_t es) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst.data(), chunk.data(), es);
    return;
  }
  std::vector<std::uint64_t> astride(rank), cstride(rank);
  std::uint64_t a = 1, c = 1;
  for (std::size_t i = rank; i-- > 0;) {
    astride[i] = a;
    a *= static_cast<std::uint64_t>(shape[i]);
    cstride[i] = c;
    c *= static_cast<std::uint64_t>(chunks[i]);
  }
  std::vector<std::int64_t> start(rank), ext(rank), local(rank, 0);
  for (std::size_t i = 0; i < rank; ++i) {
    start[i] = idx[i] * chunks[i];
    ext[i] = std::min(chunks[i], shape[i] - start[i]);
    if (ext[i] <= 0) return;
  }
  const auto inner = static_cast<std::size_t>(ext[rank - 1]) * es;
  for (;;) {
    std::uint64_t so = 0, doff = 0;
    for (std::size_t i = 0; i < rank; ++i) {
      so += static_cast<std::uint64_t>(local[i]) * cstride[i];
      doff += static_cast<std::uint64_t>(start[i] + local[i]) * astride[i];
    }
    std::memcpy(dst.data() + doff * es, chunk.data() + so * es, inner);
    std::size_t k = rank - 1;
    bool more = false;
    while (k-- > 0) {
      if (++local[k] < ext[k]) { more = true; break; }
      local[k] = 0;
    }
    if (!more) break;
  }
}

// Undoes a transpose: src is C order of the permuted shape (dim k of src is dim
// order[k] of the result); dst is C order of `shape`.
inline void untranspose(std::span<const std::byte> src, std::span<std::byte> dst, const Shape& shape,
                        const std::vector<std::size_t>& order, std::size_t es) {
  const std::size_t rank = shape.size();
  if (rank == 0 || element_count(shape) == 0) return;
  std::vector<std::uint64_t> dstride(rank);
  std::uint64_t a = 1;
  for (std::size_t i = rank; i-- > 0;) { dstride[i] = a; a *= static_cast<std::uint64_t>(shape[i]); }
  std::vector<std::int64_t> tshape(rank), pos(rank, 0);
  for (std::size_t k = 0; k < rank; ++k) tshape[k] = shape[order[k]];
  std::size_t at = 0;
  for (;;) {
    std::uint64_t d = 0;
    for (std::size_t k = 0; k < rank; ++k) d += static_cast<std::uint64_t>(pos[k]) * dstride[order[k]];
    std::memcpy(dst.data() + d * es, src.data() + at, es);
    at += es;
    std::size_t k = rank;
    bool more = false;
    while (k-- > 0) {
      if (++pos[k] < tshape[k]) { more = true; break; }
      pos[k] = 0;
    }
    if (!more) break;
  }
}

inline void fill_with(std::span<std::byte> dst, const std::vector<std::byte>& fill, std::size_t es) {
  if (fill.empty()) {
    if (!dst.empty()) std::memset(dst.data(), 0, dst.size());
  } else {
    for (std::size_t i = 0; i + es <= dst.size(); i += es) std::memcpy(dst.data() + i, fill.data(), es);
  }
}

// Iterates the chunk grid of shape/chunks in C order; f(idx) for each. Grids beyond
// max_chunks are refused before.
inline std::uint64_t grid_size(const Shape& shape, const Shape& chunks) {
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto g = static_cast<std::uint64_t>((shape[i] + chunks[i] - 1) / chunks[i]);
    if (g != 0 && n > max_chunks / g) return max_chunks + 1;
    n *= g;
  }
  return n;
}

template <class F>
void for_each_chunk(const Shape& shape, const Shape& chunks, F&& f) {
  const std::size_t rank = shape.size();
  for (std::size_t i = 0; i < rank; ++i)
    if (shape[i] == 0) return;
  std::vector<std::int64_t> idx(rank, 0);
  for (;;) {
    f(idx);
    std::size_t k = rank;
    bool done = true;
    while (k-- > 0) {
      if (++idx[k] < (shape[k] + chunks[k] - 1) / chunks[k]) { done = false; break; }
      idx[k] = 0;
    }
    if (done) break;
  }
}

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
  const auto bad = plausible(a.meta.bytes(), a.meta.chunk_bytes(), grid_size(a.meta.shape, a.meta.chunks),
                             stored_bytes(*a.kv, name.empty() ? "" : name + "/"));
  if (!bad.empty()) fail(bad);
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

  void read(std::span<std::byte> dst, const Fail& fail) const {
    const std::size_t es = dtype_size(meta.type);
    const std::uint64_t cb = meta.chunk_bytes();
    // The fill value goes where a chunk is missing: prefill only when one is.
    bool all_there = true;
    for_each_chunk(meta.shape, meta.chunks, [&](const std::vector<std::int64_t>& idx) {
      all_there = all_there && kv->size(key(chunk_key(idx, meta.separator))).has_value();
    });
    if (!all_there || element_count(meta.shape) == 0) fill_with(dst, meta.fill, es);
    // Chunks cut along the first dimension only (what ckpt and Orbax write), C order,
    // little-endian: a full chunk is one contiguous run of dst and decodes straight into it.
    bool runs = !meta.fortran && !meta.big_endian && !meta.shape.empty();
    for (std::size_t i = 1; i < meta.shape.size(); ++i) runs = runs && meta.chunks[i] == meta.shape[i];
    std::unique_ptr<std::byte[]> comp_buf, raw_buf;
    std::size_t comp_cap = 0;
    std::vector<std::byte> t;
    for_each_chunk(meta.shape, meta.chunks, [&](const std::vector<std::int64_t>& idx) {
      const std::string k = key(chunk_key(idx, meta.separator));
      const auto size = kv->size(k);
      if (!size) return;
      const std::uint64_t max_comp = meta.compressor == io::codec::none ? cb : cb + cb / 8 + (1u << 20);
      if (*size > max_comp) fail("chunk " + k + " is " + std::to_string(*size) + " bytes, more than any encoding of its " + std::to_string(cb));
      const std::uint64_t at = static_cast<std::uint64_t>(idx.empty() ? 0 : idx[0]) * cb;
      const bool direct = runs && at + cb <= dst.size();
      std::span<std::byte> raw;
      if (direct) {
        raw = dst.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(cb));
      } else {
        if (!raw_buf) raw_buf.reset(new std::byte[std::max<std::size_t>(static_cast<std::size_t>(cb), 1)]);
        raw = {raw_buf.get(), static_cast<std::size_t>(cb)};
      }
      try {
        if (meta.compressor == io::codec::none) {
          if (*size != cb) fail("chunk " + k + " holds " + std::to_string(*size) + " bytes, " + std::to_string(cb) + " expected");
          kv->read(k, 0, raw);
        } else {
          if (*size > comp_cap) {
            comp_cap = static_cast<std::size_t>(*size);
            comp_buf.reset(new std::byte[comp_cap]);  // not zeroed: read overwrites it
          }
          const std::span<std::byte> comp(comp_buf.get(), static_cast<std::size_t>(*size));
          kv->read(k, 0, comp);
          if (const std::string bad = io::decompress(meta.compressor, comp, raw); !bad.empty()) fail("chunk " + k + ": " + bad);
        }
      } catch (const CorruptCheckpointError&) {
        throw;
      } catch (const Error& e) {
        fail("chunk " + k + ": " + e.what());
      }
      if (direct) return;
      if (meta.big_endian) zarr::byteswap(raw, es, meta.type);
      std::span<const std::byte> c = raw;
      if (meta.fortran && meta.shape.size() > 1) {
        std::vector<std::size_t> order(meta.shape.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
        t.resize(raw.size());
        untranspose(raw, t, meta.chunks, order, es);
        c = t;
      }
      copy_chunk(dst, meta.shape, meta.chunks, idx, c, es);
    });
  }
};

}  // namespace ckpt::zarr
