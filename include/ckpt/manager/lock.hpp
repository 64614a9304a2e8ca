// ckpt/manager/lock.hpp — one writing manager per root directory, across processes.
//
// flock() on <root>/.ckpt-manager.lock: the kernel drops the lock when the process
// dies, so a crash never leaves a root locked. flock locks belong to the open file
// description, so a second manager in the same process is refused as well. The file
// holds the owner's pid, for the error message only. A lock file that is a symbolic
// link is refused, and one with other hard links is locked but not written: writing
// the pid would truncate a file outside the root.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::detail::manager {

inline constexpr const char* lock_file_name = ".ckpt-manager.lock";

class RootLock {
 public:
  explicit RootLock(const std::filesystem::path& root) {
    const auto path = root / lock_file_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))  // checked before a device or FIFO is opened
      throw Error(root.string(), "", std::string(lock_file_name) + " is not a regular file; remove it");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0 && errno == ELOOP)
      throw Error(root.string(), "", std::string(lock_file_name) + " is a symbolic link; remove it");
    if (fd < 0) io::throw_errno("cannot open the manager's lock file", path);
    file_ = io::File(fd);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) io::throw_errno("cannot lock", path);
      throw RootLockedError(root.string(), "",
                            "another CheckpointManager has this directory open for writing (" + owner(fd) +
                                " holds " + lock_file_name + "); open it with .read_only = true to read it meanwhile");
    }
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      throw Error(root.string(), "", std::string(lock_file_name) + " is not a regular file; remove it");
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (st.st_nlink == 1 && ::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  }

 private:
  static std::string owner(int fd) {
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string pid(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return pid.empty() ? std::string("a process") : "process " + pid;
  }
  io::File file_;
};

}  // namespace ckpt::detail::manager
