// ckpt/restore.hpp — ckpt::restore, restore_into, restore_tree, metadata and allocate.
#pragma once

#include <filesystem>
#include <memory>

#include <ckpt/detail/static_error.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore/fill.hpp>
#include <ckpt/restore/from_index.hpp>
#include <ckpt/restore/table_fill.hpp>
#include <ckpt/restore/tree.hpp>
#if CKPT_DEFINE_API
#include <ckpt/format/native/leaf_table_fill.hpp>  // table_fill(), which restore/table_fill.hpp declares
#endif

namespace ckpt {

namespace detail {
// A restore of the checkpoint at dir into a typed target: from the native format's leaf
// table when it serves (restore/table_fill.hpp), else from the checkpoint's Index.
CKPT_API void restore_dir_with(const std::filesystem::path& dir, const RestoreOptions& opts, bool check_dynamic_shapes,
                              TargetFill fill);
template <class T>
void restore_from_dir(const std::filesystem::path& dir, T& target, const RestoreOptions& opts, bool check_dynamic_shapes) {
  node::require_tree<T>();
  restore_dir_with(dir, opts, check_dynamic_shapes, target_fill(target));
}
}  // namespace detail

#if CKPT_DEFINE_API
CKPT_API void detail::restore_dir_with(const std::filesystem::path& dir, const RestoreOptions& opts,
                                       bool check_dynamic_shapes, TargetFill fill) {
  if (const std::unique_ptr<TableFill> table = table_fill(dir, opts, check_dynamic_shapes)) {
    try {
      Path path = table->start();
      fill(path, *table);
      table->finish();
      return;
    } catch (const NeedsIndex&) {  // what only an Index serves: start again with one
    }
  }
  restore_index_with(open_index(dir), opts, check_dynamic_shapes, false, fill);
}
#endif

// Restores into an existing value: its non-empty arrays must have the checkpoint's shapes.
template <class T>
void restore_into(const std::filesystem::path& dir, T& target, const RestoreOptions& opts = {}) {
  detail::restore_from_dir(dir, target, opts, true);
}

// Restores a new T (default-constructed, then filled; arrays take the checkpoint's shapes).
template <class T>
T restore(const std::filesystem::path& dir, const RestoreOptions& opts = {}) {
  static_assert(std::is_default_constructible_v<T>,
                CKPT_STATIC_ERROR("ckpt::restore<T> needs a default-constructible T",
                                  "Construct the value yourself and fill it with ckpt::restore_into(dir, value).",
                                  CKPT_NAMED_ABOVE));
  T value{};
  detail::restore_from_dir(dir, value, opts, false);
  return value;
}

// Every leaf with no target type: loaded and verified now, or with .lazy = true read
// only when asked for. The options' transform applies.
inline Tree restore_tree(const std::filesystem::path& dir, const RestoreOptions& opts = {}) {
  return Tree(detail::index_for(open_index(dir), opts), !opts.lazy, opts.verify_checksums);
}

// Paths, dtypes and shapes, reading only the manifest.
inline Tree metadata(const std::filesystem::path& dir) { return Tree(open_index(dir), false); }

// An abstract restore, like Orbax's against ShapeDtypeStructs: a T whose arrays,
// vectors and maps are sized from the metadata (elements zero), with no data read.
// Fill it with restore_into, which then reads straight into the allocated memory.
template <class T>
T allocate(const Tree& metadata, const RestoreOptions& opts = {}) {
  T value{};
  detail::restore_from_index(metadata.to_index(), value, opts, false, true);
  return value;
}
template <class T>
T allocate(const std::filesystem::path& dir, const RestoreOptions& opts = {}) {
  return allocate<T>(metadata(dir), opts);
}


}  // namespace ckpt
