// ckpt/options.hpp — the run-time knobs of save and restore, as designated-initializer structs.
#pragma once

#include <cstddef>
#include <string>

namespace ckpt {

struct SaveOptions {
  // Overwrite an existing checkpoint at the same path (atomically swapped in).
  bool force = false;
  // Leaves smaller than this many bytes are stored inside the manifest.
  std::size_t inline_threshold = 4096;
  // Data files written in parallel, one thread each (0: one per hardware thread, at most 8).
  unsigned data_files = 1;
};

struct RestoreOptions {
  // Restore the checkpoint's subtree at this dotted path into the target ("" is the root).
  std::string subtree{};
  // Keep the target's value for leaves the checkpoint lacks instead of throwing MissingLeafError.
  bool allow_missing = false;
  // Verify every leaf's xxh3 checksum (costs one pass over the bytes at memory speed).
  bool verify_checksums = true;
};

}  // namespace ckpt
