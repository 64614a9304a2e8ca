// ckpt/mpi/comm.hpp — ckpt::mpi::Comm: a communicator, and the few collectives ckpt uses.
//
// The caller keeps MPI_Init / MPI_Finalize; Comm only wraps a communicator it is given.
// Every collective ckpt runs is one of these, called by every rank in the same order.
// Failures are agreed on (agree()): when any rank fails, every rank throws a
// ckpt::Error of the kind the failing rank threw, naming that rank and its reason.
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

namespace detail {

// The kinds of ckpt::Error (error.hpp) a failure agreed on keeps across ranks.
enum class ErrorCode : std::uint8_t {
  other, error, missing_leaf, shape_mismatch, dtype_mismatch, corrupt, root_locked, step_exists, no_such_step,
  background_save, background_timeout, read_only, cancelled, unused_leaf
};

// One rank's failure, sent to every rank: its kind, its what(), and the paths of a
// MissingLeafError (or an UnusedLeafError's first paths, with their count). Empty
// text: no failure.
struct Failure {
  ErrorCode code = ErrorCode::other;
  std::string text;
  std::vector<std::string> missing;
  std::uint64_t count = 0;

  static Failure of(const std::exception& e) {
    Failure f{ErrorCode::other, e.what(), {}, 0};
    if (f.text.empty()) f.text = "an exception with no message";
    if (const auto* m = dynamic_cast<const MissingLeafError*>(&e)) {
      f.code = ErrorCode::missing_leaf;
      f.missing = m->missing_paths();
    } else if (const auto* u = dynamic_cast<const UnusedLeafError*>(&e)) {
      f.code = ErrorCode::unused_leaf;
      f.missing = u->unused_paths();
      f.count = u->unused_count();
    }
    else if (dynamic_cast<const ShapeMismatchError*>(&e)) f.code = ErrorCode::shape_mismatch;
    else if (dynamic_cast<const DtypeMismatchError*>(&e)) f.code = ErrorCode::dtype_mismatch;
    else if (dynamic_cast<const CorruptCheckpointError*>(&e)) f.code = ErrorCode::corrupt;
    else if (dynamic_cast<const RootLockedError*>(&e)) f.code = ErrorCode::root_locked;
    else if (dynamic_cast<const StepExistsError*>(&e)) f.code = ErrorCode::step_exists;
    else if (dynamic_cast<const NoSuchStepError*>(&e)) f.code = ErrorCode::no_such_step;
    else if (dynamic_cast<const BackgroundSaveTimeoutError*>(&e)) f.code = ErrorCode::background_timeout;
    else if (dynamic_cast<const BackgroundSaveError*>(&e)) f.code = ErrorCode::background_save;
    else if (dynamic_cast<const ReadOnlyError*>(&e)) f.code = ErrorCode::read_only;
    else if (dynamic_cast<const CancelledError*>(&e)) f.code = ErrorCode::cancelled;
    else if (dynamic_cast<const Error*>(&e)) f.code = ErrorCode::error;
    return f;
  }

  // code, count, then text, then the missing paths, each after its length (u64, native
  // order: between ranks of one program)
  std::vector<std::byte> encode() const {
    std::vector<std::byte> out;
    if (text.empty()) return out;
    auto put = [&](const std::string& s) {
      const std::uint64_t n = s.size();
      const auto* p = reinterpret_cast<const std::byte*>(&n);
      out.insert(out.end(), p, p + sizeof n);
      out.insert(out.end(), reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size());
    };
    out.push_back(static_cast<std::byte>(code));
    out.insert(out.end(), reinterpret_cast<const std::byte*>(&count), reinterpret_cast<const std::byte*>(&count) + sizeof count);
    put(text);
    for (const auto& m : missing) put(m);
    return out;
  }
  static Failure decode(std::span<const std::byte> in) {
    Failure f;
    f.code = static_cast<ErrorCode>(in[0]);
    std::memcpy(&f.count, in.data() + 1, sizeof f.count);
    std::size_t at = 1 + sizeof f.count;
    auto get = [&] {
      std::uint64_t n = 0;
      std::memcpy(&n, in.data() + at, sizeof n);
      at += sizeof n;
      std::string s(reinterpret_cast<const char*>(in.data() + at), static_cast<std::size_t>(n));
      at += static_cast<std::size_t>(n);
      return s;
    };
    f.text = get();
    while (at < in.size()) f.missing.push_back(get());
    return f;
  }

  // Throws this failure on this rank as a ckpt::Error of its kind about `checkpoint`,
  // its message prefixed (a MissingLeafError lists its paths, as the failing rank's did).
  [[noreturn]] void throw_agreed(const std::string& checkpoint, const std::string& prefix) const {
    const std::string what = prefix + text;
    switch (code) {
      case ErrorCode::missing_leaf: throw MissingLeafError(checkpoint, missing);
      case ErrorCode::unused_leaf: throw UnusedLeafError(checkpoint, missing, count);
      case ErrorCode::shape_mismatch: throw ShapeMismatchError(checkpoint, "", what);
      case ErrorCode::dtype_mismatch: throw DtypeMismatchError(checkpoint, "", what);
      case ErrorCode::corrupt: throw CorruptCheckpointError(checkpoint, "", what);
      case ErrorCode::root_locked: throw RootLockedError(checkpoint, "", what);
      case ErrorCode::step_exists: throw StepExistsError(checkpoint, "", what);
      case ErrorCode::no_such_step: throw NoSuchStepError(checkpoint, "", what);
      case ErrorCode::background_save: throw BackgroundSaveError(checkpoint, "", what);
      case ErrorCode::background_timeout: throw BackgroundSaveTimeoutError(checkpoint, "", what);
      case ErrorCode::read_only: throw ReadOnlyError(checkpoint, "", what);
      case ErrorCode::cancelled: throw CancelledError(checkpoint, "", what);
      case ErrorCode::error: case ErrorCode::other: break;
    }
    throw Error(checkpoint, "", what);
  }
};

}  // namespace detail

// A communicator and the few collectives ckpt needs of it.
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

  // Every rank's failure (none when `mine` is empty); throws the same error on every
  // rank when one failed, naming the first rank that did, of the kind it threw
  // (a RootLockedError on rank 0 is a RootLockedError everywhere).
  void agree(const std::string& checkpoint, const detail::Failure& mine) const {
    const auto all = allgather(mine.encode());
    for (std::size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty())
        detail::Failure::decode(all[r]).throw_agreed(checkpoint, "rank " + std::to_string(r) + " of " +
                                                                     std::to_string(size_) + " failed: ");
  }
  void agree(const std::string& checkpoint, const std::string& my_error) const {
    agree(checkpoint, detail::Failure{detail::ErrorCode::error, my_error, {}, 0});
  }
  // Runs f on every rank, then agrees on its outcome (see agree()).
  template <class F>
  void run(const std::string& checkpoint, F&& f) const {
    detail::Failure failure;
    try {
      f();
    } catch (const std::exception& e) {
      failure = detail::Failure::of(e);
    } catch (...) {
      failure.text = "an unknown exception";
    }
    agree(checkpoint, failure);
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
