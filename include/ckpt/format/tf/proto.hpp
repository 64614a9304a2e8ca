// ckpt/format/tf/proto.hpp — a bounded protobuf wire-format reader, and the two messages of
// a tensor bundle's index: BundleHeaderProto and BundleEntryProto.
//
// Why not libprotobuf: a header-only library cannot ship the generated code of
// tensor_bundle.proto (it must match the protobuf version the user links), and the
// messages are five small ones of scalars and nested lists. The wire format (varints,
// fixed32/64, length-delimited) is simple to read with every length checked against the
// bytes left; unknown fields are skipped as protobuf does, so newer writers still read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ckpt::detail::tf::proto {

// Reads fields from one message's bytes; every read fails (returns false) rather than
// running past the end.
class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> b) : b_(b) {}

  bool done() const { return at_ >= b_.size(); }
  std::size_t remaining() const { return b_.size() - at_; }

  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= b_.size()) return false;
      const auto c = static_cast<std::uint8_t>(b_[at_++]);
      v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;  // more than 10 bytes
  }

  // The next field's number and wire type.
  bool tag(std::uint32_t& field, std::uint32_t& wire) {
    std::uint64_t t;
    if (!varint(t) || (t >> 3) == 0 || (t >> 3) > 0x1fffffff) return false;
    field = static_cast<std::uint32_t>(t >> 3);
    wire = static_cast<std::uint32_t>(t & 7);
    return true;
  }

  bool fixed32(std::uint32_t& v) {
    if (b_.size() - at_ < 4 || at_ > b_.size()) return false;
    v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(b_[at_ + static_cast<std::size_t>(i)]);
    at_ += 4;
    return true;
  }

  bool bytes(std::span<const std::byte>& out) {
    std::uint64_t n;
    if (!varint(n) || n > b_.size() - at_) return false;
    out = b_.subspan(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return true;
  }

  // Skips a field of a wire type this reader does not want.
  bool skip(std::uint32_t wire) {
    std::uint64_t v;
    std::span<const std::byte> s;
    switch (wire) {
      case 0: return varint(v);
      case 1: if (b_.size() - at_ < 8) return false; at_ += 8; return true;
      case 2: return bytes(s);
      case 5: if (b_.size() - at_ < 4) return false; at_ += 4; return true;
      default: return false;  // groups (3, 4) are not used by these messages
    }
  }

 private:
  std::span<const std::byte> b_;
  std::size_t at_ = 0;
};

// tensorflow/core/framework/versions.proto + tensor_bundle.proto
struct BundleHeader {
  std::int64_t num_shards = 0;
  int endianness = 0;  // 0 LITTLE, 1 BIG
  std::int64_t producer = 0;
  std::int64_t min_consumer = 0;
  std::vector<std::int64_t> bad_consumers;
};

struct SliceExtent {
  std::int64_t start = 0;
  std::optional<std::int64_t> length;  // none: the whole dimension
};

struct BundleEntry {
  int dtype = 0;  // tensorflow DataType
  std::vector<std::int64_t> shape;
  bool unknown_rank = false;
  std::int64_t shard_id = 0;
  std::int64_t offset = 0;
  std::int64_t size = 0;
  std::optional<std::uint32_t> crc32c;  // masked
  std::vector<std::vector<SliceExtent>> slices;
};

namespace detail {
inline constexpr std::size_t max_rank = 64;
inline constexpr std::size_t max_slices = 1 << 16;
inline std::int64_t as_int64(std::uint64_t v) { return static_cast<std::int64_t>(v); }

inline bool parse_version(std::span<const std::byte> b, BundleHeader& h) {
  WireReader r(b);
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::uint64_t v;
    if (w == 0 && (f == 1 || f == 2 || f == 3)) {
      if (!r.varint(v)) return false;
      if (f == 1) h.producer = as_int64(v);
      else if (f == 2) h.min_consumer = as_int64(v);
      else if (h.bad_consumers.size() < 1024) h.bad_consumers.push_back(as_int64(v));
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

inline bool parse_dim(std::span<const std::byte> b, std::int64_t& size) {
  WireReader r(b);
  size = 0;
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::uint64_t v;
    if (f == 1 && w == 0) {
      if (!r.varint(v)) return false;
      size = as_int64(v);
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

inline bool parse_shape(std::span<const std::byte> b, BundleEntry& e) {
  WireReader r(b);
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::span<const std::byte> s;
    std::uint64_t v;
    if (f == 2 && w == 2) {
      std::int64_t d;
      if (!r.bytes(s) || !parse_dim(s, d) || e.shape.size() >= max_rank) return false;
      e.shape.push_back(d);
    } else if (f == 3 && w == 0) {
      if (!r.varint(v)) return false;
      e.unknown_rank = v != 0;
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

inline bool parse_extent(std::span<const std::byte> b, SliceExtent& x) {
  WireReader r(b);
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::uint64_t v;
    if ((f == 1 || f == 2) && w == 0) {
      if (!r.varint(v)) return false;
      if (f == 1) x.start = as_int64(v);
      else x.length = as_int64(v);
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

inline bool parse_slice(std::span<const std::byte> b, std::vector<SliceExtent>& out) {
  WireReader r(b);
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::span<const std::byte> s;
    if (f == 1 && w == 2) {
      SliceExtent x;
      if (!r.bytes(s) || !parse_extent(s, x) || out.size() >= max_rank) return false;
      out.push_back(x);
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}
}  // namespace detail

// Both return false on malformed bytes (the caller names the checkpoint and key).
inline bool parse_header(std::span<const std::byte> b, BundleHeader& h) {
  WireReader r(b);
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::uint64_t v;
    std::span<const std::byte> s;
    if ((f == 1 || f == 2) && w == 0) {
      if (!r.varint(v)) return false;
      if (f == 1) h.num_shards = detail::as_int64(v);
      else h.endianness = static_cast<int>(v & 0x7fffffff);
    } else if (f == 3 && w == 2) {
      if (!r.bytes(s) || !detail::parse_version(s, h)) return false;
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

inline bool parse_entry(std::span<const std::byte> b, BundleEntry& e) {
  WireReader r(b);
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return false;
    std::uint64_t v;
    std::span<const std::byte> s;
    if ((f == 1 || f == 3 || f == 4 || f == 5) && w == 0) {
      if (!r.varint(v)) return false;
      if (f == 1) e.dtype = static_cast<int>(v & 0x7fffffff);
      else if (f == 3) e.shard_id = detail::as_int64(v);
      else if (f == 4) e.offset = detail::as_int64(v);
      else e.size = detail::as_int64(v);
    } else if (f == 2 && w == 2) {
      if (!r.bytes(s) || !detail::parse_shape(s, e)) return false;
    } else if (f == 6 && w == 5) {
      std::uint32_t c;
      if (!r.fixed32(c)) return false;
      e.crc32c = c;
    } else if (f == 7 && w == 2) {
      std::vector<SliceExtent> slice;
      if (!r.bytes(s) || !detail::parse_slice(s, slice) || e.slices.size() >= detail::max_slices) return false;
      e.slices.push_back(std::move(slice));
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

}  // namespace ckpt::detail::tf::proto
