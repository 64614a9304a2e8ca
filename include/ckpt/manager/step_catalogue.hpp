// ckpt/manager/step_catalogue.hpp — which committed steps a root directory holds,
// each with the metadata the manager needs (time, metrics, custom metadata, items);
// and the clean-up of what interrupted saves and deletes leave.
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
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/manager/step_metadata.hpp>
#include <ckpt/manager/step_name.hpp>
#include <ckpt/retain/record.hpp>

namespace ckpt::detail::manager {

// The format's Format::is_committed: a step directory without it is torn.
using CommitCheck = bool (*)(const std::filesystem::path&);

struct StepInfo {
  std::string name;
  std::chrono::system_clock::time_point time{};
  Metrics metrics{};
  nlohmann::json custom_metadata{};
  std::map<std::string, std::string> items{};
};

// A step's metadata. A step saved by ckpt::save (no metadata file) or with an
// unreadable one still counts, without metrics, timed by its directory.
inline StepInfo load_step_info(const std::filesystem::path& dir, std::string name) {
  StepInfo info;
  info.name = std::move(name);
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir / step_metadata_file, ec)) {
    try {
      auto m = read_step_metadata(dir);
      info.time = m.init_time();
      info.metrics = std::move(m.metrics);
      info.custom_metadata = std::move(m.custom_metadata);
      info.items = std::move(m.items);
      return info;
    } catch (const Error&) {
    }
  }
  const auto mtime = std::filesystem::last_write_time(dir, ec);
  if (!ec)
    info.time = std::chrono::time_point_cast<std::chrono::system_clock::duration>(
        std::chrono::file_clock::to_sys(mtime));
  return info;
}

// Removes what interrupted saves and deletes leave: .tmp-* directories no live writer
// holds (a plain ckpt::save into the root may be running) and step directories
// without a commit marker. Symbolic links are left alone.
inline void cleanup_root(const std::filesystem::path& root, const StepNaming& naming, CommitCheck is_committed) {
  io::remove_stale_staging(root);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code e2;
    if (e.is_symlink(e2) || !e.is_directory(e2)) continue;
    const bool tmp = name.starts_with(io::staging_prefix);
    const bool torn = !tmp && naming.parse(name) && !is_committed(e.path());
    if (torn) {
      std::error_code rm;
      std::filesystem::remove_all(e.path(), rm);
      if (rm) throw Error(e.path().string(), "", "cannot remove a leftover directory: " + rm.message());
    }
  }
  if (ec) throw Error(root.string(), "", "cannot list the root directory: " + ec.message());
}

// The committed steps under root, by step number.
inline std::map<std::int64_t, StepInfo> scan_root(const std::filesystem::path& root, const StepNaming& naming,
                                                  CommitCheck is_committed) {
  std::map<std::int64_t, StepInfo> found;
  std::error_code ec;
  if (std::filesystem::is_directory(root, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      const auto step = naming.parse(name);
      // A step is a directory of the root: a symbolic link to one elsewhere is not listed.
      std::error_code e2;
      if (!step || e.is_symlink(e2) || !e.is_directory(e2) || !is_committed(e.path())) continue;
      // Two spellings of one step (another fixed length): the canonical one wins.
      if (found.contains(*step) && name != naming.name(*step)) continue;
      found[*step] = load_step_info(e.path(), name);
    }
    if (ec) throw Error(root.string(), "", "cannot list the root directory: " + ec.message());
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
    s += " " + std::to_string(step);
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
  for (const auto& [step, info] : steps) out.push_back({step, info.time, info.metrics});
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
