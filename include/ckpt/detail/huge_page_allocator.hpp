// ckpt/detail/huge_page_allocator.hpp — large per-leaf arrays on transparent huge pages.
//
// A restore of 20,000 leaves builds a few arrays of a megabyte or more (the index's
// entries, the read queue's list), touches every page of them once and frees them.
// That memory is fresh in a process that restores once, at start-up, and each fresh
// 4 KiB page costs a fault, which on a VM, where the hypervisor backs each page, costs
// many times what it does on bare metal (for 20,000 entries, faults were about half the
// time of the restore). On a 2 MiB transparent huge page the same memory costs one
// fault per 2 MiB.
//
// So an array of min_bytes or more is mapped on its own, 2 MiB-aligned, rounded up to
// 2 MiB, and marked MADV_HUGEPAGE, which the kernel honours when transparent huge pages
// are "always" or "madvise" (Debian's default); with "never" it is plain memory. The
// cost is at most 2 MiB of resident memory more than the array's own, a bound that is
// why smaller arrays stay with std::allocator; and where free memory is fragmented, the
// first touch of a 2 MiB page may wait while the kernel compacts memory for it (THP's
// "defrag" setting), or fall back to 4 KiB pages. Elsewhere than Linux, and under
// AddressSanitizer (whose checks stop at memory it did not allocate), everything does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define CKPT_HUGE_PAGES 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPT_HUGE_PAGES 0
#endif
#endif
#if !defined(CKPT_HUGE_PAGES)
#if defined(__linux__)
#define CKPT_HUGE_PAGES 1
#else
#define CKPT_HUGE_PAGES 0
#endif
#endif

#if CKPT_HUGE_PAGES
#include <sys/mman.h>
#endif

namespace ckpt::detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

template <class T>
struct HugePageAllocator {
  using value_type = T;
  // Arrays at least this large go on huge pages: at most 4x the array's bytes resident.
  static constexpr std::size_t min_bytes = std::size_t{512} << 10;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
#if CKPT_HUGE_PAGES
    if (n * sizeof(T) >= min_bytes) return static_cast<T*>(map(n * sizeof(T)));
#endif
    return std::allocator<T>{}.allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
#if CKPT_HUGE_PAGES
    if (n * sizeof(T) >= min_bytes) {
      ::munmap(p, mapped_bytes(n * sizeof(T)));
      return;
    }
#endif
    std::allocator<T>{}.deallocate(p, n);
  }

  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) noexcept { return true; }

 private:
  static std::size_t mapped_bytes(std::size_t bytes) { return (bytes + huge_page_bytes - 1) & ~(huge_page_bytes - 1); }
#if CKPT_HUGE_PAGES
  // bytes rounded up to 2 MiB, at a 2 MiB boundary: mapped with 2 MiB to spare, whose
  // unaligned ends are unmapped again.
  static void* map(std::size_t bytes) {
    const std::size_t size = mapped_bytes(bytes);
    if (size < bytes || size + huge_page_bytes < size) throw std::bad_alloc();
    void* raw = ::mmap(nullptr, size + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const auto aligned = (start + huge_page_bytes - 1) & ~std::uintptr_t{huge_page_bytes - 1};
    if (aligned > start) ::munmap(raw, aligned - start);
    if (const std::uintptr_t end = start + size + huge_page_bytes; end > aligned + size)
      ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
#if defined(MADV_HUGEPAGE)
    (void)::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // a hint: plain pages if refused
#endif
    return reinterpret_cast<void*>(aligned);
  }
#endif
};

}  // namespace ckpt::detail
