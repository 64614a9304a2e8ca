// ckpt/io/staging_dir.hpp — write a directory somewhere invisible, then make it appear whole.
//
// A checkpoint is written into <parent>/.tmp-<name>-<random>/; commit() fsyncs it,
// renames it to <parent>/<name> (refusing, or atomically exchanging with, an existing
// one) and fsyncs the parent. A reader never sees a partial checkpoint; a crash leaves
// only a .tmp- directory.
//
// The writer holds an flock on its staging directory until it is done; the kernel
// drops it when the writer dies. A staging directory whose lock is free was left by a
// writer that is gone: remove_stale_staging() deletes those (a new StagingDir does so
// for its own target's, managers for their root's, `ckpt gc DIR` for a directory's).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <ckpt/io/file.hpp>

namespace ckpt::io {

inline constexpr std::string_view staging_prefix = ".tmp-";

namespace detail {
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

// Opens a directory (not a symlink to one) for its lock; an invalid File on failure.
inline File open_dir_for_lock(const fs::path& p) {
  return File(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
}

// Is the directory open as f still the one at p (not removed, not replaced)?
inline bool still_at(const File& f, const fs::path& p) {
  struct stat a {}, b {};
  return ::fstat(f.fd(), &a) == 0 && a.st_nlink > 0 && ::lstat(p.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

inline std::uint64_t tree_bytes(const fs::path& dir) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2) && !it->is_symlink(e2)) n += it->file_size(e2);
  }
  return n;
}
}  // namespace detail

// The staging directories remove_stale_staging() found.
struct StaleStaging {
  std::vector<fs::path> removed;  // left by writers that are gone: deleted
  std::vector<fs::path> live;     // a writer holds them: left alone
  std::vector<fs::path> kept;     // old checkpoints moved aside mid-replace, or unlockable: left alone
  std::uint64_t bytes = 0;        // what the removed ones held
};

// Whether `name` is a staging directory of a save to `target` (".tmp-<target>-<random>").
inline bool is_staging_name(std::string_view name, std::string_view target) {
  const std::string head = std::string(staging_prefix) + std::string(target) + "-";
  if (name.size() <= head.size() || name.substr(0, head.size()) != head) return false;
  for (const char c : name.substr(head.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Deletes the .tmp-* directories in `parent` whose writer is gone (their flock is free):
// only those of saves to `target` when one is given, else every one but the "-old-"
// directories a replace moves an old checkpoint into (it may be the only copy left).
// A directory whose lock cannot be taken for any other reason (a file system without
// flock) is left alone. Never throws; with dry_run, deletes nothing.
inline StaleStaging remove_stale_staging(const fs::path& parent, std::string_view target = {}, bool dry_run = false) {
  StaleStaging out;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!target.empty() ? !is_staging_name(name, target) : name.rfind(staging_prefix, 0) != 0) continue;
    std::error_code e2;
    if (it->is_symlink(e2) || !it->is_directory(e2)) continue;
    if (target.empty() && name.find("-old-") != std::string::npos) {
      out.kept.push_back(it->path());
      continue;
    }
    File f = detail::open_dir_for_lock(it->path());
    if (!f) continue;  // gone meanwhile (committed, or collected by another process)
    if (::flock(f.fd(), LOCK_EX | LOCK_NB) != 0) {
      (errno == EWOULDBLOCK ? out.live : out.kept).push_back(it->path());
      continue;
    }
    // Locked by us now: its writer is gone, or has not taken its lock yet (it then
    // notices, see StagingDir, and starts over elsewhere).
    if (!detail::still_at(f, it->path())) continue;
    out.bytes += detail::tree_bytes(it->path());
    out.removed.push_back(it->path());
    if (!dry_run) fs::remove_all(it->path(), e2);
  }
  return out;
}

class StagingDir {
 public:
  explicit StagingDir(fs::path final_dir) : final_(std::move(final_dir)) {
    if (final_.filename().empty()) final_ = final_.parent_path();  // "dir/" -> "dir"
    std::error_code ec;
    fs::create_directories(parent(), ec);
    if (ec) throw Error(final_.string(), "", "cannot create parent directory: " + ec.message());
    // What killed saves of this same target left behind.
    remove_stale_staging(parent(), final_.filename().string());
    for (int attempt = 0;; ++attempt) {
      tmp_ = parent() / (std::string(staging_prefix) + final_.filename().string() + "-" + detail::random_suffix());
      if (!fs::create_directory(tmp_, ec) || ec)
        throw Error(final_.string(), "", "cannot create staging directory " + tmp_.string() + ": " + ec.message());
      // Lock it for as long as this writer lives. Between the mkdir and the lock another
      // process may have found it unlocked and deleted it: then start over.
      lock_ = detail::open_dir_for_lock(tmp_);
      const bool locked = lock_ && ::flock(lock_.fd(), LOCK_EX | LOCK_NB) == 0;
      const bool no_flock = lock_ && !locked && errno != EWOULDBLOCK;  // a file system without flock
      if (lock_ && (locked || no_flock) && detail::still_at(lock_, tmp_)) break;
      lock_.close();
      fs::remove(tmp_, ec);
      if (attempt == 8) throw Error(final_.string(), "", "cannot set up a staging directory (it keeps disappearing)");
    }
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  ~StagingDir() {
    if (!committed_) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);  // best effort: a leftover .tmp- directory is collected later
    }
  }

  const fs::path& path() const noexcept { return tmp_; }
  const fs::path& final_path() const noexcept { return final_; }

  // Makes the staged directory visible as final_path(). With replace, an existing
  // directory there is swapped out atomically and then deleted.
  void commit(bool replace) {
    sync_dir(tmp_);
    if (detail::rename_with_flags(tmp_, final_, RENAME_NOREPLACE) == 0) return finish(fs::path());
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
    if (detail::rename_with_flags(tmp_, final_, RENAME_EXCHANGE) == 0) return finish(tmp_);  // tmp_ holds the old one
    // No atomic exchange: move the old checkpoint aside, then put the new one in place.
    const fs::path old = parent() / (std::string(staging_prefix) + final_.filename().string() + "-old-" +
                                     detail::random_suffix());
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
    lock_.close();
    std::error_code ec;
    if (!replaced.empty()) fs::remove_all(replaced, ec);
  }

  fs::path final_, tmp_;
  File lock_;  // the flock that says this writer is alive
  bool committed_ = false;
};

// Runs write(staging) and rethrows its failure naming `target`, the checkpoint the
// caller asked for, instead of the staging directory or a file in it ("data-0: write
// failed: ..."); any other exception becomes a ckpt::Error naming target.
template <class F>
void naming_target(const fs::path& target, const fs::path& staging, F&& write) {
  const std::string t = target.string(), s = staging.string();
  auto rename_in = [&](std::string text) {
    for (std::size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + t.size()))
      text.replace(at, s.size(), t);
    return text;
  };
  try {
    write();
  } catch (const Error& e) {
    const std::string& cp = e.checkpoint();
    if (cp == t || cp.rfind(t + "/", 0) == 0) throw;  // already names the target
    std::string what = rename_in(e.message());
    if (cp.size() > s.size() && cp.rfind(s + "/", 0) == 0) what = cp.substr(s.size() + 1) + ": " + what;  // a file in it
    else if (!cp.empty() && cp != s) what = rename_in(cp) + ": " + what;
    if (dynamic_cast<const CorruptCheckpointError*>(&e)) throw CorruptCheckpointError(t, e.path(), what);
    throw Error(t, e.path(), what);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(t, "", rename_in(e.what()));
  }
}

}  // namespace ckpt::io
