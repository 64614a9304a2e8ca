// bench_mpi — ckpt::mpi::save and restore_into of a sharded state (rows of 8 layers
// split over the ranks), against, in the same run, each rank writing its bytes to a
// plain file with write + fsync (the least any collective save can do). Also the t5x
// layout written by the ranks (uncompressed) and restored onto the shifted rows.
//
//   mpirun -np N bench_mpi [DIR] [MiB] [REPS]     (defaults: $TMPDIR or /tmp, 1024, 3)
//
// Not a test: it prints figures (docs/benchmarks.md, "Many processes"). Times are
// from a barrier before to a barrier after (the slowest rank's), medians over REPS.
// Restores read onto other layouts: rows split at other places (ranks shifted by half
// a shard), and columns (each rank a column strip of every layer), with checksums
// verified (the default) and not; bytes read are every rank's rchar from /proc/self/io,
// summed, against the bytes the ranks' boxes hold (counted in an untimed second
// restore with CKPT_IO_URING=0: rchar does not count io_uring's reads). Incremental: a
// ckpt::mpi::CheckpointManager with .incremental = true saves the state with one of
// its 8 layers changed since the step before (each rank hard-links its unchanged
// pieces), against the full ckpt::mpi::save of the same run.
#include <ckpt/formats.hpp>
#include <ckpt/mpi.hpp>
#include <xtensor/xtensor.hpp>

#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Layer {
  ckpt::Sharded<xt::xtensor<float, 2>> w;
};
struct State {
  std::int64_t step = 0;
  std::vector<Layer> layers;
};

namespace {

constexpr std::size_t n_layers = 8, cols = 1024;

std::pair<std::size_t, std::size_t> split(std::size_t total, std::size_t n, std::size_t k) {
  const std::size_t base = total / n, extra = total % n;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

long long rchar() {
  std::ifstream f("/proc/self/io");
  std::string key;
  long long v = 0;
  while (f >> key >> v)
    if (key == "rchar:") return v;
  return 0;
}

// Seconds from a barrier to the slowest rank's end of f.
template <class F>
double timed(const ckpt::mpi::Comm& comm, F&& f) {
  comm.barrier();
  const auto t0 = Clock::now();
  f();
  comm.barrier();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// rows: the layer's global rows; box (r0, nr, c0, nc) of each layer.
State make(std::size_t rows, std::size_t r0, std::size_t nr, std::size_t c0, std::size_t nc, bool fill) {
  State s;
  s.step = 1;
  for (std::size_t l = 0; l < n_layers; ++l) {
    Layer layer;
    layer.w = {{rows, cols}, {r0, c0}, xt::xtensor<float, 2>::from_shape({nr, nc})};
    if (fill)
      for (std::size_t i = 0; i < layer.w.local.size(); ++i) layer.w.local.data()[i] = static_cast<float>(l + i % 977);
    else
      std::fill(layer.w.local.begin(), layer.w.local.end(), 0.0f);
    s.layers.push_back(std::move(layer));
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    const ckpt::mpi::Comm comm(MPI_COMM_WORLD);
    const int P = comm.size(), r = comm.rank();
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = argc > 1 ? fs::path(argv[1]) : fs::path(tmp && *tmp ? tmp : "/tmp");
    const std::size_t mib = argc > 2 ? std::stoul(argv[2]) : 1024;
    const int reps = argc > 3 ? std::stoi(argv[3]) : 3;
    const std::size_t rows = std::max<std::size_t>(mib * (1u << 20) / (n_layers * cols * sizeof(float)), 2 * P);
    const fs::path dir = base / ("ckpt-bench-mpi-" + std::to_string(P));
    if (r == 0) fs::create_directories(dir);
    comm.barrier();

    const auto [r0, nr] = split(rows, P, r);
    const State state = make(rows, r0, nr, 0, cols, true);
    const double total_bytes = static_cast<double>(n_layers * rows * cols * sizeof(float));

    std::vector<double> t_base, t_save, t_t5x, t_rows, t_t5x_rows, t_cols, t_cols_nv, t_incremental;
    // Incremental saves: step 0 whole, then each rep one layer changed (all its bytes).
    State changing = state;
    ckpt::mpi::CheckpointManager<State> mgr(comm, dir / "incremental", {.max_to_keep = 2, .incremental = true});
    mgr.save(0, changing);
    double ratio_rows = 0, ratio_t5x_rows = 0, ratio_cols = 0, ratio_cols_nv = 0;
    for (int rep = 0; rep < reps; ++rep) {
      // Baseline: this rank's bytes, one file, write + fsync; then the directory entry.
      const fs::path plain = dir / ("plain-" + std::to_string(r));
      t_base.push_back(timed(comm, [&] {
        const int fd = ::open(plain.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        for (const auto& l : state.layers) {
          const char* p = reinterpret_cast<const char*>(l.w.local.data());
          for (std::size_t left = l.w.local.size() * sizeof(float); left > 0;) {
            const ssize_t n = ::write(fd, p, left);
            if (n <= 0) std::abort();
            p += n;
            left -= static_cast<std::size_t>(n);
          }
        }
        ::fsync(fd);
        ::close(fd);
        const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
        ::fsync(d);
        ::close(d);
      }));
      fs::remove(plain);

      const fs::path ck = dir / ("step-" + std::to_string(rep));
      t_save.push_back(timed(comm, [&] { ckpt::mpi::save(comm, ck, state); }));
      // The t5x layout by ranks, uncompressed (t5x's gzip would measure zlib, not the writing).
      const fs::path t5 = dir / ("t5x-" + std::to_string(rep));
      t_t5x.push_back(timed(comm, [&] { ckpt::mpi::save<ckpt::basic_t5x<ckpt::io::codec::none>>(comm, t5, state); }));

      // Restore onto other layouts; bytes read summed over the ranks.
      // Timed as a user runs it; the bytes counted in a second, untimed restore that reads
      // the same ranges with pread (CKPT_IO_URING=0): rchar does not count io_uring's reads.
      auto restore = [&](State target, std::size_t want_bytes, bool verify, double& ratio, const fs::path& from) {
        const double t = timed(comm, [&] { ckpt::mpi::restore_into(comm, from, target, {.verify_checksums = verify}); });
        ::setenv("CKPT_IO_URING", "0", 1);
        const long long before = rchar();
        ckpt::mpi::restore_into(comm, from, target, {.verify_checksums = verify});
        long long mine = rchar() - before, all = 0, want = static_cast<long long>(want_bytes), want_all = 0;
        ::unsetenv("CKPT_IO_URING");
        MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&want, &want_all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        ratio = static_cast<double>(all) / static_cast<double>(want_all);
        return t;
      };
      const auto [s0, sn] = split(rows, P, (r + 1) % P);  // another rank's rows, shifted by half a shard
      const std::size_t shift = std::min(sn / 2, rows - (s0 + sn));
      t_rows.push_back(restore(make(rows, s0 + shift, sn, 0, cols, false), n_layers * sn * cols * sizeof(float), true,
                               ratio_rows, ck));
      // the same from the t5x layout: each rank decodes the zarr chunks its rows meet
      t_t5x_rows.push_back(restore(make(rows, s0 + shift, sn, 0, cols, false), n_layers * sn * cols * sizeof(float),
                                   true, ratio_t5x_rows, t5));
      if (r == 0) fs::remove_all(t5);
      const auto [c0, nc] = split(cols, P, r);
      const std::size_t col_bytes = n_layers * rows * nc * sizeof(float);
      t_cols.push_back(restore(make(rows, 0, rows, c0, nc, false), col_bytes, true, ratio_cols, ck));
      t_cols_nv.push_back(restore(make(rows, 0, rows, c0, nc, false), col_bytes, false, ratio_cols_nv, ck));
      if (r == 0) fs::remove_all(ck);
      // The removals' journal work is not charged to the next timed save (its fsyncs
      // would wait for it): measured 1.0 s instead of 0.15 s for 1/8 of 512 MiB.
      if (r == 0) ::sync();
      changing.layers[0].w.local += 1.0f;
      t_incremental.push_back(timed(comm, [&] { mgr.save(rep + 1, changing); }));
      comm.barrier();
    }
    if (r == 0) {
      const double gb = total_bytes / 1e9;
      std::printf("bench_mpi: %d ranks, %.2f GB state (%zu layers of [%zu,%zu] float32, rows split), %d reps, medians\n", P,
                  gb, n_layers, rows, cols, reps);
      std::printf("  plain write+fsync per rank : %7.3f s  %6.2f GB/s\n", median(t_base), gb / median(t_base));
      std::printf("  ckpt::mpi::save            : %7.3f s  %6.2f GB/s  (%.2fx the baseline's throughput)\n",
                  median(t_save), gb / median(t_save), median(t_base) / median(t_save));
      std::printf("  incremental, 1/8 changed   : %7.3f s  %6.2f GB/s  (%.2fx the time of ckpt::mpi::save)\n",
                  median(t_incremental), gb / median(t_incremental), median(t_incremental) / median(t_save));
      std::printf("  mpi::save<t5x>, no gzip    : %7.3f s  %6.2f GB/s  (%.2fx the baseline's throughput)\n",
                  median(t_t5x), gb / median(t_t5x), median(t_base) / median(t_t5x));
      std::printf("  restore, rows shifted      : %7.3f s  %6.2f GB/s  bytes read %.3fx what the ranks need\n",
                  median(t_rows), gb / median(t_rows), ratio_rows);
      std::printf("  restore t5x, rows shifted  : %7.3f s  %6.2f GB/s  bytes read %.3fx (whole zarr chunks)\n",
                  median(t_t5x_rows), gb / median(t_t5x_rows), ratio_t5x_rows);
      std::printf("  restore, column strips     : %7.3f s  %6.2f GB/s  bytes read %.3fx (checksums verified)\n",
                  median(t_cols), gb / median(t_cols), ratio_cols);
      std::printf("  restore, column strips     : %7.3f s  %6.2f GB/s  bytes read %.3fx (verify_checksums = false)\n",
                  median(t_cols_nv), gb / median(t_cols_nv), ratio_cols_nv);
      fs::remove_all(dir);
    }
  }
  MPI_Finalize();
  return 0;
}
