// ckpt/leaf/strided.hpp — arrays whose elements are not laid out in row-major order:
// column-major matrices and tensors, views with strides. Checkpoints hold every array
// row-major with numpy's shape, so such an array is copied out in that order on save
// and read back in pieces on restore.
//
// An array here is its shape (numpy's, outermost first) and, per dimension, the
// distance in elements between neighbours along it (its stride): a column-major
// [3,4] matrix has strides [1,3], a row-major one [4,1].
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <ckpt/leaf/array_restore.hpp>

namespace ckpt::detail {

// True when an array of shape `dims` and these strides lies in memory in row-major
// order without gaps: its bytes are then the leaf's. Dimensions of length 1 may have
// any stride (a column vector is row-major too).
inline bool is_row_major(std::span<const std::int64_t> dims, std::span<const std::int64_t> strides) {
  std::int64_t expected = 1;
  for (std::size_t k = dims.size(); k-- > 0;) {
    if (dims[k] == 0) return true;  // no elements: nothing to reorder
    if (dims[k] != 1 && strides[k] != expected) return false;
    expected *= dims[k];
  }
  return true;
}

// Visits `count` elements of the array, in row-major order from the element whose
// row-major index is `first`, as runs along the last dimension: run(offset, step, index,
// length) stands for the elements index + r at memory offset + r * step, r < length.
template <class Run>
void for_each_strided_run(std::span<const std::int64_t> dims, std::span<const std::int64_t> strides,
                          std::uint64_t first, std::uint64_t count, Run&& run) {
  if (count == 0) return;
  const std::size_t n = dims.size();
  if (n == 0) return run(std::int64_t{0}, std::int64_t{0}, std::uint64_t{0}, std::uint64_t{1});  // one element
  std::vector<std::int64_t> at(n);  // the multi-index of the next element
  std::int64_t offset = 0;
  std::uint64_t rest = first;
  for (std::size_t k = n; k-- > 0;) {
    const auto d = static_cast<std::uint64_t>(dims[k]);
    at[k] = static_cast<std::int64_t>(rest % d);
    rest /= d;
    offset += at[k] * strides[k];
  }
  const std::int64_t inner = dims[n - 1], step = strides[n - 1];
  for (std::uint64_t index = first, end = first + count; index < end;) {
    const std::uint64_t length = std::min<std::uint64_t>(static_cast<std::uint64_t>(inner - at[n - 1]), end - index);
    run(offset, step, index, length);
    index += length;
    offset += static_cast<std::int64_t>(length) * step;
    at[n - 1] += static_cast<std::int64_t>(length);
    if (at[n - 1] < inner) continue;
    offset -= inner * step;  // carry into the outer dimensions
    at[n - 1] = 0;
    for (std::size_t k = n - 1; k-- > 0;) {
      offset += strides[k];
      if (++at[k] < dims[k]) break;
      offset -= dims[k] * strides[k];
      at[k] = 0;
    }
  }
}

// Calls each(offset, index) for `count` elements from row-major index `first`: the
// element of row-major index `index` at memory offset `offset`. Whole rows (of the last
// dimension) go in square tiles over the last two dimensions, so that a column-major
// array is read (or written) a few pages at a time: along a whole row, each element of
// a large column-major matrix lies on another page.
template <class Each>
void for_each_strided(std::span<const std::int64_t> dims, std::span<const std::int64_t> strides, std::uint64_t first,
                      std::uint64_t count, Each&& each) {
  auto runs = [&](std::uint64_t from, std::uint64_t n) {
    for_each_strided_run(dims, strides, from, n, [&](std::int64_t offset, std::int64_t step, std::uint64_t index, std::uint64_t length) {
      for (std::uint64_t r = 0; r < length; ++r) each(offset + static_cast<std::int64_t>(r) * step, index + r);
    });
  };
  const std::size_t n = dims.size();
  if (n < 2 || count == 0) return runs(first, count);
  const auto cols = static_cast<std::uint64_t>(dims[n - 1]), rows = static_cast<std::uint64_t>(dims[n - 2]);
  const std::uint64_t end = first + count;
  std::uint64_t at = std::min(end, (first + cols - 1) / cols * cols);  // the first whole row
  runs(first, at - first);
  constexpr std::uint64_t tile = 32;
  while (end - at >= cols) {
    const std::uint64_t row = at / cols, in_slice = row % rows;
    const std::uint64_t k = std::min(rows - in_slice, (end - at) / cols);  // whole rows of one 2-D slice
    std::int64_t offset = static_cast<std::int64_t>(in_slice) * strides[n - 2];
    for (std::uint64_t rest = row / rows, d = n - 2; d-- > 0; rest /= static_cast<std::uint64_t>(dims[d]))
      offset += static_cast<std::int64_t>(rest % static_cast<std::uint64_t>(dims[d])) * strides[d];
    for (std::uint64_t i0 = 0; i0 < k; i0 += tile)
      for (std::uint64_t j0 = 0; j0 < cols; j0 += tile)
        for (std::uint64_t i = i0; i < std::min(k, i0 + tile); ++i)
          for (std::uint64_t j = j0; j < std::min(cols, j0 + tile); ++j)
            each(offset + static_cast<std::int64_t>(i) * strides[n - 2] + static_cast<std::int64_t>(j) * strides[n - 1],
                 at + i * cols + j);
    at += k * cols;
  }
  runs(at, end - at);
}

// A leaf holding the array's elements in row-major order: a copy, since much of what
// handles a snapshot (async saves' buffers, the incremental manager, MPI saves, edits)
// reads a leaf's bytes in memory, not a stream (docs/torch.md, "Storage order and copies").
template <class E>
LeafBytes strided_leaf(Shape shape, const E* base, std::span<const std::int64_t> strides) {
  const auto n = static_cast<std::size_t>(element_count(shape));
  std::vector<std::byte> bytes(n * sizeof(E));
  E* out = reinterpret_cast<E*>(bytes.data());  // new[] aligns for every element type
  for_each_strided(shape, strides, 0, n, [&](std::int64_t offset, std::uint64_t index) { out[index] = base[offset]; });
  return LeafBytes::own(dtype_v<E>, std::move(shape), std::move(bytes));
}

// Reads the checkpoint's row-major leaf into a strided array of shape `dims` whose
// caller has checked the shape, converting dtypes as read_elements does. The leaf
// arrives in verified pieces (LeafSource::read_pieces) that are scattered into place,
// so that a format that reads ranges needs a buffer of one piece, not of the leaf.
template <class E>
void read_strided(const LeafSource& src, E* base, std::span<const std::int64_t> dims,
                  std::span<const std::int64_t> strides) {
  constexpr dtype to = dtype_v<E>;
  const std::uint64_t n = static_cast<std::uint64_t>(element_count(dims));
  // Elements copied as bytes: a piece need not be aligned for E.
  auto scatter = [&](const std::byte* values, std::uint64_t first, std::uint64_t count) {
    for_each_strided(dims, strides, first, count, [&](std::int64_t offset, std::uint64_t index) {
      std::memcpy(base + offset, values + (index - first) * sizeof(E), sizeof(E));
    });
  };
  if (src.shape_only()) {  // allocate<T>: zeros
    const E zero{};
    for_each_strided_run(dims, strides, 0, n, [&](std::int64_t offset, std::int64_t step, std::uint64_t, std::uint64_t length) {
      for (std::uint64_t r = 0; r < length; ++r) base[offset + static_cast<std::int64_t>(r) * step] = zero;
    });
    return;
  }
  src.expect_castable(to);
  const std::size_t from = dtype_size(src.type());
  if (src.byte_length() != n * from) src.fail_shape(Shape(dims.begin(), dims.end()));
  std::vector<std::byte> converted;  // a piece converted to E, when the dtypes differ
  src.read_pieces(cast_piece_bytes(src.max_memory()), [&](std::uint64_t offset, std::span<const std::byte> raw) {
    const std::uint64_t first = offset / from, count = raw.size() / from;
    if (src.type() == to) {
      check_bool_bytes(src, reinterpret_cast<const E*>(raw.data()), static_cast<std::size_t>(count));  // bools only
      return scatter(raw.data(), first, count);
    }
    converted.resize(static_cast<std::size_t>(count) * sizeof(E));
    if (auto bad = convert_elements(src.type(), raw.data(), to, converted.data(), static_cast<std::size_t>(count)))
      throw DtypeMismatchError(src.checkpoint(), src.path(),
                               "element " + std::to_string(first + *bad) + " does not fit in " +
                                   std::string(dtype_name(to)) + " (dtype " + std::string(dtype_name(src.type())) +
                                   " in checkpoint)");
    scatter(converted.data(), first, count);
  });
}

}  // namespace ckpt::detail
