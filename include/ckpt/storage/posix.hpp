// ckpt/storage/posix.hpp — a local directory as a storage::Storage, over io/file.hpp.
//
// ckpt::posix is the default storage: plain paths go to the native writer and reader
// (format/native/), which write straight with writev and publish a checkpoint by
// renaming its staging directory (io/staging_dir.hpp). This class is the same
// filesystem seen through the object interface of storage/storage.hpp, for code written
// against Storage alone (tests of the concept, tools that copy between backends).
// A put is atomic and durable: a hidden sibling file, fsynced, renamed over the key.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::storage {

class PosixStorage final : public Storage {
 public:
  explicit PosixStorage(std::filesystem::path root) : root_(std::move(root)) {}

  std::string root_url() const override { return root_.string(); }

  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override {
    const auto file = path(key);
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) throw Error(file.string(), "", "cannot create directory: " + ec.message());
    io::publish_file(file, true, [&](const std::filesystem::path& tmp) {
      io::File f = io::File::create(tmp);
      std::vector<iovec> iov;
      for (const auto& p : pieces) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
      io::write_all(f, std::move(iov), tmp);
      f.sync(tmp);
    });
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
};

}  // namespace ckpt::storage
