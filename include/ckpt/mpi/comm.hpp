// ckpt/mpi/comm.hpp — ckpt::mpi::Comm: a communicator, and the few collectives ckpt uses.
//
// The caller keeps MPI_Init / MPI_Finalize; Comm only wraps a communicator it is given.
// Every collective ckpt runs is one of these, called by every rank in the same order.
// Failures are agreed on (agree()): when any rank fails, every rank throws a
// ckpt::Error that names the failing rank and its reason.
#pragma once

// ckpt uses MPI's C interface; the deprecated C++ bindings would only cost compile time.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/leaf/box.hpp>

namespace ckpt::mpi {

class Comm {
 public:
  explicit Comm(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm get() const noexcept { return comm_; }

  void barrier() const { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  // Every rank's bytes, in rank order.
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) const {
    const long long n = static_cast<long long>(mine.size());
    std::vector<long long> sizes(static_cast<std::size_t>(size_));
    check(MPI_Allgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, comm_), "MPI_Allgather");
    std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(size_));
    long long total = 0;
    for (auto s : sizes) total += s;
    if (total <= INT_MAX) {  // one Allgatherv
      std::vector<int> counts, displs;
      int at = 0;
      for (auto s : sizes) {
        counts.push_back(static_cast<int>(s));
        displs.push_back(at);
        at += static_cast<int>(s);
      }
      std::vector<std::byte> all(static_cast<std::size_t>(total));
      check(MPI_Allgatherv(mine.data(), static_cast<int>(n), MPI_BYTE, all.data(), counts.data(), displs.data(),
                           MPI_BYTE, comm_),
            "MPI_Allgatherv");
      for (std::size_t r = 0; r < out.size(); ++r)
        out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
    } else {  // larger than an int counts: one broadcast per rank
      for (int r = 0; r < size_; ++r) {
        auto& v = out[static_cast<std::size_t>(r)];
        v.resize(static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
        if (r == rank_) std::memcpy(v.data(), mine.data(), mine.size());
        broadcast(v, r);
      }
    }
    return out;
  }

  // Sends root's bytes (whose size every rank already knows) to every rank, in pieces
  // that fit MPI's int counts.
  void broadcast(std::span<std::byte> bytes, int root) const {
    constexpr std::size_t piece = std::size_t{1} << 30;
    for (std::size_t at = 0; at < bytes.size(); at += piece) {
      const std::size_t n = std::min(piece, bytes.size() - at);
      check(MPI_Bcast(bytes.data() + at, static_cast<int>(n), MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }
  // Sends root's vector, size and bytes, to every rank.
  void broadcast(std::vector<std::byte>& bytes, int root) const {
    long long n = static_cast<long long>(bytes.size());
    check(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm_), "MPI_Bcast");
    bytes.resize(static_cast<std::size_t>(n));
    broadcast(std::span<std::byte>(bytes), root);
  }
  std::string broadcast(std::string s, int root) const {
    std::vector<std::byte> b(reinterpret_cast<const std::byte*>(s.data()),
                             reinterpret_cast<const std::byte*>(s.data()) + s.size());
    broadcast(b, root);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  std::int64_t broadcast(std::int64_t v, int root) const {
    long long x = v;
    check(MPI_Bcast(&x, 1, MPI_LONG_LONG, root, comm_), "MPI_Bcast");
    return x;
  }
  // True on every rank when `mine` is true on any.
  bool any(bool mine) const {
    int in = mine ? 1 : 0, out = 0;
    check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, comm_), "MPI_Allreduce");
    return out != 0;
  }
  std::int64_t max(std::int64_t mine) const {
    long long in = mine, out = 0;
    check(MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_MAX, comm_), "MPI_Allreduce");
    return out;
  }

  // Every rank's error text ("" for none); throws the same ckpt::Error on every rank
  // when one is not empty, naming the first rank that failed.
  void agree(const std::string& checkpoint, const std::string& my_error) const {
    const auto all = allgather({reinterpret_cast<const std::byte*>(my_error.data()), my_error.size()});
    for (std::size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty())
        throw Error(checkpoint, "", "rank " + std::to_string(r) + " of " + std::to_string(size_) + " failed: " +
                                        std::string(reinterpret_cast<const char*>(all[r].data()), all[r].size()));
  }
  // Runs f on every rank, then agrees on its outcome (see agree()).
  template <class F>
  void run(const std::string& checkpoint, F&& f) const {
    std::string err;
    try {
      f();
    } catch (const std::exception& e) {
      err = e.what();
      if (err.empty()) err = "an exception with no message";
    } catch (...) {
      err = "an unknown exception";
    }
    agree(checkpoint, err);
  }

 private:
  static void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      throw Error(std::string(what) + " failed: " + std::string(msg, static_cast<std::size_t>(len)));
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

namespace detail {

// Bytes in and out of the description exchange (between ranks of one program: trusted).
struct Out {
  std::vector<std::byte> b;
  void u64(std::uint64_t v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    b.insert(b.end(), p, p + 8);
  }
  void str(std::string_view s) {
    u64(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    b.insert(b.end(), p, p + s.size());
  }
  void shape(const Shape& s) {
    u64(s.size());
    for (auto d : s) u64(static_cast<std::uint64_t>(d));
  }
};
struct In {
  std::span<const std::byte> b;
  std::size_t at = 0;
  std::uint64_t u64() {
    std::uint64_t v = 0;
    std::memcpy(&v, b.data() + at, 8);
    at += 8;
    return v;
  }
  std::string str() {
    const std::size_t n = static_cast<std::size_t>(u64());
    std::string s(reinterpret_cast<const char*>(b.data() + at), n);
    at += n;
    return s;
  }
  Shape shape() {
    Shape s(static_cast<std::size_t>(u64()));
    for (auto& d : s) d = static_cast<std::int64_t>(u64());
    return s;
  }
};

}  // namespace detail

}  // namespace ckpt::mpi
