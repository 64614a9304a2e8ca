// ckpt/restore.hpp — ckpt::restore, restore_into, restore_tree and metadata.
#pragma once

#include <filesystem>

#include <ckpt/format/native.hpp>
#include <ckpt/options.hpp>
#include <ckpt/tree/fill.hpp>
#include <ckpt/tree/tree.hpp>

namespace ckpt {

namespace detail {
template <class T>
void restore_from_index(const Index& index, T& target, const RestoreOptions& opts, bool check_dynamic_shapes) {
  node::require_tree<T>();
  Path path = Path::parse(opts.subtree);
  if (!path.empty() && !index.has_subtree(path))
    throw MissingLeafError(index.checkpoint(), {path.str()});
  FillContext ctx{index, check_dynamic_shapes, opts.verify_checksums, opts.allow_missing, {}};
  fill(target, path, ctx);
  if (!ctx.missing.empty()) throw MissingLeafError(index.checkpoint(), std::move(ctx.missing));
}
}  // namespace detail

// Restores into an existing value: its non-empty arrays must have the checkpoint's shapes.
template <class T>
void restore_into(const std::filesystem::path& dir, T& target, const RestoreOptions& opts = {}) {
  detail::restore_from_index(*open_index(dir), target, opts, true);
}

// Restores a new T (default-constructed, then filled; arrays take the checkpoint's shapes).
template <class T>
T restore(const std::filesystem::path& dir, const RestoreOptions& opts = {}) {
  static_assert(std::is_default_constructible_v<T>, "ckpt::restore<T> needs a default-constructible T; "
                                                    "use ckpt::restore_into(dir, value) otherwise");
  T value{};
  detail::restore_from_index(*open_index(dir), value, opts, false);
  return value;
}

// Every leaf, loaded and verified, with no target type.
inline Tree restore_tree(const std::filesystem::path& dir) { return Tree(open_index(dir), true); }

// Paths, dtypes and shapes, reading only the manifest.
inline Tree metadata(const std::filesystem::path& dir) { return Tree(open_index(dir), false); }

}  // namespace ckpt
