// ckpt/manager/step_catalogue.hpp — which committed steps a manager's root holds, each
// with the metadata the manager needs (time, metrics, custom metadata, items); and the
// clean-up of what interrupted saves and deletes leave. A step's metrics are read here
// once, as Orbax reads them (load_step_info), for both managers and `ckpt ls`.
//
// Written once against the storage concept (storage/storage.hpp): a root is a
// storage::Location, a local directory (PosixStorage) or a prefix on S3 or in memory.
// A step is one of the root's children() named as a step and committed, and deleting
// one is the storage's remove_prefix (marker first on an object store, renamed aside
// first in a directory). What only a directory has is asked of local_directory(): the
// staging directories of live writers (flock), and the modification time of a step
// saved without metadata.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/manager/step_metadata.hpp>
#include <ckpt/manager/step_name.hpp>
#include <ckpt/retain/record.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::manager {

// The format's Format::is_committed: a step directory without it is torn.
using CommitCheck = bool (*)(const std::filesystem::path&);

// Whether the step at `step` is committed. On an object store: its commit marker,
// written last. In a directory, published whole by a rename: the format's own commit
// record, which also tells a step that another writer left torn (Orbax and t5x write
// their directories in place).
inline bool step_committed(const storage::Location& step, CommitCheck format_committed) {
  if (const auto dir = step.storage->local_directory()) return format_committed(*dir / step.prefix);
  return step.storage->size(step.key(storage::commit_marker)).has_value();
}

struct StepInfo {
  std::string name;
  std::chrono::system_clock::time_point time{};
  Metrics metrics{};
  nlohmann::json custom_metadata{};
  std::map<std::string, std::string> items{};
  nlohmann::json save_stats{};  // the manager's save figures; null when none were stored
  bool finite = true;  // false: the non-finite guard found NaN or infinities in the step
};

// The metrics of the step's Orbax metrics item, <step>/metrics/metrics (with
// `item_named`, _CHECKPOINT_METADATA's item_handlers names the item: then, as Orbax v1's
// MetricsHandler reads it, metrics/data.json or metrics/metadata when that file is
// absent); none when there is no such file. A file that cannot be read, is larger than
// max_metrics_item_bytes, is a symbolic link or is not a JSON object is a
// CorruptCheckpointError naming the step: ranking the step as one without metrics
// could delete the best one.
inline Metrics read_metrics_item(const storage::Location& step, bool item_named) {
  const auto dir = step.storage->local_directory();
  for (std::size_t i = 0; i < (item_named ? orbax_metrics_files.size() : 1); ++i) {
    const std::string file = std::string(orbax_metrics_item) + "/" + orbax_metrics_files[i];
    std::optional<std::vector<std::byte>> bytes;
    try {
      bytes = step.storage->read_all(step.key(file), max_metrics_item_bytes);
    } catch (const Error& e) {
      throw CorruptCheckpointError(step.url, "", "the metrics item " + file + " cannot be read: " + e.what());
    }
    if (!bytes) continue;
    if (dir && io::has_symlink_below(*dir / step.prefix, file))
      throw CorruptCheckpointError(step.url, "", "the metrics item " + file + " is a symbolic link");
    return parse_metrics_item(*bytes, step.url, file);
  }
  return {};
}

// A step's metadata. A step saved by ckpt::save (no metadata) or with unreadable
// metadata still counts, timed by its directory (on an object store: time zero). Its
// metrics are those of _CHECKPOINT_METADATA when it has a non-empty "metrics", else
// those of its Orbax metrics item (read_metrics_item, whose errors are thrown): Orbax's
// CheckpointManager's order.
inline StepInfo load_step_info(const storage::Location& step, std::string name) {
  StepInfo info;
  info.name = std::move(name);
  std::optional<StepMetadata> m;
  try {
    if (const auto bytes = step.storage->read_all(step.key(step_metadata_file), max_step_metadata_bytes))
      m = parse_step_metadata(*bytes, step.url);
  } catch (const Error&) {
  }
  if (m) {
    info.time = m->init_time();
    info.metrics = std::move(m->metrics);
    info.custom_metadata = std::move(m->custom_metadata);
    info.items = std::move(m->items);
    info.save_stats = std::move(m->save_stats);
    info.finite = m->finite;
  } else if (const auto dir = step.storage->local_directory()) {
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(*dir / step.prefix, ec);
    if (!ec)
      info.time = std::chrono::time_point_cast<std::chrono::system_clock::duration>(
          std::chrono::file_clock::to_sys(mtime));
  }
  if (!m || !m->metrics_given) info.metrics = read_metrics_item(step, m && m->names_metrics_item);
  return info;
}

// Removes what interrupted saves and deletes leave: steps without a commit, and
// staging entries. In a directory, only the .tmp- directories no live writer holds (a
// plain ckpt::save into the root may be running); an object store has no lock, so,
// like Orbax on GCS, this assumes no other process is saving into the root meanwhile.
inline void cleanup_root(const storage::Location& root, const StepNaming& naming, CommitCheck is_committed) {
  if (const auto dir = root.storage->local_directory()) io::remove_stale_staging(*dir / root.prefix);
  for (const auto& name : root.storage->children(root.prefix)) {
    const bool leftover = name.starts_with(io::staging_prefix) ||
                          (naming.parse(name) && !step_committed(root.child(name), is_committed));
    if (leftover) root.storage->remove_prefix(root.key(name));
  }
}

// The committed steps under root, by step number.
inline std::map<std::int64_t, StepInfo> scan_root(const storage::Location& root, const StepNaming& naming,
                                                  CommitCheck is_committed) {
  std::map<std::int64_t, StepInfo> found;
  for (const auto& name : root.storage->children(root.prefix)) {
    const auto step = naming.parse(name);
    if (!step) continue;
    // Two spellings of one step (another fixed length): the canonical one wins.
    if (found.contains(*step) && name != naming.name(*step)) continue;
    const storage::Location dir = root.child(name);
    if (!step_committed(dir, is_committed)) continue;
    found[*step] = load_step_info(dir, name);
  }
  return found;
}

// " (steps: 1 2 3)" for an error message, the first 20 at most.
inline std::string steps_list(const std::map<std::int64_t, StepInfo>& steps) {
  if (steps.empty()) return " (no steps)";
  std::string s = " (steps:";
  std::size_t n = 0;
  for (const auto& [step, info] : steps) {
    if (++n > 20) return s + " ...)";
    s += ' ';  // appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on " " + string
    s += std::to_string(step);
  }
  return s + ")";
}

// The queries both managers (one process, and ckpt::mpi's) answer from their map of
// committed steps, each under its own lock.
using StepMap = std::map<std::int64_t, StepInfo>;

inline std::vector<std::int64_t> step_numbers(const StepMap& steps) {
  std::vector<std::int64_t> out;
  for (const auto& [step, info] : steps) out.push_back(step);
  return out;
}

inline std::optional<std::int64_t> newest_step(const StepMap& steps) {
  if (steps.empty()) return std::nullopt;
  return steps.rbegin()->first;
}

// The step's metadata; NoSuchStepError naming the root and listing the steps it has.
inline const StepInfo& step_info(const StepMap& steps, std::int64_t step, const std::filesystem::path& root) {
  const auto it = steps.find(step);
  if (it == steps.end())
    throw NoSuchStepError(root.string(), "", "no step " + std::to_string(step) + steps_list(steps));
  return it->second;
}

inline std::vector<retain::StepRecord> step_records(const StepMap& steps) {
  std::vector<retain::StepRecord> out;
  for (const auto& [step, info] : steps) out.push_back({step, info.time, info.metrics, info.finite});
  return out;
}

// keep_dataset_checkpoints: the steps past the newest `keep` that hold a dataset item
// (newest first), each with its dataset items, which is_dataset_item(name) picks out.
// The manager drops them on disk (drop_step_items) and then from its map (forget_items).
struct StepItems {
  std::int64_t step = 0;
  std::string name;
  std::vector<std::string> items;
};

template <class IsDatasetItem>
std::vector<StepItems> dataset_items_past(const StepMap& steps, int keep, IsDatasetItem&& is_dataset_item) {
  std::vector<StepItems> older;
  int held = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    StepItems s{it->first, it->second.name, {}};
    for (const auto& [item, kind] : it->second.items)
      if (is_dataset_item(item)) s.items.push_back(item);
    if (!s.items.empty() && held++ >= keep) older.push_back(std::move(s));
  }
  return older;
}

inline void forget_items(StepMap& steps, const StepItems& dropped) {
  if (const auto it = steps.find(dropped.step); it != steps.end())
    for (const auto& item : dropped.items) it->second.items.erase(item);
}

// The directory of the step to read (the newest when none is named), refusing one that
// was replaced by a symbolic link since the root was listed.
inline std::filesystem::path step_dir_to_read(const StepMap& steps, std::optional<std::int64_t> step,
                                              const std::filesystem::path& root) {
  if (!step) step = newest_step(steps);
  if (!step) throw NoSuchStepError(root.string(), "", "no checkpoint to restore (no committed step)");
  const auto dir = root / step_info(steps, *step, root).name;
  std::error_code ec;
  if (std::filesystem::is_symlink(dir, ec))
    throw Error(dir.string(), "", "the step directory is a symbolic link, not a step of this root");
  return dir;
}

}  // namespace ckpt::detail::manager
