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
#include <ckpt/storage/storage.hpp>

namespace ckpt {

// One registered format, as function pointers so that the list holds any format type.
struct FormatEntry {
  std::string_view name;
  // Lower first; formats whose layouts contain another's marker files go before it
  // (Orbax step directories hold t5x-like msgpack files).
  int detect_order = 100;
  bool (*detect)(const std::filesystem::path&) = nullptr;
  bool (*is_committed)(const std::filesystem::path&) = nullptr;
  std::shared_ptr<const Index> (*open)(const std::filesystem::path&) = nullptr;
  // Writing, for formats that can (null for read-only ones): write fills a staging
  // directory (save.hpp publishes it); save_file, for single-file formats, writes and
  // publishes the file itself.
  void (*write)(const Snapshot&, const std::filesystem::path&, const SaveOptions&) = nullptr;
  void (*save_file)(const std::filesystem::path&, const Snapshot&, const SaveOptions&) = nullptr;
  // Whether the writer takes streamed leaves (LeafBytes::stream), reading each through a
  // buffer within SaveOptions::max_memory; other writers are given leaves in memory.
  bool writes_streams = false;
};

namespace detail {
template <readable_format F>
FormatEntry format_entry(int detect_order) {
  FormatEntry e{F::name, detect_order, [](const std::filesystem::path& p) -> bool { return F::detect(p); },
                [](const std::filesystem::path& p) -> bool { return F::is_committed(p); },
                [](const std::filesystem::path& p) -> std::shared_ptr<const Index> { return F::open(p); }};
  if constexpr (format_policy<F>) e.write = &F::write;
  if constexpr (requires { &F::save_file; }) e.save_file = &F::save_file;
  if constexpr (requires { F::writes_streams; }) e.writes_streams = F::writes_streams;
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
// A format's open(), every failure a ckpt::Error naming path: one a reader did not
// foresee (a std::exception from a library it uses) is turned into one here.
inline std::shared_ptr<const Index> open_with(const FormatEntry& e, const std::filesystem::path& path) {
  try {
    return e.open(path);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(path.string(), "", std::string("out of memory reading the ") + std::string(e.name) + " checkpoint");
  } catch (const std::exception& x) {
    throw CorruptCheckpointError(path.string(), "",
                                 std::string("cannot read the ") + std::string(e.name) + " checkpoint: " + x.what());
  }
}
}  // namespace detail

// Opens whatever registered format path holds. With no match, a directory is opened as
// native (its error says what is missing).
CKPT_API std::shared_ptr<const Index> open_index(const std::filesystem::path& path);
#if CKPT_DEFINE_API
CKPT_API std::shared_ptr<const Index> open_index(const std::filesystem::path& path) {
  if (const storage::UrlScheme* scheme = storage::find_url_scheme(path))  // s3://, mem://
    return scheme->open_index(scheme->open(path.native()));
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
