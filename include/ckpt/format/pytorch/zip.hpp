// ckpt/format/pytorch/zip.hpp — the zip container of torch.save files: stored entries only.
//
// torch.save (PyTorchStreamWriter, miniz underneath) writes every entry stored, not
// deflated, its data aligned to 64 bytes by padding in the local header's extra field
// (id "FB"), so that a reader can map each tensor's bytes in place. That is what this
// reads: an entry is a byte range of the file, read by range from any store (a local
// mapping, S3, memory) without inflating anything. A deflated entry (an archive
// re-zipped by another tool) is refused naming its method; zip64 (files or offsets past
// 4 GiB, which torch.save writes for large models) is read and written.
//
// A general zip library (libzip, minizip) would add inflating, which these files never
// need, and reads through its own file handle: it could not read a range of an object
// on S3. The container itself is small: the end record, the central directory, and one
// local header per entry read.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::pytorch::zip {

inline constexpr std::uint32_t local_sig = 0x04034b50, central_sig = 0x02014b50, end_sig = 0x06054b50;
inline constexpr std::uint32_t end64_sig = 0x06064b50, locator64_sig = 0x07064b50;
inline constexpr std::uint64_t max_entries = 1'000'000;
inline constexpr std::uint64_t max_directory_bytes = 256u << 20;
inline constexpr std::uint64_t alignment = 64;  // of every entry's data, as torch.save aligns it

inline std::uint64_t le(std::span<const std::byte> b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

// Reads bytes [at, at + dst.size()) of the archive; throws a ckpt::Error past its end.
using ReadAt = std::function<void(std::uint64_t at, std::span<std::byte> dst)>;

struct Entry {
  std::string name;
  std::uint64_t size = 0;          // bytes (stored: as in the file)
  std::uint64_t header_offset = 0;  // of the local header
  std::uint32_t crc = 0;
  std::uint16_t method = 0;
  std::uint16_t flags = 0;
};

class Archive {
 public:
  // Reads the end record and the central directory of an archive of `size` bytes.
  // `where` names the archive in messages (inside `checkpoint`).
  Archive(ReadAt read, std::uint64_t size, std::string checkpoint, std::string where)
      : read_(std::move(read)), size_(size), checkpoint_(std::move(checkpoint)), where_(std::move(where)) {
    if (size_ < 22) fail("is " + std::to_string(size_) + " bytes, too short for a zip archive");
    // The end record is the last 22 bytes plus a comment of at most 65535.
    const std::uint64_t tail_n = std::min<std::uint64_t>(size_, 22 + 65535);
    std::vector<std::byte> tail(static_cast<std::size_t>(tail_n));
    read_(size_ - tail_n, tail);
    std::size_t at = tail.size() - 22;
    while (true) {
      if (le(tail, at, 4) == end_sig && at + 22 + le(tail, at + 20, 2) == tail.size()) break;
      if (at == 0) fail("has no zip end-of-central-directory record (not a zip archive, or cut short)");
      --at;
    }
    const std::uint64_t end_at = size_ - tail_n + at;
    std::uint64_t count = le(tail, at + 10, 2), dir_size = le(tail, at + 12, 4), dir_at = le(tail, at + 16, 4);
    if (count == 0xffff || dir_size == 0xffffffff || dir_at == 0xffffffff) {
      if (end_at < 20) fail("says it is zip64 but has no zip64 locator");
      std::byte loc[20];
      read_(end_at - 20, loc);
      if (le(loc, 0, 4) != locator64_sig) fail("says it is zip64 but has no zip64 locator");
      const std::uint64_t end64_at = le(loc, 8, 8);
      if (end64_at > end_at - 20 || end_at - 20 - end64_at < 56) fail("zip64 end record is out of place");
      std::byte e64[56];
      read_(end64_at, e64);
      if (le(e64, 0, 4) != end64_sig) fail("zip64 end record has a wrong signature");
      count = le(e64, 32, 8);
      dir_size = le(e64, 40, 8);
      dir_at = le(e64, 48, 8);
    }
    if (count > max_entries) fail("holds " + std::to_string(count) + " entries, over the limit of a million");
    if (dir_size > max_directory_bytes || dir_at > size_ || dir_size > size_ - dir_at)
      fail("central directory (" + std::to_string(dir_size) + " bytes at " + std::to_string(dir_at) +
           ") is not inside the archive");
    std::vector<std::byte> dir(static_cast<std::size_t>(dir_size));
    read_(dir_at, dir);
    std::size_t p = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (dir.size() - p < 46 || le(dir, p, 4) != central_sig) fail("central directory entry " + std::to_string(i) + " is broken");
      Entry e;
      e.flags = static_cast<std::uint16_t>(le(dir, p + 8, 2));
      e.method = static_cast<std::uint16_t>(le(dir, p + 10, 2));
      e.crc = static_cast<std::uint32_t>(le(dir, p + 16, 4));
      std::uint64_t csize = le(dir, p + 20, 4);
      e.size = le(dir, p + 24, 4);
      const std::size_t name_n = static_cast<std::size_t>(le(dir, p + 28, 2));
      const std::size_t extra_n = static_cast<std::size_t>(le(dir, p + 30, 2));
      const std::size_t comment_n = static_cast<std::size_t>(le(dir, p + 32, 2));
      e.header_offset = le(dir, p + 42, 4);
      if (dir.size() - p - 46 < name_n + extra_n + comment_n) fail("central directory entry " + std::to_string(i) + " runs past its end");
      e.name.assign(reinterpret_cast<const char*>(dir.data() + p + 46), name_n);
      // zip64 extra field: the 64-bit values of the fields that hold 0xffffffff, in order
      const auto extra = std::span(dir).subspan(p + 46 + name_n, extra_n);
      for (std::size_t x = 0; x + 4 <= extra.size();) {
        const std::uint64_t id = le(extra, x, 2), n = le(extra, x + 2, 2);
        if (n > extra.size() - x - 4) break;
        if (id == 1) {
          std::size_t f = x + 4;
          auto next = [&](std::uint64_t& v) {
            if (v != 0xffffffff) return;
            if (f + 8 > x + 4 + n) fail("zip64 field of " + e.name + " is short");
            v = le(extra, f, 8);
            f += 8;
          };
          next(e.size);
          next(csize);
          next(e.header_offset);
        }
        x += 4 + static_cast<std::size_t>(n);
      }
      if (e.flags & 1) fail("entry " + e.name + " is encrypted");
      if (e.method != 0)
        fail("entry " + e.name + " is compressed (zip method " + std::to_string(e.method) +
             "); torch.save stores its entries uncompressed, and ckpt reads only stored entries");
      if (csize != e.size) fail("entry " + e.name + " is stored but its sizes differ");
      if (e.header_offset > size_ || e.size > size_) fail("entry " + e.name + " lies outside the archive");
      if (!by_name_.emplace(e.name, entries_.size()).second) fail("holds entry " + e.name + " twice");
      entries_.push_back(std::move(e));
      p += 46 + name_n + extra_n + comment_n;
    }
  }

  const std::vector<Entry>& entries() const noexcept { return entries_; }
  const Entry* find(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &entries_[it->second];
  }
  std::uint64_t size() const noexcept { return size_; }

  // Where the entry's data begins in the archive (from its local header), checked to
  // end inside the archive.
  std::uint64_t data_offset(const Entry& e) const {
    std::byte h[30];
    if (e.header_offset > size_ - 30) fail("local header of " + e.name + " lies outside the archive");
    read_(e.header_offset, h);
    if (le(h, 0, 4) != local_sig) fail("local header of " + e.name + " has a wrong signature");
    const std::uint64_t at = e.header_offset + 30 + le(h, 26, 2) + le(h, 28, 2);
    if (at > size_ || e.size > size_ - at) fail("data of " + e.name + " runs past the end of the archive");
    return at;
  }

  // The whole entry, at most max_bytes, its CRC-32 checked.
  std::vector<std::byte> read(const Entry& e, std::uint64_t max_bytes) const {
    if (e.size > max_bytes)
      fail("entry " + e.name + " is " + std::to_string(e.size) + " bytes, over the limit of " + std::to_string(max_bytes));
    std::vector<std::byte> out(static_cast<std::size_t>(e.size));
    read_(data_offset(e), out);
    const auto crc = ::crc32_z(0, reinterpret_cast<const Bytef*>(out.data()), out.size());
    if (crc != e.crc) fail("entry " + e.name + " fails its CRC-32 check");
    return out;
  }

  [[noreturn]] void fail(const std::string& what) const { throw CorruptCheckpointError(checkpoint_, "", where_ + " " + what); }

 private:
  ReadAt read_;
  std::uint64_t size_;
  std::string checkpoint_, where_;
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> by_name_;
};

// Writes a stored-entries zip through an ObjectWriter, entry after entry, each entry's
// data aligned to 64 bytes as torch.save aligns it; zip64 records where sizes or
// offsets need them. The CRC-32 of an entry is given with it (computed from memory
// before its header goes out).
class Writer {
 public:
  // force_zip64: zip64 records for every entry, as a file past 4 GiB has them (tests
  // check that readers take them without writing 4 GiB).
  explicit Writer(storage::ObjectWriter& out, bool force_zip64 = false) : out_(out), force_zip64_(force_zip64) {}

  // The local header of an entry whose `size` bytes the caller appends next (data()).
  void begin_entry(const std::string& name, std::uint64_t size, std::uint32_t crc) {
    Entry e;
    e.name = name;
    e.size = size;
    e.crc = crc;
    e.header_offset = at_;
    const bool big = force_zip64_ || size >= 0xffffffff;
    std::string h;
    put(h, local_sig, 4);
    put(h, big ? 45 : 20, 2);  // version needed
    put(h, 0, 2);              // flags
    put(h, 0, 2);              // stored
    put(h, 0, 2);              // time
    put(h, 0x21, 2);           // date: 1980-01-01
    put(h, crc, 4);
    put(h, big ? 0xffffffff : size, 4);
    put(h, big ? 0xffffffff : size, 4);
    put(h, name.size(), 2);
    const std::size_t extra_at = h.size();
    put(h, 0, 2);  // extra length, below
    h += name;
    std::string extra;
    if (big) {
      put(extra, 1, 2);
      put(extra, 16, 2);
      put(extra, size, 8);
      put(extra, size, 8);
    }
    // "FB" padding so that the data starts on a multiple of 64 (as PyTorchStreamWriter)
    const std::uint64_t before = at_ + h.size() + extra.size() + 4;
    const std::uint64_t pad = (alignment - before % alignment) % alignment;
    put(extra, 0x4246, 2);
    put(extra, pad, 2);
    extra.append(static_cast<std::size_t>(pad), 'Z');
    h[extra_at] = static_cast<char>(extra.size() & 0xff);
    h[extra_at + 1] = static_cast<char>(extra.size() >> 8);
    h += extra;
    emit(h);
    entries_.push_back(std::move(e));
  }
  // The entry's bytes (all of them, over one or more calls).
  void data(std::span<const storage::ConstBytes> pieces, bool stable) {
    out_.append(pieces, stable);
    for (const auto& p : pieces) at_ += p.size();
  }
  void add(const std::string& name, std::span<const std::byte> bytes) {
    begin_entry(name, bytes.size(), static_cast<std::uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size())));
    const storage::ConstBytes p = bytes;
    data(std::span(&p, 1), false);
  }

  // The central directory and the end records; closes the writer.
  void finish() {
    const std::uint64_t dir_at = at_;
    std::string d;
    for (const Entry& e : entries_) {
      const bool big_size = force_zip64_ || e.size >= 0xffffffff;
      const bool big_at = force_zip64_ || e.header_offset >= 0xffffffff;
      std::string extra;
      if (big_size || big_at) {
        put(extra, 1, 2);
        put(extra, (big_size ? 16 : 0) + (big_at ? 8 : 0), 2);
        if (big_size) {
          put(extra, e.size, 8);
          put(extra, e.size, 8);
        }
        if (big_at) put(extra, e.header_offset, 8);
      }
      put(d, central_sig, 4);
      put(d, 45, 2);  // made by
      put(d, (big_size || big_at) ? 45 : 20, 2);
      put(d, 0, 2);
      put(d, 0, 2);
      put(d, 0, 2);
      put(d, 0x21, 2);
      put(d, e.crc, 4);
      put(d, big_size ? 0xffffffff : e.size, 4);
      put(d, big_size ? 0xffffffff : e.size, 4);
      put(d, e.name.size(), 2);
      put(d, extra.size(), 2);
      put(d, 0, 2);  // comment
      put(d, 0, 2);  // disk
      put(d, 0, 2);  // internal attributes
      put(d, 0, 4);  // external attributes
      put(d, big_at ? 0xffffffff : e.header_offset, 4);
      d += e.name;
      d += extra;
    }
    const std::uint64_t dir_size = d.size();
    const bool zip64 = force_zip64_ || entries_.size() >= 0xffff || dir_at >= 0xffffffff || dir_size >= 0xffffffff;
    if (zip64) {
      const std::uint64_t end64_at = dir_at + dir_size;
      put(d, end64_sig, 4);
      put(d, 44, 8);
      put(d, 45, 2);
      put(d, 45, 2);
      put(d, 0, 4);
      put(d, 0, 4);
      put(d, entries_.size(), 8);
      put(d, entries_.size(), 8);
      put(d, dir_size, 8);
      put(d, dir_at, 8);
      put(d, locator64_sig, 4);
      put(d, 0, 4);
      put(d, end64_at, 8);
      put(d, 1, 4);
    }
    put(d, end_sig, 4);
    put(d, 0, 2);
    put(d, 0, 2);
    put(d, zip64 ? 0xffff : entries_.size(), 2);
    put(d, zip64 ? 0xffff : entries_.size(), 2);
    put(d, zip64 ? 0xffffffff : dir_size, 4);
    put(d, zip64 ? 0xffffffff : dir_at, 4);
    put(d, 0, 2);
    emit(d);
    out_.close();
  }

  // Where the next entry's local header would start.
  std::uint64_t offset() const noexcept { return at_; }

 private:
  static void put(std::string& s, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void emit(const std::string& s) {
    held_.push_back(s);
    const storage::ConstBytes p = std::as_bytes(std::span(held_.back().data(), held_.back().size()));
    data(std::span(&p, 1), true);
  }

  storage::ObjectWriter& out_;
  bool force_zip64_ = false;
  std::uint64_t at_ = 0;
  std::vector<Entry> entries_;
  std::deque<std::string> held_;  // headers stay valid until close (appends may keep them)
};

}  // namespace ckpt::detail::pytorch::zip
