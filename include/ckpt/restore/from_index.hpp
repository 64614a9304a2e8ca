// ckpt/restore/from_index.hpp — a typed restore from an Index: the fill of a target,
// its reads queued and run on several threads (exec/parallel_reads.hpp).
//
// ckpt::restore reads a checkpoint's Index through it when the native format's leaf
// table does not serve (restore.hpp); so do allocate<T> and the restores of a tree
// that was edited first (a transform, TensorFlow names translated by ckpt::tf).
#pragma once

#include <memory>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/function_ref.hpp>
#include <ckpt/exec/parallel_reads.hpp>
#include <ckpt/index.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore/fill.hpp>
#include <ckpt/restore/tree.hpp>

namespace ckpt {

namespace detail {
// The index a restore reads: the checkpoint's own, or its tree after the caller's transform.
CKPT_API std::shared_ptr<const Index> index_for(std::shared_ptr<const Index> index, const RestoreOptions& opts);
// The path of opts.subtree, which must exist in index.
CKPT_API Path subtree_path(const Index& index, const RestoreOptions& opts);
// After the fill from `start`: reports every missing leaf at once, then the leaves the
// target did not use (unless partial), then runs the queued reads.
CKPT_API void finish_restore(const FillContext& ctx, const Path& start, exec::ReadQueue& reads);

// The one part of a typed restore that depends on the target's type: fill_from_index<T>,
// which sizes the target and queues its reads. The rest of a restore (the read queue,
// the fill context, the reports) is compiled once, not once per target type and unit.
using TargetFill = FunctionRef<void(Path&, FillContext&)>;
template <class T>
auto target_fill(T& target) {
  return [&target](Path& path, FillContext& ctx) { fill_from_index(target, path, ctx); };
}

// A restore from index through fill: the reads queued and run, missing and unused leaves reported.
CKPT_API void restore_index_with(std::shared_ptr<const Index> index, const RestoreOptions& opts, bool check_dynamic_shapes,
                                 bool shape_only, TargetFill fill);

template <class T>
void restore_from_index(std::shared_ptr<const Index> index, T& target, const RestoreOptions& opts,
                        bool check_dynamic_shapes, bool shape_only = false) {
  node::require_tree<T>();
  restore_index_with(std::move(index), opts, check_dynamic_shapes, shape_only, target_fill(target));
}

}  // namespace detail

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

CKPT_API void detail::restore_index_with(std::shared_ptr<const Index> index, const RestoreOptions& opts,
                                         bool check_dynamic_shapes, bool shape_only, TargetFill fill) {
  index = index_for(std::move(index), opts);
  Path path = subtree_path(*index, opts);
  exec::ReadQueue reads;
  reads.reserve(index->entries().size());
  if (opts.progress) reads.set_progress(opts.progress, index->checkpoint());
  IndexFill ctx(index, {check_dynamic_shapes, opts.verify_checksums, opts.restore_dtype, shape_only, &reads, opts.max_memory},
                opts.allow_missing, opts.partial);
  fill(path, ctx);  // sizes the target and queues the reads
  finish_restore(ctx, path, reads);
}

CKPT_API void detail::finish_restore(const FillContext& ctx, const Path& start, exec::ReadQueue& reads) {
  if (!ctx.missing.empty()) throw MissingLeafError(ctx.checkpoint(), ctx.missing);
  ctx.check_used(start);
  reads.run();
}
#endif

}  // namespace ckpt
