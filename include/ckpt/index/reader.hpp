// ckpt/index/reader.hpp — ckpt::IndexReader: how a format fetches the bytes of an
// Index's leaves.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/index/entry.hpp>

namespace ckpt {

class Index;  // index.hpp: passed along to every read, which may look up other entries

// How a format fetches a leaf's bytes; it has checked the entry's bounds when opening.
class IndexReader {
 public:
  virtual ~IndexReader() = default;
  // Reads the whole leaf into dst (dst.size() == e.length), verifying its checksum when asked.
  virtual void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const = 0;
  // Whether entries carry the xxh3 of their bytes (checksum, chunk_xxh3), which reads
  // of a leaf in pieces verify (LeafVerifier); other formats check what they decode.
  virtual bool has_xxh3() const { return false; }
  // The fraction of the stored bytes already in the page cache, sampled; 1 when the
  // reader cannot tell (an object store, a format without files of its own). A restore
  // whose files are mostly not cached reads them as one sequential stream and verifies
  // on a second thread behind it (exec::ReadQueue): on this VM, two threads reading
  // parts of a freshly written, uncached file took twice as long as one stream.
  virtual double cached_fraction() const { return 1.0; }
  // Whether read_range reads only the range (boxed reads then read only what they need).
  virtual bool reads_ranges() const { return false; }
  // What one more read_range call costs, in bytes read: a read of part of a box weighs
  // it against the bytes when it chooses between many small ranges and fewer larger
  // ones. 0 (a file: a pread costs a system call) reads the fewest bytes; an object
  // store, where each range is a request, says how many bytes a request is worth.
  virtual std::uint64_t range_overhead() const { return 0; }
  // Reads bytes [at, at + dst.size()) of a stored leaf or box, unverified.
  virtual void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const {
    std::vector<std::byte> all(e.length);
    read(index, e, all, false);
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + dst.size()),
              dst.begin());
  }
  // Reads several ranges of one stored leaf or box, unverified: one read_range each, or
  // fewer calls where the reader can batch them (the native format: io/batch_read.hpp).
  virtual void read_ranges(const Index& index, const IndexEntry& e, std::span<const LeafRange> ranges) const {
    for (const LeafRange& r : ranges) read_range(index, e, r.at, r.dst);
  }
  // Reads pieces of stored leaves, unverified, given in the order they lie in the
  // files: a restore's one stream through files that are not in the page cache
  // (exec::ReadQueue). A reader whose leaves lie back to back overrides it to read
  // neighbours with one call: the kernel then issues larger requests (the native
  // format: a cold file is read faster in 64 MiB calls than in 4-16 MiB ones).
  virtual void read_in_file_order(const Index& index, std::span<const PieceRead> pieces) const {
    for (const PieceRead& p : pieces) read_range(index, *p.entry, p.at, p.dst);
  }
  // A reader for which many leaves are cheaper fetched together than one by one (an
  // object store: a few large ranged GETs instead of one request per leaf) says so here
  // and reads them all in read_batch, returning true; false: read them one by one (the
  // default). Asked first, so that a restore builds the batch only for such readers: for
  // 20,000 leaves it is 0.6 MB that a file's reader never looks at.
  virtual bool reads_in_batches() const { return false; }
  virtual bool read_batch(const Index& index, std::span<const LeafRead> reads) const {
    (void)index, (void)reads;
    return false;
  }
  // Reads several whole leaves stored in one piece each (no boxes, no per-chunk
  // checksums; every dst.size() == entry->length), verifying each when asked. A reader
  // that fetches neighbouring leaves with one call overrides it (the native format: one
  // pread of a run of adjacent small leaves into a buffer, instead of one pread each);
  // the default reads them one by one, through Index::read so that an error
  // names the leaf it was reading (defined in index.hpp, after Index).
  virtual void read_group(const Index& index, std::span<const LeafRead> reads) const;
  // Reads the box at `origin` of `shape` of e (a whole stored array, not boxes) into dst
  // itself, fetching only the stored pieces that meet it (a chunked array: only its
  // chunks in the box), and returns true; false: Index::read_box reads by byte ranges.
  virtual bool read_box(const Index& index, const IndexEntry& e, const Shape& origin, const Shape& shape,
                        std::span<std::byte> dst) const {
    (void)index, (void)e, (void)origin, (void)shape, (void)dst;
    return false;
  }
  // Whether read_part works for e: the format records per-chunk checksums.
  virtual bool reads_parts(const IndexEntry&) const { return false; }
  // Reads bytes [offset, offset + dst.size()) of the leaf (offset on a chunk boundary,
  // the end on one or at the leaf's end), verifying those chunks when asked.
  virtual void read_part(const Index&, const IndexEntry&, std::uint64_t, std::span<std::byte>, bool) const {
    throw Error("this format reads whole leaves only");
  }
};

}  // namespace ckpt
