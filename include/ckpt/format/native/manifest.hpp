// ckpt/format/native/manifest.hpp — the native format's manifest and commit marker.
//
// manifest: msgpack map
//   format "ckpt-native", format_version 1, library_version, type, fingerprint,
//   schema [[path, dtype, rank]...],
//   leaves [{path: [segments], dtype, shape, file (nil: inline), offset, length,
//            codec "raw", xxh3, inline (bin, only when file is nil)}...]
// format_version 2 adds, to leaves longer than one chunk:
//   chunk_bytes (1 MiB), chunk_xxh3 (bin: the xxh3 of each chunk, little-endian u64s),
// and their xxh3 is then the xxh3 of chunk_xxh3's bytes; chunks are read and verified by
// several threads. A manifest with no such leaf is still written as version 1, which
// older readers read; version 1 checkpoints read as before.
// format_version 3 writes each leaf stored whole and raw as its path alone
// in "leaves" and a fixed-size record in the root's "records" (leaf_records.hpp), when
// there are at least records_from such leaves.
// commit: text written last, holding the manifest's size and xxh3, so a torn or
// altered manifest is detected before it is parsed.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/format/msgpack.hpp>
#include <ckpt/format/native/leaf_records.hpp>
#include <ckpt/index.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/io/tile_checksums.hpp>
#include <ckpt/storage/storage.hpp>
#include <ckpt/version.hpp>

namespace ckpt::detail::native {

inline constexpr const char* format_name = "ckpt-native";
// 1: every leaf stored whole, one checksum each. 2: some leaves stored as boxes
// ("boxes", Sharded leaves) and/or leaves longer than checksum_chunk_bytes carrying
// per-chunk checksums ("chunk_bytes", "chunk_xxh3"); written only when a checkpoint
// has such a leaf, so that others stay readable by older versions. A box may also carry
// tile checksums ("tile_bytes", "tile_rows", "tiles": io/tile_checksums.hpp), which
// readers that do not know them skip: they add no version. 3: leaves as fixed-size
// records (leaf_records.hpp), written only when records_from leaves or more fit one.
inline constexpr std::uint64_t format_version = 3;
// Leaves longer than this carry per-chunk checksums (format version 2).
inline constexpr std::uint64_t checksum_chunk_bytes = std::uint64_t{1} << 20;
inline constexpr const char* manifest_file = "manifest";
inline constexpr const char* commit_file = "commit";
inline constexpr std::uint64_t alignment = 4096;
inline constexpr std::uint64_t max_manifest_bytes = std::uint64_t{1} << 32;

inline std::string data_file_name(std::size_t k) { return "data-" + std::to_string(k); }

// Only names the writer produces are accepted: nothing can point outside the checkpoint.
inline bool is_data_file_name(std::string_view s) {
  if (s.size() < 6 || s.size() > 12 || s.substr(0, 5) != "data-") return false;
  for (char c : s.substr(5))
    if (c < '0' || c > '9') return false;
  return true;
}

// A leaf's checksum in version 2 when it has chunk checksums: the xxh3 of their bytes.
inline std::uint64_t chunk_list_xxh3(const std::vector<std::uint64_t>& chunks) {
  std::vector<std::byte> b(chunks.size() * 8);
  for (std::size_t i = 0; i < chunks.size(); ++i)
    for (int k = 0; k < 8; ++k) b[i * 8 + static_cast<std::size_t>(k)] = static_cast<std::byte>(chunks[i] >> (8 * k));
  return io::xxh3(b);
}

// Packs the manifest into out, which takes it piece by piece (write(const char*, n)):
// a vector (encode_manifest) or a data object through a buffer (write_manifest).
template <class Out>
void encode_manifest_into(Out& out, const IndexInfo& info, std::span<const IndexEntry> entries) {
  msgpack::packer<Out> pk(out);
  auto str = [&](std::string_view s) {
    pk.pack_str(static_cast<std::uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
  };
  // Checksums (chunks, pieces, tiles) as one binary of little-endian u64s.
  std::vector<char> le;
  auto bin_u64s = [&](const std::vector<std::uint64_t>& v) {
    le.resize(v.size() * 8);
    for (std::size_t i = 0; i < v.size(); ++i)
      for (std::size_t k = 0; k < 8; ++k) le[i * 8 + k] = static_cast<char>(v[i] >> (8 * k));
    pk.pack_bin(static_cast<std::uint32_t>(le.size()));
    pk.pack_bin_body(le.data(), static_cast<std::uint32_t>(le.size()));
  };
  // version 2 only when a leaf needs it: boxes (Sharded leaves) or per-chunk checksums;
  // version 3 when enough leaves fit a record
  bool v2 = false;
  for (const auto& e : entries) v2 = v2 || !e.boxes.empty() || !e.chunk_xxh3.empty();
  const RecordTables records(entries);
  const bool v3 = records.used();
  pk.pack_map((info.processes > 1 ? 8 : 7) + (v3 ? 5 : 0));
  str("format"); str(format_name);
  str("format_version"); pk.pack(std::uint64_t{v3 ? 3u : v2 ? 2u : 1u});
  if (info.processes > 1) { str("processes"); pk.pack(info.processes); }
  str("library_version"); str(library_version);
  str("type"); str(info.type_name);
  str("fingerprint"); pk.pack(info.fingerprint);
  str("schema");
  pk.pack_array(static_cast<std::uint32_t>(info.schema.size()));
  for (const auto& s : info.schema) {
    pk.pack_array(3);
    str(s.path); str(s.dtype); pk.pack(s.rank);
  }
  if (v3) records.pack(pk, out, entries);
  str("leaves");
  pk.pack_array(static_cast<std::uint32_t>(entries.size()));
  for (const auto& e : entries) {
    if (v3 && fits_record(e)) {  // its path; the rest is its record
      pk.pack_array(static_cast<std::uint32_t>(e.path.size()));
      for (const auto& seg : e.path.segments()) str(seg);
      continue;
    }
    const bool has_chunks = !e.chunk_xxh3.empty();
    pk.pack_map(has_chunks ? 10 : 8);  // path dtype shape file offset length xxh3, inline or codec, [chunks]
    str("path");
    pk.pack_array(static_cast<std::uint32_t>(e.path.size()));
    for (const auto& seg : e.path.segments()) str(seg);
    str("dtype"); str(dtype_name(e.type));
    str("shape");
    pk.pack_array(static_cast<std::uint32_t>(e.shape.size()));
    for (auto d : e.shape) pk.pack(d);
    auto storage = [&](const IndexEntry& x) {  // file offset length xxh3, then inline or codec
      str("file");
      if (x.file.empty()) pk.pack_nil(); else str(x.file);
      str("offset"); pk.pack(x.offset);
      str("length"); pk.pack(x.length);
      str("xxh3"); pk.pack(x.checksum);
      if (x.file.empty()) {
        str("inline");
        pk.pack_bin(static_cast<std::uint32_t>(x.inline_bytes.size()));
        pk.pack_bin_body(reinterpret_cast<const char*>(x.inline_bytes.data()), static_cast<std::uint32_t>(x.inline_bytes.size()));
      } else {
        str("codec"); str(x.codec);
      }
    };
    if (e.boxes.empty()) {
      storage(e);
      if (has_chunks) {
        str("chunk_bytes"); pk.pack(e.chunk_bytes);
        str("chunk_xxh3");
        bin_u64s(e.chunk_xxh3);
      }
      continue;
    }
    // A boxed leaf: shape and length are the global array's; its bytes are in the boxes.
    str("length"); pk.pack(e.length);
    str("xxh3"); pk.pack(std::uint64_t{0});
    str("offset"); pk.pack(std::uint64_t{0});
    str("file"); pk.pack_nil();
    str("boxes");
    pk.pack_array(static_cast<std::uint32_t>(e.boxes.size()));
    for (const auto& b : e.boxes) {
      const bool tiled = !b.tiles.empty();
      pk.pack_map(tiled ? 12 : 9);  // origin shape ranks pieces [tiles], then the storage fields
      str("origin");
      pk.pack_array(static_cast<std::uint32_t>(b.origin.size()));
      for (auto d : b.origin) pk.pack(d);
      str("shape");
      pk.pack_array(static_cast<std::uint32_t>(b.bytes.shape.size()));
      for (auto d : b.bytes.shape) pk.pack(d);
      str("ranks");
      pk.pack_array(static_cast<std::uint32_t>(b.ranks.size()));
      for (auto r : b.ranks) pk.pack(r);
      str("pieces");  // the xxh3 of each box_piece bytes (empty when the box is one piece)
      bin_u64s(b.pieces);
      if (tiled) {  // io/tile_checksums.hpp: the grid, and each tile's checksum
        str("tile_bytes"); pk.pack(b.tile_bytes);
        str("tile_rows"); pk.pack(b.tile_rows);
        str("tiles");
        bin_u64s(b.tiles);
      }
      storage(b.bytes);
    }
  }
}

// The manifest as bytes in memory, packed straight into the vector it is returned in,
// reserved for its size (inline bytes, plus about 160 bytes a leaf).
inline std::vector<char> encode_manifest(const IndexInfo& info, std::span<const IndexEntry> entries) {
  std::vector<char> out;
  std::size_t estimate = 4096;
  for (const auto& s : info.schema) estimate += s.path.size() + 32;
  for (const auto& e : entries) {
    estimate += e.inline_bytes.size() + 160 + 16 * e.chunk_xxh3.size() + 256 * e.boxes.size();
    for (const auto& b : e.boxes) estimate += 8 * (b.pieces.size() + b.tiles.size());
  }
  out.reserve(estimate);
  struct Into {
    std::vector<char>& out;
    void write(const char* p, std::size_t n) { out.insert(out.end(), p, p + n); }
  } into{out};
  encode_manifest_into(into, info, entries);
  return out;
}

struct CommitRecord {
  std::uint64_t manifest_bytes = 0;
  std::uint64_t manifest_xxh3 = 0;
};

// Writes the manifest to out (the caller closes it) as it is packed, through a 256 KiB
// buffer, hashing it on the way, and returns what the commit marker records of it. What
// the writers use: a 20,000-leaf manifest is 2 MB, which a save would otherwise allocate
// and fill whole, fresh memory every save (a fault per page, slow on a VM).
inline CommitRecord write_manifest(storage::ObjectWriter& out, const IndexInfo& info,
                                   std::span<const IndexEntry> entries) {
  constexpr std::size_t capacity = std::size_t{256} << 10;
  struct Sink {
    explicit Sink(storage::ObjectWriter& o) : out(o) {}
    storage::ObjectWriter& out;
    std::unique_ptr<char[]> buf = std::make_unique_for_overwrite<char[]>(capacity);
    std::size_t used = 0;
    io::Xxh3Stream hash{};
    std::uint64_t bytes = 0;
    void flush() {
      const auto piece = std::as_bytes(std::span(buf.get(), used));
      hash.update(piece);
      out.append(piece, false);  // the buffer is reused: a backend that holds pieces copies it
      bytes += used;
      used = 0;
    }
    void write(const char* p, std::size_t n) {
      while (n > 0) {
        if (used == capacity) flush();
        const std::size_t k = std::min(n, capacity - used);
        std::memcpy(buf.get() + used, p, k);
        used += k;
        p += k;
        n -= k;
      }
    }
  } sink(out);
  encode_manifest_into(sink, info, entries);
  sink.flush();
  return {sink.bytes, sink.hash.digest()};
}

inline std::string encode_commit(const CommitRecord& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "ckpt-native commit\nmanifest-bytes %llu\nmanifest-xxh3 %016llx\n",
                static_cast<unsigned long long>(c.manifest_bytes), static_cast<unsigned long long>(c.manifest_xxh3));
  return buf;
}

inline CommitRecord decode_commit(std::string_view text, const std::string& checkpoint) {
  auto field = [&](std::string_view key, int base) {
    const auto at = text.find(key);
    if (text.substr(0, 19) != "ckpt-native commit\n" || at == std::string_view::npos)
      throw CorruptCheckpointError(checkpoint, "", "commit marker is malformed");
    const char* first = text.data() + at + key.size();
    std::uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(first, text.data() + text.size(), v, base);
    if (ec != std::errc() || ptr == first) throw CorruptCheckpointError(checkpoint, "", "commit marker is malformed");
    return v;
  };
  return {field("manifest-bytes ", 10), field("manifest-xxh3 ", 16)};
}

// The manifest bytes as read, against what the commit marker records of them: the one
// check of a manifest's integrity, for files and for objects.
inline void check_manifest(std::span<const std::byte> manifest, const CommitRecord& commit, const std::string& checkpoint) {
  if (manifest.size() != commit.manifest_bytes)
    throw CorruptCheckpointError(checkpoint, "", "manifest is " + std::to_string(manifest.size()) +
                                                     " bytes, the commit marker records " +
                                                     std::to_string(commit.manifest_bytes) + " (truncated?)");
  if (io::xxh3(manifest) != commit.manifest_xxh3)
    throw CorruptCheckpointError(checkpoint, "", "manifest checksum mismatch: the manifest was altered or torn");
}

// What a native checkpoint stores in its data files: every leaf's bytes, or every
// box's of a boxed leaf, each passed to fn in manifest order. Both openers (a
// directory, an object store) bound these.
template <class Fn>
void for_each_stored(std::span<const IndexEntry> entries, Fn&& fn) {
  for (const auto& e : entries) {
    if (e.boxes.empty()) fn(e);
    for (const auto& b : e.boxes) fn(b.bytes);
  }
}

// Refuses bytes that lie outside their data file of `size` bytes.
// `path` makes the leaf's name only when it is refused (the leaf table builds it then).
template <class PathFn>
void check_within_file(const std::string& checkpoint, PathFn&& path, std::string_view file, std::uint64_t offset,
                       std::uint64_t length, std::uint64_t size) {
  if (offset > size || length > size - offset)
    throw CorruptCheckpointError(checkpoint, path(),
                                 "bytes [" + std::to_string(offset) + ", +" + std::to_string(length) + ") lie outside " +
                                     std::string(file) + " (" + std::to_string(size) + " bytes; truncated?)");
}
inline void check_within_file(const std::string& checkpoint, const IndexEntry& e, std::uint64_t size) {
  check_within_file(checkpoint, [&] { return e.path.str(); }, e.file, e.offset, e.length, size);
}

// The keys a decoder reads, in MapFields' order. A leaf's and a box's share the first
// six, the storage fields, which decode_storage reads from either.
namespace keys {
enum : std::size_t { file, offset, length, xxh3, inline_bytes, codec };
enum : std::size_t { path = codec + 1, dtype, shape, chunk_bytes, chunk_xxh3, boxes };
enum : std::size_t { origin = codec + 1, box_shape, ranks, pieces, tile_bytes, tile_rows, tiles };
inline constexpr detail::mp::KeyNames<12> leaf(std::array<std::string_view, 12>{
    "file", "offset", "length", "xxh3", "inline", "codec", "path", "dtype", "shape", "chunk_bytes", "chunk_xxh3", "boxes"});
inline constexpr detail::mp::KeyNames<13> box(std::array<std::string_view, 13>{
    "file", "offset", "length", "xxh3", "inline", "codec", "origin", "shape", "ranks", "pieces", "tile_bytes",
    "tile_rows", "tiles"});
enum : std::size_t {
  format, format_version, processes, library_version, type, fingerprint, schema,
  record_files, record_dtypes, records, record_dims, record_inline_bytes, leaves  // version 3: leaf_records.hpp
};
inline constexpr detail::mp::KeyNames<13> root(std::array<std::string_view, 13>{
    "format", "format_version", "processes", "library_version", "type", "fingerprint", "schema",
    "files", "dtypes", "records", "dims", "inline", "leaves"});
}  // namespace keys

// The little-endian u64s of a binary (chunk or piece checksums).
inline std::vector<std::uint64_t> le_u64s(std::span<const std::byte> b) {
  std::vector<std::uint64_t> v(b.size() / 8);
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t k = 0; k < 8; ++k) v[i] |= std::uint64_t{static_cast<unsigned char>(b[i * 8 + k])} << (8 * k);
  return v;
}

// The storage fields of a leaf or a box (file or inline bytes), checked.
template <std::size_t N>
void decode_storage(detail::mp::MapFields<N>& f, IndexEntry& e) {
  detail::mp::Cursor& file = f.at(keys::file);
  const detail::mp::Reader& lr = file.reader();
  if (file.next_is_nil()) {
    const std::string_view in = f.at(keys::inline_bytes).string_if(false, true);
    if (!in.data() || in.size() != e.length) lr.fail("inline bytes do not match the length");
    e.inline_bytes = {reinterpret_cast<const std::byte*>(in.data()), in.size()};
  } else {
    e.file = file.str("file");
    if (!is_data_file_name(e.file)) lr.fail("data file name " + quote_for_message(e.file) + " is not one ckpt writes");
    if (auto* c = f.find(keys::codec))
      if (const std::string_view codec = c->str("codec"); codec != "raw")
        lr.fail("codec " + quote_for_message(std::string(codec)) + " is not supported");
    e.codec = "raw";
  }
}

// A boxed leaf's boxes: each inside the global shape, its bytes matching its shape.
inline void decode_boxes(detail::mp::Cursor& c, IndexEntry& e) {
  const detail::mp::Reader& lr = c.reader();
  if (!is_numeric(e.type)) lr.fail("only numeric arrays can be stored as boxes");
  const std::uint32_t n = c.array("boxes");
  for (std::uint32_t i = 0; i < n; ++i) {
    detail::mp::MapFields f(c, keys::box);
    IndexBox b;
    b.bytes.path = e.path;
    b.bytes.type = e.type;
    {
      auto& o = f.at(keys::origin);
      for (std::uint32_t k = 0, dims = o.array("box origin"); k < dims; ++k) b.origin.push_back(o.i64("box origin"));
    }
    {
      auto& sh = f.at(keys::box_shape);
      for (std::uint32_t k = 0, dims = sh.array("box shape"); k < dims; ++k) b.bytes.shape.push_back(sh.i64("box shape"));
    }
    if (b.origin.size() != e.shape.size() || b.bytes.shape.size() != e.shape.size())
      lr.fail("a box's rank is not the array's");
    for (std::size_t k = 0; k < e.shape.size(); ++k)
      if (b.origin[k] < 0 || b.bytes.shape[k] < 0 || b.bytes.shape[k] > e.shape[k] || b.origin[k] > e.shape[k] - b.bytes.shape[k])
        lr.fail("box at " + shape_str(b.origin) + " of shape " + shape_str(b.bytes.shape) + " lies outside the shape " +
                shape_str(e.shape));
    b.bytes.offset = f.at(keys::offset).u64("offset");
    b.bytes.length = f.at(keys::length).u64("length");
    b.bytes.checksum = f.at(keys::xxh3).u64("xxh3");
    if (detail::box_elements(b.bytes.shape) * dtype_size(e.type) != b.bytes.length)
      lr.fail("box of shape " + shape_str(b.bytes.shape) + " records " + std::to_string(b.bytes.length) + " bytes");
    if (auto* rk = f.find(keys::ranks))
      for (std::uint32_t k = 0, count = rk->array("ranks"); k < count; ++k)
        b.ranks.push_back(static_cast<std::uint32_t>(rk->u64("rank")));
    if (auto* pc = f.find(keys::pieces)) {
      const std::string_view bin = pc->string_if(false, true);
      if (!bin.data() || bin.size() % 8 != 0) lr.fail("box pieces must be binary");
      b.pieces = le_u64s(std::as_bytes(std::span(bin)));
    }
    if (auto* tc = f.find(keys::tiles)) {  // io/tile_checksums.hpp; the grid must be one ckpt could cut
      const std::string_view bin = tc->string_if(false, true);
      if (!bin.data() || bin.size() % 8 != 0) lr.fail("box tiles must be binary");
      b.tile_bytes = f.at(keys::tile_bytes).u64("tile_bytes");
      b.tile_rows = f.at(keys::tile_rows).u64("tile_rows");
      const auto g = io::TileGrid::recorded(b.bytes.shape, dtype_size(e.type), b.tile_bytes, b.tile_rows);
      if (!g)
        lr.fail("box tiles of " + std::to_string(b.tile_bytes) + " bytes by " + std::to_string(b.tile_rows) +
                " rows do not fit the box of shape " + shape_str(b.bytes.shape));
      if (bin.size() / 8 != g->count())
        lr.fail("box tiles must hold " + std::to_string(g->count()) + " checksums, not " + std::to_string(bin.size() / 8));
      b.tiles = le_u64s(std::as_bytes(std::span(bin)));
    }
    decode_storage(f, b.bytes);
    // Writers since format v2's chunk checksums hash a box larger than a chunk chunk by
    // chunk, like any leaf: its xxh3 is then that of its pieces' checksums, which are its
    // chunk checksums, and a read of the whole box verifies it chunk by chunk. (Boxes
    // hashed whole, by earlier writers, keep the whole-box check.)
    static_assert(box_piece == checksum_chunk_bytes);
    if (!b.pieces.empty() && b.bytes.chunk_xxh3.empty() && chunk_list_xxh3(b.pieces) == b.bytes.checksum) {
      b.bytes.chunk_bytes = checksum_chunk_bytes;
      b.bytes.chunk_xxh3 = b.pieces;
    }
    e.boxes.push_back(std::move(b));
    f.finish();
  }
}

// What is wrong with a leaf's shape (of `elements` elements, >= 0) for its dtype (named
// dt in the manifest) and length; "" when nothing.
inline std::string leaf_shape_fault(dtype type, std::span<const std::int64_t> shape, std::uint64_t length,
                                    std::int64_t elements, std::string_view dt) {
  if (is_numeric(type)) {
    if (static_cast<std::uint64_t>(elements) > length / dtype_size(type) + 1 ||
        static_cast<std::uint64_t>(elements) * dtype_size(type) != length)
      return "shape " + shape_str(Shape(shape.begin(), shape.end())) + " of " + std::string(dt) + " needs " +
             std::to_string(elements) + " elements but " + std::to_string(length) + " bytes are recorded";
  } else if (type == dtype::none && length != 0) {
    return "an empty node has bytes";
  } else if (type == dtype::string && !shape.empty()) {
    return "string leaves must be scalars";
  }
  return {};
}
inline std::string leaf_shape_fault(const IndexEntry& e, std::int64_t elements, std::string_view dt) {
  return leaf_shape_fault(e.type, e.shape, e.length, elements, dt);
}

// A leaf as this library's writer lays it out (encode_manifest_into): a map of eight
// keys in the writer's order, its bytes whole in a data file, raw. Read front to back,
// each key compared with the bytes the writer puts there, with the checks decode_leaf
// makes: opening 20,000 leaves spent more in MapFields' key lookups than in anything
// else. Any other leaf (keys in another order or added, an inline scalar, chunk
// checksums, boxes) and any fault returns false with e cleared and the cursor back at
// the leaf, for decode_leaf's general reading, whose error then names the fault.
inline bool decode_leaf_as_written(detail::mp::Cursor& c, IndexEntry& e) {
  // Each key as msgpack's fixstr (0xa0 + its length, then its bytes).
  const auto read = [&] {
    if (!c.take_if("\x88\xa4path")) return false;  // a map of eight, its first key
    {
      const std::uint32_t n = c.array("path");
      std::vector<std::string> segs;
      segs.reserve(n);  // n <= the bytes left: Cursor::array checks
      for (std::uint32_t i = 0; i < n; ++i) segs.emplace_back(c.str("path segment"));
      e.path = Path(std::move(segs));
    }
    if (!c.take_if("\xa5" "dtype")) return false;
    const std::string_view dt = c.str("dtype");
    const auto d = dtype_from_name(dt);
    if (!d || !c.take_if("\xa5" "shape")) return false;
    e.type = *d;
    const std::uint32_t rank = c.array("shape");
    e.shape.reserve(rank);
    for (std::uint32_t k = 0; k < rank; ++k) e.shape.push_back(c.i64("shape"));
    const std::int64_t elements = element_count(e.shape);
    if (elements < 0 || !c.take_if("\xa4" "file")) return false;
    const std::string_view file = c.string_if(true, false);  // nil: an inline leaf, read the long way
    if (!file.data() || !is_data_file_name(file) || !c.take_if("\xa6" "offset")) return false;
    e.file = file;
    e.offset = c.u64("offset");
    if (!c.take_if("\xa6" "length")) return false;
    e.length = c.u64("length");
    if (!c.take_if("\xa4" "xxh3")) return false;
    e.checksum = c.u64("xxh3");
    if (!c.take_if("\xa5" "codec" "\xa3" "raw") || !leaf_shape_fault(e, elements, dt).empty()) return false;
    e.codec = "raw";
    return true;
  };
  const std::size_t start = c.pos();
  try {
    if (read()) return true;
  } catch (const CorruptCheckpointError&) {  // malformed: decode_leaf says how
  }
  c.seek(start);
  e = IndexEntry{};
  return false;
}

// One leaf of the manifest's "leaves", decoded into e and checked; errors name it (lr).
inline void decode_leaf(detail::mp::Cursor& c, detail::mp::Reader& lr, const IndexInfo& info, IndexEntry& e) {
  detail::mp::MapFields l(c, keys::leaf);
  {
    auto& segments = l.at(keys::path);
    std::vector<std::string> segs(segments.array("path"));
    for (auto& seg : segs) seg = segments.str("path segment");
    e.path = Path(std::move(segs));
    l.read_past(keys::path);
  }
  // Every error after this point names the leaf, whatever field of it is wrong.
  lr.name_leaf(e.path);
  c.use(lr);
  auto fail = [&](const std::string& what) -> void { lr.fail(what); };
  const std::string_view dt = l.at(keys::dtype).str("dtype");
  l.read_past(keys::dtype);
  const auto d = dtype_from_name(dt);
  if (!d) fail("unknown dtype " + quote_for_message(std::string(dt)));
  e.type = *d;
  {
    auto& dims = l.at(keys::shape);
    const std::uint32_t rank = dims.array("shape");
    e.shape.reserve(std::min<std::size_t>(rank, dims.left()));
    for (std::uint32_t k = 0; k < rank; ++k) e.shape.push_back(dims.i64("shape"));
    l.read_past(keys::shape);
  }
  const std::int64_t elements = element_count(e.shape);
  if (elements < 0) fail("shape " + shape_str(e.shape) + " is invalid");
  e.offset = l.at(keys::offset).u64("offset");
  l.read_past(keys::offset);
  e.length = l.at(keys::length).u64("length");
  l.read_past(keys::length);
  e.checksum = l.at(keys::xxh3).u64("xxh3");
  l.read_past(keys::xxh3);
  if (const std::string fault = leaf_shape_fault(e, elements, dt); !fault.empty()) fail(fault);
  if (auto* boxes = l.find(keys::boxes)) {
    decode_boxes(*boxes, e);
    l.finish();
    return;
  }
  decode_storage(l, e);
  if (auto* ch = l.find(keys::chunk_xxh3)) {  // version 2: per-chunk checksums
    if (info.format_version < 2) fail("chunk_xxh3 in a version 1 manifest");
    if (e.file.empty()) fail("an inline leaf has chunk checksums");
    const std::string_view bin = ch->string_if(false, true);
    e.chunk_bytes = l.at(keys::chunk_bytes).u64("chunk_bytes");
    if (e.chunk_bytes < 4096 || e.chunk_bytes > (std::uint64_t{1} << 30) || (e.chunk_bytes & (e.chunk_bytes - 1)))
      fail("chunk_bytes " + std::to_string(e.chunk_bytes) + " is not a power of two in [4 KiB, 1 GiB]");
    const std::uint64_t n = (e.length + e.chunk_bytes - 1) / e.chunk_bytes;
    if (!bin.data() || bin.size() != n * 8)
      fail("chunk_xxh3 must hold " + std::to_string(n) + " checksums for " + std::to_string(e.length) + " bytes");
    e.chunk_xxh3 = le_u64s(std::as_bytes(std::span(bin)));
    if (chunk_list_xxh3(e.chunk_xxh3) != e.checksum) fail("chunk checksums do not match the leaf's xxh3");
  }
  l.finish();
}

// A leaf written as its path (version 3), its fields the next of `records`, into e,
// checked; errors name it (lr).
inline void decode_leaf_record(detail::mp::Cursor& c, detail::mp::Reader& lr, LeafRecords& records, IndexEntry& e) {
  {
    std::vector<std::string> segs(c.array("path"));
    for (auto& seg : segs) seg = c.str("path segment");
    e.path = Path(std::move(segs));
  }
  lr.name_leaf(e.path);
  LeafRecord r;
  if (const std::string fault = records.take(r, e.shape); !fault.empty()) lr.fail(fault);
  e.type = r.type;
  e.length = r.length;
  e.checksum = r.checksum;
  const std::int64_t elements = element_count(e.shape);
  if (elements < 0) lr.fail("shape " + shape_str(e.shape) + " is invalid");
  if (const std::string fault = leaf_shape_fault(e, elements, r.dtype_name); !fault.empty()) lr.fail(fault);
  if (r.file == record_inline) {
    e.inline_bytes = std::as_bytes(records.inline_bytes.subspan(r.offset, r.length));
  } else {
    e.file = records.files[r.file];
    e.offset = r.offset;
    e.codec = "raw";
  }
}

// Parses a manifest already checked against the commit marker; still validates every
// field, since the marker only proves the manifest is the one the writer wrote. Read
// with a Cursor, straight from the bytes. The leaves are decoded by
// leaves(cursor, reader, count, records), which reads `count` of them from the cursor,
// taking a record from `records` for each leaf written as a path (version 3): into
// IndexEntries (decode_manifest, below), or into the leaf table's flat records
// (leaf_table.hpp). What they keep may point into `bytes`, which the caller keeps alive.
template <class DecodeLeaves>
void decode_manifest_with(std::span<const std::byte> bytes, const std::string& checkpoint, IndexInfo& info,
                          DecodeLeaves&& leaves) {
  const detail::mp::Reader r(checkpoint, "manifest");
  detail::mp::Cursor c(bytes, r);
  detail::mp::MapFields root(c, keys::root);
  info.format = root.at(keys::format).str("format");
  if (info.format != format_name) r.fail("format is " + quote_for_message(info.format) + ", not " + format_name);
  info.format_version = root.at(keys::format_version).u64("format_version");
  if (info.format_version > format_version)
    r.fail("format version " + std::to_string(info.format_version) + " is newer than this library reads (" +
           std::to_string(format_version) + ")");
  info.library_version = root.at(keys::library_version).str("library_version");
  info.type_name = root.at(keys::type).str("type");
  info.fingerprint = root.at(keys::fingerprint).u64("fingerprint");
  {
    auto& sc = root.at(keys::schema);
    for (std::uint32_t i = 0, n = sc.array("schema"); i < n; ++i) {
      if (sc.array("schema entry") != 3) r.fail("schema entry must have 3 items");
      std::string path(sc.str("schema path"));
      std::string dtype(sc.str("schema dtype"));
      info.schema.push_back({std::move(path), std::move(dtype), static_cast<int>(sc.i64("schema rank"))});
    }
  }
  // Version 3's record tables (leaf_records.hpp), which writers put before the leaves.
  // Not looked for in older manifests: an absent key is looked for to the map's end.
  LeafRecords records;
  if (info.format_version >= 3) {
    auto binary = [&](std::size_t k, std::string_view what, std::size_t unit) {
      const std::string_view b = root.at(k).string_if(false, true);
      if (!b.data() || b.size() % unit != 0)
        r.fail(std::string(what) + " must be a binary of " + std::to_string(unit) + "-byte items");
      root.read_past(k);
      return std::span(reinterpret_cast<const unsigned char*>(b.data()), b.size());
    };
    auto& fc = root.at(keys::record_files);
    for (std::uint32_t i = 0, n = fc.array("files"); i < n; ++i) {
      const std::string_view f = fc.str("file");
      if (!is_data_file_name(f)) r.fail("data file name " + quote_for_message(std::string(f)) + " is not one ckpt writes");
      records.files.push_back(f);
    }
    root.read_past(keys::record_files);
    auto& dc = root.at(keys::record_dtypes);
    for (std::uint32_t i = 0, n = dc.array("dtypes"); i < n; ++i) {
      const std::string_view dt = dc.str("dtype");
      const auto d = dtype_from_name(dt);
      if (!d) r.fail("unknown dtype " + quote_for_message(std::string(dt)));
      records.dtypes.emplace_back(*d, dt);
    }
    root.read_past(keys::record_dtypes);
    records.records = binary(keys::records, "records", record_bytes);
    records.dims = binary(keys::record_dims, "dims", 8);
    records.inline_bytes = binary(keys::record_inline_bytes, "inline", 1);
  }
  // No more than the bytes left (Cursor::array checks): what a decoder reserves for the
  // leaves stays within a record's size times the manifest's size.
  const std::uint32_t count = root.at(keys::leaves).array("leaves");
  leaves(c, r, count, records);
  c.use(r);
  root.read_past(keys::leaves);
  if (records.next != records.count())
    r.fail(std::to_string(records.count() - records.next) + " of " + std::to_string(records.count()) +
           " leaf records belong to no leaf");
  // Looked up after the leaves: writers put it before them, and an absent key is looked
  // for to the map's end, which would step over every leaf first.
  if (auto* p = root.find(keys::processes)) info.processes = p->u64("processes");
  root.finish();
  if (c.left() != 0) r.fail("malformed msgpack: " + std::to_string(c.left()) + " bytes after the end");
}

// decode_manifest_with, and when it fails on bytes that are not msgpack at all, the
// reason they are not (check_msgpack_counts' message, naming what is malformed rather
// than which field met it). The Cursor needs no such walk first: it bounds every count
// by the bytes left. The walk was an eighth of opening 20,000 leaves; now only a
// broken manifest pays for it.
template <class DecodeLeaves>
void decode_manifest_checked(std::span<const std::byte> bytes, const std::string& checkpoint, IndexInfo& info,
                             DecodeLeaves&& leaves) {
  try {
    decode_manifest_with(bytes, checkpoint, info, leaves);
  } catch (const CorruptCheckpointError&) {
    if (const std::string bad =
            detail::mp::check_msgpack_counts(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
        !bad.empty())
      throw CorruptCheckpointError(checkpoint, "", "manifest: malformed msgpack: " + bad);
    throw;
  }
}

// The manifest's leaves as IndexEntries, checked. The entries' inline bytes point into
// `bytes`.
inline IndexEntries decode_manifest(std::span<const std::byte> bytes, const std::string& checkpoint, IndexInfo& info) {
  IndexEntries entries;
  decode_manifest_checked(bytes, checkpoint, info,
                          [&](detail::mp::Cursor& c, const detail::mp::Reader& r, std::uint32_t count,
                              LeafRecords& records) {
                            entries.reserve(count);
                            detail::mp::Reader lr = r.at_path("");  // names each leaf in turn (name_leaf)
                            for (std::uint32_t i = 0; i < count; ++i) {
                              c.use(r);
                              IndexEntry& e = entries.emplace_back();  // reserved: the leaf lr names stays put
                              if (c.next_is_array()) {
                                decode_leaf_record(c, lr, records, e);
                                continue;
                              }
                              if (!decode_leaf_as_written(c, e)) decode_leaf(c, lr, info, e);
                            }
                          });
  return entries;
}

}  // namespace ckpt::detail::native
