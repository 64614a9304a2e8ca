// ckpt/io/staging_dir.hpp — write a directory somewhere invisible, then make it appear whole.
//
// A checkpoint is written into <parent>/.tmp-<name>-<random>/; commit() fsyncs it,
// renames it to <parent>/<name> (refusing, or atomically exchanging with, an existing
// one) and fsyncs the parent. A reader never sees a partial checkpoint; a crash leaves
// only a .tmp- directory, which managers clean up.
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
    if (rename_with_flags(tmp_, final_, RENAME_NOREPLACE) == 0) return finish(fs::path());
    const int err = errno;
    const bool no_flags = err == EINVAL || err == ENOSYS;  // a file system without renameat2 flags
    if (no_flags && !fs::exists(final_)) {
      if (::rename(tmp_.c_str(), final_.c_str()) != 0) throw_errno("cannot rename staging directory", final_);
      return finish(fs::path());
    }
    if (!no_flags && err != EEXIST && err != ENOTEMPTY) {
      errno = err;
      throw_errno("cannot rename staging directory", final_);
    }
    if (!replace) throw Error(final_.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
    if (rename_with_flags(tmp_, final_, RENAME_EXCHANGE) == 0) return finish(tmp_);  // tmp_ holds the old one
    // No atomic exchange: move the old checkpoint aside, then put the new one in place.
    const fs::path old = parent() / (std::string(staging_prefix) + final_.filename().string() + "-old-" +
                                     random_suffix());
    if (::rename(final_.c_str(), old.c_str()) != 0) throw_errno("cannot move the old checkpoint aside", final_);
    if (::rename(tmp_.c_str(), final_.c_str()) != 0) throw_errno("cannot rename staging directory", final_);
    finish(old);
  }

 private:
  fs::path parent() const { return final_.has_parent_path() ? final_.parent_path() : fs::path("."); }
  // The rename is done: make it durable, then delete what it replaced.
  void finish(const fs::path& replaced) {
    committed_ = true;
    sync_dir(parent());
    std::error_code ec;
    if (!replaced.empty()) fs::remove_all(replaced, ec);
  }

  fs::path final_, tmp_;
  bool committed_ = false;
};

}  // namespace ckpt::io
