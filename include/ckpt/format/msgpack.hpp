// ckpt/format/msgpack.hpp — msgpack-cxx without Boost, plus strict readers for
// untrusted msgpack: every access checks the type and throws CorruptCheckpointError.
#pragma once

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
// Only the parts ckpt uses: objects, the packer, sbuffer, unpack, and the adaptors of
// the scalars it packs. <msgpack.hpp> adds every std container's adaptor and the
// x3 parser, which every file that includes a format's header would parse for nothing.
#include <msgpack/object.hpp>
#include <msgpack/pack.hpp>
#include <msgpack/sbuffer.hpp>
#include <msgpack/unpack.hpp>
#include <msgpack/adaptor/bool.hpp>
#include <msgpack/adaptor/float.hpp>
#include <msgpack/adaptor/int.hpp>
#include <msgpack/adaptor/string.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
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
// Containers may nest max_msgpack_depth deep (msgpack-cxx's unpack is given the same
// limit): decoders that recurse can then trust the depth too.
inline constexpr int max_msgpack_depth = 64;
inline std::string check_msgpack_counts(const unsigned char* p, std::size_t size) {
  std::size_t at = 0;
  std::uint64_t owed = 1;  // objects still to read; the root first
  std::array<std::uint64_t, max_msgpack_depth + 1> left_at;  // of each open container, the items still to read
  int depth = 0;
  left_at[0] = 1;
  auto be = [&](std::size_t n) {  // a big-endian length of n bytes at `at`
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[at + i];
    at += n;
    return v;
  };
  while (owed > 0) {
    if (at >= size) return "truncated";
    while (left_at[static_cast<std::size_t>(depth)] == 0) --depth;  // containers read whole
    const unsigned char b = p[at++];
    --owed;
    --left_at[static_cast<std::size_t>(depth)];
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
    if (items > 0) {
      if (depth == max_msgpack_depth) return "containers nested more than " + std::to_string(max_msgpack_depth) + " deep";
      left_at[static_cast<std::size_t>(++depth)] = items;
    }
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
                           msgpack::unpack_limit(n, n, n, n, n, max_msgpack_depth));
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

// Reads msgpack one value at a time, straight from the bytes, without building an
// object tree: what a native manifest is decoded with (for 20,000 leaves, msgpack-cxx's
// tree was a third of opening the checkpoint). It needs no check_msgpack_counts first:
// it checks every length, and every container's count, against the bytes left (an
// item takes a byte at least), so that a count sizes nothing larger than the bytes
// could hold, and it nests to max_msgpack_depth at most. Its errors read like
// Reader's ("shape: expected an integer") and go through the Reader in use, so that
// they name the checkpoint, the file and the leaf.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const Reader& r)
      : p_(reinterpret_cast<const unsigned char*>(bytes.data())), size_(bytes.size()), r_(&r) {}

  void use(const Reader& r) noexcept { r_ = &r; }
  const Reader& reader() const noexcept { return *r_; }
  std::size_t pos() const noexcept { return at_; }
  void seek(std::size_t at) noexcept { at_ = at; }
  std::size_t left() const noexcept { return size_ - at_; }

  bool next_is_nil() const { return peek() == 0xc0; }
  bool next_is_array() const {
    const unsigned char b = peek();
    return (b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd;
  }
  // Consumes the N - 1 bytes of the literal `raw` when the bytes at the cursor are
  // exactly those (a key as a known writer encodes it); else consumes nothing. (GCC 12
  // calls memcmp for it; comparing unrolled bytes or 8-byte words instead counted more
  // instructions under callgrind.)
  template <std::size_t N>
  bool take_if(const char (&raw)[N]) noexcept {
    constexpr std::size_t n = N - 1;
    if (n > left() || std::memcmp(p_ + at_, raw, n) != 0) return false;
    at_ += n;
    return true;
  }

  // A map header: the number of key-value pairs that follow.
  std::uint32_t map(std::string_view what) {
    const unsigned char b = peek();
    if (b >= 0x80 && b <= 0x8f) return header(0, b & 0x0fu, 2);
    if (b == 0xde || b == 0xdf) return header(b == 0xde ? 2 : 4, 0, 2);
    r_->fail(what.empty() ? std::string("expected a map") : std::string(what) + ": expected a map");
  }
  // An array header: the number of items that follow.
  std::uint32_t array(std::string_view what) {
    const unsigned char b = peek();
    if (b >= 0x90 && b <= 0x9f) return header(0, b & 0x0fu, 1);
    if (b == 0xdc || b == 0xdd) return header(b == 0xdc ? 2 : 4, 0, 1);
    r_->fail(std::string(what) + ": expected an array");
  }
  // A string or a binary (as Reader::view takes either), where its bytes lie.
  std::string_view str(std::string_view what) {
    if (const auto s = string_if(true, true); s.data()) return s;
    r_->fail(std::string(what) + ": expected a string");
  }
  // The value when it is a string (a binary too, when asked), consumed; else
  // {nullptr, 0} and nothing consumed.
  std::string_view string_if(bool strings, bool binaries) {
    const unsigned char b = peek();
    std::size_t len_bytes = 0, n = 0;
    if (strings && b >= 0xa0 && b <= 0xbf) n = b & 0x1fu;
    else if ((strings && b == 0xd9) || (binaries && b == 0xc4)) len_bytes = 1;
    else if ((strings && b == 0xda) || (binaries && b == 0xc5)) len_bytes = 2;
    else if ((strings && b == 0xdb) || (binaries && b == 0xc6)) len_bytes = 4;
    else return {};
    ++at_;
    if (len_bytes) n = static_cast<std::size_t>(be(len_bytes));
    return {reinterpret_cast<const char*>(take(n)), n};
  }
  // As msgpack-cxx reads integers: any encoding of a value >= 0 is a non-negative integer.
  std::uint64_t u64(std::string_view what) {
    std::uint64_t v = 0;
    if (integer(v) != sign::non_negative) r_->fail(std::string(what) + ": expected a non-negative integer");
    return v;
  }
  std::int64_t i64(std::string_view what) {
    std::uint64_t v = 0;
    const sign s = integer(v);
    if (s == sign::none || (s == sign::non_negative && v > static_cast<std::uint64_t>(INT64_MAX)))
      r_->fail(std::string(what) + ": expected an integer");
    return static_cast<std::int64_t>(v);
  }
  // Steps over one value of any type (containers to a bounded depth). The type bytes
  // are the same table as check_msgpack_counts' switch; a shared table (a 256-entry
  // array of small structs) was tried and made both walks slower.
  void skip(int depth = 0) {
    if (depth > max_msgpack_depth) r_->fail("malformed msgpack: nested too deeply");
    const unsigned char b = peek();
    ++at_;
    std::uint64_t items = 0, n = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return;
    if (b <= 0x8f) items = 2u * (b & 0x0fu);
    else if (b <= 0x9f) items = b & 0x0fu;
    else if (b <= 0xbf) n = b & 0x1fu;
    else switch (b) {
        case 0xc4: case 0xd9: n = be(1); break;
        case 0xc5: case 0xda: n = be(2); break;
        case 0xc6: case 0xdb: n = be(4); break;
        case 0xc7: n = be(1) + 1; break;  // ext: length, then a type byte
        case 0xc8: n = be(2) + 1; break;
        case 0xc9: n = be(4) + 1; break;
        case 0xcc: case 0xd0: n = 1; break;
        case 0xcd: case 0xd1: n = 2; break;
        case 0xca: case 0xce: case 0xd2: n = 4; break;
        case 0xcb: case 0xcf: case 0xd3: n = 8; break;
        case 0xd4: n = 2; break;  // fixext: a type byte, then 1..16 bytes
        case 0xd5: n = 3; break;
        case 0xd6: n = 5; break;
        case 0xd7: n = 9; break;
        case 0xd8: n = 17; break;
        case 0xdc: items = be(2); break;
        case 0xdd: items = be(4); break;
        case 0xde: items = 2 * be(2); break;
        case 0xdf: items = 2 * be(4); break;
        default: r_->fail("malformed msgpack: byte 0xc1 is never used");
      }
    take(n);
    if (items > left()) r_->fail("malformed msgpack: a container claims more items than the bytes left");
    for (std::uint64_t i = 0; i < items; ++i) skip(depth + 1);
  }

 private:
  enum class sign { none, non_negative, negative };
  unsigned char peek() const {
    if (at_ >= size_) r_->fail("malformed msgpack: truncated");
    return p_[at_];
  }
  const unsigned char* take(std::uint64_t n) {
    if (n > size_ - at_) r_->fail("malformed msgpack: a string or binary runs past the end");
    const unsigned char* q = p_ + at_;
    at_ += static_cast<std::size_t>(n);
    return q;
  }
  std::uint64_t be(std::size_t n) {
    const unsigned char* q = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | q[i];
    return v;
  }
  // Consumes a container header: its count in the header byte, or in len_bytes after it;
  // each of the count items is at least per_item values of a byte or more.
  std::uint32_t header(std::size_t len_bytes, std::uint32_t count, std::uint64_t per_item) {
    ++at_;
    if (len_bytes) count = static_cast<std::uint32_t>(be(len_bytes));
    if (count * per_item > left()) r_->fail("malformed msgpack: a container claims more items than the bytes left");
    return count;
  }
  // Any integer encoding, consumed (v holds the value as two's complement); sign::none
  // and nothing consumed when the value is not an integer.
  sign integer(std::uint64_t& v) {
    const unsigned char b = peek();
    if (b <= 0x7f) {
      ++at_;
      v = b;
      return sign::non_negative;
    }
    if (b >= 0xe0) {  // negative fixint
      ++at_;
      v = static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int8_t>(b)));
      return sign::negative;
    }
    if (b >= 0xcc && b <= 0xcf) {  // uint8..uint64
      ++at_;
      v = be(std::size_t{1} << (b - 0xcc));
      return sign::non_negative;
    }
    if (b >= 0xd0 && b <= 0xd3) {  // int8..int64
      ++at_;
      const std::size_t n = std::size_t{1} << (b - 0xd0);
      v = be(n);
      if (n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
      return static_cast<std::int64_t>(v) < 0 ? sign::negative : sign::non_negative;
    }
    return sign::none;
  }

  const unsigned char* p_;
  std::size_t size_;
  std::size_t at_ = 0;
  const Reader* r_;
};

// The keys a decoder wants from a map, in the order writers put them, each with its
// first 8 bytes as a number: a key is matched by its size and one integer comparison
// (a memcmp call per key was a quarter of opening a 20,000-leaf manifest).
template <std::size_t N>
struct KeyNames {
  constexpr explicit KeyNames(const std::array<std::string_view, N>& n) : names(n) {
    for (std::size_t k = 0; k < N; ++k) heads[k] = head(names[k]);
  }
  static constexpr std::uint64_t head(std::string_view s) {
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < s.size() && i < 8; ++i) h |= std::uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
    return h;
  }
  constexpr bool matches(std::size_t k, std::string_view key, std::uint64_t key_head) const {
    return key.size() == names[k].size() && key_head == heads[k] &&
           (key.size() <= 8 || key.substr(8) == names[k].substr(8));
  }
  std::array<std::string_view, N> names;
  std::array<std::uint64_t, N> heads{};
};

// The values of a msgpack map that a decoder wants, by key. The map is read as far as
// needed and no further: at(k) or find(k) reads keys (stepping over the values of the
// others, remembering where wanted ones start) until it meets k, and leaves the cursor
// at k's value. A caller that reads that value whole says so (read_past), and reading
// goes on from there: a manifest's 20,000 leaves, its last value, are then read once,
// not stepped over first. As with Reader::find, only string keys count, and the first
// of two equal keys. Keys are compared with the wanted names in the order writers put
// them, starting after the last match: about one comparison a key.
template <std::size_t N>
class MapFields {
 public:
  MapFields(Cursor& c, const KeyNames<N>& names, std::string_view what = "")
      : c_(c), names_(names), pairs_(c.map(what)), next_(c.pos()) {
    at_.fill(unread);
  }
  bool has(std::size_t k) {
    read_to(k);
    return at_[k] != unread;
  }
  Cursor& at(std::size_t k) {
    if (!has(k)) c_.reader().fail("missing key \"" + std::string(names_.names[k]) + "\"");
    c_.seek(at_[k]);
    return c_;
  }
  Cursor* find(std::size_t k) {
    if (!has(k)) return nullptr;
    c_.seek(at_[k]);
    return &c_;
  }
  // The cursor has just read k's value whole: the map's next key starts here.
  void read_past(std::size_t k) {
    if (stopped_at_ == k) {
      next_ = c_.pos();
      stopped_at_ = N;
    }
  }
  // Leaves the cursor after the map.
  void finish() {
    read_to(N);
    c_.seek(next_);
  }

 private:
  // Reads keys until k's is read (k == N: to the end of the map).
  void read_to(std::size_t k) {
    if (k < N && at_[k] != unread) return;
    while (true) {
      if (stopped_at_ < N) {  // step over the value reading stopped at
        c_.seek(at_[stopped_at_]);
        c_.skip();
        next_ = c_.pos();
        stopped_at_ = N;
      }
      if (read_ == pairs_) return;
      c_.seek(next_);
      ++read_;
      const std::string_view key = c_.string_if(true, false);
      std::size_t found = N;
      if (key.data()) {
        const std::uint64_t head = KeyNames<N>::head(key);
        for (std::size_t j = 0; j < N && found == N; ++j)
          if (names_.matches((last_ + j) % N, key, head)) found = (last_ + j) % N;
      } else {
        c_.skip();  // a key that is not a string: nobody's
      }
      if (found < N && at_[found] == unread) {
        at_[found] = c_.pos();
        last_ = found + 1;
        stopped_at_ = found;
        if (found == k) return;
      } else {
        c_.skip();
        next_ = c_.pos();
      }
    }
  }
  static constexpr std::size_t unread = ~std::size_t{0};
  Cursor& c_;
  const KeyNames<N>& names_;
  std::uint32_t pairs_;
  std::uint32_t read_ = 0;      // keys read so far
  std::size_t next_;            // where the next key starts (when stopped_at_ == N)
  std::size_t stopped_at_ = N;  // the wanted key whose value reading stopped at, if any
  std::size_t last_ = 0;        // where the next comparison starts
  std::array<std::size_t, N> at_;
};

}  // namespace ckpt::detail::mp
