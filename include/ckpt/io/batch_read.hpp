// ckpt/io/batch_read.hpp — many small reads at scattered offsets of one file, in a few
// system calls: a column strip of a row-split box is one short range per row.
//
// One pread per range costs a system call each: a strip of 2 KiB per row of a box took
// several times as long as reading the whole box. Submitted to an io_uring 256 at a
// time, the same reads take a fraction of that (reads of cached pages complete inline,
// in the submitting call). io_uring needs Linux
// 5.6+ and may be refused (seccomp in containers, kernel.io_uring_disabled): then, and
// on other systems, each range is read with pread_exact, as before. CKPT_IO_URING=0 in
// the environment asks for pread only (Linux's rchar, in /proc/<pid>/io, counts the
// bytes of read(2) and pread(2) but not of io_uring's reads: the benchmarks and tests
// that count bytes read set it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>

#include <ckpt/io/file.hpp>

#if defined(__linux__) && __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#define CKPT_HAS_IO_URING 1
#else
#define CKPT_HAS_IO_URING 0
#endif

namespace ckpt::io {

struct RangeRead {
  std::uint64_t offset;        // in the file
  std::span<std::byte> dst;    // filled exactly
};

namespace detail {
#if CKPT_HAS_IO_URING
// A submission and completion ring, one per thread, made on first use; none when the
// kernel refuses one (then every batch goes through pread_exact).
class ReadRing {
 public:
  static constexpr unsigned depth = 256;

  static ReadRing* for_this_thread() {
    if (const char* v = std::getenv("CKPT_IO_URING"); v && std::string_view(v) == "0") return nullptr;  // pread only
    thread_local ReadRing ring;
    return ring.fd_ >= 0 && !ring.broken_ ? &ring : nullptr;
  }

  // Reads the ranges it can: done[i] is set for each range read whole. The caller reads
  // the others with pread_exact (a short read, an error, the file's end: pread_exact
  // says which). After an error of the ring itself, it is not used again.
  void read(int file, std::span<const RangeRead> ops, std::span<bool> done) {
    for (std::size_t first = 0; first < ops.size() && !broken_;) {
      const unsigned n = static_cast<unsigned>(std::min<std::size_t>(ops.size() - first, entries_));
      unsigned tail = *sq_tail_;
      for (unsigned k = 0; k < n; ++k, ++tail) {
        const RangeRead& op = ops[first + k];
        const unsigned at = tail & *sq_mask_;
        io_uring_sqe& s = sqes_[at];
        std::memset(&s, 0, sizeof s);
        s.opcode = IORING_OP_READ;
        s.fd = file;
        s.addr = reinterpret_cast<std::uint64_t>(op.dst.data());
        s.len = static_cast<std::uint32_t>(std::min<std::size_t>(op.dst.size(), std::size_t{1} << 30));
        s.off = op.offset;
        s.user_data = first + k;
        sq_array_[at] = at;
      }
      std::atomic_ref<unsigned>(*sq_tail_).store(tail, std::memory_order_release);
      unsigned submitted = 0, completed = 0;
      while (completed < n) {
        const long r = ::syscall(__NR_io_uring_enter, fd_, n - submitted, n - completed, IORING_ENTER_GETEVENTS, nullptr, 0);
        if (r < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY) {
          // Nothing of this call was submitted. With reads in flight, their buffers are
          // the caller's: wait for them (the kernel completes what it accepted); with
          // none, stop here and let pread do the rest.
          broken_ = true;
          if (submitted == completed) return;
        }
        if (r > 0) submitted += static_cast<unsigned>(r);
        unsigned head = std::atomic_ref<unsigned>(*cq_head_).load(std::memory_order_acquire);
        const unsigned ctail = std::atomic_ref<unsigned>(*cq_tail_).load(std::memory_order_acquire);
        for (; head != ctail; ++head, ++completed) {
          const io_uring_cqe& c = cqes_[head & *cq_mask_];
          const auto i = static_cast<std::size_t>(c.user_data);
          done[i] = c.res >= 0 && static_cast<std::size_t>(c.res) == ops[i].dst.size();
        }
        std::atomic_ref<unsigned>(*cq_head_).store(head, std::memory_order_release);
        if (broken_ && submitted == completed) return;
      }
      first += n;
    }
  }

  ~ReadRing() { close(); }

 private:
  ReadRing() {
    io_uring_params p{};
    fd_ = static_cast<int>(::syscall(__NR_io_uring_setup, depth, &p));
    if (fd_ < 0) return;
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {  // kernels before 5.4
      close();
      return;
    }
    ring_bytes_ = std::max<std::size_t>(p.sq_off.array + p.sq_entries * sizeof(unsigned),
                                        p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe));
    void* ring = ::mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQ_RING);
    if (ring == MAP_FAILED) {
      close();
      return;
    }
    ring_ = static_cast<char*>(ring);
    sqe_bytes_ = p.sq_entries * sizeof(io_uring_sqe);
    void* sqes = ::mmap(nullptr, sqe_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES);
    if (sqes == MAP_FAILED) {
      close();
      return;
    }
    sqes_ = static_cast<io_uring_sqe*>(sqes);
    entries_ = p.sq_entries;
    sq_tail_ = reinterpret_cast<unsigned*>(ring_ + p.sq_off.tail);
    sq_mask_ = reinterpret_cast<unsigned*>(ring_ + p.sq_off.ring_mask);
    sq_array_ = reinterpret_cast<unsigned*>(ring_ + p.sq_off.array);
    cq_head_ = reinterpret_cast<unsigned*>(ring_ + p.cq_off.head);
    cq_tail_ = reinterpret_cast<unsigned*>(ring_ + p.cq_off.tail);
    cq_mask_ = reinterpret_cast<unsigned*>(ring_ + p.cq_off.ring_mask);
    cqes_ = reinterpret_cast<io_uring_cqe*>(ring_ + p.cq_off.cqes);
  }
  void close() {
    if (sqes_) ::munmap(sqes_, sqe_bytes_);
    if (ring_) ::munmap(ring_, ring_bytes_);
    if (fd_ >= 0) ::close(fd_);
    sqes_ = nullptr;
    ring_ = nullptr;
    fd_ = -1;
  }

  int fd_ = -1;
  bool broken_ = false;
  char* ring_ = nullptr;
  std::size_t ring_bytes_ = 0, sqe_bytes_ = 0;
  io_uring_sqe* sqes_ = nullptr;
  io_uring_cqe* cqes_ = nullptr;
  unsigned entries_ = 0;
  unsigned *sq_tail_ = nullptr, *sq_mask_ = nullptr, *sq_array_ = nullptr;
  unsigned *cq_head_ = nullptr, *cq_tail_ = nullptr, *cq_mask_ = nullptr;
};
#endif
}  // namespace detail

// Reads every range of f exactly (a file too short is an error, as for pread_exact).
inline void pread_ranges(const File& f, std::span<const RangeRead> ops, const std::filesystem::path& name) {
#if CKPT_HAS_IO_URING
  if (ops.size() > 1)
    if (detail::ReadRing* ring = detail::ReadRing::for_this_thread()) {
      std::unique_ptr<bool[]> done(new bool[ops.size()]());
      ring->read(f.fd(), ops, std::span(done.get(), ops.size()));
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (!done[i]) pread_exact(f, ops[i].dst, ops[i].offset, name);
      return;
    }
#endif
  for (const RangeRead& op : ops) pread_exact(f, op.dst, op.offset, name);
}

}  // namespace ckpt::io
