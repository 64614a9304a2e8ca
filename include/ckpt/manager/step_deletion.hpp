// ckpt/manager/step_deletion.hpp — deleting a step directory (delete_step, pruning).
#pragma once

#include <sys/file.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>

namespace ckpt::detail::manager {

// Deletion is a rename first (to a .tmp- name, or into todelete_subdir), so that a
// crash halfway through never leaves a committed-looking step with files missing.
inline void remove_step_dir(const std::filesystem::path& root, const std::string& todelete_subdir,
                            const std::string& name) {
  const auto dir = root / name;
  if (!todelete_subdir.empty()) {
    const auto bin = root / todelete_subdir;
    std::error_code ec;
    std::filesystem::create_directories(bin, ec);
    if (ec) throw Error(bin.string(), "", "cannot create todelete_subdir: " + ec.message());
    auto target = bin / name;
    if (std::filesystem::exists(target, ec)) target = bin / (name + "-" + io::random_suffix());
    if (::rename(dir.c_str(), target.c_str()) != 0) io::throw_errno("cannot move a pruned step", dir);
    io::sync_dir(root);
    return;
  }
  const auto doomed = root / (std::string(io::staging_prefix) + name + "-deleting-" + io::random_suffix());
  // Locked before it gets its .tmp- name, so that `ckpt gc` leaves the deletion to us.
  const io::File hold = ckpt::io::detail::open_dir_for_lock(dir);
  if (hold) (void)::flock(hold.fd(), LOCK_EX | LOCK_NB);
  if (::rename(dir.c_str(), doomed.c_str()) != 0) {
    if (errno == ENOENT) return;  // already gone
    io::throw_errno("cannot delete step", dir);
  }
  std::error_code ec;
  std::filesystem::remove_all(doomed, ec);
  if (ec) throw Error(doomed.string(), "", "cannot delete a pruned step: " + ec.message());
}

}  // namespace ckpt::detail::manager
