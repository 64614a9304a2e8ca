// ckpt/format/zarr/chunk_copy.hpp — where a decoded chunk's elements go: into the
// whole array, or into a box of it (a rank's shard: only the chunks that meet the box
// are read). Shared by zarr v2 and v3, in a directory or a key-value store.
//
// A decoded chunk is C order, native byte order, of the chunk's full shape (edge
// chunks included); an array or a box is C order of its own shape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <ckpt/format/zarr/metadata.hpp>

namespace ckpt::detail::zarr {

// A buffer reused from chunk to chunk, grown without zeroing: every use overwrites the
// bytes it asks for (a read, a decompression), so clearing them would be one more
// pass over every compressed byte of the array.
class Scratch {
 public:
  std::span<std::byte> get(std::size_t n) {
    if (n > cap_) {
      buf_.reset(new std::byte[n]);  // default-initialized: not zeroed
      cap_ = n;
    }
    return {buf_.get(), n};
  }

 private:
  std::unique_ptr<std::byte[]> buf_;
  std::size_t cap_ = 0;
};

// Calls f(idx) for every index with lo <= idx <= hi (inclusive, per dimension), in C
// order; once with an empty idx for rank 0.
template <class F>
void for_each_index_in(const std::vector<std::int64_t>& lo, const std::vector<std::int64_t>& hi, F&& f) {
  const std::size_t rank = lo.size();
  for (std::size_t i = 0; i < rank; ++i)
    if (hi[i] < lo[i]) return;
  std::vector<std::int64_t> idx = lo;
  for (;;) {
    f(idx);
    std::size_t k = rank;
    bool done = true;
    while (k-- > 0) {
      if (++idx[k] <= hi[k]) { done = false; break; }
      idx[k] = lo[k];
    }
    if (done) break;
  }
}

// The number of chunks in the grid of shape/chunks (max_chunks + 1 when beyond it).
inline std::uint64_t grid_size(const Shape& shape, const Shape& chunks) {
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto g = static_cast<std::uint64_t>((shape[i] + chunks[i] - 1) / chunks[i]);
    if (g != 0 && n > max_chunks / g) return max_chunks + 1;
    n *= g;
  }
  return n;
}

// Iterates the chunk grid of shape/chunks in C order; f(idx) for each. Grids beyond
// max_chunks are refused before.
template <class F>
void for_each_chunk(const Shape& shape, const Shape& chunks, F&& f) {
  std::vector<std::int64_t> lo(shape.size(), 0), hi(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) hi[i] = (shape[i] + chunks[i] - 1) / chunks[i] - 1;
  for_each_index_in(lo, hi, f);
}

// Copies the part of chunk `idx` that lies in the box at `origin` of shape `box` into
// dst, the C-order box; nothing when they do not meet. The box lies in the array, so
// the part of an edge chunk beyond the array is never copied.
inline void copy_chunk_into_box(std::span<std::byte> dst, const Shape& origin, const Shape& box, const Shape& chunks,
                                const std::vector<std::int64_t>& idx, std::span<const std::byte> chunk, std::size_t es) {
  const std::size_t rank = box.size();
  if (rank == 0) {
    std::memcpy(dst.data(), chunk.data(), es);
    return;
  }
  std::vector<std::uint64_t> bstride(rank), cstride(rank);
  std::uint64_t b = 1, c = 1;
  for (std::size_t i = rank; i-- > 0;) {
    bstride[i] = b;
    b *= static_cast<std::uint64_t>(box[i]);
    cstride[i] = c;
    c *= static_cast<std::uint64_t>(chunks[i]);
  }
  // [lo, hi) in array coordinates: the chunk's extent within the box
  std::vector<std::int64_t> lo(rank), hi(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    lo[i] = std::max(idx[i] * chunks[i], origin[i]);
    hi[i] = std::min((idx[i] + 1) * chunks[i], origin[i] + box[i]);
    if (hi[i] <= lo[i]) return;
  }
  // runs along the last dimension are contiguous on both sides
  const auto inner = static_cast<std::size_t>(hi[rank - 1] - lo[rank - 1]) * es;
  std::vector<std::int64_t> outer_lo(lo.begin(), lo.end() - 1), outer_hi(rank - 1);
  for (std::size_t i = 0; i + 1 < rank; ++i) outer_hi[i] = hi[i] - 1;
  for_each_index_in(outer_lo, outer_hi, [&](const std::vector<std::int64_t>& pos) {
    std::uint64_t so = static_cast<std::uint64_t>(lo[rank - 1] - idx[rank - 1] * chunks[rank - 1]);
    std::uint64_t doff = static_cast<std::uint64_t>(lo[rank - 1] - origin[rank - 1]);
    for (std::size_t i = 0; i + 1 < rank; ++i) {
      so += static_cast<std::uint64_t>(pos[i] - idx[i] * chunks[i]) * cstride[i];
      doff += static_cast<std::uint64_t>(pos[i] - origin[i]) * bstride[i];
    }
    std::memcpy(dst.data() + doff * es, chunk.data() + so * es, inner);
  });
}

// Copies chunk `idx` into dst, the C-order array of `shape` (the part inside it).
inline void copy_chunk(std::span<std::byte> dst, const Shape& shape, const Shape& chunks, const std::vector<std::int64_t>& idx,
                       std::span<const std::byte> chunk, std::size_t es) {
  copy_chunk_into_box(dst, Shape(shape.size(), 0), shape, chunks, idx, chunk, es);
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
  std::vector<std::int64_t> lo(rank, 0), hi(rank);
  for (std::size_t k = 0; k < rank; ++k) hi[k] = shape[order[k]] - 1;
  std::size_t at = 0;
  for_each_index_in(lo, hi, [&](const std::vector<std::int64_t>& pos) {
    std::uint64_t d = 0;
    for (std::size_t k = 0; k < rank; ++k) d += static_cast<std::uint64_t>(pos[k]) * dstride[order[k]];
    std::memcpy(dst.data() + d * es, src.data() + at, es);
    at += es;
  });
}

// A Fortran-order chunk in raw (the C order of its reversed shape), put in C order in
// place; t is scratch.
inline void fortran_to_c_order(std::span<std::byte> raw, const Shape& chunks, std::size_t es, std::vector<std::byte>& t) {
  if (chunks.size() <= 1) return;
  std::vector<std::size_t> order(chunks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  t.resize(raw.size());
  untranspose(raw, t, chunks, order, es);
  std::memcpy(raw.data(), t.data(), raw.size());
}

inline void fill_with(std::span<std::byte> dst, const std::vector<std::byte>& fill, std::size_t es) {
  if (fill.empty()) {
    if (!dst.empty()) std::memset(dst.data(), 0, dst.size());
  } else {
    for (std::size_t i = 0; i + es <= dst.size(); i += es) std::memcpy(dst.data() + i, fill.data(), es);
  }
}

// Where chunk idx lands in the C-order box at `origin` of `shape` when it is one
// contiguous run of it (the chunk lies inside the box and spans the box's every
// dimension but the first): its byte offset in the box; -1 otherwise.
inline std::int64_t chunk_run_in_box(const Shape& origin, const Shape& shape, const Shape& chunks,
                                     const std::vector<std::int64_t>& idx, std::size_t es) {
  const std::size_t rank = shape.size();
  if (rank == 0) return 0;
  std::int64_t row = static_cast<std::int64_t>(es);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t start = idx[i] * chunks[i];
    if (start < origin[i] || start + chunks[i] > origin[i] + shape[i]) return -1;
    if (i > 0) {
      if (chunks[i] != shape[i]) return -1;
      row *= shape[i];
    }
  }
  return (idx[0] * chunks[0] - origin[0]) * row;
}

// Reads the box at `origin` of `shape` (inside an array chunked by `chunks`) into dst,
// C order, decoding only the chunks that meet it. load(idx, raw) decodes chunk idx
// into raw (chunk_bytes, C order, native byte order) and returns false when the chunk
// is missing: its part of the box then reads as `fill`. A chunk that is a contiguous
// run of the box (chunks cut along the first dimension, as ckpt and Orbax write them)
// decodes straight into dst; others go through one chunk-sized buffer.
template <class Load>
void read_box(const Shape& chunks, std::uint64_t chunk_bytes, std::size_t es, const std::vector<std::byte>& fill,
              const Shape& origin, const Shape& shape, std::span<std::byte> dst, Load&& load) {
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> lo(rank), hi(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    if (shape[i] == 0) return;
    lo[i] = origin[i] / chunks[i];
    hi[i] = (origin[i] + shape[i] - 1) / chunks[i];
  }
  const auto cb = static_cast<std::size_t>(std::max<std::uint64_t>(chunk_bytes, es));
  Scratch buffer;  // allocated by the first chunk that needs it
  for_each_index_in(lo, hi, [&](const std::vector<std::int64_t>& idx) {
    if (const std::int64_t at = chunk_run_in_box(origin, shape, chunks, idx, es); at >= 0) {
      const auto run = dst.subspan(static_cast<std::size_t>(at), cb);
      if (!load(idx, run)) fill_with(run, fill, es);
      return;
    }
    const auto raw = buffer.get(cb);
    if (!load(idx, raw)) fill_with(raw, fill, es);
    copy_chunk_into_box(dst, origin, shape, chunks, idx, raw, es);
  });
}

}  // namespace ckpt::detail::zarr
