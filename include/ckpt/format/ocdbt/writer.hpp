// ckpt/format/ocdbt/writer.hpp — writing an OCDBT database the way TensorStore does
// for Orbax: one generation per commit, values larger than max_inline_value_bytes out
// of line in a data file `d/<32 hex>`, B+tree leaf and interior nodes (zstd, CRC-32C)
// in the same file after the values, and a single-kind `manifest.ocdbt` naming the
// data files and the latest versions (at most 16 inline: no version tree nodes).
//
// Values are streamed: put() appends a large value to the data file's writer at once
// (storage::ObjectWriter: a file in a staging directory, a multipart upload on S3), so
// a checkpoint of many gigabytes is never held in memory; small ones are kept until
// commit() writes the nodes. Keys may come in any order. The database is written
// through the storage concept alone.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ckpt/format/ocdbt/database.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/storage/kvstore.hpp>
#include <ckpt/storage/posix.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::ocdbt {

struct WriterOptions {
  // Orbax's settings (the fixtures' manifests): 1 KiB inline, 100 MB decoded nodes,
  // arity 16, zstd level 0.
  std::uint64_t max_inline_value_bytes = 1024;
  std::uint64_t max_decoded_node_bytes = 100000000;
  int zstd_level = 0;
  // Leaf and interior nodes are cut when their encoded entries reach this many bytes.
  std::uint64_t target_node_bytes = 64 << 10;
};

inline std::string random_hex(std::size_t bytes) {
  static const char* digits = "0123456789abcdef";
  std::random_device rd;
  std::string s;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto b = rd() & 0xFF;
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

class Writer {
 public:
  // Writes under loc. When loc already holds a database, commit() adds a generation
  // to it.
  explicit Writer(storage::Location loc, WriterOptions opt = {}) : loc_(std::move(loc)), opt_(opt) {
    data_name_ = "d/" + random_hex(16);
    data_ = loc_.storage->create(loc_.key(data_name_));
  }
  // A database in a directory of its own, each file put in place by a rename (the
  // manifest of a new generation replaces the old one atomically).
  explicit Writer(const fs::path& dir, WriterOptions opt = {}) : Writer(storage::directory_location(dir), opt) {}

  // Adds key = value. Large values go to the data file now; `value` may be released after.
  void put(std::string key, std::span<const std::byte> value) {
    if (key.size() > max_node_bytes) throw Error(loc_.url, "", "OCDBT key too long");
    Entry e;
    e.key = std::move(key);
    e.length = value.size();
    if (value.size() > opt_.max_inline_value_bytes) {
      e.offset = offset_;
      data_->append(value, false);
      offset_ += value.size();
      e.indirect = true;
      indirect_bytes_ += value.size();
    } else {
      e.bytes.assign(value.begin(), value.end());
    }
    entries_.push_back(std::move(e));
  }

  // Adds key = a value already stored in another database's data file, `file` (relative
  // to this database, e.g. "ocdbt.process_1/d/<hex>", whose directory part up to
  // `base` bytes is that database's), at [offset, offset + length): how the root
  // database of a multi-process save refers to what each process wrote.
  void put_ref(std::string key, std::string file, std::size_t base, std::uint64_t offset, std::uint64_t length) {
    if (key.size() > max_node_bytes) throw Error(loc_.url, "", "OCDBT key too long");
    Entry e;
    e.key = std::move(key);
    e.length = length;
    e.offset = offset;
    e.indirect = true;
    e.file = std::move(file);
    e.base = base;
    indirect_bytes_ += length;
    entries_.push_back(std::move(e));
  }

  // Writes the nodes and the manifest (written last, replacing any older one by rename).
  void commit() {
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
    for (std::size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].key == entries_[i - 1].key) throw Error(loc_.url, "", "OCDBT key " + entries_[i].key + " put twice");
    // older generations, when there are
    std::vector<Version> versions;
    std::vector<std::string> files;
    std::array<std::uint8_t, 16> uuid{};
    if (loc_.storage->size(loc_.key("manifest.ocdbt"))) {  // (a new database: one request, no listing)
      const auto old = Database::open(std::make_shared<const storage::LocationKv>(loc_), "", loc_.url);
      uuid = old->config().uuid;
      for (const auto& v : old->versions()) {
        Version c = v;
        if (!c.empty()) {
          const std::string& path = old->data_files()[c.root.file].path;
          auto it = std::find(files.begin(), files.end(), path);
          c.root.file = static_cast<std::size_t>(it - files.begin());
          if (it == files.end()) files.push_back(path);
        }
        versions.push_back(c);
      }
    } else {
      std::random_device rd;
      for (auto& b : uuid) b = static_cast<std::uint8_t>(rd());
    }
    if (versions.size() >= 16) throw Error(loc_.url, "", "more than 16 OCDBT generations need version tree nodes, which ckpt does not write");
    const std::size_t own = files.size();
    if (!entries_.empty()) files.push_back(data_name_);
    Version v;
    v.generation = versions.empty() ? 1 : versions.back().generation + 1;
    v.commit_time = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    v.num_keys = entries_.size();
    v.num_indirect_value_bytes = indirect_bytes_;
    if (!entries_.empty()) {
      std::vector<Child> level = write_leaves();
      int height = 0;
      while (level.size() > 1) {
        level = write_interior(level, height + 1);
        ++height;
      }
      v.root_height = static_cast<std::uint8_t>(height);
      v.root = {own, level[0].offset, level[0].length};
      v.num_tree_bytes = level[0].tree_bytes;
    }
    if (offset_ != 0) data_->close();  // otherwise dropped: no empty data file
    data_.reset();
    versions.push_back(v);

    std::vector<std::byte> body;
    for (auto b : uuid) body.push_back(static_cast<std::byte>(b));
    body.push_back(std::byte{0});  // manifest kind: single
    put_varint(body, opt_.max_inline_value_bytes);
    put_varint(body, opt_.max_decoded_node_bytes);
    body.push_back(std::byte{4});  // version tree arity log2
    put_varint(body, 1);           // zstd
    put_le(body, static_cast<std::uint32_t>(opt_.zstd_level), 4);
    // TensorStore lists data files sorted by path
    std::vector<std::size_t> order(files.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return files[a] < files[b]; });
    std::vector<std::size_t> id(files.size());
    std::vector<std::string> sorted;
    for (std::size_t i = 0; i < order.size(); ++i) {
      id[order[i]] = i;
      sorted.push_back(files[order[i]]);
    }
    write_data_file_table(body, sorted);
    put_varint(body, versions.size());
    for (const auto& x : versions) put_varint(body, x.generation);
    for (const auto& x : versions) body.push_back(static_cast<std::byte>(x.root_height));
    for (const auto& x : versions) put_varint(body, x.empty() ? 0 : id[x.root.file]);
    for (const auto& x : versions) put_varint(body, x.root.offset);
    for (const auto& x : versions) put_varint(body, x.root.length);
    for (const auto& x : versions) put_varint(body, x.num_keys);
    for (const auto& x : versions) put_varint(body, x.num_tree_bytes);
    for (const auto& x : versions) put_varint(body, x.num_indirect_value_bytes);
    for (const auto& x : versions) put_le(body, x.commit_time, 8);
    put_varint(body, 0);  // no version tree nodes
    const auto manifest = encode_envelope(body, manifest_magic, true, opt_.zstd_level);
    loc_.storage->put(loc_.key("manifest.ocdbt"), manifest);  // last: the data it names is stored
  }

 private:
  struct Entry {
    std::string key;
    std::uint64_t length = 0, offset = 0;
    bool indirect = false;
    std::vector<std::byte> bytes;
    std::string file;       // an indirect value's data file when not this writer's (put_ref)
    std::size_t base = 0;   // how much of `file` is its base path
  };
  struct Child {
    std::string first_key;
    std::uint64_t offset = 0, length = 0;
    std::uint64_t keys = 0, tree_bytes = 0, indirect_bytes = 0;
  };

  static std::size_t common_prefix(const std::string& a, const std::string& b) {
    std::size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    return k;
  }

  Child append_node(const std::vector<std::byte>& body, std::string first_key) {
    const auto enc = encode_envelope(body, btree_magic, true, opt_.zstd_level);
    Child c;
    c.first_key = std::move(first_key);
    c.offset = offset_;
    c.length = enc.size();
    data_->append(enc, false);
    offset_ += enc.size();
    return c;
  }

  // Keys are stored whole in every node (subtree common prefixes of 0): simple and valid.
  static void put_keys(std::vector<std::byte>& b, const std::vector<const std::string*>& keys, bool interior) {
    for (std::size_t i = 1; i < keys.size(); ++i) put_varint(b, common_prefix(*keys[i - 1], *keys[i]));
    std::vector<std::size_t> pre(keys.size(), 0);
    for (std::size_t i = 1; i < keys.size(); ++i) pre[i] = common_prefix(*keys[i - 1], *keys[i]);
    for (std::size_t i = 0; i < keys.size(); ++i) put_varint(b, keys[i]->size() - pre[i]);
    if (interior)
      for (std::size_t i = 0; i < keys.size(); ++i) put_varint(b, 0);
    for (std::size_t i = 0; i < keys.size(); ++i)
      for (std::size_t k = pre[i]; k < keys[i]->size(); ++k) b.push_back(static_cast<std::byte>((*keys[i])[k]));
  }

  std::vector<Child> write_leaves() {
    std::vector<Child> out;
    std::size_t i = 0;
    while (i < entries_.size()) {
      // take entries until the node's payload reaches the target
      std::size_t j = i;
      std::uint64_t bytes = 0;
      while (j < entries_.size() && (j == i || bytes + entries_[j].key.size() + entries_[j].bytes.size() + 24 <= opt_.target_node_bytes)) {
        bytes += entries_[j].key.size() + entries_[j].bytes.size() + 24;
        ++j;
      }
      std::vector<std::byte> b;
      b.push_back(std::byte{0});  // height
      // the node's data files: this writer's, and those put_ref named, sorted by path
      std::vector<std::pair<std::string, std::size_t>> table;
      for (std::size_t k = i; k < j; ++k)
        if (entries_[k].indirect)
          table.emplace_back(entries_[k].file.empty() ? data_name_ : entries_[k].file, entries_[k].base);
      std::sort(table.begin(), table.end());
      table.erase(std::unique(table.begin(), table.end()), table.end());
      auto file_id = [&](const Entry& e) {
        const std::pair<std::string, std::size_t> f{e.file.empty() ? data_name_ : e.file, e.base};
        return static_cast<std::size_t>(std::lower_bound(table.begin(), table.end(), f) - table.begin());
      };
      write_data_file_table(b, table);
      put_varint(b, j - i);
      std::vector<const std::string*> keys;
      for (std::size_t k = i; k < j; ++k) keys.push_back(&entries_[k].key);
      put_keys(b, keys, false);
      Child c;
      for (std::size_t k = i; k < j; ++k) put_varint(b, entries_[k].length);
      for (std::size_t k = i; k < j; ++k) put_varint(b, entries_[k].indirect ? 1 : 0);
      for (std::size_t k = i; k < j; ++k)
        if (entries_[k].indirect) put_varint(b, file_id(entries_[k]));
      for (std::size_t k = i; k < j; ++k)
        if (entries_[k].indirect) {
          put_varint(b, entries_[k].offset);
          c.indirect_bytes += entries_[k].length;
        }
      for (std::size_t k = i; k < j; ++k) b.insert(b.end(), entries_[k].bytes.begin(), entries_[k].bytes.end());
      Child n = append_node(b, entries_[i].key);
      n.keys = j - i;
      n.tree_bytes = n.length;
      n.indirect_bytes = c.indirect_bytes;
      out.push_back(std::move(n));
      for (std::size_t k = i; k < j; ++k) entries_[k].bytes = {};
      i = j;
    }
    return out;
  }

  std::vector<Child> write_interior(const std::vector<Child>& children, int height) {
    std::vector<Child> out;
    std::size_t i = 0;
    while (i < children.size()) {
      std::size_t j = i;
      std::uint64_t bytes = 0;
      // at least two children per node, so each level shrinks
      while (j < children.size() && (j < i + 2 || bytes + children[j].first_key.size() + 40 <= opt_.target_node_bytes)) {
        bytes += children[j].first_key.size() + 40;
        ++j;
      }
      std::vector<std::byte> b;
      b.push_back(static_cast<std::byte>(height));
      write_data_file_table(b, {data_name_});
      put_varint(b, j - i);
      std::vector<const std::string*> keys;
      for (std::size_t k = i; k < j; ++k) keys.push_back(&children[k].first_key);
      put_keys(b, keys, true);
      for (std::size_t k = i; k < j; ++k) put_varint(b, 0);
      for (std::size_t k = i; k < j; ++k) put_varint(b, children[k].offset);
      for (std::size_t k = i; k < j; ++k) put_varint(b, children[k].length);
      for (std::size_t k = i; k < j; ++k) put_varint(b, children[k].keys);
      for (std::size_t k = i; k < j; ++k) put_varint(b, children[k].tree_bytes);
      for (std::size_t k = i; k < j; ++k) put_varint(b, children[k].indirect_bytes);
      Child n = append_node(b, children[i].first_key);
      for (std::size_t k = i; k < j; ++k) {
        n.keys += children[k].keys;
        n.tree_bytes += children[k].tree_bytes;
        n.indirect_bytes += children[k].indirect_bytes;
      }
      n.tree_bytes += n.length;
      out.push_back(std::move(n));
      i = j;
    }
    return out;
  }

  storage::Location loc_;
  WriterOptions opt_;
  std::string data_name_;
  std::unique_ptr<storage::ObjectWriter> data_;
  std::uint64_t offset_ = 0, indirect_bytes_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace ckpt::detail::ocdbt
