// bench_peers — ckpt against the C++ libraries a user would otherwise pick, and the
// plain-file limit, on the same state in one process run (issue 11):
//
//   plain      one file of the same bytes: write() + fsync, read() (the limit)
//   ckpt       ckpt::save / ckpt::restore_into (native format, checksums on)
//   HDF5       HDF5's C API, one dataset per leaf (H5Dwrite / H5Dread into the arrays)
//   cereal     cereal's BinaryOutputArchive / BinaryInputArchive over std::fstream
//
// Rows: durable save, warm restore (page cache), cold restore (fsync, then
// posix_fadvise(POSIX_FADV_DONTNEED) on every file), 20,000 leaves of 4 KiB saved and
// restored, and a save of a state 90% unchanged since the last one (ckpt's manager with
// ManagerOptions::incremental; the peers rewrite everything). Peers' saves are made
// durable the same way (fsync of every file they wrote). Medians over rounds, in
// alternating order; ratios are baseline time / this time (>= 1: faster).
//
//   bench_peers [DIR] [MB] [ROUNDS]     (defaults: $TMPDIR or /tmp, 376, 5)
//
// HDF5 and cereal are optional (Debian: libhdf5-dev, libcereal-dev, installed by
// tools/install-deps.sh); without them their rows say "not built".
#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(CKPT_BENCH_HDF5) && __has_include(<hdf5.h>)
#include <hdf5.h>
#define HAVE_HDF5 1
#else
#define HAVE_HDF5 0
#endif
#if __has_include(<cereal/archives/binary.hpp>)
#include <cereal/archives/binary.hpp>
#include <cereal/types/vector.hpp>
#define HAVE_CEREAL 1
#else
#define HAVE_CEREAL 0
#endif

#include "page_cache.hpp"
#include "positional_args.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct PeerState {
  std::int64_t step = 0;
  std::vector<std::vector<float>> leaves;
#if HAVE_CEREAL
  template <class A>
  void serialize(A& ar) {
    ar(step, leaves);
  }
#endif
};

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- plain: every leaf's bytes back to back in one file ----
void plain_save(const PeerState& s, const fs::path& file) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::vector<iovec> iov;
  for (const auto& l : s.leaves) iov.push_back({const_cast<float*>(l.data()), l.size() * sizeof(float)});
  for (std::size_t i = 0; i < iov.size(); i += 512) {
    const int n = static_cast<int>(std::min<std::size_t>(512, iov.size() - i));
    std::size_t want = 0;
    for (int k = 0; k < n; ++k) want += iov[i + static_cast<std::size_t>(k)].iov_len;
    if (::writev(fd, iov.data() + i, n) != static_cast<ssize_t>(want)) std::exit(2);  // files here are < 2 GB a call
  }
  (void)::fsync(fd);
  ::close(fd);
}
void plain_load(PeerState& s, const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<iovec> iov;
  for (auto& l : s.leaves) iov.push_back({l.data(), l.size() * sizeof(float)});
  for (std::size_t i = 0; i < iov.size(); i += 512) {
    const int n = static_cast<int>(std::min<std::size_t>(512, iov.size() - i));
    std::size_t want = 0;
    for (int k = 0; k < n; ++k) want += iov[i + static_cast<std::size_t>(k)].iov_len;
    if (::readv(fd, iov.data() + i, n) != static_cast<ssize_t>(want)) std::exit(2);
  }
  ::close(fd);
}

// ---- HDF5: one dataset per leaf ----
#if HAVE_HDF5
void h5_save(const PeerState& s, const fs::path& file) {
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  for (std::size_t i = 0; i < s.leaves.size(); ++i) {
    const hsize_t dims[1] = {s.leaves[i].size()};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const std::string name = "leaf" + std::to_string(i);
    const hid_t d = H5Dcreate2(f, name.c_str(), H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.leaves[i].data());
    H5Dclose(d);
    H5Sclose(space);
  }
  H5Fclose(f);
  fsync_all(file);
}
void h5_load(PeerState& s, const fs::path& file) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (std::size_t i = 0; i < s.leaves.size(); ++i) {
    const std::string name = "leaf" + std::to_string(i);
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.leaves[i].data());
    H5Dclose(d);
  }
  H5Fclose(f);
}
#endif

// ---- cereal: the whole state through a binary archive ----
#if HAVE_CEREAL
void cereal_save(const PeerState& s, const fs::path& file) {
  {
    std::ofstream os(file, std::ios::binary | std::ios::trunc);
    cereal::BinaryOutputArchive ar(os);
    ar(s);
  }
  fsync_all(file);
}
void cereal_load(PeerState& s, const fs::path& file) {
  std::ifstream is(file, std::ios::binary);
  cereal::BinaryInputArchive ar(is);
  ar(s);
}
#endif

struct Lib {
  std::string name;
  bool built;
  std::function<void(const PeerState&, const fs::path&)> save;
  std::function<void(PeerState&, const fs::path&)> load;
};

}  // namespace

int main(int argc, char** argv) {
  refuse_flags(argc, argv, "[DIR] [MB] [ROUNDS]     (defaults: $TMPDIR or /tmp, 376, 5)");
  const char* tmp = std::getenv("TMPDIR");
  const fs::path base = (argc > 1 ? fs::path(argv[1]) : fs::path(tmp && *tmp ? tmp : "/tmp")) / "ckpt-bench-peers";
  const std::size_t mb = argc > 2 ? std::stoul(argv[2]) : 376;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 5;
  fs::remove_all(base);
  fs::create_directories(base);
#if HAVE_HDF5
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
#endif

  std::uint64_t x = 88172645463325252ull;
  auto fill = [&](std::vector<float>& v) {
    for (auto& f : v) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f = static_cast<float>(static_cast<std::int32_t>(x >> 32)) * (1.0f / 2147483648.0f);
    }
  };
  // The big state: one leaf of 30% (an embedding) and 47 equal ones.
  const std::size_t floats = mb * 1000000 / sizeof(float);
  PeerState big;
  big.leaves.resize(48);
  big.leaves[0].resize(floats * 3 / 10);
  for (std::size_t i = 1; i < 48; ++i) big.leaves[i].resize((floats - big.leaves[0].size()) / 47);
  for (auto& l : big.leaves) fill(l);
  // The small-leaves state: 20,000 leaves of 4 KiB.
  PeerState small;
  small.leaves.assign(20000, std::vector<float>(1024));
  for (auto& l : small.leaves) fill(l);
  auto bytes_of = [](const PeerState& s) {
    double n = 0;
    for (const auto& l : s.leaves) n += static_cast<double>(l.size() * sizeof(float));
    return n;
  };

  std::vector<Lib> libs = {
      {"plain file (limit)", true, plain_save, plain_load},
      {"ckpt", true, [](const PeerState& s, const fs::path& p) { ckpt::save(p, s, {.force = true, .data_files = 0}); },
       [](PeerState& s, const fs::path& p) { ckpt::restore_into(p, s); }},
#if HAVE_HDF5
      {"HDF5 C API", true, h5_save, h5_load},
#else
      {"HDF5 C API", false, nullptr, nullptr},
#endif
#if HAVE_CEREAL
      {"cereal binary", true, cereal_save, cereal_load},
#else
      {"cereal binary", false, nullptr, nullptr},
#endif
  };
  std::printf("state: %zu leaves, %.0f MB; small: %zu leaves of 4 KiB (%.0f MB); %u hardware threads; %s\n",
              big.leaves.size(), bytes_of(big) / 1e6, small.leaves.size(), bytes_of(small) / 1e6,
              std::thread::hardware_concurrency(), base.c_str());

  // times[row][lib]
  std::map<std::string, std::map<std::string, std::vector<double>>> times;
  auto path_of = [&](const Lib& l, const std::string& what) {
    std::string n = l.name;
    std::replace(n.begin(), n.end(), ' ', '_');
    return base / (n + "-" + what);
  };
  // The restores' targets, preallocated (HDF5 and plain need it; cereal resizes, to the
  // same sizes) and shared by every library and round: memory the kernel has written
  // before. A target made afresh for each restore was partly new pages, on which the
  // VM's first write by the kernel costs about 5 us a page (a 376 MB restore into a
  // wholly new target: plain 477 ms, ckpt 313 ms, against 27 and 25 ms into the same
  // target again); which pages were new depended on malloc's history, so it differed
  // between libraries (docs/benchmarks.md, 2026-12-02, seventh).
  PeerState into = big, sinto = small;
  // Each restore is checked on one leaf, cleared before it (check() below clears it again).
  std::fill(into.leaves[7].begin(), into.leaves[7].end(), 0.0f);
  std::fill(sinto.leaves[7].begin(), sinto.leaves[7].end(), 0.0f);
  for (int r = 0; r < rounds; ++r) {
    std::vector<const Lib*> order;
    for (const auto& l : libs)
      if (l.built) order.push_back(&l);
    if (r % 2) std::reverse(order.begin(), order.end());
    for (const Lib* l : order) {
      const fs::path p = path_of(*l, "big");
      fs::remove_all(p);
      ::sync();
      auto t0 = Clock::now();
      l->save(big, p);
      times["save"][l->name].push_back(since(t0));
      // The target holds the last restore's bytes but for leaf 7, cleared for this one.
      auto check = [&](PeerState& s, const PeerState& want, const char* what) {
        if (s.leaves[7] != want.leaves[7]) std::printf("%s: %s: restored bytes differ!\n", l->name.c_str(), what);
        std::fill(s.leaves[7].begin(), s.leaves[7].end(), 0.0f);
      };
      t0 = Clock::now();
      l->load(into, p);
      times["restore, warm"][l->name].push_back(since(t0));
      check(into, big, "warm restore");
      drop_cache(p);
      t0 = Clock::now();
      l->load(into, p);
      times["restore, cold"][l->name].push_back(since(t0));
      check(into, big, "cold restore");

      const fs::path q = path_of(*l, "small");
      fs::remove_all(q);
      ::sync();
      t0 = Clock::now();
      l->save(small, q);
      times["20,000 x 4 KiB save"][l->name].push_back(since(t0));
      t0 = Clock::now();
      l->load(sinto, q);
      times["20,000 x 4 KiB restore, warm"][l->name].push_back(since(t0));
      check(sinto, small, "small restore");
      fs::remove_all(p);
      fs::remove_all(q);
    }
  }

  // 90% unchanged: ckpt's incremental manager against a full ckpt save and the peers'
  // (full) saves of the same state, one step after another.
  {
    ckpt::CheckpointManager<PeerState> inc(base / "inc", {.max_to_keep = 2, .incremental = true});
    PeerState s = big;
    inc.save(0, s);
    for (int r = 0; r < rounds; ++r) {
      s.step = r + 1;
      for (std::size_t k = 0; k < 5; ++k) {  // ~10% of the bytes change
        auto& l = s.leaves[1 + (static_cast<std::size_t>(r) * 5 + k) % 47];
        for (std::size_t j = 0; j < l.size(); j += 1024) l[j] += 1.0f;
      }
      ::sync();
      auto t0 = Clock::now();
      inc.save(s.step, s);
      times["save, 90% unchanged"]["ckpt incremental"].push_back(since(t0));
      for (const auto& l : libs) {
        if (!l.built) continue;
        const fs::path p = path_of(l, "step");
        fs::remove_all(p);
        ::sync();
        t0 = Clock::now();
        l.save(s, p);
        times["save, 90% unchanged"][l.name].push_back(since(t0));
        fs::remove_all(p);
      }
    }
  }
  fs::remove_all(base);

  const std::vector<std::string> rows = {"save", "restore, warm", "restore, cold", "20,000 x 4 KiB save",
                                         "20,000 x 4 KiB restore, warm", "save, 90% unchanged"};
  std::printf("\n%-30s %-18s %9s %8s %9s %9s\n", "", "", "median s", "GB/s", "vs plain", "vs best peer");
  for (const auto& row : rows) {
    const double gb = (row.rfind("20,000", 0) == 0 ? bytes_of(small) : bytes_of(big)) / 1e9;
    const auto& t = times[row];
    const double plain = median(t.at("plain file (limit)"));
    double best_peer = 0;
    for (const auto& [name, v] : t)
      if (name != "plain file (limit)" && name.rfind("ckpt", 0) != 0)
        best_peer = best_peer == 0 ? median(v) : std::min(best_peer, median(v));
    std::printf("%s\n", std::string(92, '-').c_str());
    bool first = true;
    std::vector<std::string> names;
    for (const auto& l : libs) names.push_back(l.name);
    if (t.count("ckpt incremental")) names.insert(names.begin() + 2, "ckpt incremental");
    for (const auto& name : names) {
      const auto it = t.find(name);
      if (it == t.end()) {
        std::printf("%-30s %-18s %9s\n", first ? row.c_str() : "", name.c_str(), "not built");
        first = false;
        continue;
      }
      const double m = median(it->second);
      std::printf("%-30s %-18s %9.3f %8.2f %8.2fx", first ? row.c_str() : "", name.c_str(), m, gb / m, plain / m);
      if (best_peer > 0 && name.rfind("ckpt", 0) == 0) std::printf(" %8.2fx", best_peer / m);
      std::printf("\n");
      first = false;
    }
  }
  std::printf("%s\n(%d rounds, alternating order; vs = that median / this median: >= 1 is faster)\n"
              "(cold: this machine's page cache dropped; a VM's host may still serve the reads from its own cache:\n"
              " bench/page_cache.hpp)\n",
              std::string(92, '-').c_str(), rounds);
  return 0;
}
