// ckpt/io/file.hpp — POSIX files: large writes, exact reads, fsync of files and directories.
//
// Every failure throws ckpt::Error naming the file and the errno text; callers add
// the checkpoint and tree path where they know them.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>  // IOV_MAX
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>

namespace ckpt::io {

namespace fs = std::filesystem;

[[noreturn]] inline void throw_errno(const std::string& what, const fs::path& file) {
  throw Error(file.string(), "", what + ": " + std::strerror(errno));
}

// An owned file descriptor.
class File {
 public:
  File() = default;
  explicit File(int fd) noexcept : fd_(fd) {}
  File(File&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  File& operator=(File&& o) noexcept {
    if (this != &o) { close(); fd_ = std::exchange(o.fd_, -1); }
    return *this;
  }
  ~File() { close(); }

  // Opens a regular file only. A FIFO or device put where a checkpoint file belongs
  // would block the open (or the reads) forever, or do something on open: anything but
  // a regular file is refused before it is opened (and again after, in case it was
  // swapped meanwhile), and O_NONBLOCK keeps the open from waiting (it has no effect on
  // reads of regular files, so it is left on). A symbolic link is refused too, unless
  // follow_symlink: a checkpoint's files are its own, and a link could make a
  // checkpoint of files elsewhere. Only the last component is checked: the callers
  // check the directories inside a checkpoint (the checkpoint's own path is the
  // caller's to choose).
  static File open_read(const fs::path& p, bool follow_symlink = false) {
    struct stat st {};
    if ((follow_symlink ? ::stat(p.c_str(), &st) : ::lstat(p.c_str(), &st)) != 0) throw_errno("cannot open for reading", p);
    if (S_ISLNK(st.st_mode)) throw Error(p.string(), "", "is a symbolic link, not a file of the checkpoint");
    if (!S_ISREG(st.st_mode)) throw Error(p.string(), "", "not a regular file");
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_symlink ? 0 : O_NOFOLLOW));
    if (fd < 0) {
      if (errno == ELOOP && !follow_symlink) throw Error(p.string(), "", "is a symbolic link, not a file of the checkpoint");
      throw_errno("cannot open for reading", p);
    }
    File f(fd);
    if (::fstat(fd, &st) != 0) throw_errno("cannot stat", p);
    if (!S_ISREG(st.st_mode)) throw Error(p.string(), "", "not a regular file");
    return f;
  }
  // Creates a new file; fails if it exists.
  static File create(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw_errno("cannot create", p);
    return File(fd);
  }
  static File open_dir(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw_errno("cannot open directory", p);
    return File(fd);
  }

  int fd() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  std::uint64_t size(const fs::path& name) const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw_errno("cannot stat", name);
    return static_cast<std::uint64_t>(st.st_size);
  }

  void sync(const fs::path& name) const {
    if (::fsync(fd_) != 0) throw_errno("fsync failed", name);
  }

  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// After a vectored call moved n bytes: skips the buffers it filled (or emptied) from
// `first` on, trims the one it stopped in, and returns the first with bytes left.
inline std::size_t advance_iov(std::span<iovec> iov, std::size_t first, std::size_t n) {
  while (first < iov.size() && n >= iov[first].iov_len) n -= iov[first++].iov_len;
  if (n > 0) {
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + n;
    iov[first].iov_len -= n;
  }
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
  return first;
}

// Writes every byte of every buffer, in as few system calls as the kernel allows.
inline void write_all(const File& f, std::vector<iovec> iov, const fs::path& name) {
  std::size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = ::writev(f.fd(), iov.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("write failed", name);
    }
    first = advance_iov(iov, first, static_cast<std::size_t>(n));
  }
}

inline void write_all(const File& f, std::span<const std::byte> bytes, const fs::path& name) {
  write_all(f, {iovec{const_cast<std::byte*>(bytes.data()), bytes.size()}}, name);
}

// Every this many bytes written, a writer asks the kernel to start writing the file out
// (start_writeback). Without it nothing reaches the disk until the final fsync (the
// dirty limits are far above a checkpoint's size on most machines), so copying and disk
// I/O would run one after the other instead of at the same time.
inline constexpr std::uint64_t writeback_chunk = std::uint64_t{32} << 20;

// Starts asynchronous writeback of [offset, offset + length); a hint only, the fsync
// at the end is what makes the file durable and reports errors.
inline void start_writeback(const File& f, std::uint64_t offset, std::uint64_t length) noexcept {
#ifdef SYNC_FILE_RANGE_WRITE
  (void)::sync_file_range(f.fd(), static_cast<off_t>(offset), static_cast<off_t>(length), SYNC_FILE_RANGE_WRITE);
#else
  (void)f, (void)offset, (void)length;
#endif
}

// Reserves the file's blocks for its first `length` bytes before they are written (a
// hint: a file system without fallocate, or a full disk, is left to the writes to
// report). Data files written at once by several threads, each starting writeback as
// it goes, were otherwise given blocks in turns, 32 MiB of one file then of the other
// (ext4: 9-14 extents for each of two 188 MB files, 2-3 with the reservation), and a
// cold restore read them back more slowly than with it. The file's size is not changed
// (FALLOC_FL_KEEP_SIZE): appends grow it as before.
inline void preallocate(const File& f, std::uint64_t length) noexcept {
#if defined(FALLOC_FL_KEEP_SIZE)
  if (length > 0) (void)::fallocate(f.fd(), FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(length));
#else
  (void)f, (void)length;
#endif
}

// Reads exactly dst.size() bytes at offset; a short file is an error, not a short read.
inline void pread_exact(const File& f, std::span<std::byte> dst, std::uint64_t offset, const fs::path& name) {
  std::size_t done = 0;
  while (done < dst.size()) {
    const std::size_t want = std::min<std::size_t>(dst.size() - done, std::size_t{1} << 30);
    const ssize_t n = ::pread(f.fd(), dst.data() + done, want, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("read failed", name);
    }
    // Said for every reader (the native manifest, zarr chunks, msgpack files): no "manifest".
    if (n == 0)
      throw CorruptCheckpointError(name.string(), "", "file ends at byte " + std::to_string(offset + done) + ", before the " +
                                                          std::to_string(offset + dst.size()) + " bytes expected (truncated?)");
    done += static_cast<std::size_t>(n);
  }
}

// Reads into dst what the page cache holds of the file from offset on, without
// waiting for the disk (preadv2 with RWF_NOWAIT): the bytes read, from 0 (the first
// page is not cached, the file ends there, or the kernel or file system cannot say) to
// dst.size(). Errors are left to the caller's ordinary read of what is left, which
// reports them with the file's name.
inline std::size_t pread_cached(const File& f, std::span<std::byte> dst, std::uint64_t offset) noexcept {
#if defined(__linux__) && defined(RWF_NOWAIT)
  iovec v{dst.data(), dst.size()};
  for (;;) {
    const ssize_t n = ::preadv2(f.fd(), &v, 1, static_cast<off_t>(offset), RWF_NOWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno != EINTR) return 0;  // EAGAIN: not cached; EOPNOTSUPP: cannot say
  }
#else
  (void)f, (void)dst, (void)offset;
  return 0;
#endif
}

// Fills every buffer in turn with the file's bytes from offset on, in as few system
// calls as the kernel allows; a short file is an error, as for pread_exact.
inline void preadv_exact(const File& f, std::vector<iovec> iov, std::uint64_t offset, const fs::path& name) {
  std::size_t first = 0;
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = ::preadv(f.fd(), iov.data() + first, count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("read failed", name);
    }
    if (n == 0)
      throw CorruptCheckpointError(name.string(), "", "file ends at byte " + std::to_string(offset) +
                                                          ", before the bytes expected (truncated?)");
    offset += static_cast<std::uint64_t>(n);
    first = advance_iov(iov, first, static_cast<std::size_t>(n));
  }
}

// Reads a whole small file, refusing one larger than max_bytes (and, unless
// follow_symlink, a symbolic link: see File::open_read).
inline std::vector<std::byte> read_file(const fs::path& p, std::uint64_t max_bytes, bool follow_symlink = false) {
  File f = File::open_read(p, follow_symlink);
  const std::uint64_t size = f.size(p);
  if (size > max_bytes)
    throw CorruptCheckpointError(p.string(), "", "file is " + std::to_string(size) + " bytes, more than the " +
                                                     std::to_string(max_bytes) + " allowed");
  std::vector<std::byte> buf(static_cast<std::size_t>(size));
  pread_exact(f, buf, 0, p);
  return buf;
}

inline void write_file_synced(const fs::path& p, std::span<const std::byte> bytes) {
  File f = File::create(p);
  write_all(f, bytes, p);
  f.sync(p);
}

inline void sync_dir(const fs::path& dir) { File::open_dir(dir).sync(dir); }

// Whether any component of `rel` below `base` is a symbolic link (or missing): what
// the callers reading a directory inside a checkpoint check first, since opening with
// O_NOFOLLOW checks only the last component. `base` itself is not checked.
inline bool has_symlink_below(const fs::path& base, const fs::path& rel) {
  fs::path p = base;
  for (const auto& part : rel) {
    p /= part;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return true;
  }
  return false;
}

}  // namespace ckpt::io
