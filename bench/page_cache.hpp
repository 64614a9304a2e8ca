// bench/page_cache.hpp — emptying the page cache of a benchmark's files, for its cold rows.
//
// drop_cache fsyncs each file (dirty pages cannot be dropped) and asks the kernel to
// drop its cached pages (posix_fadvise DONTNEED). That empties this machine's page
// cache only. On a virtual machine, the host may still hold the files in its own cache
// behind the virtual disk, and a "cold" read is then served at memory-like speed: on the
// VM these figures come from, 5-8 GB/s for files just written, against 0.4-1.1 GB/s for
// files untouched for hours (docs/benchmarks.md, "cold reads from the disk itself").
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

// Calls f on p when it is a file, or on every regular file under p when a directory.
inline void each_file(const std::filesystem::path& p, const std::function<void(const std::filesystem::path&)>& f) {
  namespace fs = std::filesystem;
  if (fs::is_directory(p)) {
    for (const auto& e : fs::recursive_directory_iterator(p))
      if (e.is_regular_file()) f(e.path());
  } else if (fs::exists(p)) {
    f(p);
  }
}

inline void fsync_all(const std::filesystem::path& p) {
  each_file(p, [](const std::filesystem::path& f) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) (void)::fsync(fd), ::close(fd);
  });
}

// fsync + DONTNEED every regular file under p (a file or a directory).
inline void drop_cache(const std::filesystem::path& p) {
  each_file(p, [](const std::filesystem::path& f) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)::fsync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  });
}
