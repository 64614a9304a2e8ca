// ckpt/restore/table_fill.hpp — a restore that reads a local native checkpoint without
// an Index: the interface restore and restore_into see.
//
// Opening a checkpoint as an Index makes an IndexEntry per leaf, with its Path and its
// Shape on the heap. For 20,000 leaves of 4 KiB that cost a large part of the time of
// reading their bytes, and the Index's lookups and read queue more. A restore into a typed target of a native checkpoint in a local
// directory fills it from the format's leaf table instead (format/native/leaf_table.hpp):
// flat records whose paths and shapes are views into the manifest, matched in place as
// the target is walked. The table answers the fill's questions (a FillContext) and runs
// the reads in finish(). The native format defines both, and table_fill(), in
// format/native/leaf_table_fill.hpp, a layer above this one: restore.hpp includes it.
#pragma once

#include <filesystem>
#include <memory>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore/fill.hpp>

namespace ckpt::detail {

// Thrown by a table fill that meets what only an Index serves: a lazy leaf (which keeps
// its source), a Sharded leaf (which reads boxes), a checkpoint mostly not in the page
// cache (which ReadQueue reads as one stream). The restore then starts again through
// open_index; nothing a fill did before is lost by that, since the second fill makes
// every leaf of the target again. Not a ckpt::Error: no caller ever sees it.
struct NeedsIndex {};

class TableFill : public FillContext {
 public:
  using FillContext::FillContext;
  virtual ~TableFill() = default;
  // Where the fill starts: RestoreOptions::subtree's path (checked to exist).
  virtual Path start() const = 0;
  // After the fill: reports every missing leaf at once, then runs the reads.
  virtual void finish() = 0;
};

// A table fill of the checkpoint at dir, when it is a native checkpoint in a local
// directory and the options ask nothing of the restore that only an Index serves (a
// transform, progress reports, a memory ceiling); else null. Errors of a damaged
// checkpoint are thrown as open_index throws them.
CKPT_API std::unique_ptr<TableFill> table_fill(const std::filesystem::path& dir, const RestoreOptions& opts,
                                               bool check_dynamic_shapes);

}  // namespace ckpt::detail
