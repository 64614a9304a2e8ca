// bench/bench_native.cpp — the native format against plain file I/O of the same bytes.
//
// A benchmark, not a timed test: it prints a table and exits 0 whatever the figures.
// What it measures (see docs/benchmarks.md):
//   1. durable save of a ~1 GB GPT-2-like TrainState (params + two Adam moments, ~450
//      leaves) vs a plain write of the same bytes from one buffer to one file + fsync;
//   2. restore from page cache, ckpt::restore<T> (allocates) vs a plain read into a
//      freshly allocated buffer, and ckpt::restore_into (preallocated) vs a plain read
//      into a preallocated buffer;
//   3. durable save of 20,000 leaves of 4 KiB vs one leaf of the same total size.
// Every comparison runs in the same process, on the same file system, alternating which
// side goes first, and reports medians over the rounds.
//
//   bench_native [--size-mb N] [--rounds N] [--dir PATH] [--small-leaves N]
//                [--data-files N] [--parts save,restore,small] [--splits]
#include <fcntl.h>
#include <malloc.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/ckpt.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

// ---- the state -----------------------------------------------------------------
// GPT-2 small's layout (HF names), widths scaled so that params + mu + nu ~ --size-mb.
struct Block {
  xt::xtensor<float, 1> ln_1_g, ln_1_b;
  xt::xtensor<float, 2> attn_c_attn_w;
  xt::xtensor<float, 1> attn_c_attn_b;
  xt::xtensor<float, 2> attn_c_proj_w;
  xt::xtensor<float, 1> attn_c_proj_b;
  xt::xtensor<float, 1> ln_2_g, ln_2_b;
  xt::xtensor<float, 2> mlp_c_fc_w;
  xt::xtensor<float, 1> mlp_c_fc_b;
  xt::xtensor<float, 2> mlp_c_proj_w;
  xt::xtensor<float, 1> mlp_c_proj_b;
};
struct Params {
  xt::xtensor<float, 2> wte, wpe;
  std::vector<Block> h;
  xt::xtensor<float, 1> ln_f_g, ln_f_b;
};
struct Adam {
  Params mu, nu;
  std::int64_t count = 0;
};
struct TrainState {
  std::int64_t step = 0;
  Params params;
  Adam opt;
};

// The small-leaves case: a sequence of 4 KiB vector leaves vs one vector of the same size.
struct ManyLeaves {
  std::vector<std::vector<float>> leaves;
};
struct OneLeaf {
  std::vector<float> leaf;
};

constexpr std::size_t vocab = 50257, n_ctx = 1024, n_layer = 12;

// splitmix64: non-constant, incompressible floats in [-1, 1), cheap to make.
struct Fill {
  std::uint64_t s;
  float next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<std::int32_t>(z >> 32)) * (1.0f / 2147483648.0f);
  }
  template <class C>
  void operator()(C& c) {
    float* p = c.data();
    for (std::size_t i = 0, n = c.size(); i < n; ++i) p[i] = next();
  }
};

std::size_t params_per_copy(std::size_t d) {
  return (vocab + n_ctx) * d + n_layer * (12 * d * d + 13 * d) + 2 * d;
}

// The width d (a multiple of 16) whose state (3 copies of fp32 params) is closest to target bytes.
std::size_t width_for(double target_bytes) {
  const double a = 12.0 * n_layer, b = double(vocab + n_ctx + 13 * n_layer + 2), c = -target_bytes / 12.0;
  const double d = (-b + std::sqrt(b * b - 4 * a * c)) / (2 * a);
  return std::max<std::size_t>(16, static_cast<std::size_t>(std::llround(d / 16.0)) * 16);
}

Params make_params(std::size_t d, std::uint64_t seed) {
  Fill f{seed};
  auto vec = [&](std::size_t n) { xt::xtensor<float, 1> t = xt::xtensor<float, 1>::from_shape({n}); f(t); return t; };
  auto mat = [&](std::size_t r, std::size_t c) {
    xt::xtensor<float, 2> t = xt::xtensor<float, 2>::from_shape({r, c});
    f(t);
    return t;
  };
  Params p;
  p.wte = mat(vocab, d);
  p.wpe = mat(n_ctx, d);
  for (std::size_t i = 0; i < n_layer; ++i) {
    Block b;
    b.ln_1_g = vec(d), b.ln_1_b = vec(d);
    b.attn_c_attn_w = mat(d, 3 * d), b.attn_c_attn_b = vec(3 * d);
    b.attn_c_proj_w = mat(d, d), b.attn_c_proj_b = vec(d);
    b.ln_2_g = vec(d), b.ln_2_b = vec(d);
    b.mlp_c_fc_w = mat(d, 4 * d), b.mlp_c_fc_b = vec(4 * d);
    b.mlp_c_proj_w = mat(4 * d, d), b.mlp_c_proj_b = vec(d);
    p.h.push_back(std::move(b));
  }
  p.ln_f_g = vec(d), p.ln_f_b = vec(d);
  return p;
}

// ---- plain file I/O: the baselines -----------------------------------------------
constexpr std::size_t io_chunk = std::size_t{64} << 20;  // large write()/read() calls

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_native: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

// open(O_CREAT|O_TRUNC), write everything in 64 MiB write() calls, fsync, close.
double plain_write(const fs::path& file, std::span<const std::byte> bytes) {
  const auto t0 = clk::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + file.string());
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, std::min(io_chunk, bytes.size() - done));
    if (n <= 0) die("write " + file.string());
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) die("fsync " + file.string());
  ::close(fd);
  return seconds_since(t0);
}

// open, read the whole file into dst in 64 MiB read() calls, close.
void plain_read_into(const fs::path& file, std::byte* dst, std::size_t size) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open " + file.string());
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::read(fd, dst + done, std::min(io_chunk, size - done));
    if (n <= 0) die("read " + file.string());
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

// ---- helpers ---------------------------------------------------------------------
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void remove_and_settle(const std::vector<fs::path>& paths) {
  for (const auto& p : paths) fs::remove_all(p);
  ::sync();  // the deletions' journal work is not charged to the next timed write
}

std::string fs_type(const fs::path& dir) {
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) != 0) return "?";
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0xEF53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(st.f_type));
      return buf;
    }
  }
}

fs::path default_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::current_path() : exe.parent_path()) / "bench-data";
}

struct Row {
  std::string group, name;
  double seconds = 0;
  double bytes = 0;
  double ratio = 0;    // throughput vs the baseline row above it (0: this is the baseline)
  std::string target;  // e.g. ">= 0.80x"
  bool pass = true;
  double paired = 0;   // median over rounds of the per-round ratio (0: not computed)
};
// Median of base[i] / x[i]: each round's two runs saw the same machine load.
double paired_ratio(const std::vector<double>& base, const std::vector<double>& x) {
  std::vector<double> r;
  for (std::size_t i = 0; i < base.size() && i < x.size(); ++i) r.push_back(base[i] / x[i]);
  return median(r);
}
Row base_row(std::string group, std::string name, double s, double bytes) {
  return {std::move(group), std::move(name), s, bytes, 0, "", true, 0};
}
Row vs_row(std::string group, std::string name, double s, double bytes, double base_s, std::string target = "",
           double min_ratio = 0) {
  return {std::move(group), std::move(name), s, bytes, base_s / s, std::move(target), base_s / s >= min_ratio, 0};
}

void print_rows(const std::vector<Row>& rows) {
  std::printf("\n%-22s %-34s %10s %8s %10s %8s  %s\n", "", "", "median s", "GB/s", "vs base", "paired", "target");
  std::string last;
  for (const auto& r : rows) {
    if (r.group != last) std::printf("%s\n", std::string(105, '-').c_str());
    std::printf("%-22s %-34s %10.3f %8.2f ", r.group == last ? "" : r.group.c_str(), r.name.c_str(), r.seconds,
                r.bytes / r.seconds / 1e9);
    if (r.ratio > 0) std::printf("%9.2fx %7.2fx  %s%s\n", r.ratio, r.paired, r.target.c_str(),
                                 r.target.empty() ? "" : (r.pass ? "  ok" : "  MISSED"));
    else std::printf("%10s\n", "baseline");
    last = r.group;
  }
  std::printf("%s\n", std::string(105, '-').c_str());
}

}  // namespace

// ---- main ------------------------------------------------------------------------
int main(int argc, char** argv) {
  double size_mb = 1024;
  int rounds = 5;
  fs::path dir = default_dir();
  std::size_t small_leaves = 20000;
  int data_files = -1;  // -1: SaveOptions' default
  std::string parts = "save,restore,small";
  bool splits = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--size-mb") size_mb = std::stod(value());
    else if (a == "--rounds") rounds = std::max(1, std::stoi(value()));
    else if (a == "--dir") dir = value();
    else if (a == "--small-leaves") small_leaves = std::stoul(value());
    else if (a == "--data-files") data_files = std::stoi(value());
    else if (a == "--parts") parts = value();
    else if (a == "--splits") splits = true;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--size-mb N (1024)] [--rounds N (5)] [--dir PATH (%s)] [--small-leaves N (20000)]\n"
                  "          [--data-files N (library default)] [--parts save,restore,small] [--splits]\n",
                  argv[0], default_dir().c_str());
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s (try --help)\n", a.c_str());
      return 2;
    }
  }
#ifdef M_MMAP_THRESHOLD
  // glibc raises its mmap threshold after a large free, so a later restore<T> would
  // quietly reuse already-faulted heap pages while the plain read's one big buffer is
  // always fresh mmap memory. A fixed threshold (this also fixes the trim threshold)
  // gives both sides fresh, untouched pages, as a process restoring at start-up sees.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  auto part = [&](const char* p) { return parts.find(p) != std::string::npos; };
  ckpt::SaveOptions save_opts;
  if (data_files >= 0) save_opts.data_files = static_cast<unsigned>(data_files);

  fs::create_directories(dir);
  const std::string fstype = fs_type(dir);
  std::printf("bench_native: dir %s (%s), %u hardware threads, %d rounds, SaveOptions.data_files = %u\n",
              dir.c_str(), fstype.c_str(), std::thread::hardware_concurrency(), rounds, save_opts.data_files);
  if (fstype == "tmpfs") std::printf("WARNING: %s is tmpfs: fsync is free and the figures say nothing about a disk\n",
                                     dir.c_str());

  const fs::path plain_file = dir / "plain.bin";
  const fs::path ckpt_dir = dir / "ckpt";
  remove_and_settle({plain_file, ckpt_dir});
  std::vector<Row> rows;

  if (part("save") || part("restore")) {
    // ---- build the state and the same bytes in one contiguous buffer -----------
    const std::size_t d = width_for(size_mb * 1024 * 1024);
    auto t0 = clk::now();
    TrainState state;
    state.step = 1000;
    state.params = make_params(d, 1);
    state.opt.mu = make_params(d, 2);
    state.opt.nu = make_params(d, 3);
    state.opt.count = 1000;
    const ckpt::Snapshot snap = ckpt::take_snapshot(state);
    const std::size_t total = snap.total_bytes();
    std::size_t inline_leaves = 0;
    for (const auto& l : snap.leaves) inline_leaves += l.data.view.size() < save_opts.inline_threshold;
    std::unique_ptr<std::byte[]> contig(new std::byte[total]);
    {
      std::size_t off = 0;
      for (const auto& l : snap.leaves) {
        std::memcpy(contig.get() + off, l.data.view.data(), l.data.view.size());
        off += l.data.view.size();
      }
    }
    const std::span<const std::byte> contig_bytes(contig.get(), total);
    std::printf("state: GPT-2-like, d_model %zu, %zu layers, vocab %zu, ctx %zu: %.1fM params + Adam mu, nu (fp32)\n"
                "       %zu leaves (%zu under %zu B, stored inline), %.1f MiB (%.3f GB); built in %.1f s\n",
                d, n_layer, vocab, n_ctx, params_per_copy(d) / 1e6, snap.leaves.size(), inline_leaves, save_opts.inline_threshold,
                total / 1048576.0, total / 1e9, seconds_since(t0));

    // ---- 1. durable save ---------------------------------------------------------
    if (part("save")) {
      std::vector<double> plain_s, ckpt_s, snap_s, write_s, commit_s;
      for (int r = 0; r < rounds; ++r) {
        auto run_plain = [&] { plain_s.push_back(plain_write(plain_file, contig_bytes)); };
        auto run_ckpt = [&] {
          const auto t = clk::now();
          if (splits) {  // ckpt::save's steps, timed one by one (same work as ckpt::save)
            auto t1 = clk::now();
            const ckpt::Snapshot s = ckpt::take_snapshot(state);
            snap_s.push_back(seconds_since(t1));
            ckpt::io::StagingDir staging(ckpt_dir);
            t1 = clk::now();
            ckpt::native::write(s, staging.path(), save_opts);
            write_s.push_back(seconds_since(t1));
            t1 = clk::now();
            staging.commit(false);
            commit_s.push_back(seconds_since(t1));
          } else {
            ckpt::save(ckpt_dir, state, save_opts);
          }
          ckpt_s.push_back(seconds_since(t));
        };
        if (r % 2 == 0) { run_plain(); remove_and_settle({plain_file}); run_ckpt(); }
        else { run_ckpt(); remove_and_settle({ckpt_dir}); run_plain(); }
        remove_and_settle({plain_file, ckpt_dir});
        std::printf("  save round %d: plain %.3f s, ckpt %.3f s\n", r + 1, plain_s.back(), ckpt_s.back());
        std::fflush(stdout);
      }
      const double base = median(plain_s), c = median(ckpt_s);
      rows.push_back(base_row("durable save", "plain write + fsync (1 file)", base, double(total)));
      rows.push_back(vs_row("durable save", "ckpt::save", c, double(total), base, ">= 0.80x", 0.8));
      rows.back().paired = paired_ratio(plain_s, ckpt_s);
      if (splits)
        std::printf("  ckpt::save splits (medians): snapshot %.4f s, data+manifest+commit files %.3f s, "
                    "rename+dir fsyncs %.4f s\n",
                    median(snap_s), median(write_s), median(commit_s));
    }

    // ---- 2. restore from page cache ----------------------------------------------
    if (part("restore")) {
      plain_write(plain_file, contig_bytes);
      ckpt::save(ckpt_dir, state, save_opts);
      // Warm both in page cache, and check the round trip once.
      plain_read_into(plain_file, contig.get(), total);
      {
        const TrainState back = ckpt::restore<TrainState>(ckpt_dir);
        const ckpt::Snapshot b = ckpt::take_snapshot(back);
        bool same = b.leaves.size() == snap.leaves.size();
        for (std::size_t i = 0; same && i < b.leaves.size(); ++i)
          same = std::equal(b.leaves[i].data.view.begin(), b.leaves[i].data.view.end(),
                            snap.leaves[i].data.view.begin(), snap.leaves[i].data.view.end());
        if (!same) { std::fprintf(stderr, "bench_native: restored state differs from the saved one\n"); return 1; }
      }
      TrainState target = ckpt::restore<TrainState>(ckpt_dir);  // preallocated, pages touched
      ckpt::RestoreOptions no_verify;
      no_verify.verify_checksums = false;

      std::vector<double> fresh_plain, fresh_ckpt, pre_plain, pre_ckpt, pre_noverify;
      for (int r = 0; r < rounds; ++r) {
        auto run_fresh_plain = [&] {
          const auto t = clk::now();
          std::unique_ptr<std::byte[]> buf(new std::byte[total]);  // like restore<T>: untouched memory
          plain_read_into(plain_file, buf.get(), total);
          fresh_plain.push_back(seconds_since(t));
        };  // buf (and s below) are freed after the clock has stopped
        auto run_fresh_ckpt = [&] {
          const auto t = clk::now();
          TrainState s = ckpt::restore<TrainState>(ckpt_dir);
          fresh_ckpt.push_back(seconds_since(t));
        };
        auto run_pre_plain = [&] {
          const auto t = clk::now();
          plain_read_into(plain_file, contig.get(), total);
          pre_plain.push_back(seconds_since(t));
        };
        auto run_pre_ckpt = [&] {
          auto t = clk::now();
          ckpt::restore_into(ckpt_dir, target);
          pre_ckpt.push_back(seconds_since(t));
          t = clk::now();
          ckpt::restore_into(ckpt_dir, target, no_verify);
          pre_noverify.push_back(seconds_since(t));
        };
        if (r % 2 == 0) { run_fresh_plain(); run_fresh_ckpt(); run_pre_plain(); run_pre_ckpt(); }
        else { run_fresh_ckpt(); run_fresh_plain(); run_pre_ckpt(); run_pre_plain(); }
        std::printf("  restore round %d: plain fresh %.3f s, restore<T> %.3f s, plain prealloc %.3f s, "
                    "restore_into %.3f s\n", r + 1, fresh_plain.back(), fresh_ckpt.back(), pre_plain.back(),
                    pre_ckpt.back());
        std::fflush(stdout);
      }
      const double fb = median(fresh_plain), fc = median(fresh_ckpt);
      const double pb = median(pre_plain), pc = median(pre_ckpt), pn = median(pre_noverify);
      rows.push_back(base_row("restore (page cache)", "plain read, new buffer", fb, double(total)));
      rows.push_back(vs_row("restore (page cache)", "ckpt::restore<T>", fc, double(total), fb, ">= 0.80x", 0.8));
      rows.back().paired = paired_ratio(fresh_plain, fresh_ckpt);
      rows.push_back(base_row("restore_into", "plain read, preallocated buffer", pb, double(total)));
      rows.push_back(vs_row("restore_into", "ckpt::restore_into", pc, double(total), pb, ">= 0.80x", 0.8));
      rows.back().paired = paired_ratio(pre_plain, pre_ckpt);
      rows.push_back(vs_row("restore_into", "  (no checksum verification)", pn, double(total), pb));
      rows.back().paired = paired_ratio(pre_plain, pre_noverify);
      remove_and_settle({plain_file, ckpt_dir});
    }
  }

  // ---- 3. many small leaves vs one large leaf --------------------------------------
  if (part("small")) {
    constexpr std::size_t floats = 1024;  // 4 KiB a leaf
    ManyLeaves many;
    OneLeaf one;
    Fill f{42};
    many.leaves.resize(small_leaves);
    for (auto& l : many.leaves) { l.resize(floats); f(l); }
    one.leaf.resize(small_leaves * floats);
    f(one.leaf);
    const double bytes = double(small_leaves * floats * sizeof(float));
    const fs::path many_dir = dir / "many", one_dir = dir / "one";
    const int n = std::max(rounds, 5) * 2 + 1;  // short runs: more of them
    std::vector<double> one_s, many_s, one_r, many_r;
    for (int r = 0; r < n; ++r) {
      auto run_one = [&] {
        auto t = clk::now();
        ckpt::save(one_dir, one, save_opts);
        one_s.push_back(seconds_since(t));
        t = clk::now();
        ckpt::restore_into(one_dir, one);
        one_r.push_back(seconds_since(t));
      };
      auto run_many = [&] {
        auto t = clk::now();
        ckpt::save(many_dir, many, save_opts);
        many_s.push_back(seconds_since(t));
        t = clk::now();
        ckpt::restore_into(many_dir, many);
        many_r.push_back(seconds_since(t));
      };
      if (r % 2 == 0) { run_one(); run_many(); }
      else { run_many(); run_one(); }
      remove_and_settle({one_dir, many_dir});
    }
    const double o = median(one_s), m = median(many_s);
    const std::string g = std::to_string(small_leaves) + " x 4 KiB";
    rows.push_back(base_row(g, "save, 1 leaf of the same size", o, bytes));
    // Issue 11's target for both: 20,000 leaves within 1.5x the time of one leaf of the
    // same bytes (an earlier issue asked <= 2x of saves).
    rows.push_back(vs_row(g, "save, " + std::to_string(small_leaves) + " leaves", m, bytes, o,
                          "time <= 1.5x (>= 0.67x)", 1 / 1.5));
    rows.back().paired = paired_ratio(one_s, many_s);
    rows.push_back(base_row(g + " ", "restore_into, 1 leaf", median(one_r), bytes));
    rows.push_back(vs_row(g + " ", "restore_into, " + std::to_string(small_leaves) + " leaves", median(many_r),
                          bytes, median(one_r), "time <= 1.5x (>= 0.67x)", 1 / 1.5));
    rows.back().paired = paired_ratio(one_r, many_r);
    std::printf("  small leaves: %d rounds; time ratio many/one: save %.2fx, restore_into %.2fx (target <= 1.5x)\n", n,
                m / o, median(many_r) / median(one_r));
  }

  print_rows(rows);
  std::printf("vs base: baseline median time / this median time (throughput ratio; >= 1 is faster).\n"
              "paired:  median over rounds of the same ratio taken within each round (robust to load drift).\n");
  return 0;
}
