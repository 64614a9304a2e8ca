// ckpt/io/kvstore.hpp — a read-only key-value store: a directory, or a database file
// format such as OCDBT, seen the same way.
//
// zarr v3 arrays, and the zarr v2 arrays of Orbax's OCDBT checkpoints, live in a
// key-value store: keys are '/'-separated paths ("a/zarr.json", "a/c/0"). Readers of
// those arrays go through this interface so one reader serves both stores.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::io {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // The size of the value under key; nullopt when there is none.
  virtual std::optional<std::uint64_t> size(const std::string& key) const = 0;
  // Reads dst.size() bytes of the value under key from `offset`; throws when the value
  // is missing or shorter.
  virtual void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const = 0;
  // Every key starting with prefix, sorted; at most `max` (more is an error).
  virtual std::vector<std::string> list(const std::string& prefix, std::size_t max) const = 0;
  // How messages name the store.
  virtual std::string describe() const = 0;

  // The whole value, if there is one of at most max_bytes (more is an error).
  std::optional<std::vector<std::byte>> get(const std::string& key, std::uint64_t max_bytes) const {
    const auto n = size(key);
    if (!n) return std::nullopt;
    if (*n > max_bytes)
      throw Error(describe(), key, "value of " + std::to_string(*n) + " bytes exceeds the limit of " + std::to_string(max_bytes));
    std::vector<std::byte> v(static_cast<std::size_t>(*n));
    read(key, 0, v);
    return v;
  }
};

// A key names a file below the store's root: relative, '/'-separated, no empty, "." or
// ".." segment, no NUL or backslash. Anything else could leave the root.
inline bool safe_key(std::string_view k) {
  if (k.empty() || k.size() > 65535) return false;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = k.find('/', start);
    const std::string_view seg = k.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return k.find('\0') == std::string_view::npos && k.find('\\') == std::string_view::npos;
}

// Opens a regular file of a store without following a final symlink; -1 when absent.
inline int open_store_file(const std::filesystem::path& p, std::uint64_t& size) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    throw_errno("cannot open", p);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(p.string(), "", "not a regular file");
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

// A directory as a store: key "a/b" is the file <root>/a/b.
class DirectoryKv final : public KvStore {
 public:
  explicit DirectoryKv(std::filesystem::path root) : root_(std::move(root)) {}

  std::optional<std::uint64_t> size(const std::string& key) const override {
    if (!safe_key(key)) return std::nullopt;
    std::uint64_t n = 0;
    const int fd = open_store_file(root_ / key, n);
    if (fd < 0) return std::nullopt;
    ::close(fd);
    return n;
  }

  void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    if (!safe_key(key)) throw Error(describe(), key, "key leaves the store");
    std::uint64_t n = 0;
    const int fd = open_store_file(root_ / key, n);
    if (fd < 0) throw Error(describe(), key, "missing");
    File f(fd);
    if (offset > n || dst.size() > n - offset)
      throw Error(describe(), key, "holds " + std::to_string(n) + " bytes, fewer than needed");
    pread_exact(f, dst, offset, root_ / key);
  }

  std::vector<std::string> list(const std::string& prefix, std::size_t max) const override {
    std::vector<std::string> out;
    std::error_code ec;
    namespace fs = std::filesystem;
    for (fs::recursive_directory_iterator it(root_, fs::directory_options::none, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it.depth() > 64) { it.disable_recursion_pending(); continue; }
      std::error_code e2;
      if (!it->is_regular_file(e2) || it->is_symlink(e2)) continue;
      std::string k = it->path().lexically_relative(root_).generic_string();
      if (k.compare(0, prefix.size(), prefix) != 0) continue;
      if (out.size() >= max) throw Error(describe(), prefix, "more than " + std::to_string(max) + " keys");
      out.push_back(std::move(k));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string describe() const override { return root_.string(); }

 private:
  std::filesystem::path root_;
};

}  // namespace ckpt::io
