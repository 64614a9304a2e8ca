// ckpt/format/pytorch/pickle.hpp — the pickles of torch.save: read without executing, and written.
//
// A torch.save file's data.pkl is a Python pickle of the saved object: dicts (plain or
// collections.OrderedDict), lists, tuples, numbers, strings, and tensors, each a call of
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...) on a storage that
// the pickle names by a persistent id ('storage', torch.FloatStorage, key, location,
// numel) and that lies in the archive as data/<key>.
//
// Unpickler reads that as data: it accepts what torch.load(weights_only=True) accepts
// (torch/_weights_only_unpickler.py: the opcodes, and globals limited to OrderedDict,
// torch.Size, Parameter, the storage types, dtypes and the rebuild functions), and
// refuses any other global with an Error naming it (`posix.system`). Nothing is ever
// imported or called: a "call" of an allowed global is recognised and its result built
// here. Everything is bounded: the pickle's size, the objects it may create (each op
// creates at most one), the memo, the nesting a walk follows, and how often shared
// objects are visited. Objects live in an arena and refer to each other by pointer, so
// a pickle that puts a list inside itself makes a cycle that the walk's depth limit
// ends, not a leak.
//
// Pickler writes protocol 2, the subset torch.save writes, for the writer (pytorch.hpp).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/leaf/dtype.hpp>
#include <ckpt/detail/quote.hpp>

namespace ckpt::detail::pytorch::pickle {

inline constexpr std::size_t max_pickle_bytes = 256u << 20;
inline constexpr std::size_t max_objects = 8'000'000;
inline constexpr std::size_t max_rank = 64;

// The storage types of torch.save (torch.<Name>Storage) and ckpt's dtypes.
struct StorageType {
  std::string_view name;
  dtype type;
};
inline constexpr StorageType storage_types[] = {
    {"DoubleStorage", dtype::float64},   {"FloatStorage", dtype::float32},      {"HalfStorage", dtype::float16},
    {"BFloat16Storage", dtype::bfloat16}, {"LongStorage", dtype::int64},         {"IntStorage", dtype::int32},
    {"ShortStorage", dtype::int16},      {"CharStorage", dtype::int8},          {"ByteStorage", dtype::uint8},
    {"BoolStorage", dtype::bool_},       {"ComplexFloatStorage", dtype::complex64}, {"ComplexDoubleStorage", dtype::complex128},
};
inline std::optional<dtype> storage_dtype(std::string_view name) {
  for (const auto& s : storage_types)
    if (s.name == name) return s.type;
  return std::nullopt;
}
inline std::optional<std::string_view> storage_name(dtype t) {
  for (const auto& s : storage_types)
    if (s.type == t) return s.name;
  return std::nullopt;
}
// torch's dtype objects as pickled globals (torch.float32): read as their names.
inline constexpr std::string_view torch_dtypes[] = {
    "float16", "float32", "float64", "bfloat16", "complex32", "complex64", "complex128", "int8", "int16",
    "int32",   "int64",   "uint8",   "bool",     "half",      "float",     "double",     "long", "int",  "short"};

struct Obj {
  enum class Kind : std::uint8_t { none, boolean, integer, floating, string, bytes, list, tuple, dict, global, tensor, storage };
  Kind kind = Kind::none;
  bool ordered = false;    // dict: an OrderedDict
  std::int64_t i = 0;      // integer, boolean; tensor/storage: index into the side tables
  double f = 0;            // floating
  std::string s;           // string, bytes, global ("module.name")
  std::vector<Obj*> items;  // list, tuple; dict: key, value, key, value...
};

struct Storage {
  dtype type;
  std::string key;
  std::uint64_t numel;
};
struct Tensor {
  std::size_t storage;
  std::uint64_t offset;
  std::vector<std::int64_t> size, stride;
};

// The parsed pickle: the root object, and the arena and tables it points into.
struct Parsed {
  std::deque<Obj> arena;
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  Obj* root = nullptr;
};

class Unpickler {
 public:
  // fail(what): throws naming the checkpoint and the pickle (a corrupt file);
  // refuse(what): throws for what is refused by design (a global).
  Unpickler(std::span<const std::byte> bytes, std::string checkpoint, std::string where)
      : b_(bytes), checkpoint_(std::move(checkpoint)), where_(std::move(where)) {}

  Parsed parse() {
    if (b_.size() > max_pickle_bytes) fail(std::to_string(b_.size()) + " bytes, over the limit of 256 MiB");
    Parsed out;
    p_ = &out;
    while (true) {
      const std::uint8_t op = u8();
      switch (op) {
        case 0x80: u8(); break;                      // PROTO
        case 0x95: take(8); break;                   // FRAME
        case '.': {                                  // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " objects on the stack");
          out.root = stack_.back();
          return out;
        }
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '}': push(make(Obj::Kind::dict)); break;
        case ']': push(make(Obj::Kind::list)); break;
        case ')': push(make(Obj::Kind::tuple)); break;
        case 't': {
          Obj* t = make(Obj::Kind::tuple);
          t->items = pop_mark();
          push(t);
          break;
        }
        case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
          const std::size_t n = op - 0x84u;
          if (stack_.size() < n + floor()) fail("TUPLE" + std::to_string(n) + " on a short stack");
          Obj* t = make(Obj::Kind::tuple);
          t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(t);
          break;
        }
        case 'N': push(make(Obj::Kind::none)); break;
        case 0x88: case 0x89: {
          Obj* o = make(Obj::Kind::boolean);
          o->i = op == 0x88;
          push(o);
          break;
        }
        case 'J': push(integer(static_cast<std::int32_t>(le(4)))); break;
        case 'K': push(integer(u8())); break;
        case 'M': push(integer(static_cast<std::int64_t>(le(2)))); break;
        case 0x8a: {  // LONG1: n bytes of two's complement, little-endian
          const std::size_t n = u8();
          if (n > 8) fail("an integer of " + std::to_string(n) + " bytes, wider than 64 bits");
          const auto d = take(n);
          std::uint64_t v = 0;
          for (std::size_t k = n; k-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(d[k]);
          if (n > 0 && n < 8 && (static_cast<std::uint8_t>(d[n - 1]) & 0x80)) v |= ~std::uint64_t{0} << (8 * n);
          push(integer(static_cast<std::int64_t>(v)));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          const auto d = take(8);
          std::uint64_t v = 0;
          for (std::size_t k = 0; k < 8; ++k) v = (v << 8) | static_cast<std::uint8_t>(d[k]);
          Obj* o = make(Obj::Kind::floating);
          o->f = std::bit_cast<double>(v);
          push(o);
          break;
        }
        case 'X': push(text(Obj::Kind::string, le(4))); break;       // BINUNICODE
        case 0x8c: push(text(Obj::Kind::string, u8())); break;      // SHORT_BINUNICODE
        case 0x8d: push(text(Obj::Kind::string, le(8))); break;     // BINUNICODE8
        case 'U': push(text(Obj::Kind::bytes, u8())); break;        // SHORT_BINSTRING
        case 'C': push(text(Obj::Kind::bytes, u8())); break;        // SHORT_BINBYTES
        case 'B': push(text(Obj::Kind::bytes, le(4))); break;       // BINBYTES
        case 'q': memo_put(u8()); break;                            // BINPUT
        case 'r': memo_put(le(4)); break;                           // LONG_BINPUT
        case 0x94: memo_put(memo_.size()); break;                   // MEMOIZE
        case 'h': push(memo_get(u8())); break;                      // BINGET
        case 'j': push(memo_get(le(4))); break;                     // LONG_BINGET
        case 'c': {                                                 // GLOBAL module\nname\n
          std::string module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Obj* name = pop();
          Obj* module = pop();
          if (module->kind != Obj::Kind::string || name->kind != Obj::Kind::string) fail("STACK_GLOBAL of non-strings");
          push(global(module->s, name->s));
          break;
        }
        case 'R': {  // REDUCE: callable(*args)
          Obj* args = pop();
          Obj* fn = pop();
          push(call(fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args); torch allows Parameter alone
          Obj* args = pop();
          Obj* cls = pop();
          if (cls->kind != Obj::Kind::global || cls->s != "torch.nn.parameter.Parameter")
            refuse("NEWOBJ of " + describe(cls) + " (only torch.nn.parameter.Parameter may be built this way)");
          if (args->kind != Obj::Kind::tuple || args->items.empty() || args->items[0]->kind != Obj::Kind::tensor)
            fail("Parameter built from something other than a tensor");
          push(args->items[0]);
          break;
        }
        case 'b': {  // BUILD: setstate; an OrderedDict's attributes (a state_dict's _metadata) are dropped
          Obj* state = pop();
          Obj* inst = top();
          (void)state;
          if (inst->kind != Obj::Kind::dict && inst->kind != Obj::Kind::tensor)
            refuse("BUILD of " + describe(inst) + " (only dicts and tensors may be given state)");
          break;
        }
        case 'Q': {  // BINPERSID
          Obj* pid = pop();
          push(persistent(pid));
          break;
        }
        case 'a': {
          Obj* v = pop();
          list_top("APPEND")->items.push_back(v);
          break;
        }
        case 'e': {
          auto v = pop_mark();
          Obj* l = list_top("APPENDS");
          l->items.insert(l->items.end(), v.begin(), v.end());
          break;
        }
        case 's': {
          Obj* v = pop();
          Obj* k = pop();
          Obj* d = dict_top("SETITEM");
          d->items.push_back(k);
          d->items.push_back(v);
          break;
        }
        case 'u': {
          auto v = pop_mark();
          if (v.size() % 2) fail("SETITEMS with an odd number of objects");
          Obj* d = dict_top("SETITEMS");
          d->items.insert(d->items.end(), v.begin(), v.end());
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("pickle opcode ") + hex + " at byte " + std::to_string(at_ - 1) +
               " is not one torch.load(weights_only=True) accepts");
        }
      }
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw CorruptCheckpointError(checkpoint_, "", where_ + ": " + what);
  }
  [[noreturn]] void refuse(const std::string& what) const {
    throw Error(checkpoint_, "",
                where_ + ": refused " + what +
                    "; ckpt reads only what torch.load(weights_only=True) accepts (dicts, lists, tuples, numbers, "
                    "strings, tensors) and never imports or calls anything");
  }

 private:
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::span<const std::byte> take(std::uint64_t n) {
    if (n > b_.size() - at_) fail("ends inside an opcode at byte " + std::to_string(at_) + " (no STOP)");
    const auto s = b_.subspan(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  std::uint64_t le(int n) {
    const auto d = take(static_cast<std::uint64_t>(n));
    std::uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<std::uint8_t>(d[static_cast<std::size_t>(k)]);
    return v;
  }
  std::string line() {
    std::string s;
    while (true) {
      const char c = static_cast<char>(u8());
      if (c == '\n') return s;
      if (s.size() >= 256) fail("a GLOBAL name longer than 256 bytes");
      s.push_back(c);
    }
  }
  Obj* make(Obj::Kind k) {
    if (p_->arena.size() >= max_objects) fail("creates more than " + std::to_string(max_objects) + " objects");
    Obj& o = p_->arena.emplace_back();
    o.kind = k;
    return &o;
  }
  Obj* integer(std::int64_t v) {
    Obj* o = make(Obj::Kind::integer);
    o->i = v;
    return o;
  }
  Obj* text(Obj::Kind k, std::uint64_t n) {
    const auto d = take(n);
    Obj* o = make(k);
    o->s.assign(reinterpret_cast<const char*>(d.data()), d.size());
    return o;
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Obj* o) { stack_.push_back(o); }
  Obj* pop() {
    if (stack_.size() <= floor()) fail("pops an empty stack at byte " + std::to_string(at_ - 1));
    Obj* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Obj* top() {
    if (stack_.size() <= floor()) fail("reads an empty stack at byte " + std::to_string(at_ - 1));
    return stack_.back();
  }
  std::vector<Obj*> pop_mark() {
    if (marks_.empty()) fail("has no MARK for an opcode at byte " + std::to_string(at_ - 1));
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj*> v(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return v;
  }
  Obj* list_top(const char* op) {
    Obj* l = top();
    if (l->kind != Obj::Kind::list) fail(std::string(op) + " to " + describe(l) + ", not a list");
    return l;
  }
  Obj* dict_top(const char* op) {
    Obj* d = top();
    if (d->kind != Obj::Kind::dict) fail(std::string(op) + " to " + describe(d) + ", not a dict");
    return d;
  }
  void memo_put(std::uint64_t k) {
    if (memo_.size() >= max_objects && !memo_.count(k)) fail("memo holds too many objects");
    memo_[k] = top();
  }
  Obj* memo_get(std::uint64_t k) {
    const auto it = memo_.find(k);
    if (it == memo_.end()) fail("memo key " + std::to_string(k) + " read before it was written");
    return it->second;
  }

  static std::string describe(const Obj* o) {
    switch (o->kind) {
      case Obj::Kind::global: return "global " + ckpt::detail::safe_text(o->s, 200);
      case Obj::Kind::tensor: return "a tensor";
      case Obj::Kind::storage: return "a storage";
      case Obj::Kind::dict: return "a dict";
      case Obj::Kind::list: return "a list";
      case Obj::Kind::tuple: return "a tuple";
      case Obj::Kind::string: return "a string";
      default: return "a number";
    }
  }

  // The globals weights_only allows; any other is refused here, before anything else.
  Obj* global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    bool ok = full == "collections.OrderedDict" || full == "torch._utils._rebuild_tensor_v2" ||
              full == "torch._utils._rebuild_tensor" || full == "torch._utils._rebuild_parameter" ||
              full == "torch._utils._rebuild_parameter_with_state" || full == "torch.nn.parameter.Parameter" ||
              full == "torch.Size";
    if (module == "torch" && storage_dtype(name)) ok = true;
    if (module == "torch")
      for (const auto d : torch_dtypes)
        if (name == d) ok = true;
    if (!ok) refuse("the global " + ckpt::detail::safe_text(full, 200));
    Obj* o = make(Obj::Kind::global);
    o->s = full;
    return o;
  }

  std::int64_t int_arg(const Obj* o, const char* what) const {
    if (o->kind != Obj::Kind::integer) fail(std::string(what) + " is not an integer");
    return o->i;
  }
  std::vector<std::int64_t> ints(const Obj* o, const char* what) const {
    if (o->kind != Obj::Kind::tuple && o->kind != Obj::Kind::list) fail(std::string(what) + " is not a tuple");
    if (o->items.size() > max_rank) fail(std::string(what) + " has more than 64 dimensions");
    std::vector<std::int64_t> v;
    for (const Obj* x : o->items) v.push_back(int_arg(x, what));
    return v;
  }

  // REDUCE: the allowed calls, their results built here.
  Obj* call(Obj* fn, Obj* args) {
    if (fn->kind != Obj::Kind::global) refuse("a call of " + describe(fn) + " (REDUCE of a non-global)");
    if (args->kind != Obj::Kind::tuple) fail("REDUCE arguments are not a tuple");
    const auto& a = args->items;
    const std::string& f = fn->s;
    if (f == "collections.OrderedDict") {
      if (!a.empty()) fail("OrderedDict built from arguments (torch.save pickles it empty, then sets its items)");
      Obj* d = make(Obj::Kind::dict);
      d->ordered = true;
      return d;
    }
    if (f == "torch.Size") {
      if (a.size() != 1) fail("torch.Size takes one tuple");
      Obj* t = make(Obj::Kind::tuple);
      for (auto v : ints(a[0], "torch.Size")) t->items.push_back(integer(v));
      return t;
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      if (a.size() < 4) fail(f + " with fewer than 4 arguments");
      if (a[0]->kind != Obj::Kind::storage) fail(f + " of something other than a storage");
      Tensor t;
      t.storage = static_cast<std::size_t>(a[0]->i);
      const std::int64_t off = int_arg(a[1], "storage offset");
      if (off < 0) fail("negative storage offset");
      t.offset = static_cast<std::uint64_t>(off);
      t.size = ints(a[2], "tensor size");
      t.stride = ints(a[3], "tensor stride");
      if (t.size.size() != t.stride.size()) fail("tensor size and stride differ in rank");
      for (std::size_t k = 0; k < t.size.size(); ++k)
        if (t.size[k] < 0 || t.stride[k] < 0) fail("negative tensor size or stride");
      Obj* o = make(Obj::Kind::tensor);
      o->i = static_cast<std::int64_t>(p_->tensors.size());
      p_->tensors.push_back(std::move(t));
      return o;
    }
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != Obj::Kind::tensor) fail(f + " of something other than a tensor");
      return a[0];
    }
    refuse("a call of the global " + ckpt::detail::safe_text(f, 200));
  }

  // ('storage', torch.FloatStorage, key, location, numel)
  Obj* persistent(Obj* pid) {
    if (pid->kind != Obj::Kind::tuple || pid->items.size() != 5)
      fail("a persistent id that is not ('storage', type, key, location, numel)");
    const auto& a = pid->items;
    if ((a[0]->kind != Obj::Kind::string && a[0]->kind != Obj::Kind::bytes) || a[0]->s != "storage")
      refuse("a persistent id other than a storage");
    if (a[1]->kind != Obj::Kind::global || !a[1]->s.starts_with("torch.") || !storage_dtype(a[1]->s.substr(6)))
      fail("a storage whose type is " + describe(a[1]) + ", not a torch storage type");
    if (a[2]->kind != Obj::Kind::string) fail("a storage key that is not a string");
    const std::int64_t numel = int_arg(a[4], "storage size");
    if (numel < 0) fail("negative storage size");
    const std::string& key = a[2]->s;
    if (key.empty() || key.size() > 64 || key.find_first_of("/\\") != std::string::npos || key == "." || key == "..")
      fail("storage key " + quote_for_message(ckpt::detail::safe_text(key, 80)) + " is not a plain name");
    Obj* o = make(Obj::Kind::storage);
    o->i = static_cast<std::int64_t>(p_->storages.size());
    p_->storages.push_back({*storage_dtype(a[1]->s.substr(6)), key, static_cast<std::uint64_t>(numel)});
    return o;
  }

  std::span<const std::byte> b_;
  std::size_t at_ = 0;
  std::string checkpoint_, where_;
  Parsed* p_ = nullptr;
  std::vector<Obj*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Obj*> memo_;
};

// ---- writing ---------------------------------------------------------------------

// Protocol 2 as torch.save writes it; globals memoised after their first use.
class Pickler {
 public:
  Pickler() {
    out_ += "\x80\x02";
  }
  std::string finish() {
    out_ += '.';
    return std::move(out_);
  }

  void none() { out_ += 'N'; }
  void boolean(bool v) { out_ += v ? '\x88' : '\x89'; }
  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      put(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      put(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    } else {
      out_ += '\x8a';
      out_ += '\x08';
      put(static_cast<std::uint64_t>(v), 8);
    }
  }
  void floating(double v) {
    out_ += 'G';
    const auto u = std::bit_cast<std::uint64_t>(v);
    for (int k = 7; k >= 0; --k) out_ += static_cast<char>((u >> (8 * k)) & 0xff);
  }
  void string(std::string_view s) {
    out_ += 'X';
    put(s.size(), 4);
    out_ += s;
  }
  void global(const std::string& module, const std::string& name) {
    const std::string full = module + "\n" + name + "\n";
    if (const auto it = memo_.find(full); it != memo_.end()) {
      get(it->second);
      return;
    }
    out_ += 'c';
    out_ += full;
    const std::uint32_t k = static_cast<std::uint32_t>(memo_.size());
    memo_[full] = k;
    out_ += 'r';
    put(k, 4);
  }
  void mark() { out_ += '('; }
  void tuple() { out_ += 't'; }
  void empty_tuple() { out_ += ')'; }
  void empty_list() { out_ += ']'; }
  void appends() { out_ += 'e'; }
  void empty_dict() { out_ += '}'; }
  void ordered_dict() {
    global("collections", "OrderedDict");
    out_ += ")R";
  }
  void setitems() { out_ += 'u'; }
  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  void tensor(std::string_view storage_type, const std::string& key, std::uint64_t numel, const std::vector<std::int64_t>& shape) {
    global("torch._utils", "_rebuild_tensor_v2");
    mark();
    mark();
    string("storage");
    global("torch", std::string(storage_type));
    string(key);
    string("cpu");
    integer(static_cast<std::int64_t>(numel));
    tuple();
    out_ += 'Q';
    integer(0);
    mark();
    for (auto s : shape) integer(s);
    tuple();
    mark();
    std::int64_t stride = 1;
    std::vector<std::int64_t> strides(shape.size());
    for (std::size_t k = shape.size(); k-- > 0;) {
      strides[k] = stride;
      stride *= std::max<std::int64_t>(shape[k], 1);
    }
    for (auto s : strides) integer(s);
    tuple();
    boolean(false);
    ordered_dict();
    tuple();
    out_ += 'R';
  }

 private:
  void put(std::uint64_t v, int n) {
    for (int k = 0; k < n; ++k) out_ += static_cast<char>((v >> (8 * k)) & 0xff);
  }
  void get(std::uint32_t k) {
    out_ += 'j';
    put(k, 4);
  }
  std::string out_;
  std::map<std::string, std::uint32_t> memo_;
};

}  // namespace ckpt::detail::pytorch::pickle
