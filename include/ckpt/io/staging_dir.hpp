// ckpt/io/staging_dir.hpp — write somewhere invisible, then make it appear whole.
//
// The one way ckpt publishes anything. A checkpoint directory is written into
// <parent>/.tmp-<name>-<random>/ (StagingDir); a single-file checkpoint (Flax msgpack)
// into a hidden sibling file (publish_file). Both are made durable, renamed into place by
// rename_into_place (refusing, or atomically exchanging with, an existing one, with
// fallbacks for file systems without renameat2 flags), and the parent is fsynced. A
// reader never sees a partial checkpoint; a crash leaves only a .tmp- entry.
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

namespace detail {
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

// Makes the names in dir and in every directory below it durable (the files' bytes are
// each writer's to sync): what the formats create in a staging directory, however deep.
inline void sync_tree(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2) && !it->is_symlink(e2)) sync_dir(it->path());
  }
  if (ec) throw Error(dir.string(), "", "cannot list the staging directory: " + ec.message());
  sync_dir(dir);
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
      tmp_ = parent() / (std::string(staging_prefix) + final_.filename().string() + "-" + random_suffix());
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
    sync_tree(tmp_);
    rename_into_place(tmp_, final_, replace);
    committed_ = true;
    lock_.close();
  }

 private:
  fs::path parent() const { return final_.has_parent_path() ? final_.parent_path() : fs::path("."); }

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
    e.rethrow_about(t, what);  // the same kind of error, so that callers can still tell them apart
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(t, "", rename_in(e.what()));
  }
}

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
    naming_target(file, tmp, [&] { write(tmp); });
    rename_into_place(tmp, file, replace);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

}  // namespace ckpt::io
