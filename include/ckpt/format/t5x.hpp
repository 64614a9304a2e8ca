// ckpt/format/t5x.hpp — ckpt::t5x: the checkpoint directories of t5x's Checkpointer.
//
// A step directory (`checkpoint_<step>/`) holds the msgpack file `checkpoint`:
//   {"version": 3, "optimizer": <state dict>}
// in Flax's encoding (format/flax.hpp), where each array is replaced by a TensorStore
// spec {"driver": "zarr", "dtype": "float32", "kvstore": {"driver": "file", "path":
// "<name>/"}, "metadata": {"shape", "chunks", "compressor": {"id": "gzip", "level": 1}}}
// and stored as a zarr v2 array in <name>/, the leaf's dotted path. On Google Cloud
// Storage the spec's kvstore is {"driver": "gcs", "bucket": "t5x-dummy-bucket", "path":
// "<name>/"}, as t5x writes it there: the path is relative and the bucket a placeholder,
// so the checkpoint is not bound to where it was written. Reading, every spec's path
// (file, gfile or gcs; in the kvstore or, as TensorStore before 0.1.14 wrote it, beside
// it) is resolved against the checkpoint ckpt was given, on whatever storage, and the
// bucket is never read: a checkpoint copied from one bucket to another, to S3, to memory
// or to a local disk restores, as t5x's own reader does. The tree ckpt reads
// is the "optimizer" dict (paths like `state.param_states.kernel`). Scalars, strings
// and empty nodes stay in the msgpack file, as t5x keeps its non-array leaves there.
//
// Also reads the msgpack `checkpoint` of t5x's Orbax-based layout, whose arrays are
// "PLACEHOLDER://<name>" strings standing for zarr arrays in <name>/.
#pragma once

#include <filesystem>
#include <set>
#include <string>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/flax.hpp>
#include <ckpt/format/zarr.hpp>
#include <ckpt/format/zarr/kv_chunks.hpp>
#include <ckpt/format/zarr/write_part.hpp>
#include <ckpt/io/kvstore.hpp>

namespace ckpt {

namespace detail::t5x {
namespace fs = std::filesystem;
using detail::zarr::json;

inline constexpr std::uint64_t version = 3;
inline constexpr std::string_view placeholder = "PLACEHOLDER://";
inline constexpr std::string_view dummy_bucket = "t5x-dummy-bucket";

// A relative path inside the checkpoint, from a spec or placeholder: every component
// one plain name (no "..", no absolute paths, no empty components).
inline std::string checked_relative(std::string s, const std::string& checkpoint, const Path& p) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  if (s.empty() || s[0] == '/')
    throw CorruptCheckpointError(checkpoint, p.str(), "array path " + quote_for_message(s) +
                                                          " is not relative to the checkpoint");
  std::string out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t slash = std::min(s.find('/', at), s.size());
    const std::string part = s.substr(at, slash - at);
    if (!detail::zarr::safe_name(part))
      throw CorruptCheckpointError(checkpoint, p.str(), "array path " + quote_for_message(s) +
                                                            " leaves the checkpoint directory");
    out += (out.empty() ? "" : "/") + part;
    at = slash + 1;
  }
  return out;
}

// Converts msgpack (a spec's "metadata") to JSON, for zarr's parser; bounded depth.
inline json to_json(const msgpack::object& o, int depth = 0) {
  if (depth > 16) throw Error("spec nests too deep");
  switch (o.type) {
    case msgpack::type::NIL: return nullptr;
    case msgpack::type::BOOLEAN: return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER: return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER: return o.via.i64;
    case msgpack::type::FLOAT32: case msgpack::type::FLOAT64: return o.via.f64;
    case msgpack::type::STR: return std::string(o.via.str.ptr, o.via.str.size);
    case msgpack::type::ARRAY: {
      json a = json::array();
      for (std::uint32_t i = 0; i < o.via.array.size; ++i) a.push_back(to_json(o.via.array.ptr[i], depth + 1));
      return a;
    }
    case msgpack::type::MAP: {
      json m = json::object();
      for (std::uint32_t i = 0; i < o.via.map.size; ++i)
        if (o.via.map.ptr[i].key.type == msgpack::type::STR)
          m[std::string(o.via.map.ptr[i].key.via.str.ptr, o.via.map.ptr[i].key.via.str.size)] =
              to_json(o.via.map.ptr[i].val, depth + 1);
      return m;
    }
    default: return nullptr;
  }
}

// Opens the zarr array at rel (a '/'-separated path inside the checkpoint's store);
// when it has no .zarray (t5x's own test data lacks them), the spec supplies the metadata.
inline void add_array(detail::interop::IndexBuilder& b, const std::shared_ptr<const io::KvStore>& kv, const std::string& rel,
                      const Path& p, const json* spec) {
  auto fail = [&](const std::string& w) { throw CorruptCheckpointError(b.checkpoint(), p.str(), w); };
  try {
    if (kv->contains(rel + "/.zarray")) {
      b.add_zarr(p, std::make_shared<const detail::zarr::KvArrayV2>(detail::zarr::KvArrayV2::open(kv, rel, b.checkpoint(), p.str())));
      return;
    }
    if (!spec) fail("array " + quote_for_message(rel) + " has no .zarray");
    if (kv->list(rel + "/", detail::zarr::max_chunks + 16).empty())
      fail("array directory " + quote_for_message(rel) + " is missing (or a symbolic link)");
  } catch (const CorruptCheckpointError&) {
    throw;
  } catch (const Error& e) {  // a directory on the way is a symbolic link
    fail("array directory " + quote_for_message(rel) + ": " + e.what());
  }
  json z = spec->contains("metadata") && (*spec)["metadata"].is_object() ? (*spec)["metadata"] : json::object();
  z["zarr_format"] = 2;
  if (!z.contains("dtype")) {
    if (!spec->contains("dtype") || !(*spec)["dtype"].is_string()) fail("TensorStore spec has no dtype");
    const auto d = detail::zarr::dtype_from_numpy_name((*spec)["dtype"].get<std::string>());
    if (!d) fail("TensorStore dtype " + detail::describe((*spec)["dtype"]) + " is not supported");
    z["dtype"] = detail::zarr::typestr(*d);
  }
  if (!z.contains("chunks") && z.contains("shape")) z["chunks"] = z["shape"];
  if (!z.contains("compressor")) z["compressor"] = nullptr;
  // (a 0-sized chunk dimension cannot be read; a shape of 0 gives chunks of 1)
  b.add_zarr(p, std::make_shared<const detail::zarr::KvArrayV2>(
                    detail::zarr::KvArrayV2::with_meta(kv, rel, detail::zarr::parse_zarray(z, fail), b.checkpoint(), p.str())));
}

inline detail::interop::SpecialLeaf special(std::shared_ptr<const io::KvStore> kv) {
  return [kv](detail::interop::IndexBuilder& b, const Path& p, const msgpack::object& o) -> bool {
    if (o.type == msgpack::type::STR) {
      const std::string_view s(o.via.str.ptr, o.via.str.size);
      if (s.substr(0, placeholder.size()) != placeholder) return false;
      add_array(b, kv, checked_relative(std::string(s.substr(placeholder.size())), b.checkpoint(), p), p, nullptr);
      return true;
    }
    if (o.type != msgpack::type::MAP) return false;
    const detail::mp::Reader r(b.checkpoint(), "checkpoint", p.str());
    const auto* driver = r.find(o, "driver");
    if (!driver || driver->type != msgpack::type::STR) return false;
    json spec;
    try {
      spec = to_json(o);
    } catch (const Error& e) {
      throw CorruptCheckpointError(b.checkpoint(), p.str(), std::string("TensorStore spec: ") + e.what());
    }
    if (spec["driver"] != "zarr")
      throw CorruptCheckpointError(b.checkpoint(), p.str(),
                                   "TensorStore driver " + detail::describe(spec["driver"]) + " is not supported");
    // The path is relative to the checkpoint whatever the driver says: t5x swaps file and
    // gcs drivers as the checkpoint moves, and replaces a gcs spec's bucket by the one the
    // checkpoint is read from.
    std::string path;
    if (spec.contains("kvstore") && spec["kvstore"].is_object()) {
      const json& kv = spec["kvstore"];
      if (kv.contains("driver") && kv["driver"] != "file" && kv["driver"] != "gfile" && kv["driver"] != "gcs")
        throw CorruptCheckpointError(b.checkpoint(), p.str(),
                                     "kvstore driver " + detail::describe(kv["driver"]) + " is not supported");
      if (kv.contains("path") && kv["path"].is_string()) path = kv["path"].get<std::string>();
    }
    if (path.empty() && spec.contains("path") && spec["path"].is_string()) path = spec["path"].get<std::string>();
    add_array(b, kv, checked_relative(path, b.checkpoint(), p), p, &spec);
    return true;
  };
}
}  // namespace detail::t5x

template <io::codec C = io::codec::gzip, int Level = 1>
struct basic_t5x {
  static constexpr const char* name = "t5x";
  // Arrays are written a zarr chunk at a time, from memory or streamed (ckpt::convert),
  // chunks sized to SaveOptions::max_memory; scalars (in msgpack) are never streamed.
  static constexpr bool writes_streams = true;

  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& opt) {
    write_part(s, loc, opt, detail::zarr::WritePart{});
  }

  // What one process writes when several write the checkpoint (zarr/write_part.hpp):
  // its regions of the arrays; the process with `part.metadata` the .zarray files and
  // the msgpack `checkpoint` (rank 0's scalars: every rank holds the same).
  static void write_part(const Snapshot& s, const std::filesystem::path& dir, const SaveOptions& opt,
                         const detail::zarr::WritePart& part) {
    write_part(s, storage::directory_location(dir, storage::Publish::in_place), opt, part);
  }
  static void write_part(const Snapshot& s, const storage::Location& loc, const SaveOptions& opt,
                         const detail::zarr::WritePart& part) {
    const std::string ckpt = loc.url;
    // t5x's specs on GCS: the gcs driver, its placeholder bucket, the path relative.
    const bool on_gcs = storage::url_scheme(loc.storage->root_url()) == "gs";
    const detail::interop::SnapNode root = detail::interop::snapshot_tree(s, ckpt);
    std::set<std::string> names;
    exec::ProgressTracker progress(opt.progress, detail::zarr::part_bytes(s, part), s.leaves.size(), ckpt);  // chunk by chunk
    auto hook = [&](detail::interop::PieceWriter& w, const SnapshotLeaf& l) -> bool {
      if (!is_numeric(l.data.type) || detail::zarr::array_shape(l).empty()) return false;  // scalars stay in msgpack, as in t5x
      std::string name;
      for (const auto& seg : l.path.segments()) name += (name.empty() ? "" : ".") + seg;
      if (!detail::zarr::safe_name(name) || name[0] == '.')
        throw Error(ckpt, l.path.str(), "path cannot name a t5x array directory");
      if (!names.insert(name).second)
        throw Error(ckpt, l.path.str(),
                    "two leaves map to the same t5x array directory " + quote_for_message(name));
      const auto i = static_cast<std::size_t>(&l - s.leaves.data());
      const detail::zarr::ArrayMeta m = detail::zarr::part_meta(part, i, l, C, Level, opt.max_memory, ckpt);
      detail::zarr::write_leaf_part(loc.child(name), m, part, i, l, &progress);
      progress.add(0, 1);
      const detail::zarr::json spec = {
          {"driver", "zarr"},
          {"dtype", std::string(dtype_name(l.data.type))},
          {"kvstore", on_gcs ? detail::zarr::json{{"bucket", detail::t5x::dummy_bucket}, {"driver", "gcs"}, {"path", name + "/"}}
                             : detail::zarr::json{{"driver", "file"}, {"path", name + "/"}}},
          {"metadata", {{"chunks", m.chunks}, {"compressor", detail::zarr::compressor_json(m)}, {"shape", m.shape}}}};
      w.json(spec);
      return true;
    };
    detail::interop::PieceWriter w;
    w.pk().pack_map(2);
    w.str("version"); w.pk().pack(detail::t5x::version);
    w.str("optimizer");
    if (root.leaf == nullptr && root.children.empty()) w.pk().pack_map(0);
    else detail::interop::write_tree(w, root, ckpt, hook);
    if (part.metadata) {
      const auto out = loc.storage->create(loc.key("checkpoint"));
      w.write_to(*out);
      out->close();
    }
    progress.finish();  // the scalars, in the msgpack file just written
  }

  static bool detect_in(const io::KvStore& kv) { return detail::flax::looks_like_msgpack_map(kv, "checkpoint"); }
  static bool detect(const std::filesystem::path& dir) { return detect_in(io::DirectoryKv(dir)); }

  // t5x writes `checkpoint` last, after every array: its presence means the step is whole.
  static bool is_committed(const std::filesystem::path& dir) { return detect(dir); }

  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& checkpoint) {
    return detail::flax::open_msgpack(kv, "checkpoint", checkpoint, "t5x", detail::t5x::special(kv), true);
  }
  static std::shared_ptr<const Index> open(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) throw Error(dir.string(), "", "no t5x checkpoint here (not a directory)");
    return open_in(std::make_shared<io::DirectoryKv>(dir), dir.string());
  }
};
using t5x = basic_t5x<>;
static_assert(format_policy<t5x>, CKPT_INTERNAL_CHECK("t5x must meet format_policy"));
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool t5x_registered = register_format<t5x>(20);
#endif

}  // namespace ckpt
