// ckpt/format/pytorch/writer.hpp — writing a Snapshot as a torch.save file (ckpt::pytorch).
//
// The tree becomes the pickle format/pytorch.hpp describes (a state_dict, an optimizer's
// state_dict, lists, Python numbers), each tensor a storage entry of the zip; leaves that
// are the same memory share one storage, as torch.save writes tied weights. Storages go
// to the ObjectWriter piece by piece, each entry's CRC-32 computed first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <zlib.h>

#include <ckpt/format/interop/flat_names.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/format/native/writer.hpp>  // write_piece
#include <ckpt/format/pytorch/pickle.hpp>
#include <ckpt/format/pytorch/zip.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt {

namespace detail::pytorch {
namespace fs = std::filesystem;
namespace pk = detail::pytorch::pickle;
namespace pz = detail::pytorch::zip;

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

}  // namespace ckpt
