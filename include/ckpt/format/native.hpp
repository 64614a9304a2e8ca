// ckpt/format/native.hpp — the default storage format, as a policy type for save<Format>.
//
// A format policy provides:
//   static constexpr const char* name;
//   static void write(const Snapshot&, const fs::path& staging_dir, const SaveOptions&);
//   static bool detect(const fs::path& dir);                      // does dir hold this format?
//   static std::shared_ptr<const Index> open(const fs::path& dir); // manifest only, no data
// It never sees the C++ type being saved.
#pragma once

#include <ckpt/format/native/reader.hpp>
#include <ckpt/format/native/writer.hpp>

namespace ckpt {

struct native {
  static constexpr const char* name = "native";
  static void write(const Snapshot& s, const std::filesystem::path& dir, const SaveOptions& o) {
    native_format::write(s, dir, o);
  }
  static bool detect(const std::filesystem::path& dir) { return native_format::detect(dir); }
  static std::shared_ptr<const Index> open(const std::filesystem::path& dir) { return native_format::open(dir); }
};

template <class F>
concept format_policy = requires(const Snapshot& s, const std::filesystem::path& p, const SaveOptions& o) {
  { F::name } -> std::convertible_to<const char*>;
  F::write(s, p, o);
  { F::detect(p) } -> std::convertible_to<bool>;
  { F::open(p) } -> std::convertible_to<std::shared_ptr<const Index>>;
};
static_assert(format_policy<native>);

}  // namespace ckpt
