// ckpt/format/tf/table.hpp — the sorted key/value table (LevelDB's SSTable) that a tensor
// bundle's `.index` file is.
//
// Layout (tensorflow/core/lib/io/table_format.txt): data blocks, a metaindex block, an
// index block, then a 48-byte footer: two BlockHandles (varint offset + size) padded to
// 40 bytes and the magic 0xdb4775248b80fb57. Every block is followed by a 5-byte
// trailer: its compression type (0 none, 1 snappy) and the masked crc32c of the block's
// bytes and that type byte. A block holds entries (shared key length, unshared length,
// value length as varints, the key's new suffix, the value), then restart offsets
// (uint32 each, where a key is stored whole) and their count.
// The index block maps the last key of each data block to that block's handle.
// Everything is checked against the file's bytes: handles in bounds, crcs, snappy
// lengths bounded before decompressing, keys strictly increasing.
#pragma once

#include <snappy-c.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/crc32c.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::detail::tf::table {

namespace fs = std::filesystem;

inline constexpr std::uint64_t magic = 0xdb4775248b80fb57ull;
inline constexpr std::size_t footer_size = 48;
// An index of a few hundred thousand tensors is a few tens of MB; refuse anything far larger.
inline constexpr std::uint64_t max_file_bytes = std::uint64_t{1} << 30;
inline constexpr std::size_t max_block_bytes = std::size_t{256} << 20;

struct Entry {
  std::string key;
  std::vector<std::byte> value;
};

class TableReader {
 public:
  // fail(what) throws; the reader never returns after calling it.
  TableReader(std::span<const std::byte> file, std::function<void(const std::string&)> fail)
      : f_(file), fail_(std::move(fail)) {}

  // Ends in the table magic (file may be just the last 8 bytes).
  static bool has_magic(std::span<const std::byte> file) {
    if (file.size() < 8) return false;
    return le64(file.subspan(file.size() - 8)) == magic;
  }

  // Every entry of every data block, in key order.
  std::vector<Entry> entries() {
    if (f_.size() < footer_size) fail("the file is " + std::to_string(f_.size()) + " bytes, shorter than a table footer");
    if (!has_magic(f_)) fail("no table magic at the end (not a TensorFlow checkpoint index, or truncated)");
    const auto footer = f_.subspan(f_.size() - footer_size, footer_size - 8);
    std::size_t at = 0;
    std::uint64_t meta_off, meta_size, index_off, index_size;
    if (!varint(footer, at, meta_off) || !varint(footer, at, meta_size) || !varint(footer, at, index_off) ||
        !varint(footer, at, index_size))
      fail("malformed footer");
    const std::vector<std::byte> index = block(index_off, index_size, "index block");
    std::vector<Entry> out;
    std::string last;
    for_each(index, "index block", [&](const std::string&, std::span<const std::byte> handle) {
      std::size_t p = 0;
      std::uint64_t off, size;
      if (!varint(handle, p, off) || !varint(handle, p, size)) fail("malformed block handle in the index block");
      const std::vector<std::byte> data = block(off, size, "data block at offset " + std::to_string(off));
      for_each(data, "data block at offset " + std::to_string(off), [&](const std::string& k, std::span<const std::byte> v) {
        if (!out.empty() && !(k > last)) fail("keys are not in increasing order (" + std::to_string(out.size()) + ")");
        if (out.size() >= max_entries) fail("more than " + std::to_string(max_entries) + " entries");
        last = k;
        out.push_back({k, std::vector<std::byte>(v.begin(), v.end())});
      });
    });
    return out;
  }

 private:
  static constexpr std::size_t max_entries = 10'000'000;

  [[noreturn]] void fail(const std::string& what) const {
    fail_(what);
    throw Error(what);  // fail_ throws; this keeps [[noreturn]] honest
  }

  static std::uint64_t le64(std::span<const std::byte> b) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(b[static_cast<std::size_t>(i)]);
    return v;
  }
  static std::uint32_t le32(std::span<const std::byte> b) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(b[static_cast<std::size_t>(i)]);
    return v;
  }
  static bool varint(std::span<const std::byte> b, std::size_t& at, std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= b.size()) return false;
      const auto c = static_cast<std::uint8_t>(b[at++]);
      v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  }

  // The contents of the block at [off, off + size), its trailer checked, decompressed.
  std::vector<std::byte> block(std::uint64_t off, std::uint64_t size, const std::string& what) const {
    if (off > f_.size() || size > f_.size() - off || f_.size() - off - size < 5)
      fail(what + ": handle [" + std::to_string(off) + ", +" + std::to_string(size) + "] lies outside the file");
    const auto contents = f_.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(size));
    const auto type = static_cast<std::uint8_t>(f_[static_cast<std::size_t>(off + size)]);
    const std::uint32_t stored = le32(f_.subspan(static_cast<std::size_t>(off + size + 1), 4));
    const std::uint32_t actual = io::crc32c(f_.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(size) + 1));
    if (io::crc32c_mask(actual) != stored) fail(what + ": crc32c mismatch (the index file is corrupt)");
    if (type == 0) return {contents.begin(), contents.end()};
    if (type != 1) fail(what + ": unknown compression type " + std::to_string(type));
    const char* src = reinterpret_cast<const char*>(contents.data());
    std::size_t n = 0;
    if (snappy_uncompressed_length(src, contents.size(), &n) != SNAPPY_OK || n > max_block_bytes)
      fail(what + ": snappy data is malformed or would decompress to more than 256 MB");
    if (snappy_validate_compressed_buffer(src, contents.size()) != SNAPPY_OK) fail(what + ": snappy data is malformed");
    std::vector<std::byte> out(n);
    std::size_t got = n;
    if (snappy_uncompress(src, contents.size(), reinterpret_cast<char*>(out.data()), &got) != SNAPPY_OK || got != n)
      fail(what + ": snappy decompression failed");
    return out;
  }

  // Calls f(key, value) for each entry of a block.
  template <class F>
  void for_each(std::span<const std::byte> b, const std::string& what, F&& f) const {
    if (b.size() < 4) fail(what + ": too short for its restart count");
    const std::uint32_t restarts = le32(b.subspan(b.size() - 4));
    if (restarts == 0 || restarts > (b.size() - 4) / 4) fail(what + ": restart count " + std::to_string(restarts) + " does not fit");
    const std::size_t limit = b.size() - 4 - std::size_t{restarts} * 4;
    // Restart points in increasing order; each must fall where an entry begins.
    std::uint32_t next_restart = 0;
    auto restart = [&](std::uint32_t i) { return le32(b.subspan(limit + std::size_t{i} * 4)); };
    for (std::uint32_t i = 0; i < restarts; ++i)
      if (restart(i) > limit || (i > 0 && restart(i) <= restart(i - 1)))
        fail(what + ": restart points are out of order or past the entries");
    std::size_t at = 0;
    std::string key;
    while (at < limit) {
      if (next_restart < restarts && restart(next_restart) < at) fail(what + ": a restart point falls inside an entry");
      const bool restart_here = next_restart < restarts && restart(next_restart) == at;
      if (restart_here) ++next_restart;
      std::uint64_t shared, unshared, vlen;
      const auto entries = b.first(limit);
      if (!varint(entries, at, shared) || !varint(entries, at, unshared) || !varint(entries, at, vlen))
        fail(what + ": malformed entry header");
      if (shared > key.size()) fail(what + ": entry shares more key bytes than the previous key has");
      if (restart_here && shared != 0) fail(what + ": entry at a restart point does not store its key whole");
      if (unshared > limit - at || vlen > limit - at - unshared) fail(what + ": entry runs past the block");
      key.resize(static_cast<std::size_t>(shared));
      key.append(reinterpret_cast<const char*>(b.data() + at), static_cast<std::size_t>(unshared));
      at += static_cast<std::size_t>(unshared);
      f(key, b.subspan(at, static_cast<std::size_t>(vlen)));
      at += static_cast<std::size_t>(vlen);
    }
  }

  std::span<const std::byte> f_;
  std::function<void(const std::string&)> fail_;
};

}  // namespace ckpt::detail::tf::table
