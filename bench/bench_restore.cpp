// bench_restore — restores against plain reads of the same bytes, warm and cold (issue 11).
//
//   bench_restore [DIR] [MB] [ROUNDS]     (defaults: $TMPDIR or /tmp, 376, 5)
//
// The state: one embedding leaf holding 30% of the bytes and 47 equal leaves; a second
// checkpoint holds the same bytes as one leaf, a third the same number of bytes in
// GPT-2's layout (12 blocks, their small biases and norms between the weight
// matrices, as a real model's checkpoint has them). Each round,
// in alternating order:
//   warm: ckpt::restore_into (preallocated, checksums on) vs a plain read() of a file of
//         the same bytes into a preallocated buffer, both from the page cache;
//   cold: the same after fsync + posix_fadvise(POSIX_FADV_DONTNEED) of every file (the
//         pages leave the cache; on a VM the host may still cache them).
// Targets: cold restore >= 0.9x a plain cold read; restore_into >= 0.9x a plain warm
// read. Ratios are throughput ratios (baseline time / ckpt time; >= 1 is faster).
#include <ckpt/ckpt.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "page_cache.hpp"
#include "positional_args.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RestoreState {
  std::int64_t step = 0;
  std::vector<float> wte;
  std::vector<std::vector<float>> layers;
};
struct RestoreOne {
  std::vector<float> all;
};
// GPT-2's layout (HF names): each block's biases and norms, a few KiB each, lie in the
// file between its weight matrices, as in a real model's checkpoint.
struct Gpt2Block {
  std::vector<float> ln_1_g, ln_1_b, attn_c_attn_w, attn_c_attn_b, attn_c_proj_w, attn_c_proj_b;
  std::vector<float> ln_2_g, ln_2_b, mlp_c_fc_w, mlp_c_fc_b, mlp_c_proj_w, mlp_c_proj_b;
};
struct Gpt2 {
  std::vector<float> wte, wpe;
  std::vector<Gpt2Block> h;
  std::vector<float> ln_f_g, ln_f_b;
};

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void plain_write(const fs::path& file, const std::byte* p, std::size_t n) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (std::size_t done = 0; done < n;) {
    const ssize_t w = ::write(fd, p + done, std::min<std::size_t>(64 << 20, n - done));
    if (w <= 0) std::exit(1);
    done += static_cast<std::size_t>(w);
  }
  (void)::fsync(fd);
  ::close(fd);
}

// open, read the whole file into dst in 64 MiB read() calls, close.
void plain_read(const fs::path& file, std::byte* dst, std::size_t n) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  for (std::size_t done = 0; done < n;) {
    const ssize_t r = ::read(fd, dst + done, std::min<std::size_t>(64 << 20, n - done));
    if (r <= 0) std::exit(1);
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  refuse_flags(argc, argv, "[DIR] [MB] [ROUNDS]     (defaults: $TMPDIR or /tmp, 376, 5)");
  const char* tmp = std::getenv("TMPDIR");
  const fs::path base = (argc > 1 ? fs::path(argv[1]) : fs::path(tmp && *tmp ? tmp : "/tmp")) / "ckpt-bench-restore";
  const std::size_t mb = argc > 2 ? std::stoul(argv[2]) : 376;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 5;
  fs::remove_all(base);
  fs::create_directories(base);

  const std::size_t floats = mb * 1000000 / sizeof(float);
  RestoreState s;
  s.wte.resize(floats * 3 / 10);
  const std::size_t per = (floats - s.wte.size()) / 47;
  s.layers.assign(47, std::vector<float>(per));
  std::uint64_t x = 88172645463325252ull;
  auto fill = [&](std::vector<float>& v) {
    for (auto& f : v) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f = static_cast<float>(static_cast<std::int32_t>(x >> 32)) * (1.0f / 2147483648.0f);
    }
  };
  fill(s.wte);
  for (auto& l : s.layers) fill(l);
  RestoreOne one;
  one.all = s.wte;
  for (const auto& l : s.layers) one.all.insert(one.all.end(), l.begin(), l.end());
  const std::size_t bytes = one.all.size() * sizeof(float);
  // The same number of floats in GPT-2's layout: 12 blocks of width d, the embedding
  // taking the rest (about 60% at 376 MB).
  Gpt2 g;
  {
    const std::size_t d = std::max<std::size_t>(16, static_cast<std::size_t>(std::sqrt(double(one.all.size()) / 360.0)));
    g.h.resize(12);
    for (auto& b : g.h) {
      b.ln_1_g.resize(d), b.ln_1_b.resize(d), b.attn_c_attn_w.resize(3 * d * d), b.attn_c_attn_b.resize(3 * d);
      b.attn_c_proj_w.resize(d * d), b.attn_c_proj_b.resize(d), b.ln_2_g.resize(d), b.ln_2_b.resize(d);
      b.mlp_c_fc_w.resize(4 * d * d), b.mlp_c_fc_b.resize(4 * d), b.mlp_c_proj_w.resize(4 * d * d), b.mlp_c_proj_b.resize(d);
    }
    g.wpe.resize(1024 * d), g.ln_f_g.resize(d), g.ln_f_b.resize(d);
    const std::size_t rest = 12 * (12 * d * d + 13 * d) + 1024 * d + 2 * d;
    if (rest >= one.all.size()) {
      std::fprintf(stderr, "bench_restore: %zu MB is too small for the GPT-2 layout\n", mb);
      return 2;
    }
    g.wte.resize(one.all.size() - rest);
    fill(g.wte), fill(g.wpe), fill(g.ln_f_g), fill(g.ln_f_b);
    for (auto& b : g.h)
      for (auto* v : {&b.ln_1_g, &b.ln_1_b, &b.attn_c_attn_w, &b.attn_c_attn_b, &b.attn_c_proj_w, &b.attn_c_proj_b,
                      &b.ln_2_g, &b.ln_2_b, &b.mlp_c_fc_w, &b.mlp_c_fc_b, &b.mlp_c_proj_w, &b.mlp_c_proj_b})
        fill(*v);
  }

  ckpt::save(base / "state", s, {.data_files = 0});
  ckpt::save(base / "one", one, {.data_files = 0});
  ckpt::save(base / "gpt2", g, {.data_files = 0});
  plain_write(base / "plain", reinterpret_cast<const std::byte*>(one.all.data()), bytes);
  std::printf("%.0f MB: 48 leaves (one of 30%%), the same bytes as one leaf, and in GPT-2's layout (%zu leaves, %zu "
              "of them biases and norms); %u hardware threads; %s\n",
              static_cast<double>(bytes) / 1e6, 4 + 12 * g.h.size(), 2 + 8 * g.h.size(),
              std::thread::hardware_concurrency(), base.c_str());

  RestoreState target = s;  // preallocated, as restore_into wants
  RestoreOne target_one = one;
  Gpt2 target_g = g;
  auto buf = std::make_unique_for_overwrite<std::byte[]>(bytes);
  std::memset(buf.get(), 0, bytes);

  std::vector<double> pw, rw, ow, gw, pc, rc, oc, gc;
  auto plain = [&](bool cold) {
    if (cold) drop_cache(base / "plain");
    const auto t0 = Clock::now();
    plain_read(base / "plain", buf.get(), bytes);
    (cold ? pc : pw).push_back(since(t0));
  };
  auto ckpt_state = [&](bool cold) {
    if (cold) drop_cache(base / "state");
    const auto t0 = Clock::now();
    ckpt::restore_into(base / "state", target);
    (cold ? rc : rw).push_back(since(t0));
  };
  auto ckpt_one = [&](bool cold) {
    if (cold) drop_cache(base / "one");
    const auto t0 = Clock::now();
    ckpt::restore_into(base / "one", target_one);
    (cold ? oc : ow).push_back(since(t0));
  };
  auto ckpt_gpt2 = [&](bool cold) {
    if (cold) drop_cache(base / "gpt2");
    const auto t0 = Clock::now();
    ckpt::restore_into(base / "gpt2", target_g);
    (cold ? gc : gw).push_back(since(t0));
  };
  // warm-up: everything in the page cache once
  plain(false), ckpt_state(false), ckpt_one(false), ckpt_gpt2(false);
  pw.clear(), rw.clear(), ow.clear(), gw.clear();
  for (int r = 0; r < rounds; ++r) {
    for (bool cold : {false, true}) {
      if (r % 2) {
        plain(cold), ckpt_state(cold), ckpt_one(cold), ckpt_gpt2(cold);
      } else {
        ckpt_gpt2(cold), ckpt_one(cold), ckpt_state(cold), plain(cold);
      }
    }
  }
  if (target.layers[5] != s.layers[5] || target_one.all != one.all || target_g.h[3].ln_2_b != g.h[3].ln_2_b ||
      target_g.h[11].mlp_c_proj_w != g.h[11].mlp_c_proj_w) {
    std::printf("restored bytes differ!\n");
    return 1;
  }
  fs::remove_all(base);

  const double gb = static_cast<double>(bytes) / 1e9;
  auto row = [&](const char* name, const std::vector<double>& v, const std::vector<double>& b, const char* target,
                 double min) {
    const double m = median(v), bm = median(b);
    std::printf("%-46s %9.3f %8.2f %9.2fx  %s%s\n", name, m, gb / m, bm / m, target,
                min > 0 ? (bm / m >= min ? "  ok" : "  MISSED") : "");
  };
  std::printf("\n%-46s %9s %8s %10s\n", "", "median s", "GB/s", "vs plain");
  row("plain read, warm (baseline)", pw, pw, "", 0);
  row("restore_into, 48 leaves, warm, checksums on", rw, pw, ">= 0.90x", 0.9);
  row("restore_into, 1 leaf, warm, checksums on", ow, pw, ">= 0.90x", 0.9);
  row("restore_into, GPT-2 layout, warm, checksums", gw, pw, ">= 0.90x", 0.9);
  row("plain read, cold (baseline)", pc, pc, "", 0);
  row("restore_into, 48 leaves, cold", rc, pc, ">= 0.90x", 0.9);
  row("restore_into, 1 leaf, cold", oc, pc, ">= 0.90x", 0.9);
  row("restore_into, GPT-2 layout, cold", gc, pc, ">= 0.90x", 0.9);
  std::printf("(%d rounds, alternating order; vs plain = plain median / this median)\n"
              "(cold: this machine's page cache dropped; a VM's host may still serve the reads from its own cache:\n"
              " bench/page_cache.hpp)\n",
              rounds);
  return 0;
}
