// ckpt/format/ocdbt/coding.hpp — the byte-level pieces of TensorStore's OCDBT format:
// varints, the envelope every manifest and node is wrapped in (magic, length,
// version, compression, body, CRC-32C), and data file tables.
//
// Everything decoded here is untrusted: a Cursor never reads past its end, counts are
// checked against the bytes left before anything is sized by them, and zstd bodies
// decompress into a buffer that may grow only up to a caller-given limit.
#pragma once

#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/crc32c.hpp>

namespace ckpt::detail::ocdbt {

inline constexpr std::uint32_t manifest_magic = 0x0cdb3a2a;
inline constexpr std::uint32_t btree_magic = 0x0cdb20de;
inline constexpr std::uint32_t version_tree_magic = 0x0cdb1234;
// What ckpt accepts of one encoded or decoded manifest or node. TensorStore's default
// max_decoded_node_bytes is 8 MiB (Orbax sets 100 MB on the config; real nodes stay
// far smaller).
inline constexpr std::uint64_t max_node_bytes = std::uint64_t{256} << 20;
inline constexpr std::size_t max_path_bytes = 65535;

// Thrown by decoding; the database reader adds the checkpoint and file to the message.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> d) : d_(d) {}

  std::size_t left() const { return d_.size() - pos_; }
  std::size_t pos() const { return pos_; }
  bool done() const { return pos_ == d_.size(); }

  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(d_[pos_++]);
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const std::uint8_t b = u8();
      if (shift == 63 && b > 1) throw FormatError("varint overflows 64 bits");
      v |= std::uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    throw FormatError("varint longer than 10 bytes");
  }
  // A varint that sizes something: at most `max`.
  std::uint64_t varint_max(std::uint64_t max, const char* what) {
    const std::uint64_t v = varint();
    if (v > max) throw FormatError(std::string(what) + " " + std::to_string(v) + " exceeds " + std::to_string(max));
    return v;
  }
  std::uint32_t u32le() {
    need(4);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<std::uint8_t>(d_[pos_ + static_cast<std::size_t>(i)])} << (8 * i);
    pos_ += 4;
    return v;
  }
  std::uint64_t u64le() {
    const std::uint64_t lo = u32le();
    return lo | std::uint64_t{u32le()} << 32;
  }
  std::span<const std::byte> bytes(std::uint64_t n) {
    need(n);
    auto s = d_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  // A count of entries each taking at least `min_bytes` bytes: checked against what is left.
  std::size_t count(std::size_t min_bytes, const char* what) {
    const std::uint64_t n = varint();
    if (n > left() / std::max<std::size_t>(min_bytes, 1))
      throw FormatError(std::string(what) + " " + std::to_string(n) + " exceeds what the remaining " + std::to_string(left()) +
                        " bytes can hold");
    return static_cast<std::size_t>(n);
  }

 private:
  void need(std::uint64_t n) const {
    if (n > left()) throw FormatError("truncated (needs " + std::to_string(n) + " more bytes, " + std::to_string(left()) + " left)");
  }
  std::span<const std::byte> d_;
  std::size_t pos_ = 0;
};

inline void put_varint(std::vector<std::byte>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::byte>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::byte>(v));
}
inline void put_le(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// zstd-decompresses src into at most `max` bytes (the frame's declared size is not trusted).
inline std::vector<std::byte> zstd_bounded(std::span<const std::byte> src, std::uint64_t max) {
  ZSTD_DStream* ds = ZSTD_createDStream();
  if (!ds) throw FormatError("out of memory for zstd");
  struct Free {
    ZSTD_DStream* d;
    ~Free() { ZSTD_freeDStream(d); }
  } guard{ds};
  ZSTD_initDStream(ds);
  std::vector<std::byte> out(static_cast<std::size_t>(std::min<std::uint64_t>(max, std::max<std::uint64_t>(src.size() * 4, 4096))));
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  std::size_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() >= max) throw FormatError("decompresses to more than " + std::to_string(max) + " bytes");
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(max, out.size() * 2)));
    }
    ZSTD_outBuffer o{out.data(), out.size(), produced};
    const std::size_t rc = ZSTD_decompressStream(ds, &o, &in);
    produced = o.pos;
    if (ZSTD_isError(rc)) throw FormatError(std::string("zstd: ") + ZSTD_getErrorName(rc));
    if (rc == 0) {
      if (in.pos != in.size) throw FormatError("bytes after the zstd frame");
      break;
    }
    if (in.pos == in.size && o.pos < o.size) throw FormatError("zstd data is truncated");
  }
  out.resize(produced);
  return out;
}

// Checks an encoded manifest or node and returns its (decompressed) body.
inline std::vector<std::byte> decode_envelope(std::span<const std::byte> data, std::uint32_t magic, std::uint64_t max_decoded) {
  if (data.size() < 4 + 8 + 1 + 1 + 4) throw FormatError("too short (" + std::to_string(data.size()) + " bytes)");
  std::uint32_t m = 0;
  for (int i = 0; i < 4; ++i) m = (m << 8) | static_cast<std::uint8_t>(data[static_cast<std::size_t>(i)]);
  if (m != magic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "magic 0x%08x is not 0x%08x", m, magic);
    throw FormatError(buf);
  }
  Cursor c(data);
  c.bytes(4);
  const std::uint64_t length = c.u64le();
  if (length != data.size())
    throw FormatError("header says " + std::to_string(length) + " bytes, " + std::to_string(data.size()) + " stored");
  const std::uint32_t stored = [&] {
    Cursor t(data.subspan(data.size() - 4));
    return t.u32le();
  }();
  const std::uint32_t actual = io::crc32c(data.first(data.size() - 4));
  if (stored != actual) throw FormatError("crc32c mismatch (stored " + std::to_string(stored) + ", computed " + std::to_string(actual) + ")");
  Cursor h(data.first(data.size() - 4));
  h.bytes(12);
  if (const auto v = h.varint(); v != 0) throw FormatError("format version " + std::to_string(v) + " is not 0");
  const std::uint64_t compression = h.varint();
  const auto body = data.subspan(h.pos(), data.size() - 4 - h.pos());
  if (compression == 0) {
    if (body.size() > max_decoded) throw FormatError("body exceeds " + std::to_string(max_decoded) + " bytes");
    return {body.begin(), body.end()};
  }
  if (compression == 1) return zstd_bounded(body, max_decoded);
  throw FormatError("compression format " + std::to_string(compression) + " is unknown");
}

// Wraps a body in the envelope (zstd at `level` when level >= 0... or stored when compress is false).
inline std::vector<std::byte> encode_envelope(std::span<const std::byte> body, std::uint32_t magic, bool compress, int level) {
  std::vector<std::byte> out;
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<std::byte>(magic >> (8 * i)));
  put_le(out, 0, 8);  // length, patched below
  put_varint(out, 0);
  put_varint(out, compress ? 1 : 0);
  if (compress) {
    const std::size_t at = out.size();
    out.resize(at + ZSTD_compressBound(body.size()));
    const std::size_t n = ZSTD_compress(out.data() + at, out.size() - at, body.data(), body.size(), level);
    if (ZSTD_isError(n)) throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    out.resize(at + n);
  } else {
    out.insert(out.end(), body.begin(), body.end());
  }
  const std::uint64_t total = out.size() + 4;
  for (int i = 0; i < 8; ++i) out[4 + static_cast<std::size_t>(i)] = static_cast<std::byte>(total >> (8 * i));
  put_le(out, io::crc32c(out), 4);
  return out;
}

// One entry of a data file table: the path relative to the database root, and the
// transitive path that applies to the tables of nodes read from it.
struct DataFile {
  std::string path;
  std::string transitive;
};

inline bool safe_path(std::string_view k) {
  if (k.empty() || k.size() > max_path_bytes || k.front() == '/') return false;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = k.find('/', start);
    const auto seg = k.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return k.find('\0') == std::string_view::npos && k.find('\\') == std::string_view::npos;
}

inline std::vector<DataFile> read_data_file_table(Cursor& c, const std::string& transitive) {
  const std::size_t n = c.count(2, "data file count");
  std::vector<DataFile> out;
  if (n == 0) return out;
  std::vector<std::uint64_t> prefix(n, 0), suffix(n), base(n);
  for (std::size_t i = 1; i < n; ++i) prefix[i] = c.varint_max(max_path_bytes, "data file path prefix length");
  for (auto& s : suffix) s = c.varint_max(max_path_bytes, "data file path suffix length");
  for (auto& b : base) b = c.varint_max(max_path_bytes, "data file base path length");
  std::string prev;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (prefix[i] > prev.size()) throw FormatError("data file path prefix longer than the previous path");
    const auto s = c.bytes(suffix[i]);
    std::string path = prev.substr(0, static_cast<std::size_t>(prefix[i]));
    path.append(reinterpret_cast<const char*>(s.data()), s.size());
    if (base[i] > path.size()) throw FormatError("data file base path longer than its path");
    const std::string full = transitive + path;
    if (!safe_path(full)) throw FormatError("data file path \"" + full.substr(0, 80) + "\" leaves the database");
    out.push_back({full, transitive + path.substr(0, static_cast<std::size_t>(base[i]))});
    prev = std::move(path);
  }
  return out;
}

// Writes a table of data files (no transitive part), each a path and how much of it
// is its base path: 0 for a database's own "d/" + name (as TensorStore writes them),
// the length of "ocdbt.process_1/" for a file of a per-process database the root
// refers to (whose own references are then relative to that directory).
inline void write_data_file_table(std::vector<std::byte>& out,
                                  const std::vector<std::pair<std::string, std::size_t>>& files) {
  put_varint(out, files.size());
  if (files.empty()) return;
  std::vector<std::size_t> prefix(files.size(), 0);
  for (std::size_t i = 1; i < files.size(); ++i) {
    const auto& [path, base] = files[i];
    const auto& [prev, prev_base] = files[i - 1];
    std::size_t k = 0;
    while (k < path.size() && k < prev.size() && path[k] == prev[k]) ++k;
    // the spec: the common prefix may not extend past either base path unless the
    // two base paths are equal
    const bool same_base = base == prev_base && path.compare(0, base, prev, 0, prev_base) == 0;
    if (!same_base) k = std::min({k, base, prev_base});
    prefix[i] = k;
  }
  for (std::size_t i = 1; i < files.size(); ++i) put_varint(out, prefix[i]);
  for (std::size_t i = 0; i < files.size(); ++i) put_varint(out, files[i].first.size() - prefix[i]);
  for (std::size_t i = 0; i < files.size(); ++i) put_varint(out, files[i].second);
  for (std::size_t i = 0; i < files.size(); ++i)
    for (std::size_t k = prefix[i]; k < files[i].first.size(); ++k) out.push_back(static_cast<std::byte>(files[i].first[k]));
}

// The same for plain paths, each its own database's (base path "").
inline void write_data_file_table(std::vector<std::byte>& out, const std::vector<std::string>& paths) {
  std::vector<std::pair<std::string, std::size_t>> files;
  for (const auto& p : paths) files.emplace_back(p, 0);
  write_data_file_table(out, files);
}

}  // namespace ckpt::detail::ocdbt
