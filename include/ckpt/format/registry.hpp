// ckpt/format/registry.hpp — the formats this program can open, and open_index(path).
//
// restore, restore_tree, metadata, the manager and the CLI open a checkpoint through
// open_index, which asks every registered format whether the path holds it. The native
// format is always in the list, added when the list is first used; an interop format
// registers itself by its header (one inline variable): a program that includes only
// <ckpt/ckpt.hpp> knows the native format alone and compiles none of the interop readers;
// <ckpt/formats.hpp> adds all of them. With CKPT_SEPARATE_COMPILATION those inline
// variables are compiled out of the program's units (#if CKPT_DEFINE_API) and the
// library registers every format once (src.hpp includes <ckpt/formats.hpp>): an inline
// variable's initialiser instantiates the format's whole reader and writer in every
// unit that includes the header, which is what separate compilation is there to avoid.
//
// Native is not registered by a static initialiser: that would make every unit that
// includes ckpt compile the whole native reader and writer, whether it saves or not
// (about twice the compile time of a unit that only declares a state).
#pragma once

#include <algorithm>
#include <filesystem>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/error.hpp>
#include <ckpt/format/format.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/storage/kvstore.hpp>
#include <ckpt/storage/object_store.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt {

// One registered format, as function pointers so that the list holds any format type.
// What a format can do is what it declares here; nothing outside a format asks which
// format it is.
struct FormatEntry {
  std::string_view name;
  // Lower first; formats whose layouts contain another's marker files go before it
  // (Orbax step directories hold t5x-like msgpack files).
  int detect_order = 100;
  // A local path (a directory, or the file of a single-file format).
  bool (*detect)(const std::filesystem::path&) = nullptr;
  bool (*is_committed)(const std::filesystem::path&) = nullptr;
  std::shared_ptr<const Index> (*open)(const std::filesystem::path&) = nullptr;
  // A checkpoint anywhere (a directory, objects on S3 or in memory), read through a
  // key-value store by ranged reads of what a restore needs: open_in, or, for a format
  // with a reader of its own over the storage concept, open_location.
  bool (*detect_in)(const io::KvStore&) = nullptr;
  std::shared_ptr<const Index> (*open_in)(std::shared_ptr<const io::KvStore>, const std::string& checkpoint) = nullptr;
  std::shared_ptr<const Index> (*open_location)(const storage::Location&) = nullptr;
  // Writing, for formats that can (null for read-only ones): write_to writes the
  // format's objects through the storage concept, wherever the checkpoint goes (a
  // staging directory, S3, memory); save.hpp publishes them. save_file, for single-file
  // formats, writes and publishes a local file itself.
  void (*write_to)(const Snapshot&, const storage::Location&, const SaveOptions&) = nullptr;
  void (*save_file)(const std::filesystem::path&, const Snapshot&, const SaveOptions&) = nullptr;
  // Whether the writer takes streamed leaves (LeafBytes::stream), reading each through a
  // buffer within SaveOptions::max_memory; other writers are given leaves in memory.
  bool writes_streams = false;
  // Whether the format stores Sharded leaves (boxes of global arrays): check_box refuses
  // a box outside its global shape, before anything is written.
  void (*check_box)(const std::string& checkpoint, const SnapshotLeaf&) = nullptr;
};

namespace detail {
// What save<F> needs of F: its writing side alone, so that a program that saves a
// format does not compile its reader.
template <class F>
FormatEntry writer_entry() {
  FormatEntry e;
  e.name = F::name;
  if constexpr (requires { &F::write_to; }) e.write_to = &F::write_to;
  if constexpr (requires { &F::save_file; }) e.save_file = &F::save_file;
  if constexpr (requires { F::writes_streams; }) e.writes_streams = F::writes_streams;
  if constexpr (requires { F::stores_boxes; }) {
    if constexpr (F::stores_boxes) e.check_box = &F::check_box;
  }
  return e;
}

template <readable_format F>
FormatEntry format_entry(int detect_order) {
  FormatEntry e = writer_entry<F>();
  e.detect_order = detect_order;
  e.detect = [](const std::filesystem::path& p) -> bool { return F::detect(p); };
  e.is_committed = [](const std::filesystem::path& p) -> bool { return F::is_committed(p); };
  e.open = [](const std::filesystem::path& p) -> std::shared_ptr<const Index> { return F::open(p); };
  if constexpr (requires { &F::detect_in; }) e.detect_in = &F::detect_in;
  if constexpr (requires { &F::open_in; }) e.open_in = &F::open_in;
  if constexpr (requires { &F::open_location; }) e.open_location = &F::open_location;
  return e;
}

// Function-local so that registration from other headers' inline variables never runs
// before it exists (static initialisation order across translation units).
inline std::vector<FormatEntry>& format_list() {
  static std::vector<FormatEntry> list{format_entry<ckpt::native>(0)};
  return list;
}
}  // namespace detail

// Adds F to the list once (by name); returns true so that it can initialise an inline variable.
template <readable_format F>
bool register_format(int detect_order = 100) {
  auto& list = detail::format_list();
  const std::string_view name = F::name;
  if (std::none_of(list.begin(), list.end(), [&](const FormatEntry& e) { return e.name == name; })) {
    list.push_back(detail::format_entry<F>(detect_order));
    std::stable_sort(list.begin(), list.end(),
                     [](const FormatEntry& a, const FormatEntry& b) { return a.detect_order < b.detect_order; });
  }
  return true;
}

// The registered formats, in detection order. Interop formats register during static
// initialisation, before main; read the list after that.
inline const std::vector<FormatEntry>& registered_formats() { return detail::format_list(); }

// The registered format of that name, or nullptr.
inline const FormatEntry* find_format(std::string_view name) {
  for (const auto& e : registered_formats())
    if (e.name == name) return &e;
  return nullptr;
}

// The format that path holds, or nullptr when no registered format recognises it.
inline const FormatEntry* detect_format_entry(const std::filesystem::path& path) {
  for (const auto& e : registered_formats())
    if (e.detect(path)) return &e;
  return nullptr;
}

// The name of the format at path ("native", "orbax", ...), or "" when none.
inline std::string detect_format(const std::filesystem::path& path) {
  const FormatEntry* e = detect_format_entry(path);
  return e ? std::string(e->name) : std::string();
}

// A comma-separated list of the registered format names, for messages.
inline std::string registered_format_names() {
  std::string s;
  for (const auto& e : registered_formats()) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

namespace detail {
// A format's opener, every failure a ckpt::Error naming the checkpoint: one a reader did
// not foresee (a std::exception from a library it uses) is turned into one here.
template <class Open>
std::shared_ptr<const Index> open_checked(const FormatEntry& e, const std::string& checkpoint, Open open) {
  try {
    return open();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(checkpoint, "", std::string("out of memory reading the ") + std::string(e.name) + " checkpoint");
  } catch (const std::exception& x) {
    throw CorruptCheckpointError(checkpoint, "",
                                 std::string("cannot read the ") + std::string(e.name) + " checkpoint: " + x.what());
  }
}
inline std::shared_ptr<const Index> open_with(const FormatEntry& e, const std::filesystem::path& path) {
  return open_checked(e, path.string(), [&] { return e.open(path); });
}

// A committed checkpoint on an object store: its objects listed once, the format found
// by what they hold, and read by ranges through the storage.
CKPT_API std::shared_ptr<const Index> open_location(const storage::Location& loc);
}  // namespace detail

// Opens whatever registered format path holds. With no match, a directory is opened as
// native (its error says what is missing).
CKPT_API std::shared_ptr<const Index> open_index(const std::filesystem::path& path);
#if CKPT_DEFINE_API
CKPT_API std::shared_ptr<const Index> detail::open_location(const storage::Location& loc) {
  storage::require_committed(loc);
  const auto kv = std::make_shared<const storage::LocationKv>(loc);
  for (const auto& e : registered_formats()) {
    if (!e.detect_in || !e.detect_in(*kv)) continue;
    if (e.open_location) return open_checked(e, loc.url, [&] { return e.open_location(loc); });
    if (e.open_in) return open_checked(e, loc.url, [&] { return e.open_in(kv, loc.url); });
  }
  std::string hint;
  if (!find_format("orbax")) hint = "; a program that includes <ckpt/formats.hpp> also reads Orbax, t5x, zarr and Flax";
  throw Error(loc.url, "", "no checkpoint format this program reads is here (" + std::to_string(kv->list("", SIZE_MAX).size()) +
                               " objects; formats: " + registered_format_names() + hint + ")");
}

CKPT_API std::shared_ptr<const Index> open_index(const std::filesystem::path& path) {
  if (storage::find_url_scheme(path)) return detail::open_location(storage::open_location(path));  // s3://, mem://
  if (const FormatEntry* e = detect_format_entry(path)) return detail::open_with(*e, path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path.string(), "", "no checkpoint here (nothing exists at this path)");
  if (const FormatEntry* native = find_format("native"); native && std::filesystem::is_directory(path, ec))
    return detail::open_with(*native, path);
  std::string hint;
  if (!find_format("orbax")) hint = "; a program that includes <ckpt/formats.hpp> also reads Orbax, t5x, zarr and Flax";
  throw Error(path.string(), "", "not a checkpoint in any format ckpt reads (" + registered_format_names() + hint + ")");
}
#endif

}  // namespace ckpt
