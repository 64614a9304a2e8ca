// ckpt/manager/step_deletion.hpp — deleting a step directory (delete_step, pruning), or
// some of its items (keep_dataset_checkpoints).
#pragma once

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/io/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/manager/items.hpp>
#include <ckpt/manager/step_metadata.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::manager {

// Deletes a step: the storage's remove_prefix (a directory is renamed aside first, an
// object store loses the commit marker first), so that a crash halfway through never
// leaves a committed-looking step with files missing. With todelete_subdir (a local
// root only: ManagerOptions are checked when the manager opens) the step directory is
// moved into that directory instead, as Orbax does.
inline void remove_step(const storage::Location& root, const std::string& todelete_subdir, const std::string& name) {
  const auto local = root.storage->local_directory();
  if (todelete_subdir.empty() || !local) return root.storage->remove_prefix(root.key(name));
  const auto parent = *local / root.prefix;
  const auto dir = parent / name;
  const auto bin = parent / todelete_subdir;
  std::error_code ec;
  std::filesystem::create_directories(bin, ec);
  if (ec) throw Error(bin.string(), "", "cannot create todelete_subdir: " + ec.message());
  auto target = bin / name;
  if (std::filesystem::exists(target, ec)) target = bin / (name + "-" + io::random_suffix());
  if (::rename(dir.c_str(), target.c_str()) != 0) io::throw_errno("cannot move a pruned step", dir);
  io::sync_dir(parent);
}

// Removes the items `names` from the committed step in dir. The step's metadata is
// rewritten first (atomically, by rename), so that a crash in between leaves an unlisted
// item directory, never a listed item that is gone; the step itself stays whole.
inline void drop_step_items(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  const auto file = dir / step_metadata_file;
  const auto bytes = io::read_file(file, max_step_metadata_bytes);
  nlohmann::json j;
  try {  // bounded: the file is untrusted (io/untrusted.hpp)
    j = ckpt::detail::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, dir.string(), "",
                                 step_metadata_file);
  } catch (const Error&) {  // unreadable: nothing to drop from it
  }
  if (j.is_object() && j.contains("items") && j["items"].is_object()) {
    bool listed = false;
    for (const auto& n : names) listed = j["items"].erase(n) > 0 || listed;
    if (listed) {
      const std::string text = j.dump(1);
      const auto tmp = dir / (std::string(io::staging_prefix) + step_metadata_file + "-" + io::random_suffix());
      io::write_file_synced(tmp, std::as_bytes(std::span(text)));
      std::filesystem::rename(tmp, file);
      io::sync_dir(dir);
    }
  }
  std::error_code ec;
  const auto base = dir / items_dir;
  for (const auto& n : names) {
    std::filesystem::remove_all(base / n, ec);
    std::filesystem::remove(base / (n + ".json"), ec);
  }
}

}  // namespace ckpt::detail::manager
