// ckpt/options.hpp — the run-time knobs of save and restore, as designated-initializer structs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <ckpt/leaf/dtype.hpp>
#include <ckpt/progress.hpp>

namespace ckpt {

class Tree;
struct Snapshot;

struct SaveOptions {
  // Overwrite an existing checkpoint at the same path (atomically swapped in).
  bool force = false;
  // Leaves smaller than this many bytes are stored inside the manifest.
  std::size_t inline_threshold = 4096;
  // Data files written in parallel, one thread each (0: one per hardware thread, at most 8).
  unsigned data_files = 1;
  // Cast real floating leaves to this dtype on save (e.g. bfloat16), only those under
  // save_dtype_prefix (a dotted path; "" is everything).
  std::optional<dtype> save_dtype{};
  std::string save_dtype_prefix{};
  // Edits the flat list of leaves before it is written: rename, drop or add leaves.
  std::function<void(Snapshot&)> transform{};
  // safetensors directories: split the tensors into model-0000i-of-0000n.safetensors
  // files of at most this many bytes each, with model.safetensors.index.json (0: one file).
  std::uint64_t max_shard_bytes = 0;
  // Called with the bytes and leaves written so far, at a bounded rate, from any thread;
  // returning false cancels the save (CancelledError, no checkpoint). See progress.hpp.
  ProgressFn progress{};
  // A ceiling, in bytes, on the memory a save uses beyond the state it saves (0: none).
  // The native and safetensors writers write streamed leaves (ckpt::convert) through
  // buffers within it; see docs/benchmarks.md "Memory budget" for what each format holds.
  std::uint64_t max_memory = 0;
  // When set, the native writers add to it the NaN and infinite elements of the
  // floating and complex leaves they write, counted in the loop that hashes each piece
  // (no second pass over the bytes). What a CheckpointManager's guard_non_finite reads.
  std::atomic<std::uint64_t>* non_finite = nullptr;
};

struct RestoreOptions {
  // Restore the checkpoint's subtree at this dotted path into the target ("" is the root).
  std::string subtree{};
  // Restore a part of the checkpoint on purpose: without it, a restore whose target
  // leaves some of the checkpoint's leaves unused (under subtree, when one is given)
  // throws UnusedLeafError naming them.
  bool partial = false;
  // Keep the target's value for leaves the checkpoint lacks instead of throwing MissingLeafError.
  bool allow_missing = false;
  // Verify every leaf's xxh3 checksum (costs one pass over the bytes at memory speed).
  bool verify_checksums = true;
  // Allow floating leaves to be narrowed to this dtype (float64 -> float32, ...);
  // lossless casts (bfloat16 -> float32, int32 -> int64) need no asking.
  std::optional<dtype> restore_dtype{};
  // Edits the checkpoint's tree (rename, drop, add leaves) before it is matched to
  // the target, like t5x's state_transformation_fns. Leaves are read only if used.
  std::function<void(Tree&)> transform{};
  // restore_tree: read nothing until a leaf is asked for.
  bool lazy = false;
  // ckpt::mpi restores: rank 0 reads the leaves that are not Sharded and broadcasts them.
  bool load_and_broadcast = false;
  // Called with the bytes and leaves read so far, at a bounded rate, from any thread;
  // returning false cancels the restore (CancelledError). See progress.hpp.
  ProgressFn progress{};
  // A ceiling, in bytes, on the memory a restore uses beyond the target itself (0: none):
  // a leaf cast to another dtype is read and converted a piece at a time within it;
  // a leaf that its format can only read whole, and that does not fit, is an Error
  // naming it, before anything is allocated.
  std::uint64_t max_memory = 0;
};

}  // namespace ckpt
