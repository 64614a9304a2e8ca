// ckpt/format/orbax.hpp — ckpt::orbax: Orbax step directories (PyTreeCheckpointHandler),
// with OCDBT (Orbax's default, and what ckpt writes) or without.
//
//   <step>/_CHECKPOINT_METADATA   JSON: item_handlers, metrics, timestamps
//   <step>/commit_success.txt     written last
//   <step>/default/_METADATA      JSON: {"tree_metadata": {"('a', 'b')": {"key_metadata":
//                                 [{"key": "a", "key_type": 2}, ...], "value_metadata":
//                                 {"value_type": "np.ndarray", "skip_deserialize": false}}},
//                                 "use_ocdbt": true, "use_zarr3": false}
//   <step>/default/manifest.ocdbt, d/   OCDBT: keys a.b/.zarray, a.b/0 (zarr v2) or
//                                 a.b/zarr.json, a.b/c/0 (zarr v3, Orbax's v1 API)
//   <step>/default/a.b/           without OCDBT: one zarr v2 array directory per leaf
//   <step>/default/_strings.json  string leaves, {"a.b": "text"} (Orbax's StringHandler)
// Reading also accepts an item directory itself (what PyTreeCheckpointer.save(dir)
// writes), several items (each becomes a top-level key; JSON items map onto the tree),
// OCDBT items without _METADATA (paths from the key names), the per-process databases
// when the root manifest is gone, and the older layout whose msgpack `checkpoint` holds
// the tree (arrays inline or PLACEHOLDER:// strings).
#pragma once

#include <chrono>
#include <filesystem>
#include <set>
#include <string>

#include <array>
#include <deque>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/ocdbt/database.hpp>
#include <ckpt/format/ocdbt/writer.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/t5x.hpp>
#include <ckpt/format/zarr/kv_chunks.hpp>
#include <ckpt/format/zarr/v3.hpp>
#include <ckpt/format/zarr/write_part.hpp>

namespace ckpt {

namespace detail::orbax {
namespace fs = std::filesystem;
using detail::zarr::json;

inline constexpr const char* checkpoint_metadata = "_CHECKPOINT_METADATA";
inline constexpr const char* tree_metadata = "_METADATA";
inline constexpr const char* commit_file = "commit_success.txt";
inline constexpr const char* strings_file = "_strings.json";
inline constexpr const char* default_item = "default";

inline std::string py_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string r(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) r += '\\';
    r += c;
  }
  return r + q;
}

inline std::string tuple_repr(const std::vector<std::string>& keys) {
  std::string r = "(";
  for (std::size_t i = 0; i < keys.size(); ++i) r += (i ? ", " : "") + py_repr(keys[i]);
  if (keys.size() == 1) r += ",";
  return r + ")";
}

inline bool is_index(const std::string& k) {
  return !k.empty() && k.size() < 10 && k.find_first_not_of("0123456789") == std::string::npos;
}

inline void write_json(const storage::Location& loc, const std::string& name, const json& j) {
  const std::string text = j.dump(2);
  loc.storage->put(loc.key(name), std::as_bytes(std::span(text)));
}

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// The key-value store of an item written with OCDBT: the root database, or, when its
// manifest is gone, the per-process databases it was merged from (ocdbt.process_<i>/,
// which hold the same keys). nullptr: the item is not OCDBT.
class MergedKv final : public io::KvStore {
 public:
  explicit MergedKv(std::vector<std::shared_ptr<const detail::ocdbt::Database>> dbs, std::string name)
      : dbs_(std::move(dbs)), name_(std::move(name)) {}
  std::optional<std::uint64_t> size(const std::string& key) const override {
    for (const auto& d : dbs_)
      if (auto n = d->size(key)) return n;
    return std::nullopt;
  }
  void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    for (const auto& d : dbs_)
      if (d->size(key)) return d->read(key, offset, dst);
    throw Error(name_, "", "OCDBT key " + key.substr(0, 200) + " is missing");
  }
  std::vector<std::string> list(const std::string& prefix, std::size_t max) const override {
    std::set<std::string> all;
    for (const auto& d : dbs_)
      for (auto& k : d->list(prefix, max)) {
        all.insert(std::move(k));
        if (all.size() > max) throw Error(name_, "", "more than " + std::to_string(max) + " OCDBT keys");
      }
    return {all.begin(), all.end()};
  }
  std::string describe() const override { return name_; }

 private:
  std::vector<std::shared_ptr<const detail::ocdbt::Database>> dbs_;
  std::string name_;
};

// The per-process databases of an item ("ocdbt.process_0/", ...), sorted.
inline std::vector<std::string> process_databases(const io::KvStore& item) {
  std::vector<std::string> out;
  for (const auto& n : item.children("", 100000)) {
    if (n.rfind("ocdbt.process_", 0) == 0 && detail::ocdbt::Database::is_database(item, n + "/")) out.push_back(n + "/");
    if (out.size() > 65536) break;
  }
  return out;
}

inline bool is_ocdbt_item(const io::KvStore& item) {
  return detail::ocdbt::Database::is_database(item, "") || !process_databases(item).empty();
}

inline std::shared_ptr<const io::KvStore> open_ocdbt(const std::shared_ptr<const io::KvStore>& item, const std::string& ckpt) {
  if (detail::ocdbt::Database::is_database(*item, "")) return detail::ocdbt::Database::open(item, "", ckpt);
  std::vector<std::shared_ptr<const detail::ocdbt::Database>> dbs;
  for (const auto& p : process_databases(*item)) dbs.push_back(detail::ocdbt::Database::open(item, p, ckpt));
  if (dbs.empty()) return nullptr;
  if (dbs.size() == 1) return dbs[0];
  return std::make_shared<MergedKv>(std::move(dbs), item->describe());
}

// Adds the zarr array `name` of a key-value store (v2 `.zarray` or v3 `zarr.json`).
inline bool add_kv_array(detail::interop::IndexBuilder& b, const Path& p, const std::shared_ptr<const io::KvStore>& kv,
                         const std::string& name) {
  const std::string ckpt = b.checkpoint();
  if (kv->contains(name + "/.zarray")) {
    b.add_zarr(p, std::make_shared<const detail::zarr::KvArrayV2>(detail::zarr::KvArrayV2::open(kv, name, ckpt, p.str())));
    return true;
  }
  if (kv->contains(name + "/zarr.json")) {
    auto a = std::make_shared<detail::zarr::v3::KvArray>(detail::zarr::v3::KvArray::open(kv, name, ckpt, p.str()));
    b.add_loaded(p, a->meta.type, a->meta.shape, name, "ocdbt/zarr3",
                 [a](std::span<std::byte> dst, const detail::zarr::Fail& fail) { a->read(dst, fail); },
                 [a](const Shape& o, const Shape& n, std::span<std::byte> dst, const detail::zarr::Fail& fail) { a->read_box(o, n, dst, fail); });
    return true;
  }
  return false;
}

// The arrays of an OCDBT item whose _METADATA is gone: every `<name>/.zarray` or
// `<name>/zarr.json` key, `name` split at '.' into the tree path (Orbax's own naming).
inline void read_ocdbt_keys(detail::interop::IndexBuilder& b, const std::shared_ptr<const io::KvStore>& kv, const Path& prefix) {
  std::set<std::string> names;
  for (const auto& k : kv->list("", detail::zarr::max_chunks)) {
    for (const char* suffix : {"/.zarray", "/zarr.json"}) {
      const std::string_view sv(suffix);
      if (k.size() > sv.size() && k.compare(k.size() - sv.size(), sv.size(), sv) == 0) names.insert(k.substr(0, k.size() - sv.size()));
    }
  }
  if (names.empty()) throw CorruptCheckpointError(b.checkpoint(), prefix.str(), "item has no _METADATA and its OCDBT database no arrays");
  for (const auto& n : names) {
    Path p = prefix;
    std::size_t start = 0;
    for (;;) {
      const std::size_t dot = n.find('.', start);
      p.push(n.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    add_kv_array(b, p, kv, n);
  }
}

// A JSON item (JsonCheckpointHandler's `metadata`, v1 JsonHandler's `data.json`) as a
// tree: objects and lists are nodes, strings, numbers and booleans leaves, null none.
inline void add_json(detail::interop::IndexBuilder& b, const Path& p, const json& j, int depth,
                     const std::shared_ptr<std::deque<std::array<std::byte, 8>>>& store) {
  if (depth > 64) throw CorruptCheckpointError(b.checkpoint(), p.str(), "JSON item nests too deep");
  auto scalar = [&](dtype t, auto v) {
    auto& cell = store->emplace_back();
    std::memcpy(cell.data(), &v, sizeof v);
    b.add_bytes(p, t, {}, {std::span<const std::byte>(cell.data(), sizeof v)});
  };
  if (j.is_object()) {
    if (j.empty()) return b.add_none(p);
    for (const auto& [k, v] : j.items()) add_json(b, p.child(k), v, depth + 1, store);
  } else if (j.is_array()) {
    if (j.empty()) return b.add_none(p);
    for (std::size_t i = 0; i < j.size(); ++i) add_json(b, p.child(std::to_string(i)), j[i], depth + 1, store);
  } else if (j.is_string()) {
    b.add_string(p, j.get<std::string>());
  } else if (j.is_boolean()) {
    scalar(dtype::bool_, static_cast<std::uint8_t>(j.get<bool>()));
  } else if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    scalar(dtype::uint64, j.get<std::uint64_t>());
  } else if (j.is_number_integer()) {
    scalar(dtype::int64, j.get<std::int64_t>());
  } else if (j.is_number()) {
    scalar(dtype::float64, j.get<double>());
  } else {
    b.add_none(p);
  }
}

inline const char* json_item_file(const io::KvStore& item) {
  if (item.contains("data.json")) return "data.json";
  if (item.contains("metadata")) return "metadata";
  return nullptr;
}

// Reads the item whose store is `item` (a view of the checkpoint's store below the
// item's directory) into b, under prefix.
inline void read_item(detail::interop::IndexBuilder& b, const std::shared_ptr<const io::KvStore>& item, const Path& prefix) {
  const std::string ckpt = b.checkpoint();
  const bool ocdbt_item = is_ocdbt_item(*item);
  if (!item->contains(tree_metadata)) {
    if (ocdbt_item) {
      read_ocdbt_keys(b, open_ocdbt(item, ckpt), prefix);
      return;
    }
    // the older layout: msgpack `checkpoint` with PLACEHOLDER:// strings
    if (item->contains("checkpoint")) {
      detail::flax::read_msgpack_into(b, *item, "checkpoint", prefix, nullptr, detail::t5x::special(item));
      return;
    }
    if (const char* f = json_item_file(*item)) {
      const json j = detail::zarr::read_json(*item, f, ckpt, prefix.str());
      auto store = std::make_shared<std::deque<std::array<std::byte, 8>>>();
      b.keep(store);
      add_json(b, prefix, j, 0, store);
      return;
    }
    throw CorruptCheckpointError(ckpt, prefix.str(), "item directory " + item->describe() + " has no _METADATA");
  }
  const json meta = detail::zarr::read_json(*item, tree_metadata, ckpt, prefix.str());
  auto fail = [&](const std::string& path, const std::string& w) {  // path: a tree path, or a key of the file
    throw CorruptCheckpointError(ckpt, path.empty() ? prefix.str() : ckpt::detail::safe_text(path), "_METADATA: " + w);
  };
  if (!meta.is_object() || !meta.contains("tree_metadata") || !meta["tree_metadata"].is_object())
    fail("", "no tree_metadata object");
  const std::shared_ptr<const io::KvStore> kv = ocdbt_item ? open_ocdbt(item, ckpt) : nullptr;
  if (!kv && meta.contains("use_zarr3") && meta["use_zarr3"] == true) fail("", "zarr v3 arrays outside OCDBT are not supported");
  // Orbax 0.5 kept some arrays in the msgpack `checkpoint` file (skip_deserialize, no
  // zarr folder): when one is missing there, the msgpack file holds the whole tree.
  if (!kv && item->contains("checkpoint")) {
    for (const auto& [tuple, v] : meta["tree_metadata"].items()) {
      if (!v.is_object() || !v.contains("key_metadata") || !v["key_metadata"].is_array()) continue;
      std::string name;
      for (const auto& k : v["key_metadata"])
        if (k.is_object() && k.contains("key"))
          name += (name.empty() ? "" : ".") + (k["key"].is_string() ? k["key"].get<std::string>() : k["key"].dump());
      const json vm = v.value("value_metadata", json::object());
      const std::string type = vm.is_object() && vm.contains("value_type") && vm["value_type"].is_string() ? vm["value_type"].get<std::string>() : "";
      const bool array = type == "jax.Array" || type == "np.ndarray" || type == "scalar";
      if (array && (!detail::zarr::safe_name(name) || !item->contains(name + "/.zarray"))) {
        detail::flax::read_msgpack_into(b, *item, "checkpoint", prefix, nullptr, detail::t5x::special(item));
        return;
      }
    }
  }
  std::optional<json> strings;
  for (const auto& [tuple, v] : meta["tree_metadata"].items()) {
    if (!v.is_object() || !v.contains("key_metadata") || !v["key_metadata"].is_array()) fail(tuple, "entry has no key_metadata");
    Path p = prefix;
    std::string name;
    for (const auto& k : v["key_metadata"]) {
      if (!k.is_object() || !k.contains("key")) fail(tuple, "malformed key_metadata");
      const json& key = k["key"];
      std::string s = key.is_string() ? key.get<std::string>() : key.is_number_integer() ? std::to_string(key.get<std::int64_t>()) : "";
      if (s.empty() && !key.is_string()) fail(tuple, "a key is neither a string nor an integer");
      name += (name.empty() ? "" : ".") + s;
      p.push(std::move(s));
    }
    const std::string where = p.str();
    std::string type;
    if (v.contains("value_metadata") && v["value_metadata"].is_object() && v["value_metadata"].contains("value_type") &&
        v["value_metadata"]["value_type"].is_string())
      type = v["value_metadata"]["value_type"].get<std::string>();
    else
      fail(where, "entry has no value_type");
    if (type == "jax.Array" || type == "np.ndarray" || type == "scalar") {
      if (kv) {
        if (!add_kv_array(b, p, kv, name))
          throw CorruptCheckpointError(ckpt, where, "array " + name + " is missing from the OCDBT database (no " + name + "/.zarray or " + name + "/zarr.json key)");
        continue;
      }
      if (!detail::zarr::safe_name(name)) fail(where, "leaf name " + quote_for_message(name) + " leaves the item directory");
      bool there = false;
      try {
        there = item->contains(name + "/.zarray");
      } catch (const Error&) {  // a directory on the way is a symbolic link
      }
      if (!there)
        throw CorruptCheckpointError(ckpt, where, "array " + quote_for_message(name + "/.zarray") +
                                                      " is missing (or a symbolic link)");
      b.add_zarr(p, std::make_shared<const detail::zarr::KvArrayV2>(detail::zarr::KvArrayV2::open(item, name, ckpt, where)));
    } else if (type == "string") {
      if (!strings) strings = detail::zarr::read_json(*item, strings_file, ckpt, where);
      if (!strings->is_object() || !strings->contains(name) || !(*strings)[name].is_string())
        fail(where, "string leaf is missing from _strings.json");
      b.add_string(p, (*strings)[name].get<std::string>());
    } else if (type == "None" || type == "Dict" || type == "List" || type == "Tuple" || type == "NamedTuple") {
      b.add_none(p);
    } else {
      fail(where, "value_type " + quote_for_message(type) + " is not supported");
    }
  }
}
}  // namespace detail::orbax

// How an Orbax item stores its arrays: in one OCDBT database (`use_ocdbt=True`,
// Orbax's default since 0.5) or one zarr directory per array (`use_ocdbt=False`).
enum class orbax_layout { ocdbt, directories };

namespace detail::orbax {
// Orbax's zarr v2 metadata inside OCDBT: compact JSON, fill_value null, "." separator.
inline std::string zarray_text(const detail::zarr::ArrayMeta& m) {
  json j = detail::zarr::zarray_json(m);
  j["fill_value"] = nullptr;
  j["dimension_separator"] = ".";
  return j.dump();
}

// Puts what this process writes of array `name` into the database: `.zarray` when
// `metadata`, then the chunks in its regions, each compressed on its own.
inline void put_array_part(detail::ocdbt::Writer& w, const std::string& name, const detail::zarr::ArrayMeta& m, const LeafBytes& src,
                           std::span<const detail::zarr::Region> regions, bool metadata,
                           exec::ProgressTracker* progress = nullptr) {
  if (metadata) {
    const std::string zarray = zarray_text(m);
    w.put(name + "/.zarray", std::as_bytes(std::span(zarray)));
  }
  for (const detail::zarr::Region& r : regions)
    detail::zarr::encode_chunks(
        m, src, r, '.', [&](const std::string& key, std::span<const std::byte> bytes) { w.put(name + "/" + key, bytes); },
        progress);
}

// The database of process `p` of a multi-process save, inside the item directory.
inline std::string process_database(int p) { return "ocdbt.process_" + std::to_string(p); }

// Writes the item's root database from the per-process ones, as Orbax merges them after
// a multi-process save: every key of every process, small values copied inline, large
// ones referring to the process's data file (base path "ocdbt.process_<i>/").
inline void merge_process_databases(const storage::Location& item, int processes, const std::string& ckpt) {
  detail::ocdbt::Writer root(item);
  const auto kv = std::make_shared<const storage::LocationKv>(item);  // the process databases, as written
  for (int p = 0; p < processes; ++p) {
    const std::string sub = process_database(p) + "/";
    const auto db = detail::ocdbt::Database::open(kv, sub, ckpt);
    for (const auto& [key, v] : db->values()) {
      if (v.file == SIZE_MAX) root.put(key, std::as_bytes(std::span(v.bytes)));
      else root.put_ref(key, sub + db->data_files()[v.file].path, sub.size(), v.offset, v.length);
    }
  }
  root.commit();
}
}  // namespace detail::orbax

// C and Level: the chunks' compressor (zstd level 1, as Orbax). MinSavingPercent: a chunk
// that compressing shrinks by less than this is written as a zstd frame of stored
// blocks, which Orbax reads like any other but which decodes at memcpy speed (float32
// weights and Adam moments save only 7-11% under zstd, and decoding them would cost a
// restore several times its time; bfloat16 saves ~22% and stays compressed). 0
// compresses every chunk, as Orbax does.
template <io::codec C = io::codec::zstd, int Level = 1, orbax_layout Layout = orbax_layout::ocdbt,
          int MinSavingPercent = 12>
struct basic_orbax {
  static_assert(MinSavingPercent >= 0 && MinSavingPercent < 100, "basic_orbax: MinSavingPercent is a percentage, 0-99");
  static constexpr const char* name = "orbax";
  // Arrays are written a zarr chunk at a time, from memory or streamed (ckpt::convert),
  // chunks sized to SaveOptions::max_memory; strings are never streamed.
  static constexpr bool writes_streams = true;

  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& opt) {
    write_part(s, loc, opt, detail::zarr::WritePart{});
  }

  // What one process writes when several write the checkpoint (zarr/write_part.hpp):
  // its regions of the arrays; the process with `part.metadata` the .zarray files,
  // _METADATA, _strings.json, _CHECKPOINT_METADATA and commit_success.txt. With OCDBT,
  // each process writes its own database, ocdbt.process_<i>/, which merge_parts then
  // makes into the item's root database (as Orbax does).
  static void write_part(const Snapshot& s, const std::filesystem::path& dir, const SaveOptions& opt,
                         const detail::zarr::WritePart& part) {
    write_part(s, storage::directory_location(dir, storage::Publish::in_place), opt, part);
  }
  static void write_part(const Snapshot& s, const storage::Location& loc, const SaveOptions& opt,
                         const detail::zarr::WritePart& part) {
    namespace od = detail::orbax;
    constexpr bool use_ocdbt = Layout == orbax_layout::ocdbt;
    const std::string ckpt = loc.url;
    const storage::Location item = loc.child(od::default_item);
    detail::zarr::json tree = detail::zarr::json::object(), strings = detail::zarr::json::object();
    std::set<std::string> names;
    exec::ProgressTracker progress(opt.progress, detail::zarr::part_bytes(s, part), s.leaves.size(), ckpt);  // chunk by chunk
    std::optional<detail::ocdbt::Writer> db;
    // Each process its own database, merged into the root one afterwards (by merge_parts
    // after a multi-process save, below after a whole one): Orbax's layout, one process or many.
    if constexpr (use_ocdbt) db.emplace(item.child(od::process_database(part.process)));
    for (std::size_t i = 0; i < s.leaves.size(); ++i) {
      const SnapshotLeaf& l = s.leaves[i];
      std::string name;
      detail::zarr::json keys = detail::zarr::json::array();
      for (const auto& seg : l.path.segments()) {
        name += (name.empty() ? "" : ".") + seg;
        keys.push_back({{"key", seg}, {"key_type", od::is_index(seg) ? 1 : 2}});
      }
      if (l.path.empty()) throw Error(ckpt, "", "a single-leaf value cannot be an Orbax tree; wrap it in a struct");
      if (!names.insert(name).second)
        throw Error(ckpt, l.path.str(), "two leaves map to the same Orbax name " + quote_for_message(name));
      std::string type;
      detail::zarr::json value_meta;
      if (l.data.type == dtype::string) {
        type = "string";
        strings[name] = std::string(reinterpret_cast<const char*>(l.data.view.data()), l.data.view.size());
      } else if (l.data.type == dtype::none) {
        type = "None";
      } else {
        if (!detail::zarr::safe_name(name) || name[0] == '_' || name[0] == '.' || name.rfind("ocdbt.process_", 0) == 0 || name == "d")
          throw Error(ckpt, l.path.str(), "path cannot name an Orbax array directory");
        type = detail::zarr::array_shape(l).empty() ? "scalar" : "np.ndarray";
        auto meta = detail::zarr::part_meta(part, i, l, C, Level, opt.max_memory, ckpt);
        meta.min_saving_percent = MinSavingPercent;
        if constexpr (use_ocdbt) od::put_array_part(*db, name, meta, l.data, part.regions_of(i, meta), part.metadata, &progress);
        else detail::zarr::write_leaf_part(item.child(name), meta, part, i, l, &progress);
        // Orbax's write_shape: a shard's shape (rank 0's box of a Sharded leaf), else the whole
        value_meta["write_shape"] = l.data.shape;
      }
      value_meta["value_type"] = type;
      value_meta["skip_deserialize"] = type == "None";
      tree[od::tuple_repr(l.path.segments())] = {{"key_metadata", keys}, {"value_metadata", value_meta}};
      if (type == "string" || type == "None") progress.add(l.data.size(), 1);
      else progress.add(0, 1);
    }
    if (db) {
      db->commit();
      if (part.whole()) od::merge_process_databases(item, 1, ckpt);
    }
    if (!part.metadata) {
      progress.finish();
      return;
    }
    if (!strings.empty()) od::write_json(item, od::strings_file, strings);
    od::write_json(item, od::tree_metadata, {{"tree_metadata", tree},
                                              {"use_ocdbt", use_ocdbt},
                                              {"use_zarr3", false},
                                              {"store_array_data_equal_to_fill_value", true},
                                              {"custom_metadata", nullptr}});
    const auto t = od::now_ns();
    od::write_json(loc, od::checkpoint_metadata,
                   {{"item_handlers", {{od::default_item, "orbax.checkpoint._src.handlers.pytree_checkpoint_handler.PyTreeCheckpointHandler"}}},
                    {"metrics", detail::zarr::json::object()},
                    {"performance_metrics", detail::zarr::json::object()},
                    {"init_timestamp_nsecs", t},
                    {"commit_timestamp_nsecs", t},
                    {"custom_metadata", detail::zarr::json::object()}});
    // (on an object store the publish step holds this back and writes its own, last)
    const std::string ok = "Checkpoint commit was successful to " + ckpt;
    loc.storage->put(loc.key(od::commit_file), std::as_bytes(std::span(ok)));
    progress.finish();
  }

 public:
  // After every process's write_part: one process merges the per-process databases.
  static void merge_parts(const std::filesystem::path& dir, int processes) {
    if constexpr (Layout == orbax_layout::ocdbt)
      detail::orbax::merge_process_databases(
          storage::directory_location(dir / detail::orbax::default_item, storage::Publish::in_place), processes,
          dir.string());
  }

  static bool detect_in(const io::KvStore& kv) {
    namespace od = detail::orbax;
    if (kv.contains(od::tree_metadata) || kv.contains("orbax.checkpoint") || od::is_ocdbt_item(kv)) return true;
    // _CHECKPOINT_METADATA marks a manager's step, of Orbax's or of ckpt's: a t5x step
    // that a ckpt manager saved holds one too, beside t5x's own msgpack `checkpoint`
    if (kv.contains(od::checkpoint_metadata) && !detail::flax::looks_like_msgpack_map(kv, "checkpoint")) return true;
    // a composite checkpoint without _CHECKPOINT_METADATA: some item directory is one
    int seen = 0;
    for (const auto& n : kv.children("", std::size_t{1} << 20)) {
      if (++seen >= 256) break;
      // numbered subdirectories are steps (a manager root), not items
      if (n.find_first_not_of("0123456789") == std::string::npos) continue;
      if (kv.contains(n + "/" + od::tree_metadata) || detail::ocdbt::Database::is_database(kv, n + "/")) return true;
    }
    return false;
  }
  static bool detect(const std::filesystem::path& dir) { return detect_in(io::DirectoryKv(dir)); }

  // Orbax publishes a step by renaming it into place (commit_success.txt is written on
  // object stores only), so a step whose metadata is there counts.
  static bool is_committed(const std::filesystem::path& dir) { return detect(dir); }

  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& ckpt) {
    namespace od = detail::orbax;
    detail::interop::IndexBuilder b(ckpt);
    IndexInfo info;
    info.format = "orbax";
    if (kv->contains(od::tree_metadata) || od::is_ocdbt_item(*kv)) {
      od::read_item(b, kv, Path());
      return b.build(std::move(info));
    }
    // Items _CHECKPOINT_METADATA names, when it names them: a directory it does not
    // name (a stray or half-written one) is not part of the checkpoint.
    std::optional<std::set<std::string>> named;
    if (kv->contains(od::checkpoint_metadata)) {
      try {
        const detail::zarr::json cm = detail::zarr::read_json(*kv, od::checkpoint_metadata, ckpt, "");
        if (cm.is_object() && cm.contains("item_handlers") && cm["item_handlers"].is_object()) {
          named.emplace();
          for (const auto& [k, v] : cm["item_handlers"].items()) named->insert(k);
        }
      } catch (const Error&) {
        // a damaged _CHECKPOINT_METADATA only loses the filter: the items still read
      }
    }
    std::vector<std::string> items;
    for (const auto& n : kv->children("", std::size_t{1} << 20)) {
      if (n.empty() || n[0] == '.') continue;
      if (named && !named->count(n)) continue;
      const auto item = io::below(kv, n);
      if (item->contains(od::tree_metadata) || item->contains("checkpoint") || od::is_ocdbt_item(*item) ||
          od::json_item_file(*item))
        items.push_back(n);
      if (items.size() > 1024) throw CorruptCheckpointError(ckpt, "", "too many items");
    }
    if (items.empty()) throw CorruptCheckpointError(ckpt, "", "no item directory with _METADATA");
    if (items.size() == 1 && items[0] == od::default_item) {
      od::read_item(b, io::below(kv, items[0]), Path());
    } else {
      for (const auto& n : items) od::read_item(b, io::below(kv, n), Path({n}));
    }
    return b.build(std::move(info));
  }
  static std::shared_ptr<const Index> open(const std::filesystem::path& dir) {
    if (!detail::zarr::is_dir(dir)) throw Error(dir.string(), "", "no Orbax checkpoint here (not a directory)");
    return open_in(std::make_shared<io::DirectoryKv>(dir), dir.string());
  }
};
using orbax = basic_orbax<>;
// Orbax's older layout, `use_ocdbt=False`: one zarr directory per array.
using orbax_without_ocdbt = basic_orbax<io::codec::zstd, 1, orbax_layout::directories>;
static_assert(format_policy<orbax>, CKPT_INTERNAL_CHECK("orbax must meet format_policy"));
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool orbax_registered = register_format<orbax>(10);
#endif

}  // namespace ckpt
