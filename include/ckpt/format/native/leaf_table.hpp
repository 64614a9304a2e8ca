// ckpt/format/native/leaf_table.hpp — a local native checkpoint's leaves as flat
// records, looked up by path and read; the restore that fills a typed target from them
// is format/native/leaf_table_fill.hpp.
//
// Each leaf laid out as this library's writer lays it, its bytes whole and raw in a
// data file or inline in the manifest (a version 3 record, leaf_records.hpp, or in
// older manifests a map of eight keys: decode_leaf_as_written's layout), becomes a
// TableLeaf of 64 bytes: its path's segments and its shape are views into the
// manifest's bytes and one shared array, so that opening 20,000 leaves
// allocates nothing per leaf. Any other leaf (chunk checksums, boxes, keys in another
// order) is decoded into an IndexEntry as open() decodes it, and a small Index of those
// alone (the side index) serves it: its reads, boxes and lazy sources are the general
// ones. The table makes every check open() makes, with the same errors.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/huge_page_allocator.hpp>
#include <ckpt/format/native/reader.hpp>
#include <ckpt/tree/path_order.hpp>

namespace ckpt::detail::native {

struct TableLeaf {
  static constexpr std::uint32_t no_entry = ~std::uint32_t{0};
  static constexpr std::uint32_t in_manifest = ~std::uint32_t{0};  // a file: inline bytes
  std::uint32_t path_at = 0, path_size = 0;  // its segments: LeafTable::segments_[path_at, +path_size)
  std::uint32_t shape_at = 0, rank = 0;      // its dimensions: LeafTable::dims_[shape_at, +rank)
  std::uint32_t file = 0;                    // LeafTable::file_names_[file], or in_manifest
  std::uint32_t entry = no_entry;            // else the side index's entry that holds it
  dtype type = dtype::none;
  std::uint64_t offset = 0;  // in its data file, or (in_manifest) in the manifest's bytes
  std::uint64_t length = 0, checksum = 0;
  std::byte* target = nullptr;  // where a restore queued it to be read (NativeTableFill)
};

class LeafTable {
  // Leaf i's path segments, for order_.
  struct SegmentsOf {
    const LeafTable* table;
    std::span<const std::string_view> operator()(std::uint32_t i) const { return table->segments(i); }
  };
  SegmentsOf segments_of() const { return {this}; }

 public:
  static constexpr std::uint32_t none = detail::PathOrder::none;

  // Opens the checkpoint in the local directory dir.
  explicit LeafTable(const fs::path& dir) {
    const storage::Location loc = storage::directory_location(dir);
    checkpoint_ = loc.url;
    manifest_ = read_manifest(loc);
    IndexInfo info;
    IndexEntries side;
    decode_manifest_checked(manifest_->bytes(), checkpoint_, info,
                            [&](detail::mp::Cursor& c, const detail::mp::Reader& r, std::uint32_t count,
                                LeafRecords& records) {
                              // A leaf's path is two segments or so, its shape a dimension:
                              // reserved so, growing stays rare.
                              leaves_.reserve(count);
                              segments_.reserve(std::size_t{count} * 2);
                              dims_.reserve(count);
                              // The records' file numbers are the table's.
                              file_names_.assign(records.files.begin(), records.files.end());
                              for (std::uint32_t i = 0; i < count; ++i) {
                                c.use(r);
                                TableLeaf& t = leaves_.emplace_back();
                                const bool record = c.next_is_array();
                                if (record ? take_record(c, records, t) : decode_as_written(c, t)) continue;
                                // A fresh reader each time: the decoders name their leaf by
                                // pointer, and `side` may move its entries as it grows.
                                detail::mp::Reader lr = r.at_path("");
                                IndexEntry& e = side.emplace_back();
                                if (record)
                                  decode_leaf_record(c, lr, records, e);  // the fault take_record met, named
                                else
                                  decode_leaf(c, lr, info, e);
                                t.entry = static_cast<std::uint32_t>(side.size() - 1);
                              }
                            });
    if (leaves_.size() > std::numeric_limits<std::uint32_t>::max() / 2)
      throw CorruptCheckpointError(checkpoint_, "", "more than 2^31 leaves");
    // The data files, each opened once and measured, and every leaf's bytes checked to
    // lie inside its file, as open() checks them.
    std::map<std::string, std::optional<std::uint64_t>> sizes;
    for (const std::string_view f : file_names_) sizes.try_emplace(std::string(f));
    for_each_stored(side, [&](const IndexEntry& e) {
      if (!e.file.empty()) sizes.try_emplace(e.file);
    });
    reader_ = std::make_shared<Reader>(*loc.storage->local_directory() / loc.prefix,
                                       open_data_files(*loc.storage->local_directory(), loc, sizes), manifest_);
    std::vector<const std::optional<std::uint64_t>*> file_sizes;
    for (const std::string_view f : file_names_) file_sizes.push_back(&sizes.find(std::string(f))->second);
    for (std::uint32_t i = 0; i < leaves_.size(); ++i) {
      const TableLeaf& t = leaves_[i];
      if (t.entry != TableLeaf::no_entry || t.file == TableLeaf::in_manifest) continue;
      const std::optional<std::uint64_t>& size = *file_sizes[t.file];
      if (!size)
        throw CorruptCheckpointError(checkpoint_, path_str(i),
                                     "data file " + std::string(file_names_[t.file]) + " is missing or unreadable");
      check_within_file(checkpoint_, [&] { return path_str(i); }, file_names_[t.file], t.offset, t.length, *size);
    }
    for_each_stored(side, [&](const IndexEntry& e) {
      if (e.file.empty()) return;
      const auto& size = sizes.at(e.file);
      if (!size) throw CorruptCheckpointError(checkpoint_, e.path.str(), "data file " + e.file + " is missing or unreadable");
      check_within_file(checkpoint_, e, *size);
    });
    // The side index's entries keep their paths and shapes; the table views them.
    side_ = std::make_shared<const Index>(checkpoint_, std::move(info), std::move(side), reader_, manifest_);
    for (TableLeaf& t : leaves_) {
      if (t.entry == TableLeaf::no_entry) continue;
      const IndexEntry& e = side_->entries()[t.entry];
      t.path_at = static_cast<std::uint32_t>(segments_.size());
      t.path_size = static_cast<std::uint32_t>(e.path.size());
      for (const std::string& s : e.path.segments()) segments_.push_back(s);
      t.shape_at = static_cast<std::uint32_t>(dims_.size());
      t.rank = static_cast<std::uint32_t>(e.shape.size());
      dims_.insert(dims_.end(), e.shape.begin(), e.shape.end());
      t.type = e.type;
      t.length = e.length;
    }
    order_.build(static_cast<std::uint32_t>(leaves_.size()), segments_of(), [&](std::uint32_t i, const char* what) {
      throw CorruptCheckpointError(checkpoint_, path_str(i), what);
    });
  }
  LeafTable(const LeafTable&) = delete;
  LeafTable& operator=(const LeafTable&) = delete;

  const std::string& checkpoint() const noexcept { return checkpoint_; }
  std::size_t size() const noexcept { return leaves_.size(); }
  const TableLeaf& leaf(std::uint32_t i) const { return leaves_[i]; }
  std::span<const std::string_view> segments(std::uint32_t i) const {
    return {segments_.data() + leaves_[i].path_at, leaves_[i].path_size};
  }
  std::span<const std::int64_t> shape(std::uint32_t i) const { return {dims_.data() + leaves_[i].shape_at, leaves_[i].rank}; }
  std::string path_str(std::uint32_t i) const {
    const auto s = segments(i);
    return Path(std::vector<std::string>(s.begin(), s.end())).str();
  }
  // The leaves the table does not read itself, and the Index that reads them.
  const std::shared_ptr<const Index>& side() const noexcept { return side_; }
  const Reader& reader() const noexcept { return *reader_; }

  std::uint32_t find(const Path& p) const { return order_.find(segments_of(), p.segments()); }
  bool has_subtree(const Path& p) const { return order_.has_subtree(segments_of(), p.segments()); }
  template <class Fn>
  void for_each_child(const Path& p, Fn&& fn) const {
    order_.for_each_child(segments_of(), p.segments(), fn);
  }
  bool list_leaves(const Path& p, std::vector<std::uint32_t>& out) const {
    return order_.list_leaves(segments_of(), p.segments(), out);
  }

  // Leaf i (one the table reads, in a data file) as an IndexEntry, for the side index's
  // reader: a read of a leaf on its own (not in a run), whose path and shape are then
  // worth making.
  IndexEntry entry(std::uint32_t i) const {
    const TableLeaf& t = leaves_[i];
    IndexEntry e;
    const auto s = segments(i);
    e.path = Path(std::vector<std::string>(s.begin(), s.end()));
    e.type = t.type;
    const auto d = shape(i);
    e.shape.assign(d.begin(), d.end());
    e.file = file_names_[t.file];
    e.offset = t.offset;
    e.length = t.length;
    e.checksum = t.checksum;
    return e;
  }
  bool in_manifest(std::uint32_t i) const { return leaves_[i].file == TableLeaf::in_manifest; }
  // The leaf's bytes into dst (its length), verified when asked; errors name it.
  void read(std::uint32_t i, std::span<std::byte> dst, bool verify) const {
    const TableLeaf& t = leaves_[i];
    if (t.file != TableLeaf::in_manifest) return side_->read(entry(i), dst, verify);
    // dst.size() == t.length (callers check); an empty array's data() may be null
    if (!dst.empty()) std::memcpy(dst.data(), manifest_->data() + t.offset, dst.size());
    if (verify && io::xxh3(dst) != t.checksum)
      throw CorruptCheckpointError(checkpoint_, path_str(i), "checksum mismatch: the leaf's bytes were altered or torn");
  }
  // A restore's destination for leaf i (its target field).
  TableLeaf& target_of(std::uint32_t i) { return leaves_[i]; }
  // Small leaves (each no longer than Reader::bounce_bytes), in file order, read in runs
  // into their targets.
  void read_runs(std::span<const std::uint32_t> leaves, bool verify) const {
    reader_->read_runs(
        leaves.size(),
        [&](std::size_t k) {
          const TableLeaf& t = leaves_[leaves[k]];
          return Reader::RunLeaf{file_names_[t.file], t.offset, t.checksum, {t.target, static_cast<std::size_t>(t.length)}, verify};
        },
        [&](std::size_t k) {
          const TableLeaf& t = leaves_[leaves[k]];
          read(leaves[k], {t.target, static_cast<std::size_t>(t.length)}, verify);
        },
        [&](std::size_t k) {
          throw CorruptCheckpointError(checkpoint_, path_str(leaves[k]),
                                       "checksum mismatch: the leaf's bytes were altered or torn");
        });
  }
  // Where leaf a lies before leaf b in the files.
  bool before(std::uint32_t a, std::uint32_t b) const {
    const TableLeaf &x = leaves_[a], &y = leaves_[b];
    return x.file != y.file ? file_names_[x.file] < file_names_[y.file] : x.offset < y.offset;
  }

 private:
  // A leaf written as its path and a record (version 3) into t, checked as
  // decode_leaf_record checks it; false (and nothing kept, no record taken) for any
  // fault, which decode_leaf_record then names.
  bool take_record(detail::mp::Cursor& c, LeafRecords& records, TableLeaf& t) {
    const std::size_t start = c.pos(), next = records.next, segments_before = segments_.size(), dims_before = dims_.size();
    try {
      t.path_at = static_cast<std::uint32_t>(segments_before);
      t.path_size = c.array("path");  // <= the bytes left: Cursor::array checks
      for (std::uint32_t k = 0; k < t.path_size; ++k) segments_.push_back(c.str("path segment"));
      LeafRecord r;
      if (records.take(r, dims_).empty()) {
        t.shape_at = static_cast<std::uint32_t>(dims_before);
        t.rank = static_cast<std::uint32_t>(dims_.size() - dims_before);
        const std::span<const std::int64_t> dims(dims_.data() + dims_before, t.rank);
        const std::int64_t elements = element_count(dims);
        if (elements >= 0 && shape_fits(r.type, dims.empty(), r.length, elements)) {
          t.type = r.type;
          t.length = r.length;
          t.checksum = r.checksum;
          t.file = r.file == record_inline ? TableLeaf::in_manifest : r.file;
          t.offset = r.file != record_inline
                         ? r.offset
                         : static_cast<std::uint64_t>(reinterpret_cast<const std::byte*>(records.inline_bytes.data()) -
                                                      manifest_->data()) + r.offset;
          return true;
        }
      }
    } catch (const CorruptCheckpointError&) {  // malformed: decode_leaf_record says how
    }
    c.seek(start);
    records.next = next;
    segments_.resize(segments_before);
    dims_.resize(dims_before);
    t = TableLeaf{};
    return false;
  }

  // A leaf in the writer's layout into t, with decode_leaf_as_written's checks; false
  // (and nothing kept) for any other leaf or any fault, which decode_leaf then reads
  // and names.
  bool decode_as_written(detail::mp::Cursor& c, TableLeaf& t) {
    const std::size_t start = c.pos(), segments_before = segments_.size(), dims_before = dims_.size();
    std::string_view file;
    const auto read = [&] {
      if (!c.take_if("\x88\xa4path")) return false;  // a map of eight, its first key
      t.path_at = static_cast<std::uint32_t>(segments_before);
      t.path_size = c.array("path");  // <= the bytes left: Cursor::array checks
      for (std::uint32_t k = 0; k < t.path_size; ++k) segments_.push_back(c.str("path segment"));
      if (!c.take_if("\xa5" "dtype")) return false;
      const std::string_view dt = c.str("dtype");
      const auto d = dtype_from_name(dt);
      if (!d || !c.take_if("\xa5" "shape")) return false;
      t.type = *d;
      t.shape_at = static_cast<std::uint32_t>(dims_before);
      t.rank = c.array("shape");
      for (std::uint32_t k = 0; k < t.rank; ++k) dims_.push_back(c.i64("shape"));
      const std::span<const std::int64_t> dims(dims_.data() + dims_before, t.rank);
      const std::int64_t elements = element_count(dims);
      if (elements < 0 || !c.take_if("\xa4" "file")) return false;
      const bool inline_bytes = c.take_if("\xc0");  // nil: the bytes are in the manifest
      if (!inline_bytes) {
        file = c.string_if(true, false);
        if (!file.data() || !is_data_file_name(file)) return false;
      }
      if (!c.take_if("\xa6" "offset")) return false;
      t.offset = c.u64("offset");
      if (!c.take_if("\xa6" "length")) return false;
      t.length = c.u64("length");
      if (!c.take_if("\xa4" "xxh3")) return false;
      t.checksum = c.u64("xxh3");
      if (!shape_fits(t.type, dims.empty(), t.length, elements)) return false;
      if (!inline_bytes) return c.take_if("\xa5" "codec" "\xa3" "raw");
      if (!c.take_if("\xa6" "inline")) return false;
      const std::string_view in = c.string_if(false, true);
      if (!in.data() || in.size() != t.length) return false;
      t.file = TableLeaf::in_manifest;
      t.offset = static_cast<std::uint64_t>(reinterpret_cast<const std::byte*>(in.data()) - manifest_->data());
      return true;
    };
    try {
      if (read()) {
        if (t.file != TableLeaf::in_manifest) t.file = file_number(file);
        return true;
      }
    } catch (const CorruptCheckpointError&) {  // malformed: decode_leaf says how
    }
    c.seek(start);
    segments_.resize(segments_before);
    dims_.resize(dims_before);
    t = TableLeaf{};
    return false;
  }
  // What leaf_shape_fault finds nothing wrong with, without making its message.
  static bool shape_fits(dtype type, bool scalar, std::uint64_t length, std::int64_t elements) {
    // elements * size == length, with no overflow: checked by the multiplication, not
    // by dividing first (a division was a tenth of taking a record)
    std::uint64_t bytes = 0;
    if (is_numeric(type))
      return !__builtin_mul_overflow(static_cast<std::uint64_t>(elements), std::uint64_t{dtype_size(type)}, &bytes) &&
             bytes == length;
    if (type == dtype::none) return length == 0;
    return type != dtype::string || scalar;
  }
  // The number of a data file's name; neighbours share their file, so the last one is
  // asked first.
  std::uint32_t file_number(std::string_view name) {
    if (last_file_ < file_names_.size() && file_names_[last_file_] == name) return last_file_;
    const auto it = std::find(file_names_.begin(), file_names_.end(), name);
    last_file_ = static_cast<std::uint32_t>(it - file_names_.begin());
    if (it == file_names_.end()) file_names_.push_back(name);
    return last_file_;
  }

  std::string checkpoint_;
  std::shared_ptr<const ManifestBytes> manifest_;  // what the views below point into
  // Fresh memory of a megabyte or so for 20,000 leaves: on huge pages from half a
  // megabyte up, as IndexEntries are (detail/huge_page_allocator.hpp).
  std::vector<TableLeaf, detail::HugePageAllocator<TableLeaf>> leaves_;
  std::vector<std::string_view, detail::HugePageAllocator<std::string_view>> segments_;
  std::vector<std::int64_t, detail::HugePageAllocator<std::int64_t>> dims_;
  std::vector<std::string_view> file_names_;  // into the manifest
  std::uint32_t last_file_ = 0;
  std::shared_ptr<const Reader> reader_;
  std::shared_ptr<const Index> side_;
  detail::PathOrder order_;
};

}  // namespace ckpt::detail::native
