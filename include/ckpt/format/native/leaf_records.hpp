// ckpt/format/native/leaf_records.hpp — format version 3's fixed-size leaf records.
//
// Opening a 20,000-leaf checkpoint spent most of its time decoding each leaf's msgpack
// map: eight keys and their values. From format version 3, a leaf
// stored whole and raw (in a data file, or inline in the manifest) keeps only its path
// in "leaves", as a msgpack array of its segments, and the rest of it is a record of 40
// bytes in the root's "records" binary, which a reader checks where it lies:
//
//   offset u64, length u64, xxh3 u64,   (little-endian)
//   file u32      an index into "files" (data file names), or 0xffffffff: the bytes
//                 are inline, at offset in the root's "inline" binary
//   dtype u32     an index into "dtypes" (dtype names)
//   dims_at u32, rank u32    the shape: "dims"[dims_at, +rank), little-endian i64s
//
// The k-th leaf written as a path takes the k-th record, and every record is taken.
// Other leaves (boxes, chunk checksums) stay maps in their place in "leaves", so the
// leaves keep the order they were written in. A manifest is written so only when at
// least records_from leaves fit a record: fewer gain nothing measurable, and stay
// readable by releases before version 3.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include <ckpt/index.hpp>

namespace ckpt::detail::native {

inline constexpr std::size_t record_bytes = 40;
// Where each field lies in a record (the layout above), for the writer and the reader.
namespace record_at {
inline constexpr std::size_t offset = 0, length = 8, checksum = 16, file = 24, dtype = 28, dims_at = 32, rank = 36;
static_assert(rank + 4 == record_bytes);
}  // namespace record_at
inline constexpr std::uint32_t record_inline = 0xffffffffu;
inline constexpr std::size_t records_from = 1024;

// A leaf a record can hold: stored whole and raw, or inline.
inline bool fits_record(const IndexEntry& e) {
  return e.boxes.empty() && e.chunk_xxh3.empty() && (e.file.empty() || e.codec == "raw");
}

namespace detail_records {
// Little-endian loads: one move on a little-endian host (GCC 12 did not see that in a
// loop of shifts, which was a fifth of opening 20,000 leaves).
template <class U>
U load_le(const unsigned char* p) {
  U v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) {
    U r = 0;
    for (std::size_t k = 0; k < sizeof v; ++k) r = (r << 8) | p[sizeof v - 1 - k];
    v = r;
  }
  return v;
}
inline std::uint64_t load_u64(const unsigned char* p) { return load_le<std::uint64_t>(p); }
inline std::uint32_t load_u32(const unsigned char* p) { return load_le<std::uint32_t>(p); }
inline void store(char* p, std::uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) p[k] = static_cast<char>(v >> (8 * k));
}
}  // namespace detail_records

// What the writer puts in the root for the records: found in one pass over the
// entries, before anything is packed, since msgpack needs each binary's size first.
struct RecordTables {
  std::vector<std::string_view> files;  // data file names, in order of first use
  std::vector<dtype> dtypes;            // in order of first use
  std::size_t records = 0, dims = 0, inline_bytes = 0;

  explicit RecordTables(std::span<const IndexEntry> entries) {
    std::uint32_t last_file = 0;
    for (const IndexEntry& e : entries) {
      if (!fits_record(e)) continue;
      ++records;
      dims += e.shape.size();
      inline_bytes += e.file.empty() ? e.length : 0;
      if (!e.file.empty()) file_number(e.file, last_file);
      if (std::find(dtypes.begin(), dtypes.end(), e.type) == dtypes.end()) dtypes.push_back(e.type);
    }
  }
  bool used() const { return records >= records_from; }

  // Packs "files", "dtypes", "records", "dims", "inline" (five key-value pairs) into pk,
  // whose output is out. The binaries are written a record at a time: a 20,000-leaf
  // manifest's 800 KB of records are never held whole (fresh memory costs on this VM).
  template <class Out>
  void pack(msgpack::packer<Out>& pk, Out& out, std::span<const IndexEntry> entries) const {
    auto str = [&](std::string_view s) {
      pk.pack_str(static_cast<std::uint32_t>(s.size()));
      pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
    };
    str("files");
    pk.pack_array(static_cast<std::uint32_t>(files.size()));
    for (const std::string_view f : files) str(f);
    str("dtypes");
    pk.pack_array(static_cast<std::uint32_t>(dtypes.size()));
    for (const dtype d : dtypes) str(dtype_name(d));
    str("records");
    pk.pack_bin(static_cast<std::uint32_t>(records * record_bytes));
    std::uint32_t last_file = 0;
    std::uint64_t dims_at = 0, inline_at = 0;
    for (const IndexEntry& e : entries) {
      if (!fits_record(e)) continue;
      char r[record_bytes];
      detail_records::store(r + record_at::offset, e.file.empty() ? inline_at : e.offset, 8);
      detail_records::store(r + record_at::length, e.length, 8);
      detail_records::store(r + record_at::checksum, e.checksum, 8);
      detail_records::store(r + record_at::file, e.file.empty() ? record_inline : file_number(e.file, last_file), 4);
      detail_records::store(r + record_at::dtype,
                            static_cast<std::uint64_t>(std::find(dtypes.begin(), dtypes.end(), e.type) - dtypes.begin()), 4);
      detail_records::store(r + record_at::dims_at, dims_at, 4);
      detail_records::store(r + record_at::rank, e.shape.size(), 4);
      out.write(r, record_bytes);
      dims_at += e.shape.size();
      inline_at += e.file.empty() ? e.length : 0;
    }
    str("dims");
    pk.pack_bin(static_cast<std::uint32_t>(dims * 8));
    for (const IndexEntry& e : entries) {
      if (!fits_record(e)) continue;
      for (const std::int64_t d : e.shape) {
        char b[8];
        detail_records::store(b, static_cast<std::uint64_t>(d), 8);
        out.write(b, 8);
      }
    }
    str("inline");
    pk.pack_bin(static_cast<std::uint32_t>(inline_bytes));
    for (const IndexEntry& e : entries)
      if (fits_record(e) && e.file.empty() && !e.inline_bytes.empty())
        out.write(reinterpret_cast<const char*>(e.inline_bytes.data()), e.inline_bytes.size());
  }

 private:
  // Neighbouring leaves share their file: the last one is asked first. (const: packing
  // finds the numbers the constructor gave.)
  std::uint32_t file_number(std::string_view name, std::uint32_t& last) const {
    if (last < files.size() && files[last] == name) return last;
    last = static_cast<std::uint32_t>(std::find(files.begin(), files.end(), name) - files.begin());
    return last;
  }
  std::uint32_t file_number(std::string_view name, std::uint32_t& last) {
    const std::uint32_t k = std::as_const(*this).file_number(name, last);
    if (k == files.size()) files.push_back(name);
    return k;
  }
};

// One record, as a reader takes it.
struct LeafRecord {
  std::uint64_t offset = 0, length = 0, checksum = 0;
  std::uint32_t file = 0;  // an index into LeafRecords::files, or record_inline
  dtype type = dtype::none;
  std::string_view dtype_name;  // as the manifest names it, for messages
};

// A version 3 manifest's record tables, viewed in its bytes, and the next record to
// take. (Empty in older manifests, whose leaves are all maps.)
struct LeafRecords {
  std::vector<std::string_view> files;  // each checked to be a name ckpt writes
  std::vector<std::pair<dtype, std::string_view>> dtypes;
  std::span<const unsigned char> records, dims, inline_bytes;
  std::size_t next = 0;

  std::size_t count() const { return records.size() / record_bytes; }
  std::size_t dims_count() const { return dims.size() / 8; }

  // Takes the next record into r and appends its shape to shape (a vector of i64);
  // returns what is wrong with it ("" when nothing). Checks every index against its
  // table and inline bytes against the inline binary; the shape against the length is
  // the caller's check, as for a leaf written as a map.
  template <class Dims>
  std::string take(LeafRecord& r, Dims& shape) {
    using detail_records::load_u32;
    using detail_records::load_u64;
    if (next >= count()) return "more leaves are written as paths than there are records (" + std::to_string(count()) + ")";
    const unsigned char* p = records.data() + next++ * record_bytes;
    r.offset = load_u64(p + record_at::offset);
    r.length = load_u64(p + record_at::length);
    r.checksum = load_u64(p + record_at::checksum);
    r.file = load_u32(p + record_at::file);
    const std::uint32_t d = load_u32(p + record_at::dtype), dims_at = load_u32(p + record_at::dims_at),
                        rank = load_u32(p + record_at::rank);
    if (d >= dtypes.size()) return "dtype number " + std::to_string(d) + " is not one of the " + std::to_string(dtypes.size()) + " recorded";
    r.type = dtypes[d].first;
    r.dtype_name = dtypes[d].second;
    if (rank > dims_count() || dims_at > dims_count() - rank)
      return "shape [" + std::to_string(dims_at) + ", +" + std::to_string(rank) + ") lies outside the " +
             std::to_string(dims_count()) + " recorded dimensions";
    for (std::uint32_t k = 0; k < rank; ++k)
      shape.push_back(static_cast<std::int64_t>(load_u64(dims.data() + (std::size_t{dims_at} + k) * 8)));
    if (r.file == record_inline) {
      if (r.offset > inline_bytes.size() || r.length > inline_bytes.size() - r.offset)
        return "inline bytes [" + std::to_string(r.offset) + ", +" + std::to_string(r.length) + ") lie outside the " +
               std::to_string(inline_bytes.size()) + " recorded";
    } else if (r.file >= files.size()) {
      return "data file number " + std::to_string(r.file) + " is not one of the " + std::to_string(files.size()) + " recorded";
    }
    return {};
  }
};

}  // namespace ckpt::detail::native
