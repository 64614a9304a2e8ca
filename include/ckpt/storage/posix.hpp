// ckpt/storage/posix.hpp — a local directory as a storage::Storage, over io/file.hpp.
//
// ckpt::posix is the default storage. The native format's writer writes through this
// class as through every other backend (format/native/writer.hpp): into a staging
// directory (io/staging_dir.hpp), with Publish::in_place, each data file written
// straight with writev as the leaves come and fsynced at close, the directory then
// renamed into place whole. As a general object store (Publish::atomic, the default) a
// put or a create()d object goes to a hidden sibling file, fsynced, renamed over the key.
// (Reading stays on file descriptors, io_uring and pread: format/native/reader.hpp.)
#pragma once

#include <sys/file.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::storage {

// How an object written to a directory becomes visible under its key.
enum class Publish {
  atomic,    // a hidden sibling file renamed over the key when whole and durable
  in_place,  // written under its key (inside a staging directory that is published whole)
};

namespace detail {

// A file written as the appends come (writev, no copy), fsynced at close.
class FileWriter final : public ObjectWriter {
 public:
  FileWriter(std::filesystem::path file, Publish publish)
      : file_(std::move(file)),
        written_to_(publish == Publish::atomic
                        ? file_.parent_path() / (std::string(io::staging_prefix) + file_.filename().string() + "-" +
                                                 io::random_suffix())
                        : file_),
        f_(io::File::create(written_to_)) {}
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter() override {
    if (closed_) return;
    f_ = io::File();
    std::error_code ec;
    std::filesystem::remove(written_to_, ec);
  }

  void append(std::span<const ConstBytes> pieces, bool) override {
    std::vector<iovec> iov;
    iov.reserve(pieces.size());
    std::uint64_t n = 0;
    for (const auto& p : pieces) {
      iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
      n += p.size();
    }
    io::write_all(f_, std::move(iov), file_);
    written_ += n;
    if (written_ - flushed_ >= io::writeback_chunk) {
      io::start_writeback(f_, flushed_, written_ - flushed_);
      flushed_ = written_;
    }
  }

  bool writes_at_once() const override { return true; }
  void expect_size(std::uint64_t bytes) override { io::preallocate(f_, bytes); }

  void close() override {
    f_.sync(file_);
    f_ = io::File();
    if (written_to_ != file_) io::rename_into_place(written_to_, file_, true);
    closed_ = true;
  }

 private:
  std::filesystem::path file_, written_to_;
  io::File f_;
  std::uint64_t written_ = 0, flushed_ = 0;
  bool closed_ = false;
};

}  // namespace detail

class PosixStorage final : public Storage {
 public:
  explicit PosixStorage(std::filesystem::path root, Publish publish = Publish::atomic)
      : root_(std::move(root)), publish_(publish) {}

  std::string root_url() const override { return root_.string(); }
  std::optional<std::filesystem::path> local_directory() const override { return root_; }

  std::unique_ptr<ObjectWriter> create(const std::string& key) override {
    const auto file = path(key);
    if (file.has_parent_path()) {
      std::error_code ec;
      std::filesystem::create_directories(file.parent_path(), ec);
      if (ec) throw Error(file.string(), "", "cannot create directory: " + ec.message());
    }
    return std::make_unique<detail::FileWriter>(file, publish_);
  }

  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override {
    auto w = create(key);
    w->append(pieces, true);
    w->close();
  }

  void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    const auto file = path(key);
    io::pread_exact(io::File::open_read(file), dst, offset, file);
  }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    std::error_code ec;
    const auto file = path(key);
    if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
    const auto n = std::filesystem::file_size(file, ec);
    if (ec) throw Error(file.string(), "", "cannot stat: " + ec.message());
    return n;
  }

  std::vector<std::string> list(const std::string& prefix) const override {
    std::vector<std::string> out;
    std::error_code ec;
    if (!std::filesystem::is_directory(root_, ec)) return out;
    for (auto it = std::filesystem::recursive_directory_iterator(root_, ec); !ec && it != std::filesystem::end(it);
         it.increment(ec)) {
      if (it->path().filename().string().starts_with(io::staging_prefix)) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(ec)) continue;
      std::string key = it->path().lexically_relative(root_).generic_string();
      if (key.starts_with(prefix)) out.push_back(std::move(key));
    }
    if (ec) throw Error(root_.string(), "", "cannot list: " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::vector<std::string> children(const std::string& prefix) const override {
    std::vector<std::string> out;
    const auto dir = prefix.empty() ? root_ : path(prefix);
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return out;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      std::error_code e2;
      // A symbolic link to a directory elsewhere is not one of this root's.
      if (name.starts_with(io::staging_prefix) || it->is_symlink(e2) || !it->is_directory(e2)) continue;
      out.push_back(std::move(name));
    }
    if (ec) throw Error(dir.string(), "", "cannot list the directory: " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
  }

  // Renamed to a hidden .tmp- name first (a crash leaves no half-deleted directory under
  // its own name; `ckpt gc` and managers remove such leftovers), then removed.
  void remove_prefix(const std::string& prefix) override {
    if (prefix.empty()) throw Error(root_.string(), "", "refusing to delete the storage's own directory");
    const auto dir = path(prefix);
    const auto parent = dir.parent_path();
    const auto doomed =
        parent / (std::string(io::staging_prefix) + dir.filename().string() + "-deleting-" + io::random_suffix());
    {
      // Locked before it gets its .tmp- name, so that a concurrent `ckpt gc` leaves the
      // deletion to us.
      const io::File hold = io::detail::open_dir_for_lock(dir);
      if (hold) (void)::flock(hold.fd(), LOCK_EX | LOCK_NB);
      if (::rename(dir.c_str(), doomed.c_str()) != 0) {
        if (errno == ENOENT) return;  // already gone
        io::throw_errno("cannot delete", dir);
      }
      std::error_code ec;
      std::filesystem::remove_all(doomed, ec);
      if (ec) throw Error(doomed.string(), "", "cannot delete: " + ec.message());
    }
  }

  void remove(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      std::error_code ec;
      std::filesystem::remove(path(k), ec);
      if (ec) throw Error(path(k).string(), "", "cannot delete: " + ec.message());
    }
  }

 private:
  std::filesystem::path path(const std::string& key) const { return root_ / key; }
  std::filesystem::path root_;
  Publish publish_;
};

// A writer of the new file `file` itself (no sibling, no rename: what io::publish_file's
// temporary file is filled by, which it renames into place).
inline std::unique_ptr<ObjectWriter> file_writer(const std::filesystem::path& file) {
  return std::make_unique<detail::FileWriter>(file, Publish::in_place);
}

// A local directory as a Location (its path is its URL): what the native format and
// the manager use for plain paths.
inline Location directory_location(const std::filesystem::path& dir, Publish publish = Publish::atomic) {
  return Location{std::make_shared<PosixStorage>(dir, publish), "", dir.string()};
}

}  // namespace ckpt::storage
