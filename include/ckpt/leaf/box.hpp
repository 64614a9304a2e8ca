// ckpt/leaf/box.hpp — boxes of a global array: what a Sharded leaf holds and where it lies.
//
// A box is a rectangular part of a global array: an origin (the global index of its
// first element) and a shape, its elements stored row-major. Sharded leaves save one
// box each; an Index entry stored as boxes (IndexEntry::boxes) is read by intersecting
// the box a reader wants with every stored box. for_each_run enumerates the
// intersection as runs of bytes contiguous in both boxes, so reads touch only the
// bytes wanted, in increasing file order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ckpt {

using Shape = std::vector<std::int64_t>;  // the same alias as leaf/codec.hpp's

// Where one process's part of a global array lies (set by Sharded leaves on save).
struct LeafBox {
  Shape global_shape;
  Shape origin;
};

namespace detail {

// The bytes a box of `shape` holds, in elements.
inline std::uint64_t box_elements(const Shape& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d < 0 ? 0 : d);
  return n;
}

// Calls f(src, dst, bytes) for every run of bytes of the intersection of a stored box
// (origin so, shape ss) with a wanted box (origin wo, shape ws), where src is the byte
// offset in the stored box's bytes and dst in the wanted box's; elem is the element
// size. Runs come in increasing src order. Returns the intersection's element count.
// All four shapes must have the same rank (the caller checks).
template <class F>
std::uint64_t for_each_run(const Shape& so, const Shape& ss, const Shape& wo, const Shape& ws, std::size_t elem,
                           F&& f) {
  const std::size_t n = ss.size();
  if (n == 0) {
    f(std::uint64_t{0}, std::uint64_t{0}, static_cast<std::uint64_t>(elem));
    return 1;
  }
  Shape lo(n), ext(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t a = so[k] > wo[k] ? so[k] : wo[k];
    const std::int64_t b = (so[k] + ss[k]) < (wo[k] + ws[k]) ? so[k] + ss[k] : wo[k] + ws[k];
    if (b <= a) return 0;
    lo[k] = a;
    ext[k] = b - a;
  }
  // Dims after d are whole in both boxes: a run spans them.
  std::size_t d = n - 1;
  while (d > 0 && ext[d] == ss[d] && ext[d] == ws[d]) --d;
  std::vector<std::uint64_t> sst(n), wst(n);
  std::uint64_t s = 1, w = 1;
  for (std::size_t k = n; k-- > 0;) {
    sst[k] = s;
    wst[k] = w;
    s *= static_cast<std::uint64_t>(ss[k]);
    w *= static_cast<std::uint64_t>(ws[k]);
  }
  const std::uint64_t run = static_cast<std::uint64_t>(ext[d]) * sst[d] * elem;
  Shape idx(lo.begin(), lo.begin() + static_cast<std::ptrdiff_t>(d));  // odometer over dims before d
  for (;;) {
    std::uint64_t src = static_cast<std::uint64_t>(lo[d] - so[d]) * sst[d];
    std::uint64_t dst = static_cast<std::uint64_t>(lo[d] - wo[d]) * wst[d];
    for (std::size_t k = 0; k < d; ++k) {
      src += static_cast<std::uint64_t>(idx[k] - so[k]) * sst[k];
      dst += static_cast<std::uint64_t>(idx[k] - wo[k]) * wst[k];
    }
    f(src * elem, dst * elem, run);
    bool more = false;
    for (std::size_t k = d; k-- > 0;) {
      if (++idx[k] < lo[k] + ext[k]) {
        more = true;
        break;
      }
      idx[k] = lo[k];
    }
    if (!more) break;  // every index done (at once when d == 0)
  }
  return box_elements(ext);
}

}  // namespace detail
}  // namespace ckpt
