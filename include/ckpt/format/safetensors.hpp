// ckpt/format/safetensors.hpp — ckpt::safetensors: Hugging Face's safetensors files, both ways.
//
// A file is `u64le N`, N bytes of JSON header, then the tensors' bytes back to back:
//   {"__metadata__": {"k": "v"}, "encoder.layers.0.weight":
//    {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 128]}, ...}
// with offsets relative to the first byte after the header. Tree paths are tensor names
// split at '.' as Hugging Face names them (a name that is also a prefix, `a` beside
// `a.b`, at a.@value: format/interop/flat_names.hpp), written back to the same names.
// A model too large for one file is split
// into `model-00001-of-00003.safetensors`... and `model.safetensors.index.json`
// ({"metadata": {"total_size": n}, "weight_map": {name: file}}), as transformers does.
//
//   save<safetensors>("w.safetensors", state)   one file (atomically renamed into place)
//   save<safetensors>("dir", state)              dir/model.safetensors, or shards + index
//                                                when SaveOptions::max_shard_bytes says so
//   restore<T>("w.safetensors"), restore_tree("dir"), metadata(...), the CLI: detected.
//
// Reading checks what the reference implementation checks (safetensors/src/tensor.rs):
// the header at most 100 MB and inside the file, a JSON object, known dtypes, offsets
// that cover the data buffer exactly (in bounds, no overlap, no gap, in order), sizes
// equal to shape x dtype. Files are mapped: leaves are spans into the mapping (a lazy
// leaf reads nothing until touched; a restore is one copy).
// Written like the reference: tensors ordered by alignment (larger dtypes first) so that
// each starts on a multiple of its element size, the header padded with spaces to a
// multiple of 8, `__metadata__` holding {"format": "pt"} (transformers refuses files
// without it) and the saving type's name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/interop/flat_names.hpp>
#include <ckpt/io/untrusted.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/format/interop/weight_map.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/native/writer.hpp>  // write_piece
#include <ckpt/format/registry.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/io/mapped_file.hpp>
#include <ckpt/io/staging_dir.hpp>  // StagingDir, publish_file
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

namespace detail::safetensors {
namespace fs = std::filesystem;
using json = nlohmann::json;

// The reference's limit (MAX_HEADER_SIZE): a larger header is refused before parsing.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;
inline constexpr std::size_t max_rank = 64;
inline constexpr std::uint64_t max_index_json_bytes = 64u << 20;
inline constexpr const char* single_file = "model.safetensors";
inline constexpr const char* index_file = "model.safetensors.index.json";

// safetensors' dtype names (the Dtype enum of safetensors/src/tensor.rs): the
// `safetensors` column of the dtype table (leaf/dtype.hpp).
inline std::optional<std::string_view> name_of(dtype d) {
  if (info(d).safetensors.empty()) return std::nullopt;
  return info(d).safetensors;
}
inline std::optional<dtype> dtype_of(std::string_view s) {
  for (const auto& e : dtype_table)
    if (!e.safetensors.empty() && e.safetensors == s) return e.type;
  return std::nullopt;
}

// "a.b.0.c" for the path [a, b, 0, c], and a.@value for "a" beside "a.b"
// (format/interop/flat_names.hpp); a segment holding '.' has no name.
inline std::string tensor_name(const Path& p, const std::string& checkpoint) {
  return detail::interop::flat_name_or_throw(p, '.', checkpoint, "safetensors");
}

// A tensor name as messages show it (as a tree path): untrusted, so made printable and
// cut short (detail/quote.hpp).
inline std::string shown(const std::string& name) { return ckpt::detail::safe_text(name, 200); }

// ---- writing -----------------------------------------------------------------

// Leaves in file order: larger elements first (each tensor then starts aligned to its
// element size), stable otherwise; strings and empty optionals have no safetensors dtype.
inline std::vector<const SnapshotLeaf*> ordered_leaves(const Snapshot& snap, const std::string& checkpoint) {
  std::vector<const SnapshotLeaf*> v;
  v.reserve(snap.leaves.size());
  for (const auto& l : snap.leaves) {
    if (!name_of(l.data.type))
      throw Error(checkpoint, l.path.str(),
                  "safetensors stores numeric tensors only; a " + std::string(dtype_name(l.data.type)) +
                      " leaf has no safetensors dtype (drop it with SaveOptions::transform)");
    v.push_back(&l);
  }
  std::stable_sort(v.begin(), v.end(), [](const SnapshotLeaf* a, const SnapshotLeaf* b) {
    return dtype_size(a->data.type) > dtype_size(b->data.type);
  });
  return v;
}

inline std::map<std::string, std::string> default_metadata(const Snapshot& snap) {
  std::map<std::string, std::string> m{{"format", "pt"}};
  if (!snap.type_name.empty()) m["ckpt.type"] = snap.type_name;
  return m;
}

// Writes one file holding leaves (already ordered) through `out`, and closes it (a
// file: written as the pieces come, fsynced at close; an object store: uploaded).
// The leaves' own memory goes out as it is; streamed leaves (LeafStream) are read
// through one buffer of stream_buffer bytes. progress (SaveOptions::progress), when
// given, hears of every piece.
inline void write_file(storage::ObjectWriter& out, const std::vector<const SnapshotLeaf*>& leaves,
                       const std::map<std::string, std::string>& metadata, const std::string& checkpoint,
                       std::size_t stream_buffer = std::size_t{16} << 20, exec::ProgressTracker* progress = nullptr) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::uint64_t at = 0;
  std::uint64_t total = 0;
  for (const SnapshotLeaf* l : leaves) {
    const std::string name = tensor_name(l->path, checkpoint);
    if (h.contains(name)) throw Error(checkpoint, l->path.str(), "two leaves have the tensor name " + quote_for_message(name));
    const std::uint64_t n = l->data.size();
    h[name] = {{"dtype", *name_of(l->data.type)}, {"shape", l->data.shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  total = at;
  std::string header;
  try {
    header = h.dump();
  } catch (const json::exception&) {
    throw Error(checkpoint, "", "a tensor name or metadata value is not valid UTF-8, which the JSON header needs");
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // the data buffer starts 8-aligned
  std::byte len[8];
  const std::uint64_t hl = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>((hl >> (8 * i)) & 0xff);
  out.expect_size(8 + hl + total);
  // (the header and the leaves' memory stay valid until out is closed, below)
  namespace nd = detail::native;
  std::vector<storage::ConstBytes> batch{storage::ConstBytes(len, 8), std::as_bytes(std::span(header))};
  std::size_t batch_bytes = 8 + header.size();
  auto flush_batch = [&](bool stable) {
    out.append(batch, stable);
    batch.clear();
    batch_bytes = 0;
  };
  std::vector<std::byte> buffer;  // for streamed leaves, allocated at the first
  for (const SnapshotLeaf* l : leaves) {
    if (const auto& stream = l->data.stream) {
      if (!batch.empty()) flush_batch(true);  // what is queued goes out before the buffer is reused
      if (buffer.empty()) buffer.resize(std::max<std::size_t>(stream_buffer, 4096));
      const std::uint64_t length = stream->size();
      for (std::uint64_t done = 0; done < length;) {
        const auto part = std::span(buffer).first(static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - done)));
        stream->read(done, part);
        batch.push_back(part);
        flush_batch(false);  // the buffer is reused: a writer that keeps it copies it
        done += part.size();
        if (progress) progress->add(part.size(), 0);
      }
      if (progress) progress->add(0, 1);
      continue;
    }
    const auto bytes = l->data.view;
    for (std::size_t done = 0; done < bytes.size(); done += nd::write_piece) {
      const std::size_t n = std::min(nd::write_piece, bytes.size() - done);
      batch.push_back(bytes.subspan(done, n));
      batch_bytes += n;
      if (batch.size() >= 512 || batch_bytes >= nd::write_piece) flush_batch(true);
      if (progress) progress->add(n, 0);
    }
    if (progress) progress->add(0, 1);
  }
  if (!batch.empty()) flush_batch(true);
  out.close();
}

inline std::string shard_name(std::size_t i, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// Writes under loc one model.safetensors, or shards of at most max_shard_bytes of
// tensor data each (a larger tensor gets a shard of its own) and the index.
inline void write_dir(const Snapshot& snap, const storage::Location& loc, std::uint64_t max_shard_bytes,
                      const std::map<std::string, std::string>& metadata, const std::string& checkpoint,
                      std::size_t stream_buffer = std::size_t{16} << 20, exec::ProgressTracker* progress = nullptr) {
  const auto leaves = ordered_leaves(snap, checkpoint);
  if (max_shard_bytes == 0 || snap.total_bytes() <= max_shard_bytes) {
    write_file(*loc.storage->create(loc.key(single_file)), leaves, metadata, checkpoint, stream_buffer, progress);
    return;
  }
  std::vector<std::vector<const SnapshotLeaf*>> shards(1);
  std::uint64_t in_shard = 0;
  for (const SnapshotLeaf* l : leaves) {
    const std::uint64_t n = l->data.size();
    if (!shards.back().empty() && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(l);
    in_shard += n;
  }
  json weight_map = json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string fname = shard_name(i, shards.size());
    write_file(*loc.storage->create(loc.key(fname)), shards[i], metadata, checkpoint, stream_buffer, progress);
    for (const SnapshotLeaf* l : shards[i]) weight_map[tensor_name(l->path, checkpoint)] = fname;
  }
  const json index = {{"metadata", {{"total_size", snap.total_bytes()}}}, {"weight_map", weight_map}};
  std::string text;
  try {
    text = index.dump(2) + "\n";
  } catch (const json::exception&) {
    throw Error(checkpoint, "", "a tensor name is not valid UTF-8, which the JSON index needs");
  }
  loc.storage->put(loc.key(index_file), std::as_bytes(std::span(text.data(), text.size())));
}

// ---- reading -----------------------------------------------------------------

inline std::uint64_t header_length(std::span<const std::byte> b) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(b[static_cast<std::size_t>(i)]);
  return n;
}

// A file whose first 8 bytes give a header length that fits and whose header starts '{'.
inline bool looks_like_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return false;
  try {
    io::File f = io::File::open_read(p);
    const std::uint64_t size = f.size(p);
    if (size < 10) return false;
    std::byte b[9];
    io::pread_exact(f, b, 0, p);
    const std::uint64_t n = header_length(b);
    return n >= 2 && n <= max_header_bytes && n <= size - 8 && b[8] == std::byte{'{'};
  } catch (const Error&) {
    return false;
  }
}

struct ParsedFile {
  std::shared_ptr<const io::MappedFile> map;  // a local file, mapped
  std::shared_ptr<const io::KvStore> kv;      // or the store and key its tensors are read from by range
  std::string key;
  std::map<std::string, std::string> metadata;
  struct Tensor {
    std::string name;
    dtype type;
    Shape shape;
    std::uint64_t begin, end;  // absolute offsets in the file
  };
  std::vector<Tensor> tensors;
};

// Checks the first 8 bytes' header length n against the file's size; fail(path, what) throws.
template <class Fail>
void check_header_length(std::uint64_t n, std::uint64_t file_size, const Fail& fail) {
  if (n > max_header_bytes) fail("", "header length " + std::to_string(n) + " is over the 100 MB limit");
  if (n > file_size - 8)
    fail("", "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file_size) +
                 " bytes)");
}

// Validates the header (the n bytes of JSON after the length) of a file of file_size
// bytes into out's metadata and tensors.
inline void parse_header(ParsedFile& out, std::span<const std::byte> text, std::uint64_t file_size,
                         const std::string& where, const std::string& checkpoint) {
  auto fail = [&](const std::string& path, const std::string& what) -> void {
    throw CorruptCheckpointError(checkpoint, path, where + ": " + what);
  };
  const std::uint64_t n = text.size();
  if (n == 0 || text[0] != std::byte{'{'}) fail("", "header is not a JSON object");
  // nesting bounded, parse errors quoted safely (io/untrusted.hpp)
  const json h = ckpt::detail::parse_json({reinterpret_cast<const char*>(text.data()), text.size()}, checkpoint, "",
                                          where + ": header");
  if (!h.is_object()) fail("", "header is not a JSON object");
  const std::uint64_t data_start = 8 + n;
  const std::uint64_t data_size = file_size - data_start;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("", "__metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail("", "__metadata__ value of " + quote_for_message(m.key()) + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string name_in_message = detail::safetensors::shown(name);
    auto fail_t = [&](const std::string& what) { fail(name_in_message, what); };
    if (!v.is_object()) fail_t("tensor " + quote_for_message(name) + " is not an object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail_t("tensor " + quote_for_message(name) + " has no dtype string");
    const std::string& dts = dt->get_ref<const std::string&>();
    const auto type = dtype_of(dts);
    if (!type) fail_t("unknown dtype " + quote_for_message(dts.substr(0, 40)));
    if (sh == v.end() || !sh->is_array() || sh->size() > max_rank) fail_t("shape is not a list of at most 64 sizes");
    Shape shape;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) fail_t("shape holds something other than a non-negative integer");
      const auto u = d.get<std::uint64_t>();
      if (u > (std::uint64_t{1} << 62)) fail_t("dimension " + std::to_string(u) + " is implausibly large");
      shape.push_back(static_cast<std::int64_t>(u));
    }
    const std::int64_t count = element_count(shape);
    if (count < 0) fail_t("shape " + shape_str(shape) + " overflows");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail_t("data_offsets is not [begin, end]");
    const auto b = (*off)[0].get<std::uint64_t>(), e = (*off)[1].get<std::uint64_t>();
    if (b > e) fail_t("data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] end before they begin");
    if (e > data_size)
      fail_t("data_offsets end at " + std::to_string(e) + ", past the data (" + std::to_string(data_size) + " bytes)");
    const std::uint64_t want = static_cast<std::uint64_t>(count);
    if (want > (std::uint64_t{1} << 62) / dtype_size(*type) || want * dtype_size(*type) != e - b)
      fail_t("shape " + shape_str(shape) + " of " + dts + " needs " + std::to_string(want) + " elements but " +
                     std::to_string(e - b) + " bytes are stored");
    out.tensors.push_back({name, *type, std::move(shape), data_start + b, data_start + e});
  }
  // The buffer must be covered exactly: sorted by offset, each tensor begins where the
  // previous ended and the last ends at the end of the file.
  std::vector<const ParsedFile::Tensor*> by_offset;
  for (const auto& t : out.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t at = data_start;
  for (const auto* t : by_offset) {
    if (t->begin < at) fail(shown(t->name), "tensor overlaps the one before it in the data buffer");
    if (t->begin > at) fail(shown(t->name), "gap of " + std::to_string(t->begin - at) + " bytes before the tensor's data");
    at = t->end;
  }
  if (at != file_size)
    fail("", std::to_string(file_size - at) + " bytes after the last tensor are covered by no tensor");
}


// Maps and validates one local file (which may be a symbolic link: a Hugging Face cache
// links its snapshots to blobs); `checkpoint` names it in messages.
inline ParsedFile parse_file(const fs::path& file, const std::string& checkpoint) {
  ParsedFile out;
  out.map = io::MappedFile::open(file);
  const auto all = out.map->bytes();
  const std::string where = file.filename().string();
  auto fail = [&](const std::string& path, const std::string& what) -> void {
    throw CorruptCheckpointError(checkpoint, path, where + ": " + what);
  };
  if (all.size() < 8) fail("", "file is " + std::to_string(all.size()) + " bytes, too short for a safetensors header");
  const std::uint64_t n = header_length(all.first(8));
  check_header_length(n, all.size(), fail);
  parse_header(out, all.subspan(8, static_cast<std::size_t>(n)), all.size(), where, checkpoint);
  return out;
}

// Reads and validates the header of the file under key of a store (an object on S3 or
// in memory): two ranged reads, the length and the JSON; the tensors are read later, each
// by its own range.
inline ParsedFile parse_object(const std::shared_ptr<const io::KvStore>& kv, const std::string& key,
                               const std::string& checkpoint) {
  ParsedFile out;
  out.kv = kv;
  out.key = key;
  const std::string where = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
  auto fail = [&](const std::string& path, const std::string& what) -> void {
    throw CorruptCheckpointError(checkpoint, path, where + ": " + what);
  };
  const auto size = kv->size(key);
  if (!size) throw CorruptCheckpointError(checkpoint, "", where + " is missing");
  if (*size < 8) fail("", "file is " + std::to_string(*size) + " bytes, too short for a safetensors header");
  std::byte len[8];
  kv->read(key, 0, len);
  const std::uint64_t n = header_length(len);
  check_header_length(n, *size, fail);
  std::vector<std::byte> text(static_cast<std::size_t>(n));
  kv->read(key, 8, text);
  parse_header(out, text, *size, where, checkpoint);
  return out;
}

// paths: of every tensor name of the checkpoint (of all its files).
inline void add_file(detail::interop::IndexBuilder& b, const ParsedFile& f, const detail::interop::FlatNames& paths,
                     const std::string* expected_file = nullptr,
                     const std::map<std::string, std::string>* weight_map = nullptr) {
  if (f.map) b.keep(f.map);
  const auto all = f.map ? f.map->bytes() : std::span<const std::byte>();
  for (const auto& t : f.tensors) {
    if (weight_map) {
      const auto it = weight_map->find(t.name);
      if (it == weight_map->end() || it->second != *expected_file)
        throw CorruptCheckpointError(b.checkpoint(), shown(t.name),
                                     *expected_file + " holds tensor " + quote_for_message(t.name) +
                                         ", which the weight_map of " + index_file + " puts elsewhere or nowhere");
    }
    if (!f.map) {
      const auto kv = f.kv;
      const std::string key = f.key;
      const std::uint64_t begin = t.begin;
      b.add_loaded(paths.path(t.name), t.type, t.shape, key, "none",
                   [kv, key, begin](std::span<std::byte> dst, const detail::zarr::Fail&) { kv->read(key, begin, dst); }, {},
                   [kv, key, begin](std::uint64_t at, std::span<std::byte> dst) { kv->read(key, begin + at, dst); });
      continue;
    }
    const auto bytes = all.subspan(static_cast<std::size_t>(t.begin), static_cast<std::size_t>(t.end - t.begin));
    b.add_bytes(paths.path(t.name), t.type, t.shape, {bytes});
  }
}

inline IndexInfo info_from(const std::map<std::string, std::string>& metadata) {
  IndexInfo info;
  info.format = "safetensors";
  if (const auto it = metadata.find("ckpt.type"); it != metadata.end()) info.type_name = it->second;
  return info;
}

// A sharded checkpoint from its index's bytes; open_shard(file name) parses a shard,
// nullopt when it is missing.
template <class OpenShard>
std::shared_ptr<const Index> open_sharded_with(std::span<const std::byte> raw, const std::string& index_name,
                                               const std::string& checkpoint, OpenShard open_shard) {
  const detail::interop::WeightMap map = detail::interop::parse_weight_map(raw, index_name, checkpoint);
  const auto& weight_map = map.file_of;
  const auto& files = map.files;
  detail::interop::IndexBuilder b(checkpoint);
  std::vector<std::string_view> names;  // a shard's tensors not in the weight_map are refused
  for (const auto& kv : weight_map) names.emplace_back(kv.first);
  const detail::interop::FlatNames paths(names, '.');
  std::map<std::string, std::string> metadata;
  std::set<std::string> found;
  for (const auto& f : files) {
    const std::optional<ParsedFile> shard = open_shard(f);
    if (!shard)
      throw CorruptCheckpointError(checkpoint, "", "shard " + quote_for_message(f) + " named by the weight_map is missing");
    const ParsedFile& pf = *shard;
    if (pf.map) b.pieces_are_mapped();
    if (metadata.empty()) metadata = pf.metadata;
    add_file(b, pf, paths, &f, &weight_map);
    for (const auto& t : pf.tensors) found.insert(t.name);
  }
  for (const auto& [name, file] : weight_map)
    if (!found.count(name))
      throw CorruptCheckpointError(checkpoint, shown(name),
                                   "the weight_map puts tensor " + quote_for_message(name) + " in " + quote_for_message(file) +
                                       ", which does not hold it");
  IndexInfo info = info_from(metadata);
  info.format = "safetensors-sharded";
  return b.build(std::move(info));
}

inline std::shared_ptr<const Index> open_sharded(const fs::path& index_path, const std::string& checkpoint) {
  const fs::path dir = index_path.parent_path().empty() ? fs::path(".") : index_path.parent_path();
  const auto raw = io::read_file(index_path, max_index_json_bytes);
  return open_sharded_with(raw, index_path.filename().string(), checkpoint, [&](const std::string& f) -> std::optional<ParsedFile> {
    if (!fs::exists(dir / f)) return std::nullopt;
    return parse_file(dir / f, checkpoint);
  });
}

// A checkpoint directory's files read through its store, each tensor by its own range.
inline std::shared_ptr<const Index> open_store(const std::shared_ptr<const io::KvStore>& kv, const std::string& checkpoint) {
  if (const auto raw = kv->get(index_file, max_index_json_bytes))
    return open_sharded_with(*raw, index_file, checkpoint, [&](const std::string& f) -> std::optional<ParsedFile> {
      if (!kv->contains(f)) return std::nullopt;
      return parse_object(kv, f, checkpoint);
    });
  const ParsedFile pf = parse_object(kv, single_file, checkpoint);
  detail::interop::IndexBuilder b(checkpoint);
  std::vector<std::string_view> names;
  for (const auto& t : pf.tensors) names.emplace_back(t.name);
  add_file(b, pf, detail::interop::FlatNames(names, '.'));
  return b.build(info_from(pf.metadata));
}

// The first 9 bytes of the value under key: a header length that fits, then '{'.
inline bool looks_like_object(const io::KvStore& kv, const std::string& key) {
  try {
    const auto size = kv.size(key);
    if (!size || *size < 10) return false;
    std::byte b[9];
    kv.read(key, 0, b);
    const std::uint64_t n = header_length(b);
    return n >= 2 && n <= max_header_bytes && n <= *size - 8 && b[8] == std::byte{'{'};
  } catch (const Error&) {
    return false;
  }
}

inline std::shared_ptr<const Index> open_file(const fs::path& file, const std::string& checkpoint) {
  const ParsedFile pf = parse_file(file, checkpoint);
  detail::interop::IndexBuilder b(checkpoint);
  b.pieces_are_mapped();
  std::vector<std::string_view> names;
  for (const auto& t : pf.tensors) names.emplace_back(t.name);
  add_file(b, pf, detail::interop::FlatNames(names, '.'));
  return b.build(info_from(pf.metadata));
}

inline bool is_index_json(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.size() > 24 && n.ends_with(".safetensors.index.json");
}

}  // namespace detail::safetensors

struct safetensors {
  static constexpr const char* name = "safetensors";

  // Writes streamed leaves (ckpt::convert) through a buffer within o.max_memory.
  static constexpr bool writes_streams = true;

  // A checkpoint directory or prefix (the manager's step, save<safetensors>("dir", ...),
  // an s3:// or mem:// URL).
  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& o) {
    exec::ProgressTracker progress(o.progress, s.total_bytes(), s.leaves.size(), loc.url);
    detail::safetensors::write_dir(s, loc, o.max_shard_bytes, detail::safetensors::default_metadata(s), loc.url,
                                   detail::native::stream_buffer_bytes(o, 1), &progress);
    progress.finish();
  }

  // save<safetensors>(path, state): a path ending in .safetensors is the file itself
  // (renamed into place whole); any other path is a directory as write() fills it.
  static void save_file(const std::filesystem::path& path, const Snapshot& s, const SaveOptions& o) {
    if (path.extension() == ".safetensors") {
      const auto leaves = detail::safetensors::ordered_leaves(s, path.string());
      exec::ProgressTracker progress(o.progress, s.total_bytes(), s.leaves.size(), path.string());
      io::publish_file(path, o.force, [&](const std::filesystem::path& tmp) {
        detail::safetensors::write_file(*storage::file_writer(tmp), leaves, detail::safetensors::default_metadata(s),
                                        path.string(), detail::native::stream_buffer_bytes(o, 1), &progress);
      });
      progress.finish();
      return;
    }
    std::error_code ec;
    if (!o.force && std::filesystem::exists(path, ec))
      throw Error(path.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
    io::StagingDir staging(path);
    write_to(s, storage::directory_location(staging.path(), storage::Publish::in_place), o);
    staging.commit(o.force);
  }

  // One file with the caller's __metadata__ (string to string) instead of the default.
  static void save_file_with_metadata(const std::filesystem::path& file, const Snapshot& s,
                                      const std::map<std::string, std::string>& metadata, bool force = false) {
    const auto leaves = detail::safetensors::ordered_leaves(s, file.string());
    io::publish_file(file, force, [&](const std::filesystem::path& tmp) {
      detail::safetensors::write_file(*storage::file_writer(tmp), leaves, metadata, file.string());
    });
  }

  // A checkpoint directory (a prefix of objects) holding model.safetensors or the index.
  static bool detect_in(const io::KvStore& kv) {
    namespace sd = detail::safetensors;
    return kv.contains(sd::index_file) || sd::looks_like_object(kv, sd::single_file);
  }
  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& checkpoint) {
    return detail::safetensors::open_store(kv, checkpoint);
  }

  // A .safetensors file, a *.safetensors.index.json, or a directory holding either. Local
  // files are mapped, and followed when they are links (a Hugging Face cache's are).
  static bool detect(const std::filesystem::path& p) {
    namespace sd = detail::safetensors;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec))
      return std::filesystem::is_regular_file(p / sd::index_file, ec) || sd::looks_like_file(p / sd::single_file);
    if (sd::is_index_json(p)) return std::filesystem::is_regular_file(p, ec);
    return sd::looks_like_file(p);
  }
  // Files are renamed into place whole, the index last.
  static bool is_committed(const std::filesystem::path& p) { return detect(p); }

  static std::shared_ptr<const Index> open(const std::filesystem::path& p) {
    namespace sd = detail::safetensors;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      if (std::filesystem::is_regular_file(p / sd::index_file, ec)) return sd::open_sharded(p / sd::index_file, p.string());
      return sd::open_file(p / sd::single_file, p.string());
    }
    if (sd::is_index_json(p)) return sd::open_sharded(p, p.string());
    return sd::open_file(p, p.string());
  }

  // The __metadata__ of a file (or of the first shard of a sharded directory).
  static std::map<std::string, std::string> metadata(const std::filesystem::path& p) {
    namespace sd = detail::safetensors;
    std::error_code ec;
    std::filesystem::path file = p;
    if (std::filesystem::is_directory(p, ec)) {
      file = p / sd::single_file;
      if (std::filesystem::is_regular_file(p / sd::index_file, ec)) {
        const auto idx = open(p);
        if (idx->entries().empty()) return {};
        std::vector<std::filesystem::path> shards;
        for (const auto& e : std::filesystem::directory_iterator(p))
          if (e.path().extension() == ".safetensors") shards.push_back(e.path());
        if (shards.empty()) return {};
        return sd::parse_file(*std::min_element(shards.begin(), shards.end()), p.string()).metadata;
      }
    }
    return sd::parse_file(file, p.string()).metadata;
  }
};
static_assert(format_policy<safetensors>, CKPT_INTERNAL_CHECK("safetensors must meet format_policy"));

// Before Orbax (10): a manager's step directory holds _CHECKPOINT_METADATA, which Orbax's
// detection takes for its own; model.safetensors or its index is unambiguous.
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool safetensors_registered = register_format<safetensors>(5);
#endif
}  // namespace ckpt
