// ckpt/manager/object_root.hpp — a CheckpointManager root on an object store (s3://, mem://):
// the step list, the clean-up of interrupted saves and step deletion, by object keys.
//
// The local-directory versions are in step_catalogue.hpp and step_deletion.hpp. Here a
// step <root>/<name> is committed when <root>/<name>/commit_success.txt exists; there is
// no rename, so deleting a step deletes its marker first (a crash halfway leaves an
// uncommitted leftover, which the next manager's cleanup removes).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/manager/step_catalogue.hpp>
#include <ckpt/manager/step_metadata.hpp>
#include <ckpt/manager/step_name.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::manager {

// The first key component under root ("checkpoint_5" of "run/checkpoint_5/manifest")
// with the rest, for every key under root.
inline std::map<std::string, std::vector<std::string>> objects_by_entry(const storage::Location& root) {
  const std::string dir = root.prefix.empty() ? std::string() : root.prefix + "/";
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& key : root.storage->list(dir)) {
    const std::string rel = key.substr(dir.size());
    const auto slash = rel.find('/');
    if (slash == std::string::npos) continue;  // an object directly under root is no step
    out[rel.substr(0, slash)].push_back(rel.substr(slash + 1));
  }
  return out;
}

inline bool has_marker(const std::vector<std::string>& rel_keys) {
  for (const auto& k : rel_keys)
    if (k == storage::commit_marker) return true;
  return false;
}

inline std::map<std::int64_t, StepInfo> scan_objects(const storage::Location& root, const StepNaming& naming) {
  std::map<std::int64_t, StepInfo> found;
  for (const auto& [name, keys] : objects_by_entry(root)) {
    const auto step = naming.parse(name);
    if (!step || !has_marker(keys)) continue;
    if (found.contains(*step) && name != naming.name(*step)) continue;
    StepInfo info;
    info.name = name;
    const storage::Location dir{root.storage, root.key(name), root.url + "/" + name};
    try {
      if (const auto bytes = root.storage->read_all(dir.key(step_metadata_file), max_step_metadata_bytes)) {
        auto m = parse_step_metadata(*bytes, dir.url);
        info.time = m.init_time();
        info.metrics = std::move(m.metrics);
        info.custom_metadata = std::move(m.custom_metadata);
        info.items = std::move(m.items);
      }
    } catch (const CorruptCheckpointError&) {
      // counted without metrics, as a local step with unreadable metadata is
    }
    found[*step] = std::move(info);
  }
  return found;
}

// Deletes every step-named or staging-named entry without a commit marker: what
// interrupted saves and deletes leave. Like Orbax on GCS, this assumes no other
// process is saving into the root at the same time (there is no lock on object stores).
inline void cleanup_objects(const storage::Location& root, const StepNaming& naming) {
  for (const auto& [name, keys] : objects_by_entry(root)) {
    const bool ours = naming.parse(name).has_value() || name.starts_with(io::staging_prefix);
    if (!ours || has_marker(keys)) continue;
    std::vector<std::string> doomed;
    for (const auto& k : keys) doomed.push_back(root.key(name) + "/" + k);
    root.storage->remove(doomed);
  }
}

// Deletes a step: its commit marker first, then the rest.
inline void remove_step_objects(const storage::Location& root, const std::string& name) {
  const std::string dir = root.key(name) + "/";
  const std::string marker = dir + std::string(storage::commit_marker);
  root.storage->remove({marker});
  auto keys = root.storage->list(dir);
  if (!keys.empty()) root.storage->remove(keys);
}

}  // namespace ckpt::detail::manager
