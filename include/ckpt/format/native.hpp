// ckpt/format/native.hpp — ckpt::native, the default format, as a policy type for save<Format>.
//
// The format itself (manifest, data files, commit marker) is in format/native/; a program
// built with CKPT_SEPARATE_COMPILATION compiles it once, in the library's unit.
#pragma once

#include <filesystem>
#include <memory>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/format/format.hpp>
#include <ckpt/format/native/policy.hpp>
#if CKPT_DEFINE_API
#include <ckpt/io/kvstore.hpp>
#include <ckpt/format/native/reader.hpp>
#include <ckpt/format/native/writer.hpp>
#include <ckpt/detail/static_error.hpp>
#endif

namespace ckpt {

#if CKPT_DEFINE_API
CKPT_API void native::write(const Snapshot& s, const std::filesystem::path& dir, const SaveOptions& o) {
  detail::native::write(s, dir, o);
}
CKPT_API bool native::detect(const std::filesystem::path& dir) { return detail::native::detect(dir); }
CKPT_API bool native::is_committed(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / detail::native::commit_file, ec);
}
CKPT_API std::shared_ptr<const Index> native::open(const std::filesystem::path& dir) { return detail::native::open(dir); }
CKPT_API bool native::detect_in(const io::KvStore& kv) {
  return kv.contains(detail::native::commit_file) || kv.contains(detail::native::manifest_file);
}
CKPT_API void native::write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& o) {
  detail::native::write(s, loc, o);
}
CKPT_API std::shared_ptr<const Index> native::open_location(const storage::Location& loc) {
  return detail::native::open(loc);
}
CKPT_API void native::check_box(const std::string& dir, const SnapshotLeaf& leaf) {
  detail::native::check_leaf_box(dir, leaf);
}
#endif

static_assert(format_policy<native>, CKPT_INTERNAL_CHECK("native must meet format_policy"));
// Not registered here: the registry, which includes this header, lists native from its
// first use (format/registry.hpp).

}  // namespace ckpt
