// ckpt/io/mapped_file.hpp — a whole file mapped read-only into memory.
//
// Formats whose tensors lie uncompressed at known offsets (safetensors) hand out spans
// into the mapping instead of reading: a lazy leaf costs nothing until it is touched, and
// a restore is one copy from the page cache. The mapping lives as long as the last
// shared_ptr to it (the Index keeps it).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include <ckpt/io/file.hpp>

namespace ckpt::io {

class MappedFile {
 public:
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }

  // Maps p (a regular file) whole; an empty file maps to an empty span.
  static std::shared_ptr<const MappedFile> open(const fs::path& p) {
    const File f = File::open_read(p);
    const std::uint64_t size = f.size(p);
    auto m = std::shared_ptr<MappedFile>(new MappedFile());
    if (size == 0) return m;
    void* a = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, f.fd(), 0);
    if (a == MAP_FAILED) throw_errno("cannot map", p);
    m->data_ = a;
    m->size_ = static_cast<std::size_t>(size);
    return m;  // the mapping outlives the descriptor
  }

  std::span<const std::byte> bytes() const noexcept { return {static_cast<const std::byte*>(data_), size_}; }
  std::size_t size() const noexcept { return size_; }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ckpt::io
