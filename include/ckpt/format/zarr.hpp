// ckpt/format/zarr.hpp — ckpt::zarr_v2: a zarr v2 group hierarchy as a checkpoint.
//
// Reading: a directory with `.zgroup` is a tree whose inner nodes are its groups and
// whose leaves are its arrays (`.zarray`); a directory with `.zarray` is one array (the
// root leaf). An empty group is an empty node. Writing: one array per leaf at
// <dir>/<seg>/<seg>/..., `.zgroup` in every group, chunks compressed with C (zstd by
// default). Strings are not representable in zarr v2 and are refused, naming the leaf.
#pragma once

#include <filesystem>
#include <string>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/format/zarr/chunks.hpp>
#include <ckpt/format/zarr/kv_chunks.hpp>
#include <ckpt/format/zarr/metadata.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

namespace detail::zarr {

inline constexpr int max_depth = 64;
inline constexpr std::size_t max_nodes = std::size_t{1} << 20;

inline void write_zgroup(const storage::Location& group) {
  static const std::string text = "{\n    \"zarr_format\": 2\n}";
  group.storage->put(group.key(".zgroup"), std::as_bytes(std::span(text)));
}

inline bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(fs::symlink_status(p, ec));
}
inline bool is_dir(const fs::path& p) {  // a real directory, not a symlink to one
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(p, ec));
}

// The array `name` of a store (".zarray" under it) as a leaf at p.
inline void add_array(detail::interop::IndexBuilder& b, const Path& p, const std::shared_ptr<const io::KvStore>& kv,
                      const std::string& name) {
  b.add_zarr(p, std::make_shared<const KvArrayV2>(KvArrayV2::open(kv, name, b.checkpoint(), p.empty() ? "<root>" : p.str())));
}

// Adds every array under group `rel` ("" for the root; path p) of the store to b.
inline void read_group(detail::interop::IndexBuilder& b, const std::shared_ptr<const io::KvStore>& kv, const std::string& rel,
                       Path& p, int depth, std::size_t& nodes) {
  if (depth > max_depth) throw CorruptCheckpointError(b.checkpoint(), p.str(), "groups nest too deep");
  std::vector<std::string> names;
  for (auto& n : kv->children(rel.empty() ? "" : rel + "/", max_nodes)) {
    if (++nodes > max_nodes) throw CorruptCheckpointError(b.checkpoint(), p.str(), "too many files");
    if (!n.empty() && n[0] != '.') names.push_back(std::move(n));
  }
  bool any = false;
  for (const auto& n : names) {
    const std::string r = rel.empty() ? n : rel + "/" + n;
    p.push(n);
    if (kv->contains(r + "/.zarray")) {
      add_array(b, p, kv, r);
      any = true;
    } else if (kv->contains(r + "/.zgroup")) {
      read_group(b, kv, r, p, depth + 1, nodes);
      any = true;
    }
    p = Path(std::vector<std::string>(p.segments().begin(), p.segments().end() - 1));
  }
  if (!any && !p.empty()) b.add_none(p);
}

// Writes one leaf as an array under `array` (nothing there yet); throws for strings.
// Chunks are sized to max_memory (SaveOptions; 0: 64 MiB).
inline void write_leaf(const storage::Location& array, const SnapshotLeaf& l, io::codec c, int level, const std::string& checkpoint,
                       std::uint64_t max_memory, exec::ProgressTracker* progress = nullptr) {
  if (l.data.type == dtype::string)
    throw Error(checkpoint, l.path.str(), "a string leaf has no zarr v2 representation (save it in another format)");
  const ArrayMeta m = meta_for(l.data.type, l.data.shape, c, level, chunk_target(max_memory));
  check_chunk_budget(m, max_memory, checkpoint, l.path.str());
  write_array(array, m, l.data, progress);
  if (progress) progress->add(0, 1);
}

inline void write_node(const storage::Location& dir, const detail::interop::SnapNode& n, io::codec c, int level,
                       const std::string& checkpoint, const Path& p, std::uint64_t max_memory,
                       exec::ProgressTracker* progress = nullptr) {
  if (n.leaf && n.leaf->data.type != dtype::none) {
    write_leaf(dir, *n.leaf, c, level, checkpoint, max_memory, progress);
    return;
  }
  write_zgroup(dir);
  for (const auto& [k, child] : n.children) {
    if (!safe_name(k) || k[0] == '.')
      throw Error(checkpoint, p.child(k).str(), "key " + quote_for_message(k) +
                                                    " cannot be a zarr directory name");
    write_node(dir.child(k), *child, c, level, checkpoint, p.child(k), max_memory, progress);
  }
}

}  // namespace detail::zarr

template <io::codec C = io::codec::zstd, int Level = 1>
struct basic_zarr_v2 {
  static constexpr const char* name = "zarr";
  // Arrays are written a chunk at a time, from memory or streamed (ckpt::convert),
  // chunks sized to SaveOptions::max_memory.
  static constexpr bool writes_streams = true;
  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& opt) {
    const detail::interop::SnapNode root = detail::interop::snapshot_tree(s, loc.url);
    exec::ProgressTracker progress(opt.progress, s.total_bytes(), s.leaves.size(), loc.url);  // chunk by chunk
    if (root.leaf) throw Error(loc.url, "", "a single-leaf value cannot be a zarr group; wrap it in a struct");
    detail::zarr::write_zgroup(loc);
    for (const auto& [k, child] : root.children) {
      if (!detail::zarr::safe_name(k) || k[0] == '.')
        throw Error(loc.url, k, "key cannot be a zarr directory name");
      detail::zarr::write_node(loc.child(k), *child, C, Level, loc.url, Path({k}), opt.max_memory, &progress);
    }
    progress.finish();  // the empty nodes (None), which write no array
  }
  static bool detect_in(const io::KvStore& kv) { return kv.contains(".zgroup") || kv.contains(".zarray"); }
  static bool detect(const std::filesystem::path& dir) { return detect_in(io::DirectoryKv(dir)); }
  // zarr has no commit marker: a group or array whose metadata file is there counts.
  static bool is_committed(const std::filesystem::path& dir) { return detect(dir); }

  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& ckpt) {
    detail::interop::IndexBuilder b(ckpt);
    Path p;
    if (kv->contains(".zarray")) {
      detail::zarr::add_array(b, p, kv, "");
    } else if (kv->contains(".zgroup")) {
      std::size_t nodes = 0;
      detail::zarr::read_group(b, kv, "", p, 0, nodes);
    } else {
      throw Error(ckpt, "", "not a zarr array or group (no .zarray or .zgroup)");
    }
    IndexInfo info;
    info.format = "zarr";
    info.format_version = 2;
    return b.build(std::move(info));
  }
  static std::shared_ptr<const Index> open(const std::filesystem::path& dir) {
    return open_in(std::make_shared<io::DirectoryKv>(dir), dir.string());
  }
};
using zarr_v2 = basic_zarr_v2<>;
static_assert(format_policy<zarr_v2>, CKPT_INTERNAL_CHECK("zarr_v2 must meet format_policy"));
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool zarr_v2_registered = register_format<zarr_v2>(30);
#endif

}  // namespace ckpt
