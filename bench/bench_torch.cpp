// bench/bench_torch.cpp — a libtorch module + Adam state: ckpt against torch::save /
// torch::load and against a plain write/read of the same bytes, same state, same run.
//
// A benchmark, not a timed test: it prints a table and exits 0 whatever the figures.
// The state is Linear(4096, 4096) layers (about 64 MiB of float32 weights each) and the
// Adam moments of every parameter after one step: with the default --size-mb 1024,
// 5 layers, 1.0 GB in all. Each round runs the three ways in a rotated order:
//   save:    ckpt::save of {model, optimizer} (native format: fsync + rename) | torch::save
//            of the module and of the optimizer (two archives, then fsync'd: the same
//            durability) | plain: every tensor's bytes written to one file with write(2),
//            then fsync;
//   restore: into a freshly built module and optimizer each, as a resuming program has
//            them: ckpt::restore_into (checksums verified, as by default) | torch::load |
//            plain: read(2) of that file into the tensors' memory. All from the page cache.
// Each way gets its own fresh target: on VMs whose hypervisor charges the kernel's first
// write into a page the program has touched (format/native/reader.hpp), a target that
// another way had already read into would be cheaper to read into again.
// Medians over the rounds; ratios against torch and against plain (< 1: ckpt faster).
//
//   bench_torch [--size-mb N] [--rounds N] [--dir PATH]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>

#include <ckpt/ckpt.hpp>
#include <ckpt/torch.hpp>

#include "page_cache.hpp"

namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

struct State {
  torch::nn::Sequential model;
  torch::optim::Adam opt;
  explicit State(int layers) : model(make_model(layers)), opt(model->parameters()) {
    for (auto& p : model->parameters()) p.mutable_grad() = at::full_like(p, 1e-3);
    opt.step();  // creates every parameter's exp_avg and exp_avg_sq
  }
  static torch::nn::Sequential make_model(int layers) {
    torch::nn::Sequential s;
    for (int i = 0; i < layers; ++i) s->push_back(torch::nn::Linear(4096, 4096));
    return s;
  }
  friend constexpr auto ckpt_fields(ckpt::type_tag<State>) {
    return ckpt::fields(ckpt::field("model", &State::model), ckpt::field("opt", &State::opt));
  }
};

// Every tensor of the state: what the plain write and read move.
std::vector<at::Tensor> tensors(State& s) {
  std::vector<at::Tensor> out;
  for (auto& p : s.model->parameters()) out.push_back(p);
  for (auto& kv : s.opt.state()) {
    auto& a = static_cast<torch::optim::AdamParamState&>(*kv.second);
    out.push_back(a.exp_avg());
    out.push_back(a.exp_avg_sq());
  }
  return out;
}

void plain_write(const fs::path& p, State& s) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (const auto& t : tensors(s)) {
    const char* b = static_cast<const char*>(t.data_ptr());
    for (std::size_t done = 0, n = t.nbytes(); done < n;) done += static_cast<std::size_t>(::write(fd, b + done, n - done));
  }
  ::fsync(fd);
  ::close(fd);
}

void plain_read(const fs::path& p, State& s) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  for (const auto& t : tensors(s)) {
    char* b = static_cast<char*>(t.data_ptr());
    for (std::size_t done = 0, n = t.nbytes(); done < n;) {
      const ssize_t r = ::read(fd, b + done, n - done);
      if (r <= 0) std::abort();
      done += static_cast<std::size_t>(r);
    }
  }
  ::close(fd);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
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
  int rounds = 3;
  fs::path dir = fs::temp_directory_path() / "ckpt-bench-torch";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--size-mb") size_mb = std::stoul(argv[i + 1]);
    else if (a == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (a == "--dir") dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--size-mb N] [--rounds N] [--dir PATH]\n", argv[0]);
      return 2;
    }
  }
  torch::set_num_threads(1);
  // A layer with its Adam moments: 3 x (4096 x 4097) float32, 192 MiB.
  const int layers = std::max(1, static_cast<int>(size_mb / 192));
  fs::remove_all(dir);
  fs::create_directories(dir);
  State src(layers);
  std::uint64_t bytes = 0;
  for (const auto& t : tensors(src)) bytes += t.nbytes();
  std::printf("state: %d Linear(4096, 4096) layers + Adam moments, %zu tensors, %.1f MiB\n", layers,
              tensors(src).size(), static_cast<double>(bytes) / (1 << 20));

  std::vector<double> save_ckpt, save_torch, save_plain, restore_ckpt, restore_torch, restore_plain;
  const fs::path ck = dir / "ckpt", tm = dir / "model.pt", to = dir / "opt.pt", pl = dir / "plain.bin";
  bool restored_equal = true;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 3; ++k) {
      switch ((k + r) % 3) {
        case 0: save_ckpt.push_back(seconds([&] { ckpt::save(ck, src, {.force = true}); })); break;
        case 1:
          save_torch.push_back(seconds([&] {
            torch::save(src.model, tm.string());
            torch::save(src.opt, to.string());
            fsync_all(tm);
            fsync_all(to);
          }));
          break;
        default: save_plain.push_back(seconds([&] { plain_write(pl, src); }));
      }
    }
    for (int k = 0; k < 3; ++k) {
      State dst(layers);
      switch ((k + r) % 3) {
        case 0:
          restore_ckpt.push_back(seconds([&] { ckpt::restore_into(ck, dst); }));
          // The restore read what was saved (a benchmark that checks nothing measures nothing).
          restored_equal = restored_equal && dst.model->parameters().back().equal(src.model->parameters().back());
          break;
        case 1:
          restore_torch.push_back(seconds([&] {
            torch::load(dst.model, tm.string());
            torch::load(dst.opt, to.string());
          }));
          break;
        default: restore_plain.push_back(seconds([&] { plain_read(pl, dst); }));
      }
    }
  }
  if (!restored_equal) std::fprintf(stderr, "DIFFER\n");

  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf("medians over %d rounds (GB/s of %.2f GB):\n", rounds, gb);
  auto row = [&](const char* what, double c, double t, double p) {
    std::printf("%-8s ckpt %6.3f s (%5.2f GB/s)  torch %6.3f s (%5.2f GB/s)  plain %6.3f s (%5.2f GB/s)  "
                "ckpt/torch %.2fx  ckpt/plain %.2fx\n",
                what, c, gb / c, t, gb / t, p, gb / p, c / t, c / p);
  };
  row("save", median(save_ckpt), median(save_torch), median(save_plain));
  row("restore", median(restore_ckpt), median(restore_torch), median(restore_plain));
  fs::remove_all(dir);
  return 0;
}
