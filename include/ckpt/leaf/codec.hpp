// ckpt/leaf/codec.hpp — how one C++ value becomes (dtype, shape, bytes) and back.
//
// A type U is a leaf when leaf_codec<U> is specialized. A codec provides:
//   static constexpr ckpt::dtype type;   // the element type it stores (for the schema)
//   static constexpr int rank;           // number of dimensions, or -1 when only known at run time
//   static LeafBytes save(const U&);     // borrows U's memory when it can; owns a copy only when U has
//                                        // no contiguous bytes (std::string is borrowed, an engine's text owned)
//   static void restore(U&, const LeafSource&);  // checks dtype/shape, sizes U, reads straight into it
// The codecs for the standard types live beside this header; a user type becomes a
// leaf by specializing leaf_codec for it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/out_of_line.hpp>
#include <ckpt/error.hpp>
#include <ckpt/leaf/box.hpp>
#include <ckpt/leaf/convert.hpp>
#include <ckpt/leaf/dtype.hpp>

namespace ckpt {

using Shape = std::vector<std::int64_t>;

// "[2,3]": shapes as messages show them.
CKPT_API std::string shape_str(const Shape& s);

// Number of elements, or -1 when a dimension is negative or the product overflows 2^62.
inline std::int64_t element_count(std::span<const std::int64_t> s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) {
    if (d < 0) return -1;
    if (d != 0 && n > (std::int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

// A leaf's bytes that are not in memory but read piece by piece while they are written
// (ckpt::convert, `ckpt convert`): converting a leaf larger than SaveOptions::max_memory
// then holds one piece of it at a time. Writers ask for pieces in order, from byte 0 to
// the end, so that a stream can verify the whole leaf's checksum as the last one goes out.
class LeafStream {
 public:
  virtual ~LeafStream() = default;
  virtual std::uint64_t size() const = 0;
  // Reads bytes [offset, offset + dst.size()); offset is where the previous read ended.
  virtual void read(std::uint64_t offset, std::span<std::byte> dst) const = 0;
};

// The save side of one leaf. `view` points at the value's own memory, or at `storage`
// when the value had to be turned into bytes; or, for a streamed leaf, `stream` gives
// the bytes and `view` is empty (only writers that say so take streamed leaves:
// FormatEntry::writes_streams).
struct LeafBytes {
  dtype type = dtype::none;
  Shape shape;
  std::span<const std::byte> view;
  detail::OutOfLineVector<std::byte> storage;  // a std::vector held by pointer: most leaves own none
  std::shared_ptr<const LeafStream> stream{};

  LeafBytes() = default;
  LeafBytes(LeafBytes&&) noexcept = default;  // moved storage keeps its buffer: view stays valid
  LeafBytes& operator=(LeafBytes&&) noexcept = default;
  // A copy of an owning leaf views its own copy of the bytes, not the original's.
  LeafBytes(const LeafBytes& o) : type(o.type), shape(o.shape), view(o.view), storage(o.storage), stream(o.stream) {
    if (o.owns()) view = storage;
  }
  LeafBytes& operator=(const LeafBytes& o) {
    if (this != &o) *this = LeafBytes(o);
    return *this;
  }
  bool owns() const noexcept { return !storage.empty() && view.data() == storage.data(); }

  static LeafBytes borrow(dtype t, Shape s, const void* data, std::size_t size) {
    LeafBytes b;
    b.type = t;
    b.shape = std::move(s);
    b.view = {static_cast<const std::byte*>(data), size};
    return b;
  }
  static LeafBytes own(dtype t, Shape s, std::vector<std::byte> bytes) {
    LeafBytes b;
    b.type = t;
    b.shape = std::move(s);
    b.storage = std::move(bytes);
    b.view = b.storage;
    return b;
  }
  static LeafBytes streamed(dtype t, Shape s, std::shared_ptr<const LeafStream> stream) {
    LeafBytes b;
    b.type = t;
    b.shape = std::move(s);
    b.stream = std::move(stream);
    return b;
  }
  // The leaf's length in bytes, streamed or not.
  std::uint64_t size() const { return stream ? stream->size() : view.size(); }
  // Makes the leaf independent of the value it was taken from (for async saves); a
  // streamed leaf is read into memory.
  void make_owned() {
    if (stream) {
      storage.resize(static_cast<std::size_t>(stream->size()));
      stream->read(0, storage);
      stream.reset();
    } else if (!owns()) {
      storage.assign(view.begin(), view.end());
    }
    view = storage;
  }
};

// The restore side of one leaf: what the checkpoint holds and a way to read it.
class LeafSource {
 public:
  virtual ~LeafSource() = default;
  virtual dtype type() const = 0;
  virtual const Shape& shape() const = 0;
  virtual std::uint64_t byte_length() const = 0;
  // Reads exactly byte_length() bytes into dst (dst.size() must equal it), verifying the checksum.
  virtual void read_into(std::span<std::byte> dst) const = 0;
  virtual const std::string& checkpoint() const = 0;
  virtual std::string path() const = 0;
  // restore_into compares the shapes of non-empty dynamic arrays; restore<T> does not.
  virtual bool check_dynamic_shapes() const = 0;
  // The dtype the caller asked leaves to be cast to, which allows floating narrowing.
  virtual std::optional<ckpt::dtype> requested_dtype() const { return std::nullopt; }
  // True when only shapes are wanted (allocating an abstract target): reads give zeros.
  virtual bool shape_only() const { return false; }
  // Like read_into, but the read may happen later, before the restore returns: the
  // caller must not look at dst until then. Restores batch reads this way to run
  // them in parallel.
  virtual void read_into_deferred(std::span<std::byte> dst) const { read_into(dst); }
  // A copy that stays valid after the restore returns (for lazy leaves); null when the
  // source cannot outlive the call.
  virtual std::shared_ptr<const LeafSource> retain() const { return nullptr; }
  // Sharded leaves (leaf/sharded.hpp): reads the box at `origin` of `shape` (elements of
  // the checkpoint's dtype, row-major) into dst. Sources over an Index read only the
  // stored bytes that intersect it; this default reads the whole leaf and copies.
  virtual void read_box(const Shape& origin, const Shape& shape, std::span<std::byte> dst) const;
  // Sharded leaves restored into an empty target: the box (origin and shape) that
  // process `rank` held when the leaf was saved as boxes by several processes. False
  // when the source records no boxes (the whole array is then read); throws Error when
  // it does and none was that process's.
  virtual bool box_held_by(int rank, Shape& origin, Shape& shape) const {
    (void)rank, (void)origin, (void)shape;
    return false;
  }

  // The ceiling on memory a read may use beyond its destination (RestoreOptions::max_memory; 0: none).
  virtual std::uint64_t max_memory() const { return 0; }
  // Calls fn(offset, bytes) with the leaf's bytes front to back, verified, in pieces of
  // at most `piece` bytes where the format reads ranges (the last piece may be shorter).
  // This default reads the whole leaf into one buffer, and throws instead when that
  // buffer would exceed max_memory().
  virtual void read_pieces(std::size_t piece,
                           const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const;

  std::vector<std::byte> read_all() const;
  [[noreturn]] void fail_dtype(dtype target) const;
  [[noreturn]] void fail_shape(const Shape& target, const char* what = "shape") const;
  void expect_dtype(dtype target) const {
    if (type() != target) fail_dtype(target);
  }
  // Throws unless this leaf's elements may be converted to `target` (leaf/convert.hpp).
  void expect_castable(dtype target) const;
  // Reads n elements converted to `target` into dst (n * dtype_size(target) bytes).
  void read_as(dtype target, std::span<std::byte> dst) const;
};

// The pieces a cast reads and converts at a time: 16 MiB, or less to stay within a
// memory budget (never under 1 MiB), always whole MiBs so that every dtype's elements fit.
inline std::size_t cast_piece_bytes(std::uint64_t max_memory) {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  std::uint64_t p = 16 * mib;
  if (max_memory != 0) p = std::clamp<std::uint64_t>(max_memory / 2 / mib * mib, mib, p);
  return static_cast<std::size_t>(p);
}

template <class U>
struct leaf_codec;  // specialized for every leaf type

template <class U>
concept leaf = requires { leaf_codec<U>::rank; };

#if CKPT_DEFINE_API
CKPT_API std::string shape_str(const Shape& s) {
  std::string r = "[";
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
  // `"," + std::to_string(...)`, which would break -Werror builds that include this.
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

CKPT_API std::vector<std::byte> LeafSource::read_all() const {
  std::vector<std::byte> v(static_cast<std::size_t>(byte_length()));
  read_into(v);
  return v;
}

CKPT_API void LeafSource::read_box(const Shape& origin, const Shape& shape, std::span<std::byte> dst) const {
  if (!is_numeric(type()) || origin.size() != this->shape().size() || shape.size() != origin.size())
    throw Error(checkpoint(), path(), "only numeric arrays can be read by box, of the array's rank");
  const std::vector<std::byte> all = read_all();
  const std::size_t z = dtype_size(type());
  const std::uint64_t n = detail::for_each_run(Shape(origin.size(), 0), this->shape(), origin, shape, z,
                                               [&](std::uint64_t src, std::uint64_t at, std::uint64_t len) {
                                                 std::memcpy(dst.data() + at, all.data() + src, len);
                                               });
  if (n * z != dst.size()) fail_shape(shape, "box outside the array: shape");
}

CKPT_API void LeafSource::fail_dtype(dtype target) const {
  throw DtypeMismatchError(checkpoint(), path(),
                           "dtype " + std::string(dtype_name(type())) + " in checkpoint, " +
                               std::string(dtype_name(target)) + " in target");
}

CKPT_API void LeafSource::fail_shape(const Shape& target, const char* what) const {
  throw ShapeMismatchError(checkpoint(), path(),
                           std::string(what) + " " + shape_str(shape()) + " in checkpoint, " + shape_str(target) +
                               " in target");
}

CKPT_API void LeafSource::expect_castable(dtype target) const {
  if (!cast_allowed(type(), target, requested_dtype())) {
    if (classify_cast(type(), target) == cast_kind::narrowing)
      throw DtypeMismatchError(checkpoint(), path(),
                               "dtype " + std::string(dtype_name(type())) + " in checkpoint, " +
                                   std::string(dtype_name(target)) +
                                   " in target: a narrowing cast (ask for it with restore_dtype)");
    fail_dtype(target);
  }
}

CKPT_API void LeafSource::read_as(dtype target, std::span<std::byte> dst) const {
  if (shape_only()) {
    if (!dst.empty()) std::memset(dst.data(), 0, dst.size());  // an empty array's data() may be null
    return;
  }
  if (type() == target) {
    // Bools are checked right after reading (codecs look at the bytes): read them now.
    if (target == dtype::bool_) return read_into(dst);
    return read_into_deferred(dst);
  }
  expect_castable(target);
  const std::size_t n = dst.size() / dtype_size(target);
  if (byte_length() != n * dtype_size(type())) fail_shape(shape());
  // Converted piece by piece: a cast never needs a copy of the whole leaf,
  // and under a memory budget the pieces fit it. Pieces are whole elements (a MiB
  // holds a whole number of every fixed-size dtype).
  const std::size_t from = dtype_size(type()), to = dtype_size(target);
  read_pieces(cast_piece_bytes(max_memory()), [&](std::uint64_t offset, std::span<const std::byte> raw) {
    const std::uint64_t first = offset / from;
    if (auto bad = convert_elements(type(), raw.data(), target, dst.data() + first * to, raw.size() / from)) {
      throw DtypeMismatchError(checkpoint(), path(),
                               "element " + std::to_string(first + *bad) + " does not fit in " +
                                   std::string(dtype_name(target)) + " (dtype " + std::string(dtype_name(type())) +
                                   " in checkpoint)");
    }
  });
}

CKPT_API void LeafSource::read_pieces(std::size_t,
                                      const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const {
  if (max_memory() != 0 && byte_length() > max_memory())
    throw Error(checkpoint(), path(),
                "reading this leaf needs a buffer of its size (" + std::to_string(byte_length()) +
                    " bytes: its format reads whole leaves), more than max_memory (" + std::to_string(max_memory()) +
                    " bytes)");
  const std::vector<std::byte> all = read_all();
  fn(0, all);
}
#endif

}  // namespace ckpt
