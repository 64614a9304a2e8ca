// ckpt/io/kvstore.hpp — a read-only key-value store: what every format but the native
// one reads a checkpoint through.
//
// Keys are '/'-separated paths ("default/_METADATA", "a/.zarray", "a/c/0"). A store is
// a local directory (DirectoryKv, here), the objects under a storage::Location (S3,
// memory: storage/kvstore.hpp), a database inside either (an OCDBT database), or a part
// of another store (PrefixKv). A format's opener sees only this interface, so one reader
// serves every place a checkpoint can live, and reads only the values and byte ranges a
// restore needs.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <memory>
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

  // The names one level below prefix ("" or ending in '/') that hold values: "a" for
  // the key "<prefix>a/b". Sorted; at most max (more is an error).
  virtual std::vector<std::string> children(const std::string& prefix, std::size_t max) const {
    std::vector<std::string> out;
    for (const auto& k : list(prefix, max)) {
      const auto slash = k.find('/', prefix.size());
      if (slash == std::string::npos) continue;
      std::string name = k.substr(prefix.size(), slash - prefix.size());
      if (out.empty() || out.back() != name) out.push_back(std::move(name));
    }
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // The local file that holds the value of key whole, when there is one (a directory's
  // file): a reader may map it instead of reading ranges. None for remote stores.
  virtual std::optional<std::filesystem::path> local_file(const std::string&) const { return std::nullopt; }

  bool contains(const std::string& key) const { return size(key).has_value(); }

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
    if (!directories_on_the_way(key)) return std::nullopt;
    std::uint64_t n = 0;
    const int fd = open_store_file(root_ / key, n);
    if (fd < 0) return std::nullopt;
    ::close(fd);
    return n;
  }

  void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    if (!safe_key(key)) throw Error(describe(), key, "key leaves the store");
    std::uint64_t n = 0;
    const int fd = directories_on_the_way(key) ? open_store_file(root_ / key, n) : -1;
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
    // walks only the directory the prefix names ("a/b/" or "a/b." : root/a/b, root/a)
    const auto slash = prefix.rfind('/');
    const std::string dir = slash == std::string::npos ? std::string() : prefix.substr(0, slash);
    if (!dir.empty() && (!safe_key(dir) || !directories_on_the_way(dir + "/x"))) return out;
    for (fs::recursive_directory_iterator it(dir.empty() ? root_ : root_ / dir, fs::directory_options::none, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it.depth() > 64) { it.disable_recursion_pending(); continue; }
      std::error_code e2;
      std::string k = it->path().lexically_relative(root_).generic_string();
      if (it->is_directory(e2) && !it->is_symlink(e2)) {
        // a directory no key under which can start with prefix is not entered
        const std::string d = k + "/";
        if (!d.starts_with(prefix) && !prefix.starts_with(d)) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(e2) || it->is_symlink(e2)) continue;
      if (k.compare(0, prefix.size(), prefix) != 0) continue;
      if (out.size() >= max) throw Error(describe(), prefix, "more than " + std::to_string(max) + " keys");
      out.push_back(std::move(k));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::vector<std::string> children(const std::string& prefix, std::size_t max) const override {
    std::vector<std::string> out;
    if (!prefix.empty() && (!prefix.ends_with('/') || !safe_key(prefix.substr(0, prefix.size() - 1)) ||
                            !directories_on_the_way(prefix + "x")))
      return out;
    std::error_code ec;
    namespace fs = std::filesystem;
    for (fs::directory_iterator it(root_ / prefix, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      // a link to a directory elsewhere is not the store's
      if (it->is_symlink(e2) || !it->is_directory(e2)) continue;
      if (out.size() >= max) throw Error(describe(), prefix, "more than " + std::to_string(max) + " entries");
      out.push_back(it->path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::optional<std::filesystem::path> local_file(const std::string& key) const override {
    if (!safe_key(key) || !directories_on_the_way(key)) return std::nullopt;
    return root_ / key;
  }

  std::string describe() const override { return root_.string(); }

 private:
  // Whether every directory between the root and key's file is a real directory (a
  // symbolic link could reach outside the checkpoint); false when one is missing.
  bool directories_on_the_way(const std::string& key) const {
    std::size_t slash = key.find('/');
    if (slash == std::string::npos) return true;
    std::string p = root_.native();
    p += '/';
    for (std::size_t at = 0; slash != std::string::npos; at = slash + 1, slash = key.find('/', at)) {
      p.append(key, at, slash - at);
      struct stat st {};
      if (::lstat(p.c_str(), &st) != 0) return false;
      if (S_ISLNK(st.st_mode)) throw Error(describe(), key, "a directory on the way is a symbolic link");
      if (!S_ISDIR(st.st_mode)) return false;
      p += '/';
    }
    return true;
  }

  std::filesystem::path root_;
};

// The values of another store under a prefix ("default/"), keys relative to it.
class PrefixKv final : public KvStore {
 public:
  PrefixKv(std::shared_ptr<const KvStore> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {
    if (!prefix_.empty() && !prefix_.ends_with('/')) prefix_ += '/';
  }
  std::optional<std::uint64_t> size(const std::string& key) const override { return base_->size(prefix_ + key); }
  void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    base_->read(prefix_ + key, offset, dst);
  }
  std::vector<std::string> list(const std::string& prefix, std::size_t max) const override {
    auto keys = base_->list(prefix_ + prefix, max);
    for (auto& k : keys) k.erase(0, prefix_.size());
    return keys;
  }
  std::vector<std::string> children(const std::string& prefix, std::size_t max) const override {
    return base_->children(prefix_ + prefix, max);
  }
  std::optional<std::filesystem::path> local_file(const std::string& key) const override {
    return base_->local_file(prefix_ + key);
  }
  std::string describe() const override {
    return base_->describe() + "/" + prefix_.substr(0, prefix_.empty() ? 0 : prefix_.size() - 1);
  }

 private:
  std::shared_ptr<const KvStore> base_;
  std::string prefix_;
};

// A store's view below prefix: the store itself when prefix is empty.
inline std::shared_ptr<const KvStore> below(std::shared_ptr<const KvStore> kv, const std::string& prefix) {
  if (prefix.empty()) return kv;
  return std::make_shared<PrefixKv>(std::move(kv), prefix);
}

}  // namespace ckpt::io
