// ckpt/format/tf/bundle.hpp — TensorFlow tensor bundles (checkpoint V2) as an Index.
//
// A checkpoint PREFIX is `PREFIX.index` (a table, tf/table.hpp: key "" holds the
// BundleHeaderProto, every other key a tensor's BundleEntryProto) and the shards
// `PREFIX.data-00000-of-00002`... holding each tensor's little-endian bytes at the
// entry's offset. tf.train.load_checkpoint takes a prefix or a directory whose
// `checkpoint` state file names the latest prefix; so does this reader.
// Paths are the variable names split at '/' (format/interop/flat_names.hpp: a variable
// that is also a scope, as TF1's optimizer slots make `w` of `w/Adam`, is at w.@value).
// Each leaf's masked crc32c is verified when it is read (restore's verify_checksums). Strings are TensorFlow's string encoding
// (varint lengths, a masked crc of the lengths, the bytes): a scalar one becomes a
// string leaf, a tensor of shape [n, m] the leaves name/0/0 ... name/(n-1)/(m-1) (what a
// std::vector<std::vector<std::string>> restores from); they are read when opening, to
// know their lengths. A partitioned variable (an entry listing slices, each stored
// under its own key, as tf.train.Saver writes PartitionedVariable) becomes one leaf of
// the whole shape whose slices are boxes (IndexBox), assembled when it is read; the
// slices must cover the shape without overlapping. Otherwise nothing but the index is
// read when opening: a missing data shard shows when a tensor in it is read, naming it.
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/format/interop/flat_names.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/tf/proto.hpp>
#include <ckpt/format/tf/table.hpp>
#include <ckpt/index.hpp>
#include <ckpt/io/crc32c.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::detail::tf {

namespace fs = std::filesystem;

// tensorflow/core/framework/types.proto: the DataType code of each dtype is the
// `tf_datatype` column of the dtype table (leaf/dtype.hpp).
inline std::optional<dtype> dtype_of(int code) {
  if (code <= 0) return std::nullopt;
  for (const auto& e : dtype_table)
    if (e.tf_datatype == code) return e.type;
  return std::nullopt;
}

}  // namespace ckpt::detail::tf

// The bundle reader's internals.
namespace ckpt::detail::tf_bundle {

namespace fs = std::filesystem;

inline constexpr std::int64_t max_shards = 100'000;
inline constexpr std::uint64_t max_state_file_bytes = 1 << 20;

// One tensor's bytes: where they are and how to check them.
struct Stored {
  std::string shard;               // file name of the data shard
  std::uint64_t offset = 0, size = 0;
  std::optional<std::uint32_t> masked_crc;
  // One element of a string tensor, decoded when opening; string_crc_ok: the tensor's
  // crc32c matched (checked then, reported when the element is read with verification).
  std::shared_ptr<const std::string> string;
  bool string_crc_ok = true;
  std::string refuse;              // non-empty: why this tensor cannot be read
};

inline constexpr std::int64_t max_string_elements = 1 << 20;        // per string tensor
inline constexpr std::uint64_t max_string_tensor_bytes = 256u << 20;  // read when opening
inline constexpr std::size_t max_slices_per_variable = 4096;        // checked pairwise

// The key a slice of a partitioned variable is stored under: TensorFlow's
// EncodeTensorNameSlice (tensorflow/core/util/saved_tensor_slice_util.cc), written with
// its OrderedCode (tensorflow/core/lib/strings/ordered_code.cc): 0, the name, the rank,
// then start and length of each dimension (0 and -1 for a whole dimension).
namespace ordered_code {
inline void write_num(std::string& out, std::uint64_t v) {  // length byte, big-endian, no leading zeros
  const int n = (std::bit_width(v) + 7) / 8;
  out += static_cast<char>(n);
  for (int i = n - 1; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void write_string(std::string& out, std::string_view s) {  // \0 and \xff escaped, then \0\1
  for (const char c : s) {
    out += c;
    if (c == '\0') out += '\xff';
    else if (c == '\xff') out += '\0';
  }
  out += '\0';
  out += '\1';
}
// Sign bit, then as many more bits equal to it as bytes follow the first, then the value.
inline void write_signed(std::string& out, std::int64_t v) {
  static constexpr unsigned char header[11][2] = {{0, 0},       {0x80, 0},    {0xc0, 0},    {0xe0, 0},
                                                  {0xf0, 0},    {0xf8, 0},    {0xfc, 0},    {0xfe, 0},
                                                  {0xff, 0},    {0xff, 0x80}, {0xff, 0xc0}};
  const auto u = static_cast<std::uint64_t>(v);
  const std::uint64_t x = v < 0 ? ~u : u;
  const int len = (std::bit_width(x) + 7) / 7;  // 1..10 bytes
  unsigned char buf[10];
  buf[0] = buf[1] = v < 0 ? 0xff : 0;
  for (int i = 0; i < 8; ++i) buf[2 + i] = static_cast<unsigned char>((u >> (56 - 8 * i)) & 0xff);
  unsigned char* begin = buf + 10 - len;
  begin[0] ^= header[len][0];
  if (len > 1) begin[1] ^= header[len][1];
  out.append(reinterpret_cast<const char*>(begin), static_cast<std::size_t>(len));
}
}  // namespace ordered_code

inline std::string slice_key(std::string_view name, const std::vector<detail::tf::proto::SliceExtent>& slice) {
  std::string k;
  ordered_code::write_num(k, 0);
  ordered_code::write_string(k, name);
  ordered_code::write_num(k, slice.size());
  for (const auto& x : slice) {
    ordered_code::write_signed(k, x.length ? x.start : 0);
    ordered_code::write_signed(k, x.length ? *x.length : -1);
  }
  return k;
}

inline std::string shard_name(const std::string& prefix_name, std::int64_t i, std::int64_t n) {
  char buf[64];  // two 20-digit numbers fit
  std::snprintf(buf, sizeof buf, ".data-%05lld-of-%05lld", static_cast<long long>(i), static_cast<long long>(n));
  return prefix_name + buf;
}

class BundleReader final : public IndexReader {
 public:
  // slices: the stored slices of partitioned variables, by (shard, offset): the boxes of
  // their entries name those, and their crc32c is here.
  BundleReader(fs::path dir, std::vector<Stored> stored, std::map<std::pair<std::string, std::uint64_t>, Stored> slices)
      : dir_(std::move(dir)), stored_(std::move(stored)), slices_(std::move(slices)) {}

  void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
    auto fail = [&](const std::string& w) { throw CorruptCheckpointError(index.checkpoint(), e.path.str(), w); };
    const IndexEntry* first = index.entries().data();
    const std::less<const IndexEntry*> before;
    const Stored* found = nullptr;
    if (!before(&e, first) && before(&e, first + index.entries().size())) {
      found = &stored_[static_cast<std::size_t>(&e - first)];
    } else if (auto it = slices_.find({e.file, e.offset}); it != slices_.end()) {
      found = &it->second;  // a slice of a partitioned variable (a box of its entry)
    } else {
      throw Error(index.checkpoint(), e.path.str(), "entry does not belong to this index");
    }
    const Stored& s = *found;
    if (!s.refuse.empty()) throw Error(index.checkpoint(), e.path.str(), s.refuse);
    if (s.string) {
      if (verify && !s.string_crc_ok) fail("crc32c mismatch in " + s.shard + " (the data is corrupt)");
      if (dst.size() != s.string->size()) fail("size mismatch");
      if (!dst.empty()) std::memcpy(dst.data(), s.string->data(), dst.size());  // an empty string: no pointer
      return;
    }
    const fs::path file = dir_ / s.shard;
    std::error_code ec;
    if (!fs::exists(file, ec)) fail("data shard " + s.shard + " is missing");
    io::File f = io::File::open_read(file);
    const std::uint64_t fsize = f.size(file);
    if (s.offset > fsize || s.size > fsize - s.offset)
      fail("bytes [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ") lie past the end of " + s.shard +
           " (" + std::to_string(fsize) + " bytes)");
    if (dst.size() != s.size) fail("size mismatch");
    io::pread_exact(f, dst, s.offset, file);
    if (verify && s.masked_crc && io::crc32c_mask(io::crc32c(dst)) != *s.masked_crc)
      fail("crc32c mismatch in " + s.shard + " (the data is corrupt)");
  }

 private:
  fs::path dir_;
  std::vector<Stored> stored_;
  std::map<std::pair<std::string, std::uint64_t>, Stored> slices_;
};

// A string tensor of n elements as TensorFlow's WriteStringTensor stores it: n varint64
// lengths, the masked crc32c of the lengths (each as uint32, as uint64 when it needs 64
// bits), the bytes of every element. The entry's crc covers those fixed-width lengths,
// the 4 bytes of their crc and the bytes. Returns the elements and whether the entry's
// crc matched (nullopt masked: nothing to check); malformed bytes call fail.
template <class Fail>
std::pair<std::vector<std::string>, bool> decode_strings(std::span<const std::byte> raw, std::uint64_t n,
                                                         std::optional<std::uint32_t> masked, Fail&& fail) {
  detail::tf::proto::WireReader r(raw);
  std::vector<std::uint64_t> lens;
  std::uint64_t total = 0;
  std::uint32_t c = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t len = 0;
    if (!r.varint(len) || len > raw.size()) fail("malformed string length");
    lens.push_back(len);
    total += len;
    std::byte w[8];
    const std::size_t wn = len > 0xffffffffu ? 8 : 4;
    for (std::size_t k = 0; k < wn; ++k) w[k] = static_cast<std::byte>((len >> (8 * k)) & 0xff);
    c = io::crc32c_extend(c, std::span<const std::byte>(w, wn));
  }
  const std::size_t at = raw.size() - r.remaining();
  std::uint32_t stored_len_crc = 0;
  if (r.remaining() < 4 || total != r.remaining() - 4 || !r.fixed32(stored_len_crc))
    fail("string lengths do not match the stored size");
  if (stored_len_crc != io::crc32c_mask(c)) fail("crc32c of the string lengths does not match");
  c = io::crc32c_extend(c, raw.subspan(at));
  std::vector<std::string> out;
  out.reserve(lens.size());
  std::size_t from = at + 4;
  for (const std::uint64_t len : lens) {
    out.emplace_back(reinterpret_cast<const char*>(raw.data() + from), static_cast<std::size_t>(len));
    from += static_cast<std::size_t>(len);
  }
  return {std::move(out), !masked || io::crc32c_mask(c) == *masked};
}

// The model_checkpoint_path of a `checkpoint` state file (a text-format CheckpointState).
inline std::optional<std::string> state_file_latest(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  std::vector<std::byte> raw;
  try {
    raw = io::read_file(file, max_state_file_bytes);
  } catch (const Error&) {
    return std::nullopt;
  }
  const std::string text(reinterpret_cast<const char*>(raw.data()), raw.size());
  const std::string key = "model_checkpoint_path:";
  std::size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') break;  // not all_model_checkpoint_paths
    at += key.size();
  }
  if (at == std::string::npos) return std::nullopt;
  const std::size_t q1 = text.find('"', at + key.size());
  const std::size_t nl = text.find('\n', at);
  if (q1 == std::string::npos || (nl != std::string::npos && q1 > nl)) return std::nullopt;
  std::string out;
  for (std::size_t i = q1 + 1; i < text.size(); ++i) {  // text-format string: \" and \\ escapes
    if (text[i] == '"') return out;
    if (text[i] == '\\' && i + 1 < text.size()) ++i;
    out += text[i];
  }
  return std::nullopt;
}

inline bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
inline fs::path with_suffix(const fs::path& p, const char* s) { return fs::path(p.string() + s); }

}  // namespace ckpt::detail::tf_bundle

namespace ckpt::detail::tf {

// The checkpoint prefix that prefix_or_dir names, as tf.train.load_checkpoint resolves it:
// a prefix (PREFIX.index exists), PREFIX.index itself, a directory whose `checkpoint`
// file names the latest prefix (relative to the directory; an absolute path that no
// longer exists is looked up by its name in the directory, as after a move), a
// SavedModel directory (variables/variables). nullopt when none applies.
inline std::optional<fs::path> find_prefix(const fs::path& p) {
  namespace bd = ckpt::detail::tf_bundle;
  std::error_code ec;
  if (bd::is_file(bd::with_suffix(p, ".index"))) return p;
  if (p.extension() == ".index" && bd::is_file(p)) return p.parent_path() / p.stem();
  if (!fs::is_directory(p, ec)) return std::nullopt;
  if (const auto latest = bd::state_file_latest(p / "checkpoint")) {
    fs::path q = fs::path(*latest).is_absolute() ? fs::path(*latest) : p / *latest;
    if (!bd::is_file(bd::with_suffix(q, ".index")) && fs::path(*latest).is_absolute())
      q = p / fs::path(*latest).filename();
    return q;  // may lack .index: open() then says what is there instead
  }
  if (bd::is_file(p / "variables/variables.index")) return p / "variables/variables";
  if (bd::is_file(p / "variables.index")) return p / "variables";
  return std::nullopt;
}

// Opens the bundle at a prefix (or anything find_prefix resolves).
inline std::shared_ptr<const Index> open_bundle(const fs::path& prefix_or_dir) {
  namespace bd = ckpt::detail::tf_bundle;
  const std::string ckpt = prefix_or_dir.string();
  const auto prefix = find_prefix(prefix_or_dir);
  if (!prefix) throw Error(ckpt, "", "no TensorFlow checkpoint here (no PREFIX.index, no `checkpoint` state file)");
  const fs::path index_path = bd::with_suffix(*prefix, ".index");
  if (!bd::is_file(index_path)) {
    if (bd::is_file(*prefix)) {
      bool v1 = false;
      try {
        v1 = table::TableReader::has_magic(io::read_file(*prefix, table::max_file_bytes));
      } catch (const Error&) {
      }
      if (v1)
        throw Error(ckpt, "", prefix->filename().string() +
                                  " is a V1 TensorFlow checkpoint (one table file, no .index); only V2 tensor bundles "
                                  "are read: convert it with TensorFlow (tf.compat.v1.train.Saver, write_version=V2)");
    }
    throw Error(ckpt, "", "the checkpoint state names " + quote_for_message(prefix->filename().string()) +
                              " but " + index_path.filename().string() + " does not exist");
  }
  const auto raw = io::read_file(index_path, table::max_file_bytes);
  auto fail_index = [&](const std::string& what) {
    throw CorruptCheckpointError(ckpt, "", index_path.filename().string() + ": " + what);
  };
  table::TableReader reader(raw, fail_index);
  const auto entries = reader.entries();

  proto::BundleHeader header;
  bool have_header = false;
  IndexEntries out;
  std::vector<bd::Stored> stored;
  std::map<std::string, std::span<const std::byte>> slice_values;
  std::map<std::pair<std::string, std::uint64_t>, bd::Stored> slices;
  for (const auto& kv : entries) {
    if (kv.key.empty()) {
      if (!proto::parse_header(kv.value, header)) fail_index("malformed BundleHeaderProto");
      have_header = true;
      continue;
    }
    if (kv.key[0] == '\0') slice_values.emplace(kv.key, kv.value);  // a slice, read through its variable's entry
  }
  if (!have_header) fail_index("no BundleHeaderProto (the \"\" key)");
  if (header.num_shards < 1 || header.num_shards > bd::max_shards)
    fail_index("num_shards " + std::to_string(header.num_shards) + " is implausible");
  if (header.endianness != 0) fail_index("big-endian bundles are not supported");
  if (header.min_consumer > 1)
    fail_index("written for readers of version >= " + std::to_string(header.min_consumer) + "; this one reads version 1");
  const std::string prefix_name = prefix->filename().string();

  // A partitioned variable: each slice its entry lists is stored under slice_key as an
  // entry of its own (shard, offset, size, crc32c); they become the boxes of e.
  auto add_slices = [&](const std::string& name, const proto::BundleEntry& be, IndexEntry& e, const auto& fail) {
    const std::size_t rank = be.shape.size();
    if (be.slices.size() > bd::max_slices_per_variable)
      fail(std::to_string(be.slices.size()) + " slices; at most " + std::to_string(bd::max_slices_per_variable) + " are read");
    for (const auto& slice : be.slices) {
      if (slice.size() != rank) fail("a slice of rank " + std::to_string(slice.size()) + " in a tensor of rank " + std::to_string(rank));
      IndexBox b;
      for (std::size_t d = 0; d < rank; ++d) {
        const auto& x = slice[d];
        if (x.length && (x.start < 0 || *x.length < 0 || x.start > be.shape[d] || *x.length > be.shape[d] - x.start))
          fail("slice [" + std::to_string(x.start) + ", +" + std::to_string(*x.length) + ") of dimension " +
               std::to_string(d) + " lies outside the shape " + shape_str(be.shape));
        b.origin.push_back(x.length ? x.start : 0);
        b.bytes.shape.push_back(x.length ? *x.length : be.shape[d]);
      }
      const auto found = slice_values.find(bd::slice_key(name, slice));
      if (found == slice_values.end())
        fail("the slice at " + shape_str(b.origin) + " of shape " + shape_str(b.bytes.shape) + " is missing from the index");
      proto::BundleEntry se;
      if (!proto::parse_entry(found->second, se)) fail("malformed BundleEntryProto of a slice");
      const std::uint64_t want = static_cast<std::uint64_t>(element_count(b.bytes.shape)) * dtype_size(e.type);
      if (se.dtype != be.dtype || se.shape != b.bytes.shape || se.shard_id < 0 || se.shard_id >= header.num_shards ||
          se.offset < 0 || se.size < 0 || static_cast<std::uint64_t>(se.size) != want)
        fail("the slice at " + shape_str(b.origin) + " does not match its variable (dtype, shape, shard or size)");
      bd::Stored ss;
      ss.shard = bd::shard_name(prefix_name, se.shard_id, header.num_shards);
      ss.offset = static_cast<std::uint64_t>(se.offset);
      ss.size = want;
      ss.masked_crc = se.crc32c;
      b.bytes.path = e.path;
      b.bytes.type = e.type;
      b.bytes.file = ss.shard;
      b.bytes.offset = ss.offset;
      b.bytes.length = want;
      if (!slices.emplace(std::pair(ss.shard, ss.offset), ss).second && want > 0)
        fail("two slices are stored at the same place in " + ss.shard);
      e.boxes.push_back(std::move(b));
    }
    // Disjoint, and together exactly the shape (so every element is read once).
    std::uint64_t covered = 0;
    for (std::size_t i = 0; i < e.boxes.size(); ++i) {
      covered += static_cast<std::uint64_t>(element_count(e.boxes[i].bytes.shape));
      for (std::size_t j = 0; j < i; ++j) {
        bool meet = true;
        for (std::size_t d = 0; d < rank && meet; ++d) {
          const auto &a = e.boxes[i], &c = e.boxes[j];
          meet = a.origin[d] < c.origin[d] + c.bytes.shape[d] && c.origin[d] < a.origin[d] + a.bytes.shape[d];
        }
        if (meet && element_count(e.boxes[i].bytes.shape) > 0 && element_count(e.boxes[j].bytes.shape) > 0)
          fail("slices at " + shape_str(e.boxes[j].origin) + " and " + shape_str(e.boxes[i].origin) + " overlap");
      }
    }
    if (covered != static_cast<std::uint64_t>(element_count(be.shape)))
      fail("the slices cover " + std::to_string(covered) + " of the " + std::to_string(element_count(be.shape)) + " elements");
  };

  // A string tensor: read now (its elements' lengths are in the data shard), one string
  // leaf per element, at name/i/j... for a tensor of rank > 0.
  auto add_strings = [&](const proto::BundleEntry& be, IndexEntry e, bd::Stored s,
                         const auto& fail) {
    const std::int64_t count = element_count(be.shape);
    e.type = dtype::string;
    auto refuse = [&](const std::string& why) {
      e.shape = {};
      s.refuse = why;
      out.push_back(std::move(e));
      stored.push_back(std::move(s));
    };
    if (count == 0) return refuse("an empty string tensor (shape " + shape_str(be.shape) + ")");
    if (count > bd::max_string_elements)
      return refuse("a string tensor of " + std::to_string(count) + " elements; at most " +
                    std::to_string(bd::max_string_elements) + " are read");
    if (s.size > bd::max_string_tensor_bytes)
      return refuse("a string tensor of " + std::to_string(s.size) + " bytes; at most " +
                    std::to_string(bd::max_string_tensor_bytes) + " are read");
    if (s.size < static_cast<std::uint64_t>(count) + 4)
      fail("string tensor of " + std::to_string(s.size) + " bytes is too short for " + std::to_string(count) + " elements");
    const fs::path file = prefix->parent_path() / s.shard;
    if (!bd::is_file(file)) return refuse("data shard " + s.shard + " is missing");
    io::File f = io::File::open_read(file);
    const std::uint64_t fsize = f.size(file);
    if (s.offset > fsize || s.size > fsize - s.offset) fail("bytes lie past the end of " + s.shard);
    std::vector<std::byte> raw(static_cast<std::size_t>(s.size));
    io::pread_exact(f, raw, s.offset, file);
    auto [texts, crc_ok] = bd::decode_strings(raw, static_cast<std::uint64_t>(count), s.masked_crc, fail);
    Shape at(be.shape.size(), 0);  // the element's index, last dimension fastest
    for (std::string& text : texts) {
      IndexEntry el = e;
      bd::Stored es = s;
      for (const std::int64_t i : at) el.path = el.path.child(std::to_string(i));
      el.shape = {};
      el.length = text.size();
      es.string = std::make_shared<const std::string>(std::move(text));
      es.string_crc_ok = crc_ok;
      out.push_back(std::move(el));
      stored.push_back(std::move(es));
      for (std::size_t d = at.size(); d-- > 0;) {
        if (++at[d] < be.shape[d]) break;
        at[d] = 0;
      }
    }
  };

  std::vector<std::string_view> names;
  for (const auto& kv : entries)
    if (!kv.key.empty() && kv.key[0] != '\0') names.emplace_back(kv.key);
  const detail::interop::FlatNames paths(names, '/');

  for (const auto& kv : entries) {
    if (kv.key.empty() || kv.key[0] == '\0') continue;
    const std::string& name = kv.key;
    std::string shown(name, 0, std::min<std::size_t>(name.size(), 200));  // untrusted: cut short
    if (name.size() > 200) shown.append("...");
    auto fail = [&](const std::string& what) { throw CorruptCheckpointError(ckpt, shown, what); };
    proto::BundleEntry be;
    if (!proto::parse_entry(kv.value, be)) fail("malformed BundleEntryProto");
    const auto type = dtype_of(be.dtype);
    IndexEntry e;
    e.path = paths.path(name);
    e.shape = be.shape;
    bd::Stored s;
    if (be.unknown_rank) fail("shape of unknown rank");
    const std::int64_t count = element_count(be.shape);
    if (count < 0) fail("shape " + shape_str(be.shape) + " is negative or overflows");
    if (be.shard_id < 0 || be.shard_id >= header.num_shards)
      fail("shard " + std::to_string(be.shard_id) + " is not one of the " + std::to_string(header.num_shards));
    if (be.offset < 0 || be.size < 0) fail("negative offset or size");
    s.shard = bd::shard_name(prefix_name, be.shard_id, header.num_shards);
    s.offset = static_cast<std::uint64_t>(be.offset);
    s.size = static_cast<std::uint64_t>(be.size);
    s.masked_crc = be.crc32c;
    e.file = s.shard;
    e.offset = s.offset;
    e.codec = "raw";
    if (!type) {
      // resource/variant and quantized types: listed with no data
      e.type = dtype::none;
      e.shape = {};
      s.refuse = "TensorFlow DataType " + std::to_string(be.dtype) + " has no ckpt dtype";
    } else if (!be.slices.empty()) {
      e.type = *type;
      if (*type == dtype::string) {
        s.refuse = "a partitioned string variable; reading those is not supported";
      } else {
        e.file.clear();
        e.offset = 0;
        if (static_cast<std::uint64_t>(count) > (std::uint64_t{1} << 62) / dtype_size(*type))
          fail("shape " + shape_str(be.shape) + " is too large");
        e.length = static_cast<std::uint64_t>(count) * dtype_size(*type);
        add_slices(name, be, e, fail);
      }
    } else if (*type == dtype::string) {
      add_strings(be, std::move(e), std::move(s), fail);
      continue;
    } else {
      e.type = *type;
      const std::uint64_t want = static_cast<std::uint64_t>(count) * dtype_size(*type);
      if (static_cast<std::uint64_t>(count) > (std::uint64_t{1} << 62) / dtype_size(*type) || want != s.size)
        fail("shape " + shape_str(be.shape) + " of " + std::string(dtype_name(*type)) + " needs " + std::to_string(want) +
             " bytes but the entry says " + std::to_string(s.size));
      e.length = want;
    }
    out.push_back(std::move(e));
    stored.push_back(std::move(s));
  }
  IndexInfo info;
  info.format = "tensorflow";
  info.format_version = static_cast<std::uint64_t>(header.producer);
  return std::make_shared<const Index>(ckpt, std::move(info), std::move(out),
                                       std::make_shared<bd::BundleReader>(prefix->parent_path(), std::move(stored), std::move(slices)),
                                       nullptr);
}

}  // namespace ckpt::detail::tf
