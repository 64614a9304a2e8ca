// ckpt/format/ocdbt/database.hpp — reading an OCDBT database (TensorStore's
// Optionally-Cooperative Distributed B+Tree), the key-value store Orbax keeps its
// arrays in.
//
//   <db>/manifest.ocdbt     config + data file table + the latest versions (single
//                           manifest kind), or config only (numbered kind: the
//                           versions are in manifest.<16 hex digits>, the highest wins)
//   <db>/d/<32 hex>         data files: B+tree nodes, version tree nodes, values too
//                           large to be inline
//   <db>/ocdbt.process_<i>/ per-process databases Orbax writes from each host and then
//                           merges into the root one; the root's data file table may
//                           name their files ("ocdbt.process_0/d/...")
//
// The database's files are read through a key-value store (a directory, objects on S3
// or in memory), so that a database anywhere costs only the ranges read. Opening reads
// the manifest, takes the latest generation, walks its B+tree and keeps every key with
// where its value is: inline bytes, or (file, offset, length) read with exact ranges
// later. Every node's CRC-32C is checked; offsets, lengths, counts, depth
// and the number of nodes are bounded, so a hostile database costs an error, never a
// crash or an unbounded allocation. Older generations are not read.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/format/ocdbt/coding.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>

namespace ckpt::detail::ocdbt {

namespace fs = std::filesystem;

inline constexpr int max_tree_height = 32;
inline constexpr std::size_t max_nodes = std::size_t{1} << 20;
inline constexpr std::size_t max_keys = std::size_t{1} << 24;
inline constexpr std::uint64_t max_manifest_bytes = std::uint64_t{64} << 20;

struct Config {
  std::array<std::uint8_t, 16> uuid{};
  std::uint8_t manifest_kind = 0;  // 0 single, 1 numbered
  std::uint64_t max_inline_value_bytes = 100;
  std::uint64_t max_decoded_node_bytes = 8 << 20;
  std::uint8_t version_tree_arity_log2 = 4;
  bool zstd = false;
  std::int32_t zstd_level = 0;
};

// Where a B+tree node (or a version tree node) lives.
struct NodeRef {
  std::size_t file = 0;
  std::uint64_t offset = 0, length = 0;
};

struct Version {
  std::uint64_t generation = 0;
  std::uint8_t root_height = 0;
  NodeRef root;
  std::uint64_t num_keys = 0, num_tree_bytes = 0, num_indirect_value_bytes = 0;
  std::uint64_t commit_time = 0;
  bool empty() const { return num_keys == 0 && root.length == 0; }
};

inline Config read_config(Cursor& c) {
  Config cfg;
  const auto u = c.bytes(16);
  for (std::size_t i = 0; i < 16; ++i) cfg.uuid[i] = static_cast<std::uint8_t>(u[i]);
  cfg.manifest_kind = c.u8();
  if (cfg.manifest_kind > 1) throw FormatError("manifest kind " + std::to_string(cfg.manifest_kind) + " is unknown");
  cfg.max_inline_value_bytes = c.varint();
  cfg.max_decoded_node_bytes = c.varint();
  cfg.version_tree_arity_log2 = c.u8();
  if (cfg.version_tree_arity_log2 < 1 || cfg.version_tree_arity_log2 > 16)
    throw FormatError("version tree arity log2 " + std::to_string(cfg.version_tree_arity_log2) + " is out of range");
  const auto method = c.varint();
  if (method > 1) throw FormatError("compression method " + std::to_string(method) + " is unknown");
  cfg.zstd = method == 1;
  if (cfg.zstd) cfg.zstd_level = static_cast<std::int32_t>(c.u32le());
  return cfg;
}

inline std::vector<Version> read_version_leaf_entries(Cursor& c, std::size_t num_files) {
  const std::size_t n = c.count(14, "version count");
  std::vector<Version> v(n);
  std::uint64_t prev = 0;
  for (auto& e : v) {
    e.generation = c.varint();
    if (e.generation == 0 || e.generation <= prev) throw FormatError("generation numbers are not increasing from 1");
    prev = e.generation;
  }
  for (auto& e : v) e.root_height = c.u8();
  for (auto& e : v) e.root.file = static_cast<std::size_t>(c.varint());
  for (auto& e : v) e.root.offset = c.varint();
  for (auto& e : v) e.root.length = c.varint();
  for (auto& e : v) e.num_keys = c.varint();
  for (auto& e : v) e.num_tree_bytes = c.varint();
  for (auto& e : v) e.num_indirect_value_bytes = c.varint();
  for (auto& e : v) e.commit_time = c.u64le();
  for (auto& e : v)
    if (!e.empty() && e.root.file >= num_files) throw FormatError("version refers to data file " + std::to_string(e.root.file) + " of " + std::to_string(num_files));
  return v;
}

// Interior version tree entries (older generations): parsed to validate the manifest;
// reading the latest generation never needs them.
inline void skip_version_interior_entries(Cursor& c, std::size_t num_files, bool with_height) {
  const std::size_t n = c.count(13, "version node count");
  for (std::size_t i = 0; i < n; ++i) c.varint();  // generation
  for (std::size_t i = 0; i < n; ++i)
    if (c.varint() >= num_files) throw FormatError("version node refers to a missing data file");
  for (std::size_t i = 0; i < n; ++i) c.varint();  // offset
  for (std::size_t i = 0; i < n; ++i) c.varint();  // length
  for (std::size_t i = 0; i < n; ++i) c.varint();  // num_generations
  for (std::size_t i = 0; i < n; ++i) c.u64le();   // commit time
  if (with_height)
    for (std::size_t i = 0; i < n; ++i) c.u8();
}

class Database final : public io::KvStore {
 public:
  // Where a value is: inline (bytes), or in data file `file` at [offset, offset+length).
  struct Value {
    std::size_t file = SIZE_MAX;
    std::uint64_t offset = 0, length = 0;
    std::string bytes;
  };

  // Opens the database whose files are under `dir` ("" or ending in '/') of the store
  // `files`; `checkpoint` names it in errors.
  static std::shared_ptr<const Database> open(std::shared_ptr<const io::KvStore> files, std::string dir,
                                              const std::string& checkpoint) {
    if (!dir.empty() && !dir.ends_with('/')) dir += '/';
    auto db = std::shared_ptr<Database>(new Database(std::move(files), std::move(dir), checkpoint));
    db->load();
    return db;
  }
  static std::shared_ptr<const Database> open(const fs::path& dir, const std::string& checkpoint) {
    return open(std::make_shared<io::DirectoryKv>(dir), "", checkpoint);
  }

  static bool is_database(const io::KvStore& files, const std::string& dir) {
    return files.contains(dir.empty() || dir.ends_with('/') ? dir + "manifest.ocdbt" : dir + "/manifest.ocdbt");
  }
  static bool is_database(const fs::path& dir) { return is_database(io::DirectoryKv(dir), ""); }

  const Config& config() const { return config_; }
  const Version& latest() const { return latest_; }
  const std::vector<Version>& versions() const { return versions_; }
  const std::vector<DataFile>& data_files() const { return files_; }
  const std::map<std::string, Value, std::less<>>& values() const { return values_; }
  std::size_t nodes_read() const { return nodes_read_; }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second.file == SIZE_MAX ? it->second.bytes.size() : it->second.length;
  }

  void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    auto it = values_.find(key);
    if (it == values_.end()) throw CorruptCheckpointError(checkpoint_, "", "OCDBT key " + key.substr(0, 200) + " is missing");
    const Value& v = it->second;
    const std::uint64_t n = v.file == SIZE_MAX ? v.bytes.size() : v.length;
    if (offset > n || dst.size() > n - offset)
      throw CorruptCheckpointError(checkpoint_, "", "OCDBT value " + key.substr(0, 200) + " holds " + std::to_string(n) + " bytes, fewer than needed");
    if (v.file == SIZE_MAX) {
      if (!dst.empty()) std::memcpy(dst.data(), v.bytes.data() + offset, dst.size());
      return;
    }
    read_range(v.file, v.offset + offset, dst, "value " + key.substr(0, 200));
  }

  std::vector<std::string> list(const std::string& prefix, std::size_t max) const override {
    std::vector<std::string> out;
    for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (out.size() >= max) throw CorruptCheckpointError(checkpoint_, "", "more than " + std::to_string(max) + " OCDBT keys under " + prefix.substr(0, 200));
      out.push_back(it->first);
    }
    return out;
  }

  std::string describe() const override { return files_store_->describe() + (dir_.empty() ? "" : "/" + dir_.substr(0, dir_.size() - 1)); }

 private:
  Database(std::shared_ptr<const io::KvStore> files, std::string dir, std::string checkpoint)
      : files_store_(std::move(files)), dir_(std::move(dir)), checkpoint_(std::move(checkpoint)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw CorruptCheckpointError(checkpoint_, "", "OCDBT " + where + ": " + what);
  }

  std::uint64_t file_size(std::size_t file) const {
    if (!sizes_[file]) {
      const auto n = files_store_->size(dir_ + files_[file].path);
      if (!n) fail("data file " + files_[file].path, "missing");
      sizes_[file] = *n;
    }
    return *sizes_[file];
  }

  void read_range(std::size_t file, std::uint64_t offset, std::span<std::byte> dst, const std::string& what) const {
    const std::uint64_t n = file_size(file);
    if (offset > n || dst.size() > n - offset)
      fail(what, "range " + std::to_string(offset) + "+" + std::to_string(dst.size()) + " lies past the end of " +
                     files_[file].path + " (" + std::to_string(n) + " bytes)");
    try {
      files_store_->read(dir_ + files_[file].path, offset, dst);
    } catch (const CorruptCheckpointError&) {
      throw;
    } catch (const Error& e) {
      fail(what, e.what());
    }
  }

  std::vector<std::byte> read_manifest_file(const std::string& name) const {
    const auto n = files_store_->size(dir_ + name);
    if (!n) fail(name, "missing");
    if (*n > max_manifest_bytes) fail(name, "is " + std::to_string(*n) + " bytes, more than a manifest can be");
    std::vector<std::byte> b(static_cast<std::size_t>(*n));
    files_store_->read(dir_ + name, 0, b);
    return b;
  }

  void load() {
    std::string where = "manifest.ocdbt";
    try {
      auto body = decode_envelope(read_manifest_file(where), manifest_magic, max_manifest_bytes);
      Cursor c(body);
      config_ = read_config(c);
      if (config_.manifest_kind == 1) {
        // numbered manifests: the one naming the highest generation is the latest
        if (!c.done()) throw FormatError("bytes after the config of a numbered manifest");
        std::string best;
        for (const auto& key : files_store_->list(dir_ + "manifest.", std::size_t{1} << 20)) {
          const std::string n = key.substr(dir_.size());
          if (n.size() == 9 + 16 && n.rfind("manifest.", 0) == 0 &&
              n.find_first_not_of("0123456789abcdef", 9) == std::string::npos && n > best)
            best = n;
        }
        if (best.empty()) throw FormatError("numbered manifest kind, but no manifest.<generation> file");
        where = best;
        body = decode_envelope(read_manifest_file(where), manifest_magic, max_manifest_bytes);
        Cursor nc(body);
        const Config again = read_config(nc);
        if (again.uuid != config_.uuid) throw FormatError("uuid differs from manifest.ocdbt's");
        read_version_tree(nc);
      } else {
        read_version_tree(c);
      }
    } catch (const FormatError& e) {
      fail(where, e.what());
    }
    if (versions_.empty()) return;  // a database no one wrote to: no keys
    latest_ = versions_.back();
    if (latest_.empty()) return;
    if (latest_.root_height > max_tree_height) fail(where, "B+tree height " + std::to_string(latest_.root_height) + " is too large");
    std::string prefix;
    walk(latest_.root, latest_.root_height, prefix, 0);
  }

  void read_version_tree(Cursor& c) {
    files_ = read_data_file_table(c, "");
    sizes_.assign(files_.size(), std::nullopt);
    versions_ = read_version_leaf_entries(c, files_.size());
    skip_version_interior_entries(c, files_.size(), true);
    if (!c.done()) throw FormatError(std::to_string(c.left()) + " bytes after the version tree");
  }

  // Reads the node at ref, adding its keys under `prefix` (the subtree common prefixes
  // of the interior entries above it).
  void walk(const NodeRef& ref, int height, std::string& prefix, int depth) {
    const std::string where = "B+tree node " + files_[ref.file].path + "@" + std::to_string(ref.offset);
    if (++nodes_read_ > max_nodes) fail(where, "more than " + std::to_string(max_nodes) + " nodes");
    if (depth > max_tree_height) fail(where, "nested too deep");
    if (ref.length > max_node_bytes) fail(where, "is " + std::to_string(ref.length) + " bytes, more than a node can be");
    if (ref.offset > file_size(ref.file) || ref.length > file_size(ref.file) - ref.offset)
      fail(where, "range +" + std::to_string(ref.length) + " lies past the end of the file (" + std::to_string(file_size(ref.file)) + " bytes)");
    std::vector<std::byte> enc(static_cast<std::size_t>(ref.length));
    read_range(ref.file, ref.offset, enc, where);
    std::vector<std::byte> body;
    std::vector<DataFile> table;
    try {
      body = decode_envelope(enc, btree_magic, std::min<std::uint64_t>(max_node_bytes, std::max<std::uint64_t>(config_.max_decoded_node_bytes, 1 << 20)));
      enc = {};
      Cursor c(body);
      const int h = c.u8();
      if (h != height) throw FormatError("height " + std::to_string(h) + " where " + std::to_string(height) + " was expected");
      table = read_data_file_table(c, files_[ref.file].transitive);
      const std::size_t n = c.count(2, "entry count");
      std::vector<std::uint64_t> plen(n, 0), slen(n), common(height > 0 ? n : 0);
      for (std::size_t i = 1; i < n; ++i) plen[i] = c.varint_max(max_node_bytes, "key prefix length");
      for (auto& s : slen) s = c.varint_max(max_node_bytes, "key suffix length");
      for (auto& s : common) s = c.varint_max(max_node_bytes, "subtree common prefix length");
      std::vector<std::string> keys(n);
      for (std::size_t i = 0; i < n; ++i) {
        if (i > 0 && plen[i] > keys[i - 1].size()) throw FormatError("key prefix longer than the previous key");
        const auto s = c.bytes(slen[i]);
        keys[i] = i > 0 ? keys[i - 1].substr(0, static_cast<std::size_t>(plen[i])) : std::string();
        keys[i].append(reinterpret_cast<const char*>(s.data()), s.size());
      }
      // nodes are added to the (shared) table of this database so refs are indices
      std::vector<std::size_t> ids(table.size());
      for (std::size_t i = 0; i < table.size(); ++i) ids[i] = intern(table[i]);
      auto file_id = [&](std::uint64_t id) {
        if (id >= ids.size()) throw FormatError("refers to data file " + std::to_string(id) + " of " + std::to_string(ids.size()));
        return ids[static_cast<std::size_t>(id)];
      };
      if (height > 0) {
        std::vector<NodeRef> refs(n);
        for (auto& r : refs) r.file = file_id(c.varint());
        for (auto& r : refs) r.offset = c.varint();
        for (auto& r : refs) r.length = c.varint();
        for (std::size_t k = 0; k < 3 * n; ++k) c.varint();  // statistics
        if (!c.done()) throw FormatError(std::to_string(c.left()) + " bytes after the entries");
        body = {};
        for (std::size_t i = 0; i < n; ++i) {
          if (common[i] > keys[i].size()) throw FormatError("subtree common prefix longer than its key");
          const std::size_t at = prefix.size();
          prefix += keys[i].substr(0, static_cast<std::size_t>(common[i]));
          walk(refs[i], height - 1, prefix, depth + 1);
          prefix.resize(at);
        }
        return;
      }
      std::vector<std::uint64_t> vlen(n), kind(n);
      for (auto& v : vlen) v = c.varint();
      for (auto& k : kind) {
        k = c.varint();
        if (k > 1) throw FormatError("value kind " + std::to_string(k) + " is unknown");
      }
      std::vector<std::size_t> vfile(n, SIZE_MAX);
      std::vector<std::uint64_t> voff(n, 0);
      for (std::size_t i = 0; i < n; ++i)
        if (kind[i] == 1) vfile[i] = file_id(c.varint());
      for (std::size_t i = 0; i < n; ++i)
        if (kind[i] == 1) voff[i] = c.varint();
      for (std::size_t i = 0; i < n; ++i) {
        Value v;
        if (kind[i] == 0) {
          const auto b = c.bytes(vlen[i]);
          v.bytes.assign(reinterpret_cast<const char*>(b.data()), b.size());
        } else {
          v.file = vfile[i];
          v.offset = voff[i];
          v.length = vlen[i];
          if (v.offset > file_size(v.file) || v.length > file_size(v.file) - v.offset)
            throw FormatError("value range " + std::to_string(v.offset) + "+" + std::to_string(v.length) + " lies past the end of " + files_[v.file].path);
        }
        if (values_.size() >= max_keys) throw FormatError("more than " + std::to_string(max_keys) + " keys");
        std::string key = prefix + keys[i];
        if (!values_.emplace(std::move(key), std::move(v)).second) throw FormatError("a key appears twice");
      }
      if (!c.done()) throw FormatError(std::to_string(c.left()) + " bytes after the values");
    } catch (const FormatError& e) {
      fail(where, e.what());
    }
  }

  std::size_t intern(const DataFile& f) {
    auto [it, added] = file_ids_.emplace(f.path + '\n' + f.transitive, files_.size());
    if (added) {
      if (files_.size() >= max_nodes) throw FormatError("too many data files");
      files_.push_back(f);
      sizes_.push_back(std::nullopt);
    }
    return it->second;
  }

  std::shared_ptr<const io::KvStore> files_store_;
  std::string dir_;  // "" or ending in '/'
  std::string checkpoint_;
  Config config_;
  std::vector<DataFile> files_;
  mutable std::vector<std::optional<std::uint64_t>> sizes_;
  std::map<std::string, std::size_t> file_ids_;
  std::vector<Version> versions_;
  Version latest_;
  std::map<std::string, Value, std::less<>> values_;
  std::size_t nodes_read_ = 0;
};

}  // namespace ckpt::detail::ocdbt
