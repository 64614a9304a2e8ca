// ckpt/format/pytorch/reader.hpp — reading torch.save files into an Index (ckpt::pytorch).
//
// A file is opened from a local path (mapped) or an object store (ranged reads); its zip
// directory gives the pickle and the storages, the pickle is read as data
// (pytorch/pickle.hpp), and each tensor becomes an entry whose bytes are read from its
// storage when a restore asks for them. The tree paths are those format/pytorch.hpp
// describes. looks_like* recognise a PyTorch file without reading more than its
// directory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
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

#include <ckpt/format/interop/flat_names.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/format/pytorch/pickle.hpp>
#include <ckpt/format/pytorch/zip.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/io/mapped_file.hpp>
#include <ckpt/io/untrusted.hpp>

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

}  // namespace detail::pytorch

}  // namespace ckpt
