// bench/bench_migrate.cpp — the costs of issue 4's features, each against a baseline
// measured in the same run:
//   1. casting a float32 state to bfloat16 on save (ckpt::cast_floating_leaves, what
//      SaveOptions::save_dtype runs) vs a plain memcpy of the same float32 bytes;
//   2. opening a ~1 GB checkpoint lazily (restore<T> with ckpt::lazy leaves,
//      restore_tree(.lazy), metadata) vs reading its manifest file alone.
// A benchmark, not a timed test: it prints medians and exits 0.
//
//   bench_migrate [--size-mb N] [--rounds N] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/ckpt.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/migrate.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

struct Layer {
  xt::xtensor<float, 2> w;
  xt::xtensor<float, 1> b;
};
struct State {
  std::int64_t step = 0;
  std::vector<Layer> layers;
};
struct LazyLayer {
  ckpt::lazy<xt::xtensor<float, 2>> w;
  ckpt::lazy<xt::xtensor<float, 1>> b;
};
struct LazyState {
  std::int64_t step = 0;
  std::vector<LazyLayer> layers;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double seconds(F&& f) {
  const auto t0 = clk::now();
  f();
  return std::chrono::duration<double>(clk::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t size_mb = 1024;
  int rounds = 5;
  fs::path dir = fs::current_path() / "bench-migrate-tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--size-mb") size_mb = std::stoul(argv[i + 1]);
    else if (a == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (a == "--dir") dir = fs::path(argv[i + 1]) / "ckpt-bench-migrate";  // its own folder: removed at the end
  }
  fs::remove_all(dir);
  fs::create_directories(dir);

  // ~size_mb of float32 in 150 layers (300 leaves), values that are not all equal.
  const std::size_t layers = 150;
  const std::size_t per_layer = size_mb * (std::size_t{1} << 20) / 4 / layers;
  const std::size_t cols = 1024, rows = std::max<std::size_t>(1, per_layer / cols);
  State s;
  s.step = 42;
  for (std::size_t l = 0; l < layers; ++l) {
    Layer L{xt::xtensor<float, 2>::from_shape({rows, cols}), xt::xtensor<float, 1>::from_shape({cols})};
    for (std::size_t i = 0; i < L.w.size(); ++i) L.w.data()[i] = static_cast<float>((i * 2654435761u + l) % 100003) * 1e-3f;
    for (std::size_t i = 0; i < cols; ++i) L.b(i) = static_cast<float>(i);
    s.layers.push_back(std::move(L));
  }
  const ckpt::Snapshot base = ckpt::take_snapshot(s);
  const double bytes = static_cast<double>(base.total_bytes());
  std::printf("state: %.0f MB of float32 in %zu leaves; %d rounds; dir %s\n", bytes / 1e6, base.leaves.size(), rounds,
              dir.c_str());

  // 1. bfloat16 cast vs memcpy of the same bytes.
  // The conversion kernel alone, into memory already faulted in, is what the cast costs
  // beyond allocating the bfloat16 copy; both are reported.
  std::vector<double> cast_s, copy_s, kernel_s;
  std::vector<std::byte> kernel_dst(static_cast<std::size_t>(bytes) / 2);
  std::memset(kernel_dst.data(), 1, kernel_dst.size());
  std::vector<char> copy_dst(static_cast<std::size_t>(bytes));
  std::memset(copy_dst.data(), 1, copy_dst.size());  // fault the pages in before timing
  for (int r = 0; r < rounds; ++r) {
    copy_s.push_back(seconds([&] {
      std::size_t off = 0;
      for (const auto& l : base.leaves) {
        std::memcpy(copy_dst.data() + off, l.data.view.data(), l.data.view.size());
        off += l.data.view.size();
      }
    }));
    kernel_s.push_back(seconds([&] {
      std::size_t off = 0;
      for (const auto& l : base.leaves) {
        const std::size_t n = l.data.view.size() / 4;
        ckpt::convert_elements(ckpt::dtype::float32, l.data.view.data(), ckpt::dtype::bfloat16, kernel_dst.data() + off, n);
        off += 2 * n;
      }
    }));
    ckpt::Snapshot snap = ckpt::take_snapshot(s);
    cast_s.push_back(seconds([&] { ckpt::cast_floating_leaves(snap, ckpt::dtype::bfloat16); }));
  }
  const double cast = median(cast_s), copy = median(copy_s), kernel = median(kernel_s);
  std::printf("\n1. float32 -> bfloat16 cast on save\n");
  std::printf("   conversion into faulted memory  %7.3f s  %6.2f GB/s of float32 read\n", kernel, bytes / kernel / 1e9);
  std::printf("   cast_floating_leaves (allocates the bfloat16 copy) %7.3f s  %6.2f GB/s\n", cast, bytes / cast / 1e9);
  std::printf("   baseline memcpy into faulted memory %7.3f s  %6.2f GB/s (conversion/memcpy throughput: %.2fx)\n",
              copy, bytes / copy / 1e9, copy / kernel);

  // 2. lazy open of the checkpoint.
  ckpt::save(dir / "c", s, {.force = true});
  std::vector<double> lazy_s, tree_s, md_s, manifest_s;
  for (int r = 0; r < std::max(rounds, 21); ++r) {
    manifest_s.push_back(seconds([&] { (void)ckpt::io::read_file(dir / "c" / "manifest", std::uint64_t{1} << 32); }));
    lazy_s.push_back(seconds([&] {
      const LazyState l = ckpt::restore<LazyState>(dir / "c");
      if (l.layers.size() != layers) std::abort();
    }));
    tree_s.push_back(seconds([&] { (void)ckpt::restore_tree(dir / "c", {.lazy = true}); }));
    md_s.push_back(seconds([&] { (void)ckpt::metadata(dir / "c"); }));
  }
  std::printf("\n2. opening the %.0f MB checkpoint without reading data (median of %zu)\n", bytes / 1e6, lazy_s.size());
  std::printf("   restore<LazyState>          %7.3f ms\n", median(lazy_s) * 1e3);
  std::printf("   restore_tree(.lazy = true)  %7.3f ms\n", median(tree_s) * 1e3);
  std::printf("   metadata                    %7.3f ms\n", median(md_s) * 1e3);
  std::printf("   baseline: read the manifest %7.3f ms (%ju bytes)\n", median(manifest_s) * 1e3,
              static_cast<std::uintmax_t>(fs::file_size(dir / "c" / "manifest")));
  const LazyState l = ckpt::restore<LazyState>(dir / "c");
  const double first_get = seconds([&] { (void)l.layers[0].w.get(); });
  std::printf("   first get() of one %.1f MB leaf: %.3f ms\n", static_cast<double>(rows * cols * 4) / 1e6, first_get * 1e3);
  fs::remove_all(dir);
  return 0;
}
