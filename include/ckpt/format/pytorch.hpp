// ckpt/format/pytorch.hpp — ckpt::pytorch: the files of torch.save (.pt, .pth, pytorch_model.bin), both ways.
//
// A torch.save file (PyTorch 1.6 and later) is a zip of stored entries (format/pytorch/zip.hpp):
//   archive/data.pkl      a pickle of the saved object (format/pytorch/pickle.hpp)
//   archive/data/<key>    the bytes of each storage the pickle names
//   archive/version       "3", archive/byteorder "little"
// (older PyTorch names the directory after the file: model/data.pkl; any one name is read).
// The pickle is read as data, never executed: only what torch.load(weights_only=True)
// accepts, anything else refused naming the global it found.
//
// Tree paths: a dict is a node, its string keys split at '.' as state_dict names are
// (format/interop/flat_names.hpp: "layers.0.weight" is layers/0/weight, as safetensors
// names are), its integer keys (an optimizer's state) in decimal; a list or tuple is a
// node with children 0, 1...; a tensor is a leaf with its own values, a view (storage
// offset, size, stride) read as the values it shows; a Python int, float, bool, str or
// None is a scalar leaf of int64, float64, bool, string or none; a dtype (torch.float32)
// is a string leaf. Empty dicts and lists hold no leaves and are not in the tree.
//
// Writing (save<pytorch>, `ckpt convert --to pytorch`) makes what PyTorch's own code
// loads: a tree whose leaves are all tensors is one state_dict (an OrderedDict of dotted
// names, as nn.Module.state_dict() makes, which load_state_dict accepts); otherwise the
// root is a dict of its children, and below it a subtree of tensors is a state_dict, a
// node with a child `param_groups` an optimizer's state_dict ({"state": {0: {...}},
// "param_groups": [{"lr": 0.001, "params": [0, 1]}]}), a node whose children are 0..n-1
// a list, and a scalar int64, float64 or bool leaf a Python number (so
// {"model", "optimizer", "epoch"} comes back as it was saved). Leaves whose bytes are
// the same memory (same address and length, same dtype: tied weights) share one
// storage, as torch.save writes them.
//
// Hugging Face's sharded pytorch_model.bin.index.json ({"weight_map": {name: file}}) is
// read as one checkpoint, like safetensors' index. The legacy format of PyTorch before
// 1.6 (a bare pickle, torch.save(..., _use_new_zipfile_serialization=False)) is
// recognised and refused: load it in Python and save it again.
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
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/interop/flat_names.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/format/native/writer.hpp>  // write_piece
#include <ckpt/format/pytorch/pickle.hpp>
#include <ckpt/format/pytorch/zip.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/io/mapped_file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/io/untrusted.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

namespace detail::pytorch {
namespace fs = std::filesystem;
namespace pk = detail::pytorch::pickle;
namespace pz = detail::pytorch::zip;
using json = nlohmann::json;

inline constexpr const char* single_file = "pytorch_model.bin";
inline constexpr const char* index_file = "pytorch_model.bin.index.json";
inline constexpr std::uint64_t max_index_json_bytes = 64u << 20;
inline constexpr std::size_t max_depth = 100;
inline constexpr std::size_t max_shards = 100'000;

// An archive's bytes: a local file mapped, or an object read by range.
struct Source {
  std::shared_ptr<const io::MappedFile> map;
  std::shared_ptr<const io::KvStore> kv;
  std::string key;
  std::uint64_t size = 0;
  std::string name;  // the file's name, for messages

  pz::ReadAt reader(const std::string& checkpoint) const {
    if (map) {
      auto m = map;
      auto c = checkpoint;
      auto n = name;
      return [m, c, n](std::uint64_t at, std::span<std::byte> dst) {
        const auto all = m->bytes();
        if (at > all.size() || dst.size() > all.size() - at) throw CorruptCheckpointError(c, "", n + ": read past the end of the file");
        if (dst.empty()) return;  // (dst.data() may be null, which memcpy may not be given)
        std::memcpy(dst.data(), all.data() + at, dst.size());
      };
    }
    auto k = kv;
    auto key_ = key;
    return [k, key_](std::uint64_t at, std::span<std::byte> dst) { k->read(key_, at, dst); };
  }
};

inline Source local_source(const fs::path& file) {
  Source s;
  s.map = io::MappedFile::open(file);
  s.size = s.map->bytes().size();
  s.name = file.filename().string();
  return s;
}
inline Source object_source(const std::shared_ptr<const io::KvStore>& kv, const std::string& key, const std::string& checkpoint) {
  Source s;
  s.kv = kv;
  s.key = key;
  const auto size = kv->size(key);
  if (!size) throw CorruptCheckpointError(checkpoint, "", key + " is missing");
  s.size = *size;
  s.name = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
  return s;
}

// A legacy (pre-1.6) torch.save file starts with a pickle: PROTO 2 and the magic number.
inline bool looks_legacy(std::span<const std::byte> head) {
  return head.size() >= 2 && head[0] == std::byte{0x80} && static_cast<std::uint8_t>(head[1]) <= 5 &&
         static_cast<std::uint8_t>(head[1]) >= 2;
}
inline bool looks_zip(std::span<const std::byte> head) {
  return head.size() >= 4 && head[0] == std::byte{'P'} && head[1] == std::byte{'K'} && head[2] == std::byte{3} &&
         head[3] == std::byte{4};
}

// One parsed torch.save archive.
struct Opened {
  Source src;
  std::shared_ptr<pz::Archive> zip;
  std::string prefix;  // "archive/"
  pk::Parsed parsed;
};

inline Opened open_archive(Source src, const std::string& checkpoint) {
  Opened o;
  o.src = std::move(src);
  const std::string& where = o.src.name;
  auto fail = [&](const std::string& w) -> void { throw CorruptCheckpointError(checkpoint, "", where + ": " + w); };
  std::byte head[4] = {};
  if (o.src.size >= 4) o.src.reader(checkpoint)(0, head);
  if (!looks_zip(head)) {
    if (looks_legacy(head))
      throw Error(checkpoint, "",
                  where + " is in the legacy format of PyTorch before 1.6 (a bare pickle), which ckpt does not read: "
                          "load it in Python and torch.save it again");
    fail("is not a zip archive (torch.save writes one since PyTorch 1.6)");
  }
  o.zip = std::make_shared<pz::Archive>(o.src.reader(checkpoint), o.src.size, checkpoint, where);
  const pz::Entry* pkl = nullptr;
  for (const auto& e : o.zip->entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      pkl = &e;
      o.prefix = e.name.substr(0, slash + 1);
      break;
    }
  }
  if (!pkl) {
    for (const auto& e : o.zip->entries())
      if (e.name.ends_with("/constants.pkl") || e.name.find("/code/") != std::string::npos)
        throw Error(checkpoint, "", where + " is a TorchScript archive (torch.jit.save), not a torch.save file");
    fail("is a zip archive without <name>/data.pkl, so not a torch.save file");
  }
  const auto bytes = o.zip->read(*pkl, pk::max_pickle_bytes);
  o.parsed = pk::Unpickler(bytes, checkpoint, where + " " + pkl->name).parse();
  return o;
}

// Turns parsed archives into index entries.
class Loader {
 public:
  Loader(interop::IndexBuilder& b, const std::string& checkpoint) : b_(b), checkpoint_(checkpoint) {
    b_.keep(scalars_);
  }

  // Every leaf of the archive's object; top_names: when the root is a dict of tensors
  // named as in a sharded index, the names its weight_map gives (FlatNames of them all).
  void add(const Opened& o, const interop::FlatNames* top_names = nullptr) {
    o_ = &o;
    visits_ = 0;
    storage_at_.clear();  // storage keys are the archive's own
    if (o.src.map) {
      b_.keep(o.src.map);
      b_.pieces_are_mapped();
    }
    std::vector<std::string> segs;
    if (top_names) {
      const pk::Obj* root = o.parsed.root;
      if (root->kind != pk::Obj::Kind::dict) fail({}, "a shard's object is not a dict of tensors");
      for (std::size_t i = 0; i + 1 < root->items.size(); i += 2) {
        if (root->items[i]->kind != pk::Obj::Kind::string) fail({}, "a shard's dict has a key that is not a string");
        names_.push_back(root->items[i]->s);
        segs = top_names->path(root->items[i]->s).segments();
        walk(root->items[i + 1], segs, 1);
      }
      return;
    }
    walk(o.parsed.root, segs, 0);
  }
  // The string keys of the shards' root dicts, as add() met them.
  const std::vector<std::string>& top_names() const { return names_; }

 private:
  [[noreturn]] void fail(const std::vector<std::string>& segs, const std::string& what) const {
    throw CorruptCheckpointError(checkpoint_, Path(segs).str(), o_->src.name + ": " + what);
  }

  std::span<const std::byte> keep_bytes(const void* p, std::size_t n) {
    const std::string& s = scalars_->emplace_back(static_cast<const char*>(p), n);
    return std::as_bytes(std::span(s.data(), s.size()));
  }

  void leaf_path_check(const std::vector<std::string>& segs) {
    const std::string s = Path(segs).str();
    if (!seen_.insert(s).second) fail(segs, "two objects have this path (keys that name the same path)");
  }

  void walk(const pk::Obj* o, std::vector<std::string>& segs, std::size_t depth) {
    using K = pk::Obj::Kind;
    if (depth > max_depth) fail(segs, "objects nested deeper than " + std::to_string(max_depth) + " levels (or a container inside itself)");
    if (++visits_ > 2 * o_->parsed.arena.size() + 16)
      fail(segs, "the pickle refers to its shared objects more often than its size allows");
    switch (o->kind) {
      case K::dict: {
        std::vector<std::string_view> names;
        for (std::size_t i = 0; i + 1 < o->items.size(); i += 2)
          if (o->items[i]->kind == K::string) names.emplace_back(o->items[i]->s);
        const interop::FlatNames flat(names, '.');
        for (std::size_t i = 0; i + 1 < o->items.size(); i += 2) {
          const pk::Obj* k = o->items[i];
          const std::size_t n = segs.size();
          if (k->kind == K::string) {
            const Path kp = flat.path(k->s);  // (held: segments() of a temporary would dangle)
            for (const auto& s : kp.segments()) segs.push_back(s);
          } else if (k->kind == K::integer) {
            segs.push_back(std::to_string(k->i));
          } else {
            fail(segs, "a dict key that is neither a string nor an integer");
          }
          walk(o->items[i + 1], segs, depth + 1);
          segs.resize(n);
        }
        return;
      }
      case K::list:
      case K::tuple:
        for (std::size_t i = 0; i < o->items.size(); ++i) {
          segs.push_back(std::to_string(i));
          walk(o->items[i], segs, depth + 1);
          segs.pop_back();
        }
        return;
      case K::tensor: return tensor(o_->parsed.tensors[static_cast<std::size_t>(o->i)], segs);
      case K::integer:
      case K::boolean:
      case K::floating:
      case K::none:
      case K::string:
      case K::bytes:
      case K::global: return scalar(o, segs);
      case K::storage: fail(segs, "a bare storage, not a tensor");
    }
  }

  void scalar(const pk::Obj* o, const std::vector<std::string>& segs) {
    using K = pk::Obj::Kind;
    leaf_path_check(segs);
    Path p(segs);
    switch (o->kind) {
      case K::integer: b_.add_bytes(p, dtype::int64, {}, {keep_bytes(&o->i, 8)}); break;
      case K::boolean: {
        const bool v = o->i != 0;
        b_.add_bytes(p, dtype::bool_, {}, {keep_bytes(&v, 1)});
        break;
      }
      case K::floating: b_.add_bytes(p, dtype::float64, {}, {keep_bytes(&o->f, 8)}); break;
      case K::none: b_.add_none(p); break;
      case K::string: b_.add_string(p, o->s); break;
      case K::bytes: {
        const auto bytes = keep_bytes(o->s.data(), o->s.size());
        b_.add_bytes(p, dtype::uint8, {static_cast<std::int64_t>(o->s.size())}, {bytes});
        break;
      }
      case K::global:
        if (!o->s.starts_with("torch.") || o->s.ends_with("Storage") || o->s == "torch.Size")
          fail(segs, "the global " + ckpt::detail::safe_text(o->s, 200) + " as a value");
        b_.add_string(p, o->s);  // a dtype: "torch.float32"
        break;
      default: break;
    }
  }

  // Where the storage's bytes begin in the archive, checked against its numel.
  std::uint64_t storage_at(const pk::Storage& s, const std::vector<std::string>& segs) {
    if (const auto it = storage_at_.find(s.key); it != storage_at_.end()) return it->second;
    const pz::Entry* e = o_->zip->find(o_->prefix + "data/" + s.key);
    if (!e) fail(segs, "storage " + quote_for_message(s.key) + " is not in the archive");
    const std::uint64_t es = dtype_size(s.type);
    if (s.numel > e->size / es || s.numel * es != e->size)
      fail(segs, "storage " + quote_for_message(s.key) + " holds " + std::to_string(e->size) + " bytes, not " +
                     std::to_string(s.numel) + " elements of " + std::string(dtype_name(s.type)));
    const std::uint64_t at = o_->zip->data_offset(*e);
    storage_at_[s.key] = at;
    return at;
  }

  void tensor(const pk::Tensor& t, const std::vector<std::string>& segs) {
    leaf_path_check(segs);
    const pk::Storage& s = o_->parsed.storages[t.storage];
    const std::uint64_t es = dtype_size(s.type);
    Shape shape(t.size.begin(), t.size.end());
    // elements, and the last element the view reaches, without overflow
    std::uint64_t numel = 1, last = t.offset;
    bool contiguous = true;
    std::uint64_t expect = 1;
    for (std::size_t k = t.size.size(); k-- > 0;) {
      const auto n = static_cast<std::uint64_t>(t.size[k]);
      if (n != 0 && numel > (std::uint64_t{1} << 62) / n) fail(segs, "tensor size overflows");
      numel *= n;
      if (n > 1 && static_cast<std::uint64_t>(t.stride[k]) != expect) contiguous = false;
      expect *= std::max<std::uint64_t>(n, 1);
    }
    if (numel == 0) {
      b_.add_bytes(Path(segs), s.type, shape, {});
      return;
    }
    for (std::size_t k = 0; k < t.size.size(); ++k) {
      const auto reach = static_cast<std::uint64_t>(t.size[k] - 1);
      const auto stride = static_cast<std::uint64_t>(t.stride[k]);
      if (stride != 0 && reach > (std::uint64_t{1} << 62) / stride) fail(segs, "tensor stride overflows");
      last += reach * stride;
      if (last > (std::uint64_t{1} << 62)) fail(segs, "tensor stride overflows");
    }
    if (last >= s.numel)
      fail(segs, "tensor (offset " + std::to_string(t.offset) + ", size " + shape_str(shape) + ") reaches element " +
                     std::to_string(last) + " of a storage of " + std::to_string(s.numel));
    // A stride of 0 (expand) repeats elements: bounded as zarr's fill is, so that a
    // hostile size cannot make a restore allocate without limit.
    if (numel * es > (std::uint64_t{256} << 20) + 65536 * s.numel * es)
      fail(segs, "tensor of " + std::to_string(numel) + " elements repeats a storage of " + std::to_string(s.numel) +
                     " beyond the limit (256 MiB + 65536 x its size)");
    const std::uint64_t base = storage_at(s, segs);
    const std::uint64_t first_byte = base + t.offset * es;
    const std::uint64_t bytes = numel * es;
    if (contiguous && o_->src.map) {
      const auto all = o_->src.map->bytes();
      b_.add_bytes(Path(segs), s.type, shape,
                   {all.subspan(static_cast<std::size_t>(first_byte), static_cast<std::size_t>(bytes))});
      return;
    }
    const pz::ReadAt read = o_->src.reader(checkpoint_);
    const std::string where = o_->src.name;
    if (contiguous) {
      b_.add_loaded(
          Path(segs), s.type, shape, where, "none",
          [read, first_byte](std::span<std::byte> dst, const detail::zarr::Fail&) { read(first_byte, dst); }, {},
          [read, first_byte](std::uint64_t at, std::span<std::byte> dst) { read(first_byte + at, dst); });
      return;
    }
    // A view: the span of storage it reaches, read once, gathered in C order.
    const std::uint64_t span_bytes = (last - t.offset + 1) * es;
    const auto size = t.size;
    const auto stride = t.stride;
    b_.add_loaded(Path(segs), s.type, shape, where, "none",
                  [read, first_byte, span_bytes, size, stride, es](std::span<std::byte> dst, const detail::zarr::Fail&) {
                    std::vector<std::byte> src(static_cast<std::size_t>(span_bytes));
                    read(first_byte, src);
                    std::vector<std::int64_t> idx(size.size(), 0);
                    const std::size_t n = dst.size() / es;
                    for (std::size_t i = 0; i < n; ++i) {
                      std::uint64_t off = 0;
                      for (std::size_t k = 0; k < size.size(); ++k)
                        off += static_cast<std::uint64_t>(idx[k]) * static_cast<std::uint64_t>(stride[k]);
                      std::memcpy(dst.data() + i * es, src.data() + off * es, es);
                      for (std::size_t k = size.size(); k-- > 0;) {
                        if (++idx[k] < size[k]) break;
                        idx[k] = 0;
                      }
                    }
                  });
  }

  interop::IndexBuilder& b_;
  std::string checkpoint_;
  const Opened* o_ = nullptr;
  std::size_t visits_ = 0;
  std::set<std::string> seen_;
  std::map<std::string, std::uint64_t> storage_at_;
  std::vector<std::string> names_;
  std::shared_ptr<std::deque<std::string>> scalars_ = std::make_shared<std::deque<std::string>>();
};

inline IndexInfo info(std::string format) {
  IndexInfo i;
  i.format = std::move(format);
  return i;
}

inline std::shared_ptr<const Index> open_single(Source src, const std::string& checkpoint) {
  const Opened o = open_archive(std::move(src), checkpoint);
  interop::IndexBuilder b(checkpoint);
  Loader l(b, checkpoint);
  l.add(o);
  return b.build(info("pytorch"));
}

inline bool plain_file_name(const std::string& s) {
  return !s.empty() && s.size() < 256 && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// Hugging Face's sharded checkpoint: the index's weight_map names each tensor's file;
// open_shard(file) gives its Source, nullopt when it is missing.
template <class OpenShard>
std::shared_ptr<const Index> open_sharded_with(std::span<const std::byte> raw, const std::string& index_name,
                                               const std::string& checkpoint, OpenShard open_shard) {
  const json j = ckpt::detail::parse_json({reinterpret_cast<const char*>(raw.data()), raw.size()}, checkpoint, "", index_name);
  const auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (wm == j.end() || !wm->is_object()) throw CorruptCheckpointError(checkpoint, "", index_name + " has no weight_map object");
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> files;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string() || !plain_file_name(it.value().get<std::string>()))
      throw CorruptCheckpointError(checkpoint, ckpt::detail::safe_text(it.key(), 200),
                                   "weight_map entry is not a file name inside the checkpoint directory");
    const auto& f = it.value().get_ref<const std::string&>();
    weight_map[it.key()] = f;
    if (std::find(files.begin(), files.end(), f) == files.end()) {
      if (files.size() >= max_shards) throw CorruptCheckpointError(checkpoint, "", "weight_map names too many files");
      files.push_back(f);
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string_view> names;
  for (const auto& kv : weight_map) names.emplace_back(kv.first);
  const interop::FlatNames paths(names, '.');
  interop::IndexBuilder b(checkpoint);
  Loader l(b, checkpoint);
  std::vector<Opened> opened;  // each shard's parse, alive while its entries are added
  opened.reserve(files.size());
  std::size_t before = 0;
  for (const auto& f : files) {
    std::optional<Source> src = open_shard(f);
    if (!src) throw CorruptCheckpointError(checkpoint, "", "shard " + quote_for_message(f) + " named by the weight_map is missing");
    opened.push_back(open_archive(std::move(*src), checkpoint));
    l.add(opened.back(), &paths);
    for (std::size_t i = before; i < l.top_names().size(); ++i) {
      const std::string& name = l.top_names()[i];
      const auto it = weight_map.find(name);
      if (it == weight_map.end() || it->second != f)
        throw CorruptCheckpointError(checkpoint, ckpt::detail::safe_text(name, 200),
                                     f + " holds tensor " + quote_for_message(name) + ", which the weight_map of " +
                                         index_name + " puts elsewhere or nowhere");
    }
    before = l.top_names().size();
  }
  if (l.top_names().size() != weight_map.size())
    throw CorruptCheckpointError(checkpoint, "",
                                 "the weight_map names " + std::to_string(weight_map.size()) + " tensors but the shards hold " +
                                     std::to_string(l.top_names().size()));
  return b.build(info("pytorch-sharded"));
}

inline std::shared_ptr<const Index> open_sharded(const fs::path& index_path, const std::string& checkpoint) {
  const fs::path dir = index_path.parent_path().empty() ? fs::path(".") : index_path.parent_path();
  const auto raw = io::read_file(index_path, max_index_json_bytes);
  return open_sharded_with(raw, index_path.filename().string(), checkpoint, [&](const std::string& f) -> std::optional<Source> {
    std::error_code ec;
    if (!fs::is_regular_file(dir / f, ec)) return std::nullopt;
    return local_source(dir / f);
  });
}

inline bool is_index_json(const fs::path& p) { return p.filename().string().ends_with(".bin.index.json"); }

// A zip whose central directory holds <name>/data.pkl, or a legacy pickle named like a
// PyTorch file (so that opening it says why it is not read).
inline bool looks_like(const pz::ReadAt& read, std::uint64_t size, const fs::path& name) {
  try {
    if (size < 4) return false;
    std::byte head[4];
    read(0, head);
    if (looks_legacy(head)) {
      const auto ext = name.extension();
      return ext == ".pt" || ext == ".pth" || ext == ".bin";
    }
    if (!looks_zip(head)) return false;
    const pz::Archive z(read, size, "", "");
    for (const auto& e : z.entries()) {
      const auto slash = e.name.find('/');
      if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) return true;
    }
    return false;
  } catch (const Error&) {
    return false;
  }
}
inline bool looks_like_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return false;
  try {
    const Source s = local_source(p);
    return looks_like(s.reader(p.string()), s.size, p);
  } catch (const Error&) {
    return false;
  }
}
inline bool looks_like_object(const std::shared_ptr<const io::KvStore>& kv, const std::string& key) {
  try {
    const auto size = kv->size(key);
    if (!size) return false;
    return looks_like(
        [&](std::uint64_t at, std::span<std::byte> dst) { kv->read(key, at, dst); }, *size, key);
  } catch (const Error&) {
    return false;
  }
}

// ---- writing -----------------------------------------------------------------------

// A Python number in the written pickle: a scalar that torch.load gives back as int,
// float or bool (and strings and None, which have no tensor).
inline bool python_scalar(const SnapshotLeaf& l) {
  if (!is_numeric(l.data.type)) return true;
  return l.data.shape.empty() &&
         (l.data.type == dtype::int64 || l.data.type == dtype::float64 || l.data.type == dtype::bool_);
}

struct StorageOut {
  std::string key;
  std::span<const std::byte> bytes;
};

class PickleWriter {
 public:
  PickleWriter(std::string checkpoint) : checkpoint_(std::move(checkpoint)) {}

  std::string write(const interop::SnapNode& root) {
    if (root.leaf) tensor(*root.leaf);  // torch.save(tensor): the root itself
    else if (state_dict_like(root)) state_dict(root);
    else dict(root, Ctx::general);
    return p_.finish();
  }
  std::vector<StorageOut> storages;

 private:
  enum class Ctx { general, state, group };

  static bool is_decimal(const std::string& s) {
    return !s.empty() && s.size() < 19 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
           (s.size() == 1 || s[0] != '0');
  }
  static bool list_like(const interop::SnapNode& n) {
    for (std::size_t i = 0; i < n.children.size(); ++i)
      if (n.children[i].first != std::to_string(i)) return false;
    return !n.children.empty();
  }
  template <class F>
  static bool all_leaves(const interop::SnapNode& n, const F& f) {
    if (n.leaf) return f(*n.leaf);
    for (const auto& c : n.children)
      if (!all_leaves(*c.second, f)) return false;
    return true;
  }
  static bool has_optimizer(const interop::SnapNode& n) {
    for (const auto& c : n.children)
      if ((c.first == "param_groups" && !c.second->leaf) || has_optimizer(*c.second)) return true;
    return false;
  }
  // Tensors only (scalars of a Python type alone are a dict of numbers), no optimizer.
  static bool state_dict_like(const interop::SnapNode& n) {
    return all_leaves(n, [](const SnapshotLeaf& l) { return is_numeric(l.data.type); }) &&
           !all_leaves(n, [](const SnapshotLeaf& l) { return python_scalar(l); }) && !has_optimizer(n);
  }

  void tensor(const SnapshotLeaf& l) {
    const auto& d = l.data;
    if (!is_numeric(d.type)) return python(l);
    const auto sname = pk::storage_name(d.type);
    if (!sname)
      throw Error(checkpoint_, l.path.str(),
                  "PyTorch has no tensor of " + std::string(dtype_name(d.type)) + " (drop or cast it with SaveOptions::transform)");
    if (d.stream) throw Error(checkpoint_, l.path.str(), "the PyTorch writer takes leaves in memory, not streamed");
    const std::uint64_t es = dtype_size(d.type);
    std::string key;
    const auto id = std::make_tuple(static_cast<const void*>(d.view.data()), d.view.size(), d.type);
    if (const auto it = shared_.find(id); it != shared_.end() && !d.view.empty()) {
      key = it->second;
    } else {
      key = std::to_string(storages.size());
      storages.push_back({key, d.view});
      if (!d.view.empty()) shared_[id] = key;
    }
    p_.tensor(*sname, key, d.view.size() / es, d.shape);
  }

  void python(const SnapshotLeaf& l) {
    const auto& d = l.data;
    if (d.type == dtype::none) return p_.none();
    if (d.type == dtype::string) return p_.string(std::string_view(reinterpret_cast<const char*>(d.view.data()), d.view.size()));
    if (d.stream || d.view.size() != dtype_size(d.type)) return tensor(l);
    const auto kind = info(d.type).kind;
    if (d.type == dtype::bool_) return p_.boolean(d.view[0] != std::byte{0});
    if (kind == dtype_kind::signed_integer || kind == dtype_kind::unsigned_integer) {
      std::int64_t v = 0;
      visit_element(d.type, d.view.data(), [&](auto x) { v = static_cast<std::int64_t>(x); });
      return p_.integer(v);
    }
    if (kind == dtype_kind::floating) {
      double v = 0;
      visit_element(d.type, d.view.data(), [&](auto x) { v = static_cast<double>(x); });
      return p_.floating(v);
    }
    tensor(l);
  }
  template <class F>
  static void visit_element(dtype t, const std::byte* p, const F& f) {
    switch (t) {
      case dtype::int8: return f(load<std::int8_t>(p));
      case dtype::int16: return f(load<std::int16_t>(p));
      case dtype::int32: return f(load<std::int32_t>(p));
      case dtype::int64: return f(load<std::int64_t>(p));
      case dtype::uint8: return f(load<std::uint8_t>(p));
      case dtype::uint16: return f(load<std::uint16_t>(p));
      case dtype::uint32: return f(load<std::uint32_t>(p));
      case dtype::uint64: return f(load<std::uint64_t>(p));
      case dtype::float16: return f(static_cast<float>(load<float16>(p)));
      case dtype::bfloat16: return f(static_cast<float>(load<bfloat16>(p)));
      case dtype::float32: return f(load<float>(p));
      case dtype::float64: return f(load<double>(p));
      default: return;
    }
  }
  template <class T>
  static T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

  void key(const std::string& k, bool integer_keys) {
    if (integer_keys && is_decimal(k)) p_.integer(std::stoll(k));
    else p_.string(k);
  }

  // An OrderedDict of dotted names to tensors, as nn.Module.state_dict() makes.
  void state_dict(const interop::SnapNode& n) {
    p_.ordered_dict();
    p_.mark();
    std::vector<std::string> rel;
    flat(n, rel);
    p_.setitems();
  }
  void flat(const interop::SnapNode& n, std::vector<std::string>& rel) {
    if (n.leaf) {
      p_.string(interop::flat_name_or_throw(Path(rel), '.', checkpoint_, "a PyTorch state_dict"));
      tensor(*n.leaf);
      return;
    }
    for (const auto& [name, child] : n.children) {
      rel.push_back(name);
      flat(*child, rel);
      rel.pop_back();
    }
  }

  void dict(const interop::SnapNode& n, Ctx ctx, bool integer_keys = false) {
    p_.empty_dict();
    if (n.children.empty()) return;
    p_.mark();
    for (const auto& [name, child] : n.children) {
      key(name, integer_keys);
      value(*child, ctx);
    }
    p_.setitems();
  }
  void list(const interop::SnapNode& n, Ctx ctx) {
    p_.empty_list();
    p_.mark();
    for (const auto& c : n.children) value(*c.second, ctx);
    p_.appends();
  }

  void value(const interop::SnapNode& n, Ctx ctx) {
    if (n.leaf) {
      const SnapshotLeaf& l = *n.leaf;
      if (ctx == Ctx::state) return tensor(l);
      if (ctx == Ctx::group && l.data.shape.empty()) return python(l);
      if (ctx == Ctx::group && l.data.shape.size() == 1 && is_numeric(l.data.type) && !l.data.stream) {
        // a list of numbers (an optimizer group's params)
        const std::size_t es = dtype_size(l.data.type);
        p_.empty_list();
        p_.mark();
        for (std::size_t i = 0; i + es <= l.data.view.size(); i += es) {
          SnapshotLeaf one;
          one.path = l.path;
          one.data = LeafBytes::borrow(l.data.type, {}, l.data.view.data() + i, es);
          python(one);
        }
        p_.appends();
        return;
      }
      return python_scalar(l) ? python(l) : tensor(l);
    }
    if (ctx == Ctx::general) {
      if (const auto* g = child(n, "param_groups"); g && !g->leaf) return optimizer(n);
      if (state_dict_like(n)) return state_dict(n);
    }
    if (list_like(n)) return list(n, ctx);
    dict(n, ctx);
  }

  static const interop::SnapNode* child(const interop::SnapNode& n, const std::string& name) {
    for (const auto& c : n.children)
      if (c.first == name) return c.second.get();
    return nullptr;
  }

  // {"state": {0: {...}}, "param_groups": [{...}]}, as Optimizer.state_dict() makes.
  void optimizer(const interop::SnapNode& n) {
    p_.empty_dict();
    p_.mark();
    p_.string("state");
    if (const auto* s = child(n, "state"); s && !s->leaf) dict(*s, Ctx::state, true);
    else p_.empty_dict();
    for (const auto& [name, c] : n.children) {
      if (name == "state") continue;
      p_.string(name);
      if (name == "param_groups") {
        p_.empty_list();
        p_.mark();
        for (const auto& g : c->children) value(*g.second, Ctx::group);
        p_.appends();
      } else {
        value(*c, Ctx::general);
      }
    }
    p_.setitems();
  }

  std::string checkpoint_;
  pk::Pickler p_;
  std::map<std::tuple<const void*, std::size_t, dtype>, std::string> shared_;
};

inline constexpr const char* archive_dir = "archive/";

// Writes the whole file through out (and closes it).
inline void write_file(storage::ObjectWriter& out, const Snapshot& snap, const std::string& checkpoint,
                       exec::ProgressTracker* progress = nullptr, bool force_zip64 = false) {
  PickleWriter w(checkpoint);
  const std::string pickle = w.write(interop::snapshot_tree(snap, checkpoint));
  pz::Writer z(out, force_zip64);
  z.add(std::string(archive_dir) + "data.pkl", std::as_bytes(std::span(pickle.data(), pickle.size())));
  static constexpr char order[] = "little";
  z.add(std::string(archive_dir) + "byteorder", std::as_bytes(std::span(order, 6)));
  namespace nd = detail::native;
  for (const StorageOut& s : w.storages) {
    const auto crc = ::crc32_z(0, reinterpret_cast<const Bytef*>(s.bytes.data()), s.bytes.size());
    z.begin_entry(std::string(archive_dir) + "data/" + s.key, s.bytes.size(), static_cast<std::uint32_t>(crc));
    for (std::size_t done = 0; done < s.bytes.size(); done += nd::write_piece) {
      const storage::ConstBytes piece = s.bytes.subspan(done, std::min(nd::write_piece, s.bytes.size() - done));
      z.data(std::span(&piece, 1), true);
      if (progress) progress->add(piece.size(), 0);
    }
  }
  static constexpr char version[] = "3\n";
  z.add(std::string(archive_dir) + "version", std::as_bytes(std::span(version, 2)));
  if (progress) progress->add(0, snap.leaves.size());
  z.finish();
}

inline bool is_file_name(const fs::path& p) {
  const auto e = p.extension();
  return e == ".pt" || e == ".pth" || e == ".bin" || e == ".ckpt";
}

}  // namespace detail::pytorch

struct pytorch {
  static constexpr const char* name = "pytorch";

  // A checkpoint directory or prefix: its pytorch_model.bin.
  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& o) {
    exec::ProgressTracker progress(o.progress, s.total_bytes(), s.leaves.size(), loc.url);
    detail::pytorch::write_file(*loc.storage->create(loc.key(detail::pytorch::single_file)), s, loc.url, &progress);
    progress.finish();
  }

  // save<pytorch>(path, state): a path ending in .pt, .pth, .bin or .ckpt is the file
  // itself (renamed into place whole); any other is a directory holding pytorch_model.bin.
  static void save_file(const std::filesystem::path& path, const Snapshot& s, const SaveOptions& o) {
    if (detail::pytorch::is_file_name(path)) {
      exec::ProgressTracker progress(o.progress, s.total_bytes(), s.leaves.size(), path.string());
      io::publish_file(path, o.force, [&](const std::filesystem::path& tmp) {
        detail::pytorch::write_file(*storage::file_writer(tmp), s, path.string(), &progress);
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

  static bool detect_in(const io::KvStore& kv) {
    namespace dp = detail::pytorch;
    if (kv.contains(dp::index_file)) return true;
    const auto size = kv.size(dp::single_file);
    if (!size) return false;
    try {
      return dp::looks_like([&](std::uint64_t at, std::span<std::byte> dst) { kv.read(dp::single_file, at, dst); }, *size,
                            dp::single_file);
    } catch (const Error&) {
      return false;
    }
  }
  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& checkpoint) {
    namespace dp = detail::pytorch;
    if (const auto raw = kv->get(dp::index_file, dp::max_index_json_bytes))
      return dp::open_sharded_with(*raw, dp::index_file, checkpoint, [&](const std::string& f) -> std::optional<dp::Source> {
        if (!kv->contains(f)) return std::nullopt;
        return dp::object_source(kv, f, checkpoint);
      });
    return dp::open_single(dp::object_source(kv, dp::single_file, checkpoint), checkpoint);
  }

  // A torch.save file, a *.bin.index.json, or a directory holding pytorch_model.bin or its index.
  static bool detect(const std::filesystem::path& p) {
    namespace dp = detail::pytorch;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec))
      return std::filesystem::is_regular_file(p / dp::index_file, ec) || dp::looks_like_file(p / dp::single_file);
    if (dp::is_index_json(p)) return std::filesystem::is_regular_file(p, ec);
    return dp::looks_like_file(p);
  }
  static bool is_committed(const std::filesystem::path& p) { return detect(p); }

  static std::shared_ptr<const Index> open(const std::filesystem::path& p) {
    namespace dp = detail::pytorch;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      if (std::filesystem::is_regular_file(p / dp::index_file, ec)) return dp::open_sharded(p / dp::index_file, p.string());
      return dp::open_single(dp::local_source(p / dp::single_file), p.string());
    }
    if (dp::is_index_json(p)) return dp::open_sharded(p, p.string());
    return dp::open_single(dp::local_source(p), p.string());
  }
};
static_assert(format_policy<pytorch>, CKPT_INTERNAL_CHECK("pytorch must meet format_policy"));

// After safetensors (5): a Hugging Face directory holding both is read as safetensors,
// as transformers prefers it.
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool pytorch_registered = register_format<pytorch>(6);
#endif
}  // namespace ckpt
