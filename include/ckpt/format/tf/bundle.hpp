// ckpt/format/tf/bundle.hpp — TensorFlow tensor bundles (checkpoint V2) as an Index.
//
// A checkpoint PREFIX is `PREFIX.index` (a table, tf/table.hpp: key "" holds the
// BundleHeaderProto, every other key a tensor's BundleEntryProto) and the shards
// `PREFIX.data-00000-of-00002`... holding each tensor's little-endian bytes at the
// entry's offset. tf.train.load_checkpoint takes a prefix or a directory whose
// `checkpoint` state file names the latest prefix; so does this reader.
// Paths are the variable names split at '/'. Each leaf's masked crc32c is verified when
// it is read (restore's verify_checksums). Strings are TensorFlow's string encoding
// (varint lengths, a masked crc of the lengths, the bytes); scalar ones become string
// leaves. Partitioned variables (entries with slices) are listed but refuse to be read.
// Nothing but the index is read when opening: a missing data shard shows when a tensor
// in it is read, naming the shard.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/tf/proto.hpp>
#include <ckpt/format/tf/table.hpp>
#include <ckpt/index.hpp>
#include <ckpt/io/crc32c.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::tf {

namespace fs = std::filesystem;

// tensorflow/core/framework/types.proto: the DataType code of each dtype is the
// `tf_datatype` column of the dtype table (leaf/dtype.hpp).
inline std::optional<dtype> dtype_of(int code) {
  if (code <= 0) return std::nullopt;
  for (const auto& e : dtype_table)
    if (e.tf_datatype == code) return e.type;
  return std::nullopt;
}

}  // namespace ckpt::tf

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
  bool string = false;             // TensorFlow's string encoding
  std::string refuse;              // non-empty: why this tensor cannot be read
};

inline std::string shard_name(const std::string& prefix_name, std::int64_t i, std::int64_t n) {
  char buf[48];
  std::snprintf(buf, sizeof buf, ".data-%05lld-of-%05lld", static_cast<long long>(i), static_cast<long long>(n));
  return prefix_name + buf;
}

class BundleReader final : public IndexReader {
 public:
  BundleReader(fs::path dir, std::vector<Stored> stored) : dir_(std::move(dir)), stored_(std::move(stored)) {}

  void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
    const auto i = static_cast<std::size_t>(&e - index.entries().data());
    if (&e < index.entries().data() || i >= stored_.size())
      throw Error(index.checkpoint(), e.path.str(), "entry does not belong to this index");
    const Stored& s = stored_[i];
    auto fail = [&](const std::string& w) { throw CorruptCheckpointError(index.checkpoint(), e.path.str(), w); };
    if (!s.refuse.empty()) throw Error(index.checkpoint(), e.path.str(), s.refuse);
    const fs::path file = dir_ / s.shard;
    std::error_code ec;
    if (!fs::exists(file, ec)) fail("data shard " + s.shard + " is missing");
    io::File f = io::File::open_read(file);
    const std::uint64_t fsize = f.size(file);
    if (s.offset > fsize || s.size > fsize - s.offset)
      fail("bytes [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ") lie past the end of " + s.shard +
           " (" + std::to_string(fsize) + " bytes)");
    if (!s.string) {
      if (dst.size() != s.size) fail("size mismatch");
      io::pread_exact(f, dst, s.offset, file);
      if (verify && s.masked_crc && io::crc32c_mask(io::crc32c(dst)) != *s.masked_crc)
        fail("crc32c mismatch in " + s.shard + " (the data is corrupt)");
      return;
    }
    std::vector<std::byte> raw(static_cast<std::size_t>(s.size));
    io::pread_exact(f, raw, s.offset, file);
    const std::string text = decode_string(raw, verify ? s.masked_crc : std::nullopt, fail);
    if (dst.size() != text.size()) fail("size mismatch");
    std::memcpy(dst.data(), text.data(), text.size());
  }

  // One element of TensorFlow's string encoding: varint64 length, the masked crc32c of
  // the length as uint32 (as uint64 when it needs 64 bits), the bytes. The entry's crc
  // covers the fixed-width length, that crc and the bytes.
  template <class Fail>
  static std::string decode_string(std::span<const std::byte> raw, std::optional<std::uint32_t> masked, Fail&& fail) {
    tf::proto::WireReader r(raw);
    std::uint64_t len = 0;
    if (!r.varint(len)) fail("malformed string length");
    std::size_t at = 0;
    while (static_cast<std::uint8_t>(raw[at]) & 0x80) ++at;
    ++at;
    if (raw.size() - at < 4 || len != raw.size() - at - 4) fail("string length does not match the stored size");
    if (masked) {
      std::byte w[8];
      const std::size_t wn = len > 0xffffffffu ? 8 : 4;
      for (std::size_t k = 0; k < wn; ++k) w[k] = static_cast<std::byte>((len >> (8 * k)) & 0xff);
      std::uint32_t c = io::crc32c(std::span<const std::byte>(w, wn));
      const std::uint32_t len_crc = io::crc32c_mask(c);
      std::uint32_t stored_len_crc = 0;
      for (int k = 3; k >= 0; --k) stored_len_crc = (stored_len_crc << 8) | static_cast<std::uint8_t>(raw[at + static_cast<std::size_t>(k)]);
      if (stored_len_crc != len_crc) fail("crc32c of the string's length does not match");
      c = io::crc32c_extend(c, raw.subspan(at, 4 + static_cast<std::size_t>(len)));
      if (io::crc32c_mask(c) != *masked) fail("crc32c mismatch (the data is corrupt)");
    }
    const auto body = raw.subspan(at + 4);
    return std::string(reinterpret_cast<const char*>(body.data()), body.size());
  }

 private:
  fs::path dir_;
  std::vector<Stored> stored_;
};

// "a/b/c" -> [a, b, c]
inline Path path_of(std::string_view name) {
  std::vector<std::string> segs;
  std::size_t at = 0;
  while (true) {
    const std::size_t slash = name.find('/', at);
    segs.emplace_back(name.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  return Path(std::move(segs));
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

namespace ckpt::tf {

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
  std::vector<IndexEntry> out;
  std::vector<bd::Stored> stored;
  for (const auto& kv : entries) {
    if (kv.key.empty()) {
      if (!proto::parse_header(kv.value, header)) fail_index("malformed BundleHeaderProto");
      have_header = true;
      continue;
    }
    if (kv.key[0] == '\0') continue;  // a slice of a partitioned variable, read through its full entry
  }
  if (!have_header) fail_index("no BundleHeaderProto (the \"\" key)");
  if (header.num_shards < 1 || header.num_shards > bd::max_shards)
    fail_index("num_shards " + std::to_string(header.num_shards) + " is implausible");
  if (header.endianness != 0) fail_index("big-endian bundles are not supported");
  if (header.min_consumer > 1)
    fail_index("written for readers of version >= " + std::to_string(header.min_consumer) + "; this one reads version 1");
  const std::string prefix_name = prefix->filename().string();

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
    e.path = bd::path_of(name);
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
      const auto es = dtype_size(*type);
      e.length = *type == dtype::string ? 0 : static_cast<std::uint64_t>(count) * es;
      s.refuse = "a partitioned variable (stored as " + std::to_string(be.slices.size()) +
                 " slices); reading partitioned variables is not supported";
    } else if (*type == dtype::string) {
      e.type = dtype::string;
      if (count != 1) {
        s.refuse = "a string tensor of shape " + shape_str(be.shape) + "; only scalar strings are read";
      } else {
        if (s.size < 5) fail("string tensor of " + std::to_string(s.size) + " bytes is too short");
        // the length varint is inside the data file; the leaf's length is known only
        // from it, so read it now (a few bytes) when the shard is there
        const fs::path file = prefix->parent_path() / s.shard;
        if (bd::is_file(file)) {
          io::File f = io::File::open_read(file);
          const std::uint64_t fsize = f.size(file);
          if (s.offset > fsize || s.size > fsize - s.offset) fail("bytes lie past the end of " + s.shard);
          std::byte head[10] = {};
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(10, s.size));
          io::pread_exact(f, std::span<std::byte>(head, n), s.offset, file);
          proto::WireReader r(std::span<const std::byte>(head, n));
          std::uint64_t len;
          if (!r.varint(len) || len > s.size) fail("malformed string length");
          e.length = len;
          s.string = true;
        } else {
          s.refuse = "data shard " + s.shard + " is missing";
        }
      }
      e.shape = {};
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
                                       std::make_shared<bd::BundleReader>(prefix->parent_path(), std::move(stored)),
                                       nullptr);
}

}  // namespace ckpt::tf
