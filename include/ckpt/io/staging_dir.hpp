// ckpt/io/staging_dir.hpp — write somewhere invisible, then make it appear whole.
//
// The one way ckpt publishes anything. A checkpoint directory is written into
// <parent>/.tmp-<name>-<random>/ (StagingDir); a single-file checkpoint (Flax msgpack)
// into a hidden sibling file (publish_file). Both are made durable, renamed into place by
// rename_into_place (refusing, or atomically exchanging with, an existing one, with
// fallbacks for file systems without renameat2 flags), and the parent is fsynced. A
// reader never sees a partial checkpoint; a crash leaves only a .tmp- entry, which
// managers clean up.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

#include <ckpt/io/file.hpp>

namespace ckpt::io {

inline constexpr std::string_view staging_prefix = ".tmp-";

// A suffix that no other staging name of this or another process uses.
inline std::string random_suffix() {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  const auto now = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%x%x%x", static_cast<unsigned>(::getpid()),
                static_cast<unsigned>(now ^ rd()), counter.fetch_add(1));
  return buf;
}

// renameat2 with flags; returns 0 or -1 with errno, as the system call does.
inline int rename_with_flags(const fs::path& from, const fs::path& to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags));
}

// Renames tmp (a file or a directory, already durable) to final. Without replace an
// existing final is an Error; with it, final is swapped out atomically where the file
// system can (renameat2 RENAME_EXCHANGE) and moved aside first where it cannot. Syncs
// the parent, then deletes what was replaced.
inline void rename_into_place(const fs::path& tmp, const fs::path& final_path, bool replace) {
  const fs::path parent = final_path.has_parent_path() ? final_path.parent_path() : fs::path(".");
  fs::path replaced;
  auto finish = [&] {
    sync_dir(parent);
    std::error_code ec;
    if (!replaced.empty()) fs::remove_all(replaced, ec);  // best effort: a leftover .tmp- entry is harmless
  };
  if (rename_with_flags(tmp, final_path, RENAME_NOREPLACE) == 0) return finish();
  const int err = errno;
  const bool no_flags = err == EINVAL || err == ENOSYS;  // a file system without renameat2 flags
  std::error_code ec;
  if (no_flags && !fs::exists(fs::symlink_status(final_path, ec))) {
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) throw_errno("cannot rename into place", final_path);
    return finish();
  }
  if (!no_flags && err != EEXIST && err != ENOTEMPTY) {
    errno = err;
    throw_errno("cannot rename into place", final_path);
  }
  if (!replace) throw Error(final_path.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
  if (rename_with_flags(tmp, final_path, RENAME_EXCHANGE) == 0) {
    replaced = tmp;  // tmp now holds the old one
    return finish();
  }
  // No atomic exchange: move the old checkpoint aside, then put the new one in place.
  replaced = parent / (std::string(staging_prefix) + final_path.filename().string() + "-old-" + random_suffix());
  if (::rename(final_path.c_str(), replaced.c_str()) != 0) throw_errno("cannot move the old checkpoint aside", final_path);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) throw_errno("cannot rename into place", final_path);
  finish();
}

class StagingDir {
 public:
  explicit StagingDir(fs::path final_dir) : final_(std::move(final_dir)) {
    if (final_.filename().empty()) final_ = final_.parent_path();  // "dir/" -> "dir"
    std::error_code ec;
    fs::create_directories(parent(), ec);
    if (ec) throw Error(final_.string(), "", "cannot create parent directory: " + ec.message());
    tmp_ = parent() / (std::string(staging_prefix) + final_.filename().string() + "-" + random_suffix());
    if (!fs::create_directory(tmp_, ec) || ec)
      throw Error(final_.string(), "", "cannot create staging directory " + tmp_.string() + ": " + ec.message());
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  ~StagingDir() {
    if (!committed_) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);  // best effort: a leftover .tmp- directory is harmless
    }
  }

  const fs::path& path() const noexcept { return tmp_; }
  const fs::path& final_path() const noexcept { return final_; }

  // Makes the staged directory visible as final_path(). With replace, an existing
  // directory there is swapped out atomically and then deleted.
  void commit(bool replace) {
    sync_dir(tmp_);
    rename_into_place(tmp_, final_, replace);
    committed_ = true;
  }

 private:
  fs::path parent() const { return final_.has_parent_path() ? final_.parent_path() : fs::path("."); }

  fs::path final_, tmp_;
  bool committed_ = false;
};

// A single-file checkpoint: write(tmp) fills a hidden sibling of file (and makes it
// durable), which is then renamed into place as StagingDir::commit does for directories.
template <class Write>
void publish_file(const fs::path& file, bool replace, Write&& write) {
  std::error_code ec;
  const fs::path parent = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  fs::create_directories(parent, ec);
  if (fs::is_directory(file, ec)) throw Error(file.string(), "", "a directory is in the way of the checkpoint file");
  const fs::path tmp = parent / (std::string(staging_prefix) + file.filename().string() + "-" + random_suffix());
  try {
    write(tmp);
    rename_into_place(tmp, file, replace);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

}  // namespace ckpt::io
