// ckpt/format/interop/msgpack_tree.hpp — flax.serialization's msgpack encoding, both ways.
//
// What Flax's msgpack_serialize writes, and what t5x's `checkpoint` file is made of:
// nested maps with string keys (lists and tuples become maps keyed "0", "1", ...), and
// leaves that are
//   ext 1  an ndarray: msgpack of (shape, numpy dtype name, C-order bytes)
//   ext 2  a Python complex: msgpack of (real, imag)
//   ext 3  a numpy scalar: as ext 1 with shape ()
//   plain msgpack int, float, bool, str, nil
// and arrays over 2**30 bytes split into {"__msgpack_chunked_array__": true,
// "shape": {"0": d0, ...}, "chunks": {"0": ext 1, ...}} of 1-d pieces.
#pragma once

#include <algorithm>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/format/msgpack.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/format/interop/stored.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::interop {

inline constexpr std::uint64_t flax_chunk_bytes = std::uint64_t{1} << 30;  // flax MAX_CHUNK_SIZE
inline constexpr const char* chunked_key = "__msgpack_chunked_array__";

enum ext_type : std::int8_t { ext_ndarray = 1, ext_complex = 2, ext_npscalar = 3 };

// Parsed msgpack the Index's spans point into; kept alive by the Index.
struct MsgpackKeep {
  std::shared_ptr<std::vector<std::byte>> file;
  std::deque<msgpack::object_handle> handles;
  std::deque<std::vector<std::byte>> owned;  // scalars converted from plain msgpack numbers
};

// Called for each map or string before the generic decoding; returns true when it
// consumed the object (t5x's TensorStore specs, Orbax's PLACEHOLDER:// strings).
using SpecialLeaf = std::function<bool(IndexBuilder&, const Path&, const msgpack::object&)>;

class MsgpackTreeReader {
 public:
  MsgpackTreeReader(IndexBuilder& out, MsgpackKeep& keep, std::string context, SpecialLeaf special = {})
      : out_(out), keep_(keep), context_(std::move(context)), special_(std::move(special)) {}

  [[noreturn]] void fail(const Path& p, const std::string& what) const {
    throw CorruptCheckpointError(out_.checkpoint(), p.empty() ? std::string("<root>") : p.str(), context_ + ": " + what);
  }

  void walk(const msgpack::object& o, Path& p) {
    if (special_ && special_(out_, p, o)) return;
    switch (o.type) {
      case msgpack::type::MAP: {
        if (o.via.map.size == 0) { out_.add_none(p); return; }
        if (is_chunked(o)) { chunked(o, p); return; }
        for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
          const auto& kv = o.via.map.ptr[i];
          p.push(key(kv.key, p));
          walk(kv.val, p);
          p = Path(std::vector<std::string>(p.segments().begin(), p.segments().end() - 1));
        }
        return;
      }
      case msgpack::type::ARRAY:  // Flax never writes lists at the tree level; read them as "0", "1", ...
        if (o.via.array.size == 0) { out_.add_none(p); return; }
        for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
          p.push(std::to_string(i));
          walk(o.via.array.ptr[i], p);
          p = Path(std::vector<std::string>(p.segments().begin(), p.segments().end() - 1));
        }
        return;
      case msgpack::type::NIL: out_.add_none(p); return;
      case msgpack::type::BOOLEAN: scalar(p, dtype::bool_, static_cast<std::uint8_t>(o.via.boolean)); return;
      case msgpack::type::POSITIVE_INTEGER:
        if (o.via.u64 > static_cast<std::uint64_t>(INT64_MAX)) scalar(p, dtype::uint64, o.via.u64);
        else scalar(p, dtype::int64, static_cast<std::int64_t>(o.via.u64));
        return;
      case msgpack::type::NEGATIVE_INTEGER: scalar(p, dtype::int64, o.via.i64); return;
      case msgpack::type::FLOAT32: scalar(p, dtype::float32, static_cast<float>(o.via.f64)); return;
      case msgpack::type::FLOAT64: scalar(p, dtype::float64, o.via.f64); return;
      case msgpack::type::STR:
        out_.add_bytes(p, dtype::string, {}, {std::as_bytes(std::span(o.via.str.ptr, o.via.str.size))});
        return;
      case msgpack::type::BIN:
        out_.add_bytes(p, dtype::string, {}, {std::as_bytes(std::span(o.via.bin.ptr, o.via.bin.size))});
        return;
      case msgpack::type::EXT: ext(o, p); return;
    }
    fail(p, "unsupported msgpack object");
  }

 private:
  std::string key(const msgpack::object& k, const Path& p) const {
    if (k.type == msgpack::type::STR) return std::string(k.via.str.ptr, k.via.str.size);
    if (k.type == msgpack::type::POSITIVE_INTEGER) return std::to_string(k.via.u64);
    if (k.type == msgpack::type::NEGATIVE_INTEGER) return std::to_string(k.via.i64);
    fail(p, "a map key is neither a string nor an integer");
  }

  template <class V>
  void scalar(const Path& p, dtype t, V v) {
    auto& b = keep_.owned.emplace_back(sizeof(V));
    std::memcpy(b.data(), &v, sizeof(V));
    out_.add_bytes(p, t, {}, {std::span<const std::byte>(b)});
  }

  static bool is_chunked(const msgpack::object& o) {
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& k = o.via.map.ptr[i].key;
      if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == chunked_key) return true;
    }
    return false;
  }

  struct Array {
    dtype type;
    Shape shape;
    std::span<const std::byte> bytes;
  };

  // Decodes the payload of ext 1 or 3: (shape, dtype name, bytes).
  Array ndarray(const msgpack::object& o, const Path& p) {
    const auto& h = keep_.handles.emplace_back(
        detail::mp::unpack_untrusted(o.via.ext.data(), o.via.ext.size, out_.checkpoint(), context_ + ": " + p.str()));
    const msgpack::object& a = h.get();
    if (a.type != msgpack::type::ARRAY || a.via.array.size != 3) fail(p, "ndarray ext is not (shape, dtype, bytes)");
    Array r{};
    const auto& sh = a.via.array.ptr[0];
    if (sh.type != msgpack::type::ARRAY || sh.via.array.size > 64) fail(p, "ndarray shape is not a list");
    for (std::uint32_t i = 0; i < sh.via.array.size; ++i) {
      if (sh.via.array.ptr[i].type != msgpack::type::POSITIVE_INTEGER || sh.via.array.ptr[i].via.u64 > (1ull << 62))
        fail(p, "ndarray shape holds a non-dimension");
      r.shape.push_back(static_cast<std::int64_t>(sh.via.array.ptr[i].via.u64));
    }
    const auto& dt = a.via.array.ptr[1];
    if (dt.type != msgpack::type::STR) fail(p, "ndarray dtype is not a string");
    const std::string name(dt.via.str.ptr, dt.via.str.size);
    const auto d = detail::zarr::dtype_from_numpy_name(name);
    if (!d) fail(p, "numpy dtype " + quote_for_message(name) + " is not supported");
    r.type = *d;
    const auto& b = a.via.array.ptr[2];
    if (b.type == msgpack::type::BIN) r.bytes = std::as_bytes(std::span(b.via.bin.ptr, b.via.bin.size));
    else if (b.type == msgpack::type::STR) r.bytes = std::as_bytes(std::span(b.via.str.ptr, b.via.str.size));
    else fail(p, "ndarray data is not bytes");
    return r;
  }

  void ext(const msgpack::object& o, const Path& p) {
    const std::int8_t t = o.via.ext.type();
    if (t == ext_ndarray || t == ext_npscalar) {
      Array a = ndarray(o, p);
      if (t == ext_npscalar && !a.shape.empty()) fail(p, "numpy scalar with a shape");
      out_.add_bytes(p, a.type, std::move(a.shape), {a.bytes});
      return;
    }
    if (t == ext_complex) {
      const auto& h = keep_.handles.emplace_back(
          detail::mp::unpack_untrusted(o.via.ext.data(), o.via.ext.size, out_.checkpoint(), context_ + ": " + p.str()));
      const msgpack::object& a = h.get();
      auto num = [&](const msgpack::object& x) -> double {
        if (x.type == msgpack::type::FLOAT32 || x.type == msgpack::type::FLOAT64) return x.via.f64;
        if (x.type == msgpack::type::POSITIVE_INTEGER) return static_cast<double>(x.via.u64);
        if (x.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<double>(x.via.i64);
        fail(p, "complex part is not a number");
      };
      if (a.type != msgpack::type::ARRAY || a.via.array.size != 2) fail(p, "complex ext is not (real, imag)");
      scalar(p, dtype::complex128, std::complex<double>(num(a.via.array.ptr[0]), num(a.via.array.ptr[1])));
      return;
    }
    fail(p, "msgpack ext type " + std::to_string(t) + " is not one Flax writes");
  }

  void chunked(const msgpack::object& o, const Path& p) {
    const detail::mp::Reader r(out_.checkpoint(), context_, p.str());
    const auto& shape_map = r.at(o, "shape");
    const auto& chunks_map = r.at(o, "chunks");
    auto items = [&](const msgpack::object& m, const char* what) {
      std::vector<const msgpack::object*> v;
      if (m.type == msgpack::type::ARRAY) {
        for (std::uint32_t i = 0; i < m.via.array.size; ++i) v.push_back(&m.via.array.ptr[i]);
        return v;
      }
      if (m.type != msgpack::type::MAP) fail(p, std::string("chunked array ") + what + " is not a map");
      v.resize(m.via.map.size, nullptr);
      for (std::uint32_t i = 0; i < m.via.map.size; ++i) {
        const auto& kv = m.via.map.ptr[i];
        const std::string k = key(kv.key, p);
        std::size_t n = 0;
        if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos ||
            (n = std::stoul(k)) >= v.size() || v[n])
          fail(p, std::string("chunked array ") + what + " keys are not 0..n-1");
        v[n] = &kv.val;
      }
      return v;
    };
    Shape shape;
    for (const auto* d : items(shape_map, "shape")) {
      if (d->type != msgpack::type::POSITIVE_INTEGER || d->via.u64 > (1ull << 62)) fail(p, "chunked array shape holds a non-dimension");
      shape.push_back(static_cast<std::int64_t>(d->via.u64));
    }
    std::vector<std::span<const std::byte>> pieces;
    std::optional<dtype> type;
    for (const auto* c : items(chunks_map, "chunks")) {
      if (c->type != msgpack::type::EXT || c->via.ext.type() != ext_ndarray) fail(p, "a chunk is not an ndarray");
      Array a = ndarray(*c, p);
      if (type && *type != a.type) fail(p, "chunks differ in dtype");
      type = a.type;
      pieces.push_back(a.bytes);
    }
    if (!type) fail(p, "chunked array has no chunks");
    out_.add_bytes(p, *type, std::move(shape), std::move(pieces));
  }

  IndexBuilder& out_;
  MsgpackKeep& keep_;
  std::string context_;
  SpecialLeaf special_;
};

// ---------------------------------------------------------------------------------
// Writing: a list of byte pieces (small headers owned here, bulk data borrowed from
// the snapshot), written with writev; no copy of the arrays.
class PieceWriter {
 public:
  msgpack::packer<msgpack::sbuffer>& pk() { return pk_; }

  void str(std::string_view s) {
    pk_.pack_str(static_cast<std::uint32_t>(s.size()));
    pk_.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
  }
  void raw(const void* p, std::size_t n) { buf_.write(static_cast<const char*>(p), n); }
  // A JSON value as msgpack, with msgpack-cxx like every other msgpack ckpt writes: the
  // TensorStore specs t5x keeps in its checkpoint file. Only ckpt's own values come here.
  void json(const nlohmann::json& j) {
    using t = nlohmann::json::value_t;
    switch (j.type()) {
      case t::object:
        pk_.pack_map(static_cast<std::uint32_t>(j.size()));
        for (const auto& [k, v] : j.items()) {
          str(k);
          json(v);
        }
        break;
      case t::array:
        pk_.pack_array(static_cast<std::uint32_t>(j.size()));
        for (const auto& v : j) json(v);
        break;
      case t::string: str(j.get_ref<const std::string&>()); break;
      case t::boolean: j.get<bool>() ? pk_.pack_true() : pk_.pack_false(); break;
      case t::number_integer: pk_.pack(j.get<std::int64_t>()); break;
      case t::number_unsigned: pk_.pack(j.get<std::uint64_t>()); break;
      case t::number_float: pk_.pack(j.get<double>()); break;
      case t::binary: {
        const auto& b = j.get_binary();
        pk_.pack_bin(static_cast<std::uint32_t>(b.size()));
        pk_.pack_bin_body(reinterpret_cast<const char*>(b.data()), static_cast<std::uint32_t>(b.size()));
        break;
      }
      case t::null: case t::discarded: pk_.pack_nil(); break;
    }
  }
  void borrow(std::span<const std::byte> b) {
    flush();
    if (!b.empty()) parts_.push_back(b);
  }
  // flax's ndarray ext (1) or numpy scalar ext (3), its payload's bytes borrowed.
  void ndarray(std::int8_t ext, dtype t, const Shape& shape, std::span<const std::byte> bytes) {
    msgpack::sbuffer head;
    msgpack::packer<msgpack::sbuffer> h(head);
    h.pack_array(3);
    h.pack_array(static_cast<std::uint32_t>(shape.size()));
    for (auto d : shape) h.pack(d);
    const auto name = dtype_name(t);
    h.pack_str(static_cast<std::uint32_t>(name.size()));
    h.pack_str_body(name.data(), static_cast<std::uint32_t>(name.size()));
    h.pack_bin(static_cast<std::uint32_t>(bytes.size()));
    pk_.pack_ext(head.size() + bytes.size(), ext);
    buf_.write(head.data(), head.size());
    borrow(bytes);
  }
  void flush() {
    if (buf_.size() == 0) return;
    auto& o = owned_.emplace_back(reinterpret_cast<const std::byte*>(buf_.data()),
                                  reinterpret_cast<const std::byte*>(buf_.data()) + buf_.size());
    parts_.push_back(o);
    buf_.clear();
  }
  // Writes the object in pieces of at most 8 MiB, telling progress (when given) of
  // each; the caller closes `out` (the pieces stay valid until this writer goes).
  void write_to(storage::ObjectWriter& out, exec::ProgressTracker* progress = nullptr) {
    flush();
    constexpr std::size_t piece = std::size_t{8} << 20;
    std::vector<storage::ConstBytes> batch;
    std::size_t queued = 0;
    auto write = [&] {
      out.append(batch, true);
      batch.clear();
      if (progress) progress->add(queued, 0);
      queued = 0;
    };
    for (auto p : parts_) {
      for (std::size_t at = 0; at < p.size(); at += piece) {
        const std::size_t n = std::min(piece, p.size() - at);
        batch.push_back(p.subspan(at, n));
        queued += n;
        if (queued >= piece || batch.size() >= 512) write();
      }
    }
    if (!batch.empty()) write();
  }
  // The bytes write_to writes.
  std::uint64_t size() {
    flush();
    std::uint64_t n = 0;
    for (auto p : parts_) n += p.size();
    return n;
  }

 private:
  msgpack::sbuffer buf_;
  msgpack::packer<msgpack::sbuffer> pk_{buf_};
  std::deque<std::vector<std::byte>> owned_;
  std::vector<std::span<const std::byte>> parts_;
};

// Called for each leaf before the generic encoding; returns true when it wrote it
// (t5x writes its arrays as TensorStore specs).
using LeafHook = std::function<bool(PieceWriter&, const SnapshotLeaf&)>;

// Writes one leaf as flax.serialization would.
inline void write_flax_leaf(PieceWriter& w, const SnapshotLeaf& l, const std::string& checkpoint) {
  const auto& d = l.data;
  if (d.type == dtype::none) { w.pk().pack_map(0); return; }  // an empty node: Flax's {} state dict
  if (d.type == dtype::string) {
    w.pk().pack_str(static_cast<std::uint32_t>(d.view.size()));
    w.borrow(d.view);
    return;
  }
  if (d.view.size() > 0xffffffffu - 1024 && d.view.size() <= flax_chunk_bytes)
    throw Error(checkpoint, l.path.str(), "leaf too large for msgpack");
  if (d.shape.empty()) { w.ndarray(ext_npscalar, d.type, d.shape, d.view); return; }
  if (d.view.size() <= flax_chunk_bytes) { w.ndarray(ext_ndarray, d.type, d.shape, d.view); return; }
  // Flax's _chunk: 1-d pieces of at most 2**30 bytes, shape and chunks as "0".."n-1" maps
  const std::size_t es = dtype_size(d.type);
  const std::size_t per = std::max<std::size_t>(1, flax_chunk_bytes / es) * es;
  const std::size_t n = (d.view.size() + per - 1) / per;
  w.pk().pack_map(3);
  w.str(chunked_key); w.pk().pack_true();
  w.str("shape");
  w.pk().pack_map(static_cast<std::uint32_t>(d.shape.size()));
  for (std::size_t i = 0; i < d.shape.size(); ++i) { w.str(std::to_string(i)); w.pk().pack(d.shape[i]); }
  w.str("chunks");
  w.pk().pack_map(static_cast<std::uint32_t>(n));
  for (std::size_t i = 0; i < n; ++i) {
    const auto part = d.view.subspan(i * per, std::min(per, d.view.size() - i * per));
    w.str(std::to_string(i));
    w.ndarray(ext_ndarray, d.type, {static_cast<std::int64_t>(part.size() / es)}, part);
  }
}

inline void write_tree(PieceWriter& w, const SnapNode& n, const std::string& checkpoint, const LeafHook& hook = {}) {
  if (n.leaf) {
    if (!hook || !hook(w, *n.leaf)) write_flax_leaf(w, *n.leaf, checkpoint);
    return;
  }
  w.pk().pack_map(static_cast<std::uint32_t>(n.children.size()));
  for (const auto& [k, c] : n.children) {
    w.str(k);
    write_tree(w, *c, checkpoint, hook);
  }
}

// Parses the msgpack bytes keep.file holds.
inline const msgpack::object& parse_kept(MsgpackKeep& keep, const std::string& checkpoint, const std::string& context) {
  const auto& h = keep.handles.emplace_back(detail::mp::unpack_untrusted(
      reinterpret_cast<const char*>(keep.file->data()), keep.file->size(), checkpoint, context));
  return h.get();
}

// Reads the whole msgpack value under key of a store and parses it.
inline const msgpack::object& load_msgpack(const io::KvStore& kv, const std::string& key, MsgpackKeep& keep,
                                           const std::string& checkpoint, const std::string& context,
                                           std::uint64_t max_bytes = std::uint64_t{1} << 40) {
  try {
    auto bytes = kv.get(key, max_bytes);
    if (!bytes) throw Error(kv.describe(), key, "missing");
    keep.file = std::make_shared<std::vector<std::byte>>(std::move(*bytes));
  } catch (const Error& e) {
    throw CorruptCheckpointError(checkpoint, "", context + " cannot be read: " + e.what());
  }
  return parse_kept(keep, checkpoint, context);
}

// Reads a whole msgpack file (bounded by its size on disk) and parses it.
inline const msgpack::object& load_msgpack_file(const fs::path& file, MsgpackKeep& keep, const std::string& checkpoint,
                                                const std::string& context,
                                                std::uint64_t max_bytes = std::uint64_t{1} << 40,
                                                bool follow_symlink = false) {
  try {
    keep.file = std::make_shared<std::vector<std::byte>>(io::read_file(file, max_bytes, follow_symlink));
  } catch (const Error& e) {
    throw CorruptCheckpointError(checkpoint, "", context + " cannot be read: " + e.what());
  }
  return parse_kept(keep, checkpoint, context);
}

}  // namespace ckpt::detail::interop
