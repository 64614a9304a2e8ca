// ckpt/format/zarr3.hpp — ckpt::zarr_v3: a zarr v3 hierarchy in a directory, read.
//
// A directory whose `zarr.json` says node_type "group" is a tree: its subdirectories
// with a `zarr.json` are its children (groups are inner nodes, arrays leaves); one
// whose `zarr.json` is an array is a single leaf. The arrays are read through the
// directory as a key-value store (format/zarr/v3.hpp), the same code that reads zarr
// v3 arrays inside Orbax's OCDBT databases. ckpt does not write zarr v3.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/zarr.hpp>
#include <ckpt/format/zarr/v3.hpp>
#include <ckpt/io/kvstore.hpp>

namespace ckpt {

namespace detail::zarr3 {
namespace fs = std::filesystem;

// The node_type of the zarr.json under prefix rel ("" for the root).
inline std::string node_type(const io::KvStore& kv, const std::string& rel, const std::string& ckpt, const std::string& path) {
  const detail::zarr::json j = detail::zarr::read_json(kv, rel.empty() ? "zarr.json" : rel + "/zarr.json", ckpt, path);
  if (!j.is_object() || !j.contains("zarr_format") || j["zarr_format"] != 3 || !j.contains("node_type") || !j["node_type"].is_string())
    throw CorruptCheckpointError(ckpt, path, "zarr.json is not zarr v3 metadata");
  return j["node_type"].get<std::string>();
}

inline void add_array(detail::interop::IndexBuilder& b, const Path& p, const std::shared_ptr<const io::KvStore>& kv, const std::string& name) {
  auto a = std::make_shared<detail::zarr::v3::KvArray>(detail::zarr::v3::KvArray::open(kv, name, b.checkpoint(), p.str()));
  b.add_loaded(p, a->meta.type, a->meta.shape, name.empty() ? "." : name, "zarr3",
               [a](std::span<std::byte> dst, const detail::zarr::Fail& fail) { a->read(dst, fail); },
                 [a](const Shape& o, const Shape& n, std::span<std::byte> dst, const detail::zarr::Fail& fail) { a->read_box(o, n, dst, fail); });
}

inline void read_group(detail::interop::IndexBuilder& b, const std::shared_ptr<const io::KvStore>& kv, const std::string& rel,
                       Path& p, int depth, std::size_t& nodes) {
  if (depth > detail::zarr::max_depth) throw CorruptCheckpointError(b.checkpoint(), p.str(), "groups nest too deep");
  std::vector<std::string> names;
  for (auto& n : kv->children(rel.empty() ? "" : rel + "/", detail::zarr::max_nodes)) {
    if (++nodes > detail::zarr::max_nodes) throw CorruptCheckpointError(b.checkpoint(), p.str(), "too many files");
    if (n.empty() || n[0] == '.' || !kv->contains((rel.empty() ? n : rel + "/" + n) + "/zarr.json")) continue;
    names.push_back(std::move(n));
  }
  if (names.empty() && !p.empty()) b.add_none(p);
  for (const auto& n : names) {
    const std::string r = rel.empty() ? n : rel + "/" + n;
    p.push(n);
    const std::string t = node_type(*kv, r, b.checkpoint(), p.str());
    if (t == "array") add_array(b, p, kv, r);
    else if (t == "group") read_group(b, kv, r, p, depth + 1, nodes);
    else throw CorruptCheckpointError(b.checkpoint(), p.str(), "zarr.json node_type is neither array nor group");
    p = Path(std::vector<std::string>(p.segments().begin(), p.segments().end() - 1));
  }
}
}  // namespace detail::zarr3

struct zarr_v3 {
  static constexpr const char* name = "zarr3";

  static bool detect_in(const io::KvStore& kv) {
    if (!kv.contains("zarr.json")) return false;
    try {
      const auto j = detail::zarr::read_json(kv, "zarr.json", kv.describe(), "");
      return j.is_object() && j.contains("zarr_format") && j["zarr_format"] == 3;
    } catch (const Error&) {
      return false;
    }
  }
  static bool detect(const std::filesystem::path& dir) { return detect_in(io::DirectoryKv(dir)); }
  static bool is_committed(const std::filesystem::path& dir) { return detect(dir); }

  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& ckpt) {
    detail::interop::IndexBuilder b(ckpt);
    Path p;
    const std::string t = detail::zarr3::node_type(*kv, "", ckpt, "");
    if (t == "array") {
      detail::zarr3::add_array(b, p, kv, "");
    } else if (t == "group") {
      std::size_t nodes = 0;
      detail::zarr3::read_group(b, kv, "", p, 0, nodes);
    } else {
      throw CorruptCheckpointError(ckpt, "", "zarr.json node_type is neither array nor group");
    }
    IndexInfo info;
    info.format = "zarr";
    info.format_version = 3;
    return b.build(std::move(info));
  }
  static std::shared_ptr<const Index> open(const std::filesystem::path& dir) {
    return open_in(std::make_shared<io::DirectoryKv>(dir), dir.string());
  }
};
static_assert(readable_format<zarr_v3>);
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool zarr_v3_registered = register_format<zarr_v3>(31);
#endif

}  // namespace ckpt
