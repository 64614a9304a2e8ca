// ckpt/restore.hpp — ckpt::restore, restore_into, restore_tree, metadata and allocate.
#pragma once

#include <filesystem>
#include <memory>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/exec/parallel_reads.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore/fill.hpp>
#include <ckpt/restore/table_fill.hpp>
#include <ckpt/restore/tree.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

namespace detail {
// The index a restore reads: the checkpoint's own, or its tree after the caller's transform.
CKPT_API std::shared_ptr<const Index> index_for(std::shared_ptr<const Index> index, const RestoreOptions& opts);
// The path of opts.subtree, which must exist in index.
CKPT_API Path subtree_path(const Index& index, const RestoreOptions& opts);
// After the fill from `start`: reports every missing leaf at once, then the leaves the
// target did not use (unless partial), then runs the queued reads.
CKPT_API void finish_restore(const FillContext& ctx, const Path& start, exec::ReadQueue& reads);

template <class T>
void restore_from_index(std::shared_ptr<const Index> index, T& target, const RestoreOptions& opts,
                        bool check_dynamic_shapes, bool shape_only = false) {
  node::require_tree<T>();
  index = index_for(std::move(index), opts);
  Path path = subtree_path(*index, opts);
  exec::ReadQueue reads;
  reads.reserve(index->entries().size());
  if (opts.progress) reads.set_progress(opts.progress, index->checkpoint());  // issue 11
  IndexFill ctx(index, {check_dynamic_shapes, opts.verify_checksums, opts.restore_dtype, shape_only, &reads, opts.max_memory},
                  opts.allow_missing, opts.partial);
  fill_from_index(target, path, ctx);  // sizes the target and queues the reads
  finish_restore(ctx, path, reads);
}

// A restore of the checkpoint at dir into a typed target: from the native format's leaf
// table when it serves (restore/table_fill.hpp), else from the checkpoint's Index.
template <class T>
void restore_from_dir(const std::filesystem::path& dir, T& target, const RestoreOptions& opts, bool check_dynamic_shapes) {
  node::require_tree<T>();
  if (const std::unique_ptr<TableFill> table = table_fill(dir, opts, check_dynamic_shapes)) {
    try {
      Path path = table->start();
      fill_from_index(target, path, *table);
      table->finish();
      return;
    } catch (const NeedsIndex&) {  // what only an Index serves: start again with one
    }
  }
  restore_from_index(open_index(dir), target, opts, check_dynamic_shapes);
}
}  // namespace detail

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

#if CKPT_DEFINE_API
CKPT_API std::shared_ptr<const Index> detail::index_for(std::shared_ptr<const Index> index, const RestoreOptions& opts) {
  if (!opts.transform) return index;
  Tree tree(std::move(index), false);
  opts.transform(tree);
  return tree.to_index();
}

CKPT_API Path detail::subtree_path(const Index& index, const RestoreOptions& opts) {
  Path path = Path::parse(opts.subtree);
  if (!path.empty() && !index.has_subtree(path)) throw MissingLeafError(index.checkpoint(), {path.str()});
  return path;
}

CKPT_API void detail::finish_restore(const FillContext& ctx, const Path& start, exec::ReadQueue& reads) {
  if (!ctx.missing.empty()) throw MissingLeafError(ctx.checkpoint(), ctx.missing);
  ctx.check_used(start);
  reads.run();
}
#endif

}  // namespace ckpt
