// ckpt/detail/msgpack.hpp — msgpack-cxx without Boost, plus strict readers for
// untrusted msgpack: every access checks the type and throws CorruptCheckpointError.
#pragma once

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <ckpt/error.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt::detail::mp {

// Walks msgpack bytes without building anything and returns "" when they hold exactly
// one well-formed object, else what is wrong. msgpack-cxx allocates a container's items
// (24 or 32 bytes each) when it reads the header, before the items; its per-container
// limits cannot stop nested headers that each claim up to the whole input (60 levels
// claiming a million items each: 1.4 GiB from a 1 MiB file). Here every item still
// owed must fit in the bytes left, one byte at least each, so the headers of input that
// passes claim fewer objects, all together, than it has bytes.
inline std::string check_msgpack_counts(const unsigned char* p, std::size_t size) {
  std::size_t at = 0;
  std::uint64_t owed = 1;  // objects still to read; the root first
  auto be = [&](std::size_t n) {  // a big-endian length of n bytes at `at`
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[at + i];
    at += n;
    return v;
  };
  while (owed > 0) {
    if (at >= size) return "truncated";
    const unsigned char b = p[at++];
    --owed;
    std::uint64_t skip = 0, items = 0;
    std::size_t len_bytes = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    } else if (b <= 0x8f) { items = 2u * (b & 0x0fu);
    } else if (b <= 0x9f) { items = b & 0x0fu;
    } else if (b <= 0xbf) { skip = b & 0x1fu;
    } else {
      switch (b) {
        case 0xc4: case 0xd9: len_bytes = 1; break;  // bin8, str8
        case 0xc5: case 0xda: len_bytes = 2; break;
        case 0xc6: case 0xdb: len_bytes = 4; break;
        case 0xc7: len_bytes = 1; skip = 1; break;  // ext: length, then a type byte
        case 0xc8: len_bytes = 2; skip = 1; break;
        case 0xc9: len_bytes = 4; skip = 1; break;
        case 0xca: skip = 4; break;
        case 0xcb: skip = 8; break;
        case 0xcc: case 0xd0: skip = 1; break;
        case 0xcd: case 0xd1: skip = 2; break;
        case 0xce: case 0xd2: skip = 4; break;
        case 0xcf: case 0xd3: skip = 8; break;
        case 0xd4: skip = 2; break;  // fixext: a type byte, then 1..16 bytes
        case 0xd5: skip = 3; break;
        case 0xd6: skip = 5; break;
        case 0xd7: skip = 9; break;
        case 0xd8: skip = 17; break;
        case 0xdc: case 0xdd: case 0xde: case 0xdf: {
          const std::size_t n = (b == 0xdc || b == 0xde) ? 2 : 4;
          if (size - at < n) return "truncated";
          items = be(n) * (b >= 0xde ? 2 : 1);
          break;
        }
        default: return "byte 0xc1 is never used";
      }
    }
    if (len_bytes) {
      if (size - at < len_bytes) return "truncated";
      skip += be(len_bytes);
    }
    if (skip > size - at) return "a string or binary runs past the end";
    at += static_cast<std::size_t>(skip);
    owed += items;
    if (owed > size - at) return "a container claims more items than the bytes left";
  }
  if (at != size) return std::to_string(size - at) + " bytes after the end";
  return "";
}

// Checks the counts first (above), then unpacks with limits sized by the input and
// nesting bounded; `context` names the file in errors ("manifest"). With
// reference_input, strings and binaries of the object point into data instead of
// being copied (a 20,000-leaf manifest: a quarter of the unpacking): the caller then
// keeps data alive as long as the handle.
inline msgpack::object_handle unpack_untrusted(const char* data, std::size_t size, const std::string& checkpoint,
                                               const std::string& context = "", bool reference_input = false) {
  const std::string pre = context.empty() ? std::string() : context + ": ";
  if (const std::string bad = check_msgpack_counts(reinterpret_cast<const unsigned char*>(data), size); !bad.empty())
    throw CorruptCheckpointError(checkpoint, "", pre + "malformed msgpack: " + bad);
  const std::size_t n = size;
  try {
    const msgpack::unpack_reference_func reference = [](msgpack::type::object_type, std::size_t, void*) { return true; };
    return msgpack::unpack(data, size, reference_input ? reference : nullptr, nullptr,
                           msgpack::unpack_limit(n, n, n, n, n, 64));
  } catch (const std::exception& e) {
    throw CorruptCheckpointError(checkpoint, "", pre + "malformed msgpack: " + e.what());
  }
}

class Reader {
 public:
  // path: the tree path errors name (a leaf's, once known), so that they say which leaf.
  Reader(std::string checkpoint, std::string context, std::string path = "")
      : names_(std::make_shared<const Names>(Names{std::move(checkpoint), std::move(context)})), path_(std::move(path)) {}

  // The same reader, naming `path` in its errors (made once per leaf of a 20,000-leaf
  // manifest: it shares the checkpoint's name instead of copying it).
  Reader at_path(std::string path) const {
    Reader r(names_);
    r.path_ = std::move(path);
    return r;
  }

  // Names the leaf at `leaf` in errors from now on. It is kept by pointer (the caller
  // keeps it alive while using this reader) and formatted only when an error is thrown:
  // decoding a 20,000-leaf manifest would otherwise build 20,000 path strings.
  void name_leaf(const Path& leaf) {
    leaf_ = &leaf;
    path_.clear();
  }

  [[noreturn]] void fail(const std::string& what, const std::string& path = "") const {
    std::string where = path.empty() ? path_ : path;
    if (where.empty() && leaf_) where = leaf_->empty() ? std::string("<root>") : leaf_->str();
    throw CorruptCheckpointError(names_->checkpoint, where, names_->context + ": " + what);
  }

  const msgpack::object* find(const msgpack::object& map, std::string_view key) const {
    if (map.type != msgpack::type::MAP) fail("expected a map");
    for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
      const auto& kv = map.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
        return &kv.val;
    }
    return nullptr;
  }
  const msgpack::object& at(const msgpack::object& map, std::string_view key) const {
    const auto* v = find(map, key);
    if (!v) fail("missing key \"" + std::string(key) + "\"");
    return *v;
  }
  std::string str(const msgpack::object& o, std::string_view what) const { return std::string(view(o, what)); }
  // The string's bytes where they lie (in the unpacked buffer): valid as long as it is.
  std::string_view view(const msgpack::object& o, std::string_view what) const {
    if (o.type == msgpack::type::STR) return {o.via.str.ptr, o.via.str.size};
    if (o.type == msgpack::type::BIN) return {o.via.bin.ptr, o.via.bin.size};
    fail(std::string(what) + ": expected a string");
  }
  std::uint64_t u64(const msgpack::object& o, std::string_view what) const {
    if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
    fail(std::string(what) + ": expected a non-negative integer");
  }
  std::int64_t i64(const msgpack::object& o, std::string_view what) const {
    if (o.type == msgpack::type::POSITIVE_INTEGER && o.via.u64 <= static_cast<std::uint64_t>(INT64_MAX))
      return static_cast<std::int64_t>(o.via.u64);
    if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
    fail(std::string(what) + ": expected an integer");
  }
  const msgpack::object_array& array(const msgpack::object& o, std::string_view what) const {
    if (o.type != msgpack::type::ARRAY) fail(std::string(what) + ": expected an array");
    return o.via.array;
  }

 private:
  struct Names {
    std::string checkpoint, context;
  };
  explicit Reader(std::shared_ptr<const Names> names) : names_(std::move(names)) {}
  std::shared_ptr<const Names> names_;
  std::string path_;
  const Path* leaf_ = nullptr;  // name_leaf
};

}  // namespace ckpt::detail::mp
