// ckpt/manager/items.hpp — values saved beside the state in the same step, restorable alone.
//
// What Orbax's Composite and t5x's dataset checkpoints are for: a data-iterator
// position, a JSON config. Each item is named; a tree item (any type ckpt can save)
// becomes a checkpoint of its own in <step>/items/<name>/, a JSON item the file
// <step>/items/<name>.json. Both are written into the staging directory before the
// step commits, so a step has all its items or does not exist.
//
//   mgr.save(step, state, metrics, {.items = {{"dataset", ckpt::tree_item(pos)},
//                                             {"config", ckpt::json_item(cfg)}}});
//   auto pos = mgr.restore_item<DataPosition>(step, "dataset");
//   auto cfg = mgr.item_json(step, "config");
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/io/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/format/format.hpp>
#include <ckpt/storage/storage.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/tree/node.hpp>

namespace ckpt {

class Item {
 public:
  enum class kind { tree, json };

  template <class T>
  static Item tree(const T& value) {
    node::require_tree<T>();
    Item i(kind::tree);
    i.snapshot_ = take_snapshot(value);
    return i;
  }
  static Item json(nlohmann::json value) {
    Item i(kind::json);
    i.json_ = std::move(value);
    return i;
  }

  kind type() const noexcept { return kind_; }
  const Snapshot& snapshot() const noexcept { return snapshot_; }
  const nlohmann::json& json_value() const noexcept { return json_; }
  // Copies the bytes a tree item borrows, for a save that outlives the value.
  void make_owned() { snapshot_.make_owned(); }

 private:
  explicit Item(kind k) : kind_(k) {}
  kind kind_;
  Snapshot snapshot_;
  nlohmann::json json_;
};

// A value of any type ckpt can save, stored as a checkpoint of its own. An lvalue is
// borrowed until the save copies it (as the state is); a temporary is copied now, since
// it is gone before the save.
template <class T>
Item tree_item(const T& value) {
  return Item::tree(value);
}
template <class T>
  requires(!std::is_lvalue_reference_v<T>)
Item tree_item(T&& value) {
  Item i = Item::tree(value);
  i.make_owned();
  return i;
}
// A JSON value, stored as a .json file.
inline Item json_item(nlohmann::json value) { return Item::json(std::move(value)); }

using Items = std::map<std::string, Item>;

namespace detail::manager {

inline constexpr const char* items_dir = "items";

// Item names become file names: keep them to [A-Za-z0-9_.-], not starting with '.',
// so that no name can reach outside the step directory.
inline bool valid_item_name(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.front() == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

inline void check_item_name(const std::filesystem::path& where, std::string_view name) {
  if (!valid_item_name(name))
    throw Error(where.string(), "",
                "invalid item name \"" + std::string(name) +
                    "\" (use letters, digits, '_', '-' and '.', not starting with '.')");
}

inline std::string_view kind_name(Item::kind k) { return k == Item::kind::tree ? "tree" : "json"; }

// Where item `name` of kind `kind` is in the step directory `dir`, whose metadata lists
// `items` (name -> "tree" | "json"): an Error when the name is invalid, was not saved
// or is of the other kind; with check_links (local steps: object stores have no links),
// a CorruptCheckpointError when items/ or the item's directory is a symbolic link.
inline std::filesystem::path item_path(const std::filesystem::path& dir, const std::map<std::string, std::string>& items,
                                       std::string_view name, Item::kind kind, bool check_links) {
  check_item_name(dir, name);
  const auto it = items.find(std::string(name));
  const std::string want(kind_name(kind));
  if (it == items.end()) throw Error(dir.string(), "", "no item \"" + std::string(name) + "\" saved with this step");
  if (it->second != want)
    throw Error(dir.string(), "", "item \"" + std::string(name) + "\" is a " + it->second + " item, not a " + want + " item");
  const auto base = dir / items_dir;
  const auto rel = kind == Item::kind::tree ? std::filesystem::path(items_dir) / std::string(name)
                                            : std::filesystem::path(items_dir);
  // items/ and a tree item's directory belong to the step
  if (check_links && io::has_symlink_below(dir, rel))
    throw CorruptCheckpointError(dir.string(), "", "item \"" + std::string(name) + "\" is missing or a symbolic link");
  return kind == Item::kind::tree ? base / std::string(name) : base / (std::string(name) + ".json");
}

// A JSON item's value: `read` fetches the bytes of its file (a local read, or an object
// store's GET); a failure to read or parse is a CorruptCheckpointError naming the file.
template <class Read>
nlohmann::json read_item_json(const std::filesystem::path& file, Read&& read) {
  std::vector<std::byte> bytes;
  try {
    bytes = read(file);
  } catch (const Error& e) {
    throw CorruptCheckpointError(file.string(), "", std::string("item cannot be read: ") + e.what());
  }
  return ckpt::detail::parse_json(bytes, file.string(), "", "item");
}

// Writes every item under <step>/items/ through the storage (the step is still a
// staging directory, or an object-store prefix without its commit marker): a tree item
// in the step's format, a JSON item as one object.
template <class Format>
void write_items(const storage::Location& step, const Items& items, const SaveOptions& opts) {
  const storage::Location dir = step.child(items_dir);
  for (const auto& [name, item] : items) {
    check_item_name(step.url, name);
    if (item.type() == Item::kind::tree) {
      Format::write_to(item.snapshot(), dir.child(name), opts);
    } else {
      const std::string text = item.json_value().dump(1);
      dir.storage->put(dir.key(name + ".json"), std::as_bytes(std::span(text)));
    }
  }
}

}  // namespace detail::manager
}  // namespace ckpt
