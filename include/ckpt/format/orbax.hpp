// ckpt/format/orbax.hpp — ckpt::orbax: Orbax step directories (PyTreeCheckpointHandler,
// without OCDBT).
//
//   <step>/_CHECKPOINT_METADATA   JSON: item_handlers, metrics, timestamps
//   <step>/commit_success.txt     written last
//   <step>/default/_METADATA      JSON: {"tree_metadata": {"('a', 'b')": {"key_metadata":
//                                 [{"key": "a", "key_type": 2}, ...], "value_metadata":
//                                 {"value_type": "np.ndarray", "skip_deserialize": false}}},
//                                 "use_zarr3": false}
//   <step>/default/a.b/           one zarr v2 array per numeric leaf (.zarray + chunks)
//   <step>/default/_strings.json  string leaves, {"a.b": "text"} (Orbax's StringHandler)
// Reading also accepts an item directory itself (what PyTreeCheckpointer.save(dir)
// writes), several items (each becomes a top-level key), and the older layout whose
// msgpack `checkpoint` holds PLACEHOLDER:// strings.
#pragma once

#include <chrono>
#include <filesystem>
#include <set>
#include <string>

#include <ckpt/format/registry.hpp>
#include <ckpt/format/t5x.hpp>

namespace ckpt {

namespace orbax_detail {
namespace fs = std::filesystem;
using zarr::json;

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

inline void write_json(const fs::path& file, const json& j) {
  const std::string text = j.dump(2);
  io::write_file_synced(file, std::as_bytes(std::span(text)));
}

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

inline void read_item(interop::IndexBuilder& b, const fs::path& item, const Path& prefix) {
  const std::string ckpt = b.checkpoint();
  if (zarr::is_file(item / "manifest.ocdbt"))
    throw Error(ckpt, prefix.str(), "OCDBT checkpoints are not supported (save with use_ocdbt=False)");
  if (!zarr::is_file(item / tree_metadata)) {
    // the older layout: msgpack `checkpoint` with PLACEHOLDER:// strings
    if (zarr::is_file(item / "checkpoint")) {
      flax_detail::read_msgpack_into(b, item / "checkpoint", prefix, nullptr, t5x_detail::special(item));
      return;
    }
    throw CorruptCheckpointError(ckpt, prefix.str(), "item directory " + item.string() + " has no _METADATA");
  }
  const json meta = zarr::read_json_file(item / tree_metadata, ckpt, prefix.str());
  auto fail = [&](const std::string& path, const std::string& w) {  // path: a tree path, or a key of the file
    throw CorruptCheckpointError(ckpt, path.empty() ? prefix.str() : ckpt::detail::safe_text(path), "_METADATA: " + w);
  };
  if (!meta.is_object() || !meta.contains("tree_metadata") || !meta["tree_metadata"].is_object())
    fail("", "no tree_metadata object");
  if (meta.contains("use_zarr3") && meta["use_zarr3"] == true) fail("", "zarr v3 arrays are not supported");
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
      if (!zarr::safe_name(name)) fail(where, "leaf name " + native_format::quote_for_message(name) + " leaves the item directory");
      const fs::path adir = item / name;
      if (!zarr::is_dir(adir) || !zarr::is_file(adir / ".zarray"))  // is_dir: not a link to a directory elsewhere
        throw CorruptCheckpointError(ckpt, where, "array " + native_format::quote_for_message(name + "/.zarray") +
                                                      " is missing (or a symbolic link)");
      b.add_zarr(p, adir, name, zarr::open_array(adir, ckpt, where));
    } else if (type == "string") {
      if (!strings) strings = zarr::read_json_file(item / strings_file, ckpt, where);
      if (!strings->is_object() || !strings->contains(name) || !(*strings)[name].is_string())
        fail(where, "string leaf is missing from _strings.json");
      b.add_string(p, (*strings)[name].get<std::string>());
    } else if (type == "None" || type == "Dict" || type == "List" || type == "Tuple" || type == "NamedTuple") {
      b.add_none(p);
    } else {
      fail(where, "value_type " + native_format::quote_for_message(type) + " is not supported");
    }
  }
}
}  // namespace orbax_detail

template <io::codec C = io::codec::zstd, int Level = 1>
struct basic_orbax {
  static constexpr const char* name = "orbax";

  static void write(const Snapshot& s, const std::filesystem::path& dir, const SaveOptions&) {
    namespace od = orbax_detail;
    const std::string ckpt = dir.string();
    const auto item = dir / od::default_item;
    std::filesystem::create_directory(item);
    zarr::json tree = zarr::json::object(), strings = zarr::json::object();
    std::set<std::string> names;
    for (const auto& l : s.leaves) {
      std::string name;
      zarr::json keys = zarr::json::array();
      for (const auto& seg : l.path.segments()) {
        name += (name.empty() ? "" : ".") + seg;
        keys.push_back({{"key", seg}, {"key_type", od::is_index(seg) ? 1 : 2}});
      }
      if (l.path.empty()) throw Error(ckpt, "", "a single-leaf value cannot be an Orbax tree; wrap it in a struct");
      if (!names.insert(name).second)
        throw Error(ckpt, l.path.str(), "two leaves map to the same Orbax name " + native_format::quote_for_message(name));
      std::string type;
      if (l.data.type == dtype::string) {
        type = "string";
        strings[name] = std::string(reinterpret_cast<const char*>(l.data.view.data()), l.data.view.size());
      } else if (l.data.type == dtype::none) {
        type = "None";
      } else {
        if (!zarr::safe_name(name) || name[0] == '_' || name[0] == '.')
          throw Error(ckpt, l.path.str(), "path cannot name an Orbax array directory");
        type = l.data.shape.empty() ? "scalar" : "np.ndarray";
        zarr::write_array(item / name, zarr::meta_for(l.data.type, l.data.shape, C, Level), l.data.view);
      }
      tree[od::tuple_repr(l.path.segments())] = {
          {"key_metadata", keys}, {"value_metadata", {{"value_type", type}, {"skip_deserialize", type == "None"}}}};
    }
    if (!strings.empty()) od::write_json(item / od::strings_file, strings);
    od::write_json(item / od::tree_metadata, {{"tree_metadata", tree}, {"use_zarr3", false}});
    const auto t = od::now_ns();
    od::write_json(dir / od::checkpoint_metadata,
                   {{"item_handlers", {{od::default_item, "orbax.checkpoint._src.handlers.pytree_checkpoint_handler.PyTreeCheckpointHandler"}}},
                    {"metrics", zarr::json::object()},
                    {"performance_metrics", zarr::json::object()},
                    {"init_timestamp_nsecs", t},
                    {"commit_timestamp_nsecs", t},
                    {"custom", zarr::json::object()}});
    const std::string ok = "Checkpoint commit was successful to " + ckpt;
    io::write_file_synced(dir / od::commit_file, std::as_bytes(std::span(ok)));
  }

  static bool detect(const std::filesystem::path& dir) {
    namespace od = orbax_detail;
    if (zarr::is_file(dir / od::checkpoint_metadata) || zarr::is_file(dir / od::tree_metadata)) return true;
    return zarr::is_file(dir / od::default_item / od::tree_metadata);
  }

  // Orbax publishes a step by renaming it into place (commit_success.txt is written on
  // object stores only), so a step whose metadata is there counts.
  static bool is_committed(const std::filesystem::path& dir) { return detect(dir); }

  static std::shared_ptr<const Index> open(const std::filesystem::path& dir) {
    namespace od = orbax_detail;
    const std::string ckpt = dir.string();
    interop::IndexBuilder b(ckpt);
    IndexInfo info;
    info.format = "orbax";
    if (zarr::is_file(dir / od::tree_metadata)) {
      od::read_item(b, dir, Path());
      return b.build(std::move(info));
    }
    if (!zarr::is_dir(dir)) throw Error(ckpt, "", "no Orbax checkpoint here (not a directory)");
    std::vector<std::string> items;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.empty() || n[0] == '.' || !zarr::is_dir(it->path())) continue;
      if (zarr::is_file(it->path() / od::tree_metadata) || zarr::is_file(it->path() / "checkpoint")) items.push_back(n);
      if (items.size() > 1024) throw CorruptCheckpointError(ckpt, "", "too many items");
    }
    std::sort(items.begin(), items.end());
    if (items.empty()) throw CorruptCheckpointError(ckpt, "", "no item directory with _METADATA");
    if (items.size() == 1 && items[0] == od::default_item) {
      od::read_item(b, dir / items[0], Path());
    } else {
      for (const auto& n : items) od::read_item(b, dir / n, Path({n}));
    }
    return b.build(std::move(info));
  }
};
using orbax = basic_orbax<>;
inline const bool orbax_registered = register_format<orbax>(10);

}  // namespace ckpt
