// ckpt/detail/msgpack.hpp — msgpack-cxx without Boost, plus strict readers for
// untrusted msgpack: every access checks the type and throws CorruptCheckpointError.
#pragma once

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include <ckpt/error.hpp>

namespace ckpt::detail::mp {

// Limits sized by the input: no count in a hostile file can ask for more objects
// than the file has bytes, and nesting is bounded.
inline msgpack::object_handle unpack_untrusted(const char* data, std::size_t size, const std::string& what) {
  const std::size_t n = size;
  try {
    return msgpack::unpack(data, size, nullptr, nullptr, msgpack::unpack_limit(n, n, n, n, n, 64));
  } catch (const std::exception& e) {
    throw CorruptCheckpointError(what, "", std::string("malformed msgpack: ") + e.what());
  }
}

class Reader {
 public:
  Reader(std::string checkpoint, std::string context) : checkpoint_(std::move(checkpoint)), context_(std::move(context)) {}

  [[noreturn]] void fail(const std::string& what, const std::string& path = "") const {
    throw CorruptCheckpointError(checkpoint_, path, context_ + ": " + what);
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
  std::string str(const msgpack::object& o, std::string_view what) const {
    if (o.type == msgpack::type::STR) return std::string(o.via.str.ptr, o.via.str.size);
    if (o.type == msgpack::type::BIN) return std::string(o.via.bin.ptr, o.via.bin.size);
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
  std::string checkpoint_, context_;
};

}  // namespace ckpt::detail::mp
