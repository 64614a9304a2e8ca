// ckpt/format/zarr/chunks.hpp — one zarr v2 array's chunks: checked for plausibility,
// read into one buffer and written, as zarr/metadata.hpp's ArrayMeta describes them.
//
// Each chunk is a file named by its grid position ("0.1", or "0/1"; "0" for a 0-d
// array). Edge chunks are stored full size; a missing chunk reads as fill_value.
// Everything read is untrusted: the array's declared size is checked against the
// bytes on disk before anything is allocated, every decompression is bounded by the
// chunk's size, and chunk keys are grid numbers only, so they never leave the array
// directory; a chunk that is a symlink is refused.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/format/zarr/chunk_copy.hpp>
#include <ckpt/format/zarr/metadata.hpp>
#include <ckpt/io/codec.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::zarr {

inline std::string chunk_key(const std::vector<std::int64_t>& idx, char sep) {
  if (idx.empty()) return "0";
  std::string k;
  for (std::size_t i = 0; i < idx.size(); ++i) k += (i ? std::string(1, sep) : "") + std::to_string(idx[i]);
  return k;
}

}  // namespace ckpt::detail::zarr

namespace ckpt::detail::zarr_array {
// Opens a chunk without following a final symlink (a chunk must be a file of the
// checkpoint), nor opening anything but a regular file (a device can act on open);
// returns -1 when absent.
inline int open_chunk(const std::filesystem::path& p, std::uint64_t& size) {
  struct stat pre {};
  if (::lstat(p.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode))
    throw Error(p.string(), "", S_ISLNK(pre.st_mode) ? "chunk is a symbolic link" : "chunk is not a regular file");
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    io::throw_errno("cannot open chunk", p);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(p.string(), "", "chunk is not a regular file");
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

}  // namespace ckpt::detail::zarr_array

namespace ckpt::detail::zarr {

// Big-endian elements to native order, in place (elem: one element's size in bytes).
inline void byteswap(std::span<std::byte> b, std::size_t elem, dtype d) {
  // complex numbers swap each half on its own
  const std::size_t w = (d == dtype::complex64 || d == dtype::complex128) ? elem / 2 : elem;
  for (std::size_t i = 0; i + w <= b.size(); i += w) std::reverse(b.begin() + static_cast<std::ptrdiff_t>(i), b.begin() + static_cast<std::ptrdiff_t>(i + w));
}

// Refuses arrays whose declared size the files cannot plausibly hold, and grids of too
// many chunks, before anything is allocated or iterated. Returns "" or the reason.
inline std::string check_plausible(const fs::path& dir, const ArrayMeta& m) {
  std::uint64_t chunks = 1;
  for (std::size_t i = 0; i < m.shape.size(); ++i) {
    const auto n = static_cast<std::uint64_t>((m.shape[i] + m.chunks[i] - 1) / m.chunks[i]);
    if (n != 0 && chunks > max_chunks / n) return "its grid has more than " + std::to_string(max_chunks) + " chunks";
    chunks *= n;
  }
  // A chunk is decompressed whole, however little of it lies inside the array (edge
  // chunks are stored full size): chunks far larger than the array itself are refused,
  // or a 1 MiB chunk file could make a 10-element array allocate 64 GiB.
  const std::uint64_t array_bytes = m.bytes();
  const std::uint64_t chunk_limit = std::max(free_bytes, array_bytes > (std::uint64_t{1} << 60) ? array_bytes : 4 * array_bytes);
  if (m.chunk_bytes() > chunk_limit)
    return "chunks of " + shape_str(m.chunks) + " (" + std::to_string(m.chunk_bytes()) +
           " bytes) are far larger than the array's " + std::to_string(array_bytes) + " bytes";
  std::uint64_t stored = 0;
  std::error_code ec;
  std::size_t files = 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end; !ec && it != end; it.increment(ec)) {
    if (++files > max_chunks + 16) return "its directory holds too many files";
    if (it.depth() > max_rank) { it.disable_recursion_pending(); continue; }
    std::error_code e2;  // what links point at is not the array's: not counted
    if (fs::is_regular_file(it->symlink_status(e2))) stored += it->file_size(e2);
  }
  const std::uint64_t allowed = free_bytes + (stored > (std::uint64_t{1} << 40) ? (std::uint64_t{1} << 62) : stored * max_expansion);
  if (m.bytes() > allowed)
    return "shape " + shape_str(m.shape) + " needs " + std::to_string(m.bytes()) + " bytes, far more than its " +
           std::to_string(stored) + " bytes of files can hold";
  return "";
}

// Reads chunk `key` of the array in dir into raw (its chunk_bytes, decoded, native byte
// order, in the array's own C or Fortran order); comp is a buffer reused across chunks.
// False when the chunk is absent (it reads as fill_value).
inline bool load_chunk_file(const fs::path& dir, const ArrayMeta& m, const std::string& key, Scratch& comp,
                       std::span<std::byte> raw, const std::function<void(const std::string&)>& fail) {
  const fs::path file = dir / key;
  const std::uint64_t chunk_bytes = m.chunk_bytes();
  std::uint64_t size = 0;
  int fd = -1;
  try {
    // "0/1": open_chunk refuses a link as the chunk itself, the directories on the
    // way are checked here (a missing one: the chunk reads as fill_value)
    if (m.separator == '/' && m.shape.size() > 1) {
      fs::path p = dir;
      for (const auto& part : fs::path(key).parent_path()) {
        p /= part;
        std::error_code e2;
        const auto st = fs::symlink_status(p, e2);
        if (fs::is_symlink(st)) throw Error(file.string(), "", "a directory on the way is a symbolic link");
        if (!fs::exists(st)) break;
      }
    }
    fd = detail::zarr_array::open_chunk(file, size);
  } catch (const Error& e) {
    fail(std::string("chunk ") + key + ": " + e.what());
  }
  if (fd < 0) return false;
  io::File f(fd);
  const std::uint64_t max_comp = m.compressor == io::codec::none ? chunk_bytes : chunk_bytes + chunk_bytes / 8 + (1u << 20);
  if (size > max_comp) fail("chunk " + key + " is " + std::to_string(size) + " bytes, more than any encoding of its " + std::to_string(chunk_bytes));
  if (chunk_bytes > free_bytes + size * max_expansion)
    fail("chunk " + key + " would decompress to " + std::to_string(chunk_bytes) + " bytes from " + std::to_string(size));
  const bool stored_raw = m.compressor == io::codec::none && size == raw.size();  // read straight into place
  const auto enc = stored_raw ? raw : comp.get(static_cast<std::size_t>(size));
  try {
    io::pread_exact(f, enc, 0, file);
  } catch (const Error& e) {
    fail(std::string("chunk ") + key + ": " + e.what());
  }
  if (!stored_raw)
    if (const std::string bad = io::decompress(m.compressor, enc, raw); !bad.empty()) fail("chunk " + key + ": " + bad);
  if (m.big_endian) byteswap(raw, dtype_size(m.type), m.type);
  return true;
}

// Reads the box at `origin` of `shape` of the array into dst (C order, native byte
// order), opening only the chunk files that meet the box (a rank's shard of a t5x or
// Orbax array). `fail` throws naming the checkpoint and leaf.
inline void read_array_box(const fs::path& dir, const ArrayMeta& m, const Shape& origin, const Shape& shape,
                           std::span<std::byte> dst, const std::function<void(const std::string&)>& fail) {
  const std::size_t es = dtype_size(m.type);
  Scratch comp;
  std::vector<std::byte> c_order;
  read_box(m.chunks, m.chunk_bytes(), es, m.fill, origin, shape, dst, [&](const std::vector<std::int64_t>& idx, std::span<std::byte> raw) {
    if (!load_chunk_file(dir, m, chunk_key(idx, m.separator), comp, raw, fail)) return false;
    if (m.fortran) fortran_to_c_order(raw, m.chunks, es, c_order);
    return true;
  });
}

// Reads the whole array into dst (dst.size() == m.bytes()), C order, native byte order.
// `fail` throws naming the checkpoint and leaf.
inline void read_array(const fs::path& dir, const ArrayMeta& m, std::span<std::byte> dst,
                       const std::function<void(const std::string&)>& fail) {
  read_array_box(dir, m, Shape(m.shape.size(), 0), m.shape, dst, fail);
}

// The chunk size writers aim at (meta_for's target): 64 MiB, or a quarter of a save's
// max_memory, since a chunk is held with its compressed copy (and, streamed, its read).
inline std::uint64_t chunk_target(std::uint64_t max_memory) {
  return max_memory == 0 ? std::uint64_t{64} << 20 : std::max<std::uint64_t>(max_memory / 4, 1);
}

// Throws unless m's chunks (cut along the first dimension, at least one row) keep
// within a save's max_memory: a leaf whose single row is larger cannot.
inline void check_chunk_budget(const ArrayMeta& m, std::uint64_t max_memory, const std::string& checkpoint,
                               const std::string& path) {
  if (max_memory != 0 && m.chunk_bytes() > chunk_target(max_memory))
    throw Error(checkpoint, path,
                "a zarr chunk of this leaf is at least one row, " + std::to_string(m.chunk_bytes()) +
                    " bytes, more than a quarter of max_memory (" + std::to_string(max_memory) + " bytes)");
}

// The bytes [off, off + n) of a leaf: a view of its memory or, for a streamed leaf
// (LeafStream, read front to back), read into buf.
inline std::span<const std::byte> leaf_part(const LeafBytes& d, std::uint64_t off, std::size_t n,
                                            std::vector<std::byte>& buf) {
  if (!d.stream) return d.view.subspan(static_cast<std::size_t>(off), n);
  buf.resize(n);
  d.stream->read(off, buf);
  return buf;
}

// A box of an array that one process writes (ckpt::mpi::save): origin and shape in
// elements, its bytes in C order from byte `at` of the leaf's. Its edges lie on the
// array's chunk grid (or at the array's end), so it is a union of whole chunks.
struct Region {
  Shape origin, shape;
  std::uint64_t at = 0;
};

// The region of a whole leaf of array m.
inline Region whole(const ArrayMeta& m) { return {Shape(m.shape.size(), 0), m.shape, 0}; }

// Encodes the chunks of array m that lie in region r of the leaf's bytes src: edge
// chunks stored full size (padded with the fill value 0), each compressed on its own;
// hands each to put(key, bytes), key as chunk_key(index, separator) ("0" for a 0-d
// array), and reports its bytes to progress (SaveOptions::progress) when given. The one
// chunk loop of the directory writer below, of the OCDBT one (format/orbax.hpp) and of
// the ranks writing their parts of one array.
inline void encode_chunks(const ArrayMeta& m, const LeafBytes& src, const Region& r, char separator,
                          const std::function<void(const std::string&, std::span<const std::byte>)>& put,
                          exec::ProgressTracker* progress = nullptr) {
  io::blosc_params bp = m.blosc;
  const std::size_t es = dtype_size(m.type);
  bp.typesize = es;
  auto emit = [&](const std::string& key, std::span<const std::byte> part) {
    if (m.compressor == io::codec::none) put(key, part);
    else put(key, io::compress_if_it_pays(m.compressor, m.level, m.min_saving_percent, part, bp));
  };
  std::vector<std::byte> buf;  // a streamed leaf's current bytes
  const std::size_t rank = m.shape.size();
  if (rank == 0) {
    emit("0", leaf_part(src, r.at, es, buf));
    if (progress) progress->add(es, 0);
    return;
  }
  if (element_count(r.shape) == 0) return;
  // the chunk grid positions the region covers; its strides in elements (C order)
  std::vector<std::int64_t> lo(rank), hi(rank);
  std::vector<std::uint64_t> rstride(rank);
  std::uint64_t stride = 1;
  for (std::size_t k = rank; k-- > 0;) {
    lo[k] = r.origin[k] / m.chunks[k];
    hi[k] = (r.origin[k] + r.shape[k] + m.chunks[k] - 1) / m.chunks[k];
    rstride[k] = stride;
    stride *= static_cast<std::uint64_t>(r.shape[k]);
  }
  // A chunk as wide as the array and the region in every dimension but the first is
  // one run of the region's bytes (how meta_for cuts arrays): read as it is.
  bool rows = true;
  for (std::size_t k = 1; k < rank; ++k) rows = rows && m.chunks[k] == m.shape[k] && r.shape[k] == m.shape[k];
  const std::uint64_t chunk = m.chunk_bytes();
  std::vector<std::byte> tile;
  std::vector<std::int64_t> idx = lo, start(rank), ext(rank), local(rank);
  for (;;) {
    std::uint64_t in_array = es;
    for (std::size_t k = 0; k < rank; ++k) {
      start[k] = idx[k] * m.chunks[k];
      ext[k] = std::min(m.chunks[k], m.shape[k] - start[k]);
      in_array *= static_cast<std::uint64_t>(ext[k]);
      if (start[k] < r.origin[k] || start[k] + ext[k] > r.origin[k] + r.shape[k])
        throw Error("zarr chunk " + chunk_key(idx, separator) + " is not inside the region written");  // a plan's bug
    }
    std::span<const std::byte> part;
    if (rows) {
      const std::uint64_t off = r.at + static_cast<std::uint64_t>(start[0] - r.origin[0]) * rstride[0] * es;
      part = leaf_part(src, off, static_cast<std::size_t>(in_array), buf);
      if (part.size() < chunk) {
        tile.assign(part.begin(), part.end());
        tile.resize(static_cast<std::size_t>(chunk));
        part = tile;
      }
    } else {  // gather the chunk's rows (runs along the last dimension) from the region
      tile.assign(static_cast<std::size_t>(chunk), std::byte{0});
      std::fill(local.begin(), local.end(), 0);
      const auto run = static_cast<std::size_t>(ext[rank - 1]) * es;
      for (;;) {
        std::uint64_t from = 0, to = 0, cstride = 1;
        for (std::size_t k = rank; k-- > 0;) {
          from += static_cast<std::uint64_t>(start[k] - r.origin[k] + local[k]) * rstride[k];
          to += static_cast<std::uint64_t>(local[k]) * cstride;
          cstride *= static_cast<std::uint64_t>(m.chunks[k]);
        }
        const auto bytes = leaf_part(src, r.at + from * es, run, buf);
        std::memcpy(tile.data() + to * es, bytes.data(), run);
        std::size_t k = rank - 1;
        bool more = false;
        while (k-- > 0) {
          if (++local[k] < ext[k]) { more = true; break; }
          local[k] = 0;
        }
        if (!more) break;
      }
      part = tile;
    }
    emit(chunk_key(idx, separator), part);
    if (progress) progress->add(in_array, 0);
    std::size_t k = rank;
    bool more = false;
    while (k-- > 0) {
      if (++idx[k] < hi[k]) { more = true; break; }
      idx[k] = lo[k];
    }
    if (!more) break;
  }
}

// The whole leaf (ckpt::save of one process).
inline void encode_chunks(const ArrayMeta& m, const LeafBytes& src, char separator,
                          const std::function<void(const std::string&, std::span<const std::byte>)>& put,
                          exec::ProgressTracker* progress = nullptr) {
  encode_chunks(m, src, whole(m), separator, put, progress);
}

// Writes regions of the array under `array` (several processes may write one array):
// .zarray when `metadata` (one process's job), then one object per chunk, each put
// whole through the storage (a file in a staging directory, an object on S3).
inline void write_array_part(const storage::Location& array, const ArrayMeta& m, const LeafBytes& src,
                             std::span<const Region> regions, bool metadata, exec::ProgressTracker* progress = nullptr) {
  if (metadata) {
    const std::string zarray = zarray_json(m).dump(4);
    array.storage->put(array.key(".zarray"), std::as_bytes(std::span(zarray)));
  }
  for (const Region& r : regions)
    encode_chunks(
        m, src, r, m.separator,
        [&](const std::string& key, std::span<const std::byte> bytes) { array.storage->put(array.key(key), bytes); },
        progress);
}

// Writes the array under `array`: .zarray, then one object per chunk. src is C order.
inline void write_array(const storage::Location& array, const ArrayMeta& m, const LeafBytes& src,
                        exec::ProgressTracker* progress = nullptr) {
  const Region all = whole(m);
  write_array_part(array, m, src, std::span(&all, 1), true, progress);
}

// Opens an array directory: parses .zarray (or uses `given`) and checks it is plausible.
inline ArrayMeta open_array(const fs::path& dir, const std::string& checkpoint, const std::string& path) {
  auto fail = [&](const std::string& w) { throw CorruptCheckpointError(checkpoint, path, w); };
  ArrayMeta m = parse_zarray(read_json_file(dir / ".zarray", checkpoint, path), fail);
  if (const auto bad = check_plausible(dir, m); !bad.empty()) fail(bad);
  return m;
}

}  // namespace ckpt::detail::zarr
