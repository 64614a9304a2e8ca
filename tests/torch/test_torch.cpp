// tests/torch/test_torch.cpp — libtorch (<ckpt/torch.hpp>): torch::Tensor leaves, Modules and
// optimizers under PyTorch's names, and training that resumes bit for bit in a new process.
//
// Its own executable (ckpt_torch_tests), built where libtorch is found: libtorch's headers
// cost more to compile than the rest of a test unit, so every libtorch test is here, in
// one unit. Run with `--torch-train <dir> <steps>` or `--torch-resume <dir> <steps> <out>`,
// it is the child process of the resume test; under mpirun with `--torch-mpi <dir>`
// (built with CKPT_TEST_TORCH_MPI), one rank of the MPI test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ckpt/torch.hpp>
#if CKPT_TEST_TORCH_MPI
#include <ckpt/mpi.hpp>
#endif

// After libtorch: its glog defines CHECK too, and doctest's must be the one the tests use.
#include "../support.hpp"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace torch_test {

using test::TempDir;
namespace fs = std::filesystem;

// Every element's bytes equal (NaNs included), shapes and dtypes equal.
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() && (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0);
}

struct Net : torch::nn::Module {
  Net() {
    layers = register_module("layers", torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::BatchNorm1d(32),
                                                             torch::nn::Functional(at::relu), torch::nn::Linear(32, 4)));
  }
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};

// A plain aggregate: ckpt reflects its fields, the optimizer among them.
struct TrainState {
  std::int64_t step = 0;
  Net model;
  torch::optim::Adam opt{model.parameters(), torch::optim::AdamOptions(1e-2).amsgrad(true).weight_decay(1e-4)};
  std::mt19937_64 rng{42};
};

// One training step on a batch drawn from the state's own generator.
void train_step(TrainState& s) {
  std::uniform_real_distribution<float> u(-1, 1);
  at::Tensor x = at::empty({16, 8}, at::kFloat);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data_ptr<float>()[i] = u(s.rng);
  const at::Tensor target = x.narrow(1, 0, 4).sin();
  s.opt.zero_grad();
  const at::Tensor loss = (s.model.forward(x) - target).pow(2).mean();
  loss.backward();
  s.opt.step();
  ++s.step;
}

// Every leaf of a value as the snapshot a save writes: path -> (dtype, shape, bytes).
template <class T>
std::map<std::string, std::string> leaves_of(const T& s) {
  std::map<std::string, std::string> out;
  for (const auto& l : ckpt::take_snapshot(s).leaves) {
    std::string v = std::string(ckpt::dtype_name(l.data.type)) + ckpt::shape_str(l.data.shape) + ":";
    v.append(reinterpret_cast<const char*>(l.data.view.data()), l.data.view.size());
    out.emplace(l.path.str(), std::move(v));
  }
  return out;
}

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

void run(const std::string& cmd) {
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
}

// The child processes of the resume test.
int child_main(int argc, char** argv) {
  torch::set_num_threads(1);
  const std::string mode = argv[1];
  const fs::path dir = argv[2];
  const int steps = std::stoi(argv[3]);
  torch::manual_seed(0);
  TrainState s;
  ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(dir, {.max_to_keep = 2});
  if (mode == "--torch-resume") mgr.restore_latest_into(s);
  for (int i = 0; i < steps; ++i) {
    train_step(s);
    mgr.save(s.step, s);
  }
  mgr.wait_until_finished();
  if (mode == "--torch-resume" && argc > 4) ckpt::save(argv[4], s);
  return 0;
}

TEST_CASE("torch: every dtype numpy names round-trips bit for bit, any rank, zero-size, non-contiguous") {
  TempDir tmp;
  std::map<std::string, at::Tensor> in;
  const std::vector<c10::ScalarType> types = {at::kBool,  at::kChar,  at::kShort,    at::kInt,
                                              at::kLong,  at::kByte,  at::kHalf,     at::kBFloat16,
                                              at::kFloat, at::kDouble, at::kComplexFloat, at::kComplexDouble};
  for (c10::ScalarType t : types) {
    const at::Tensor base = at::arange(24, at::kDouble).mul(1.37).sub(11);
    in["r3_" + std::string(c10::toString(t))] = t == at::kBool ? base.gt(0).reshape({2, 3, 4})
                                                                : base.to(t).reshape({2, 3, 4});
  }
  in["scalar"] = at::scalar_tensor(2.5, at::kFloat);
  in["empty"] = at::empty({0, 3}, at::kFloat);
  in["rank5"] = at::arange(32, at::kInt).reshape({2, 2, 2, 2, 2});
  const at::Tensor wide = at::arange(12, at::kFloat).reshape({3, 4});
  in["transposed"] = wide.t();                 // non-contiguous: saved as its values in row-major order
  in["column"] = wide.select(1, 2);            // a strided view into wide's storage
  ckpt::save(tmp / "c", in);

  const auto md = ckpt::metadata(tmp / "c");
  CHECK(md.leaf("r3_BFloat16").dtype() == ckpt::dtype::bfloat16);
  CHECK(md.leaf("r3_ComplexDouble").dtype() == ckpt::dtype::complex128);
  CHECK(md.leaf("transposed").shape() == (ckpt::Shape{4, 3}));
  CHECK(md.leaf("empty").shape() == (ckpt::Shape{0, 3}));

  const auto out = ckpt::restore<std::map<std::string, at::Tensor>>(tmp / "c");
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    CHECK(same_bits(out.at(name), t));
    CHECK(out.at(name).is_contiguous());
  }
  // The stored bytes of the transposed view are its values in row-major order.
  const auto tree = ckpt::restore_tree(tmp / "c");
  const std::vector<std::byte> bytes = tree.leaf("transposed").bytes();
  const at::Tensor want = wide.t().contiguous();
  REQUIRE(bytes.size() == want.nbytes());
  CHECK(std::memcmp(bytes.data(), want.data_ptr(), bytes.size()) == 0);
}

TEST_CASE("torch: restore_into writes into the tensor's own memory; restore<T> allocates") {
  TempDir tmp;
  struct Pair {
    at::Tensor a, b;
  };
  Pair in{at::arange(6, at::kFloat).reshape({2, 3}), at::arange(4, at::kInt)};
  ckpt::save(tmp / "c", in);

  Pair target{at::zeros({2, 3}, at::kFloat), at::zeros({4}, at::kLong)};
  const void* a_mem = target.a.data_ptr();
  const void* b_mem = target.b.data_ptr();
  ckpt::restore_into(tmp / "c", target);
  CHECK(target.a.data_ptr() == a_mem);
  CHECK(target.b.data_ptr() == b_mem);
  CHECK(same_bits(target.a, in.a));
  CHECK((target.b.scalar_type() == at::kLong));  // int32 -> int64: a lossless cast, in place
  CHECK(same_bits(target.b, in.b.to(at::kLong)));

  // A non-contiguous target is filled through its view: the base tensor sees the values.
  at::Tensor base = at::zeros({3, 2}, at::kFloat);
  Pair view_target{base.t(), at::zeros({4}, at::kInt)};
  ckpt::restore_into(tmp / "c", view_target);
  CHECK(same_bits(base.t().contiguous(), in.a));

  // restore_into refuses another shape; restore<T> takes the checkpoint's.
  Pair wrong{at::zeros({3, 3}, at::kFloat), at::zeros({4}, at::kInt)};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", wrong), ckpt::ShapeMismatchError, "a");
  const Pair fresh = ckpt::restore<Pair>(tmp / "c");
  CHECK(same_bits(fresh.a, in.a));
  CHECK(same_bits(fresh.b, in.b));

  // A narrowing cast is refused, naming the leaf.
  Pair narrow{at::zeros({2, 3}, at::kHalf), at::zeros({4}, at::kInt)};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", narrow), ckpt::DtypeMismatchError, "narrowing");

  // An undefined tensor is saved as an empty node and restored undefined.
  Pair undefined{at::Tensor(), at::arange(4, at::kLong)};
  ckpt::save(tmp / "u", undefined);
  Pair back{at::ones({1}), at::Tensor()};
  back = ckpt::restore<Pair>(tmp / "u");
  CHECK_FALSE(back.a.defined());
  CHECK(same_bits(back.b, undefined.b));
}

TEST_CASE("torch: lazy<torch::Tensor> reads on first use; allocate<T> sizes without reading") {
  TempDir tmp;
  std::map<std::string, at::Tensor> in{{"w", at::arange(10, at::kDouble)}, {"m", at::ones({2, 2}, at::kChar)}};
  ckpt::save(tmp / "c", in);
  const auto lazy = ckpt::restore<std::map<std::string, ckpt::lazy<at::Tensor>>>(tmp / "c");
  CHECK_FALSE(lazy.at("w").loaded());
  CHECK(lazy.at("w").dtype() == ckpt::dtype::float64);
  CHECK(same_bits(lazy.at("w").get(), in.at("w")));
  CHECK(lazy.at("w").loaded());

  auto shaped = ckpt::allocate<std::map<std::string, at::Tensor>>(tmp / "c");
  CHECK(shaped.at("w").sizes().equals({10}));
  CHECK((shaped.at("m").scalar_type() == at::kChar));
  CHECK(shaped.at("w").abs().sum().item<double>() == 0);
  const void* mem = shaped.at("w").data_ptr();
  ckpt::restore_into(tmp / "c", shaped);
  CHECK(shaped.at("w").data_ptr() == mem);
  CHECK(same_bits(shaped.at("w"), in.at("w")));
}

TEST_CASE("torch: tied weights are the same bytes to a writer (zero-copy snapshot)") {
  Net net;
  struct Tied {
    at::Tensor embed, head;
  };
  const at::Tensor w = at::randn({5, 3});
  Tied tied{w, w};
  const ckpt::Snapshot snap = ckpt::take_snapshot(tied);
  REQUIRE(snap.leaves.size() == 2);
  CHECK(snap.leaves[0].data.view.data() == snap.leaves[1].data.view.data());
  CHECK(static_cast<const void*>(snap.leaves[0].data.view.data()) == w.data_ptr());
  CHECK_FALSE(snap.leaves[0].data.owns());
  // A view with an offset into the same storage points into it.
  Tied view{w, w.narrow(0, 2, 2)};
  const ckpt::Snapshot snap2 = ckpt::take_snapshot(view);
  CHECK(snap2.leaves[1].data.view.data() == snap2.leaves[0].data.view.data() + 2 * 3 * sizeof(float));
  // A module's parameters are borrowed too.
  const ckpt::Snapshot msnap = ckpt::take_snapshot(net);
  bool found = false;
  for (const auto& l : msnap.leaves)
    if (l.path.str() == "layers.0.weight") {
      found = true;
      CHECK(static_cast<const void*>(l.data.view.data()) == net.layers[0]->named_parameters()["weight"].data_ptr());
    }
  CHECK(found);
}

// PyTorch's names for the same network and optimizers, from Python's state_dict().
const char* python_names = R"(
import sys, torch
torch.manual_seed(0)
net = torch.nn.Module()
net.layers = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
names = ['model.' + k for k in net.state_dict()]
def flat(prefix, v):
    if isinstance(v, dict):
        for k, x in v.items(): flat(prefix + '.' + str(k), x)
    elif isinstance(v, (list, tuple)) and not (prefix.endswith('.params')):
        for k, x in enumerate(v): flat(prefix + '.' + str(k), x)
    elif v is not None: names.append(prefix)
for opt, kind in [(torch.optim.Adam(net.parameters(), lr=1e-2, amsgrad=True, weight_decay=1e-4), 'adam'),
                  (torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9), 'sgd')]:
    net.train(); net.layers(torch.randn(16, 8)).sum().backward(); opt.step()
    sd = opt.state_dict()
    for g in sd['param_groups']:
        for k in ['maximize', 'foreach', 'capturable', 'differentiable', 'fused']: g.pop(k, None)
    flat(kind, sd)
print('\n'.join(sorted(names)))
)";

struct Optimizers {
  Net model;
  torch::optim::Adam adam{model.parameters(), torch::optim::AdamOptions(1e-2).amsgrad(true).weight_decay(1e-4)};
  torch::optim::SGD sgd{model.parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9)};
  friend constexpr auto ckpt_fields(ckpt::type_tag<Optimizers>) {
    return ckpt::fields(ckpt::field("model", &Optimizers::model), ckpt::field("adam", &Optimizers::adam),
                        ckpt::field("sgd", &Optimizers::sgd));
  }
};

TEST_CASE("torch: Module and optimizer leaves carry PyTorch's state_dict names") {
  TempDir tmp;
  Optimizers o;
  for (torch::optim::Optimizer* opt : {static_cast<torch::optim::Optimizer*>(&o.adam), static_cast<torch::optim::Optimizer*>(&o.sgd)}) {
    opt->zero_grad();
    o.model.forward(at::randn({16, 8})).sum().backward();
    opt->step();
  }
  const ckpt::Snapshot snap = ckpt::take_snapshot(o);
  std::set<std::string> ours;
  for (const auto& l : snap.leaves) ours.insert(l.path.str());
  std::set<std::string> theirs;
  std::istringstream py(test::python(python_names, tmp.path()));
  for (std::string line; std::getline(py, line);)
    if (!line.empty()) theirs.insert(line);
  CHECK(ours == theirs);
  CHECK(ours.count("model.layers.1.running_mean"));
  CHECK(ours.count("adam.state.3.max_exp_avg_sq"));
  CHECK(ours.count("adam.param_groups.0.betas.1"));
  CHECK(ours.count("sgd.state.0.momentum_buffer"));
  CHECK(ours.count("sgd.param_groups.0.params"));
}

TEST_CASE("torch: Modules by value, shared_ptr and ModuleHolder; load_state_dict's refusals") {
  TempDir tmp;
  struct Held {
    std::shared_ptr<Net> shared = std::make_shared<Net>();
    torch::nn::Linear holder{3, 2};
  };
  Held in;
  ckpt::save(tmp / "c", in);
  Held out;
  ckpt::restore_into(tmp / "c", out);
  CHECK(same_bits(out.holder->weight, in.holder->weight));
  CHECK(same_bits(out.shared->layers[3]->named_parameters()["bias"], in.shared->layers[3]->named_parameters()["bias"]));
  const auto md = ckpt::metadata(tmp / "c");
  CHECK(md.contains("holder.weight"));
  CHECK(md.contains("shared.layers.1.num_batches_tracked"));
  CHECK(md.leaf("shared.layers.1.num_batches_tracked").dtype() == ckpt::dtype::int64);

  // Another shape: refused, naming the parameter, and the module keeps its shape.
  struct Wide {
    torch::nn::Linear holder{4, 2};
  };
  Wide wide;
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", wide, {.partial = true}), ckpt::ShapeMismatchError, "holder.weight");
  CHECK(wide.holder->weight.sizes().equals({2, 4}));
  // A parameter the checkpoint lacks: missing; leaves the module lacks: unused.
  struct Bigger {
    torch::nn::Linear holder{3, 2};
    torch::nn::Linear extra{2, 2};
  };
  Bigger bigger;
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", bigger, {.partial = true}), ckpt::MissingLeafError, "extra.weight");
  struct Smaller {
    torch::nn::Linear holder{3, 2};
  };
  Smaller smaller;
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", smaller), ckpt::UnusedLeafError, "shared.layers");
  // A tensor of the checkpoint that is corrupt on disk is named too.
}

struct AdamOnly {
  Net model;
  torch::optim::Adam adam{std::vector<at::Tensor>{model.parameters()[0]}};
  friend constexpr auto ckpt_fields(ckpt::type_tag<AdamOnly>) {
    return ckpt::fields(ckpt::field("model", &AdamOnly::model), ckpt::field("adam", &AdamOnly::adam));
  }
};

TEST_CASE("torch: optimizers restore into fresh ones; a param group of another size is refused") {
  TempDir tmp;
  Optimizers o;
  for (int i = 0; i < 3; ++i) {
    o.adam.zero_grad();
    o.model.forward(at::randn({16, 8})).sum().backward();
    o.adam.step();
    o.sgd.step();
  }
  o.adam.param_groups()[0].options().set_lr(0.123);
  ckpt::save(tmp / "c", o);
  Optimizers fresh;
  ckpt::restore_into(tmp / "c", fresh);
  CHECK(fresh.adam.param_groups()[0].options().get_lr() == 0.123);
  for (std::size_t i = 0; i < o.model.parameters().size(); ++i) {
    const auto key = c10::guts::to_string(fresh.model.parameters()[i].unsafeGetTensorImpl());
    const auto old = c10::guts::to_string(o.model.parameters()[i].unsafeGetTensorImpl());
    auto& a = static_cast<torch::optim::AdamParamState&>(*fresh.adam.state().at(key));
    auto& b = static_cast<torch::optim::AdamParamState&>(*o.adam.state().at(old));
    CHECK(a.step() == 3);
    CHECK(same_bits(a.exp_avg(), b.exp_avg()));
    CHECK(same_bits(a.exp_avg_sq(), b.exp_avg_sq()));
    CHECK(same_bits(a.max_exp_avg_sq(), b.max_exp_avg_sq()));
    auto& m = static_cast<torch::optim::SGDParamState&>(*fresh.sgd.state().at(key));
    auto& n = static_cast<torch::optim::SGDParamState&>(*o.sgd.state().at(old));
    CHECK(same_bits(m.momentum_buffer(), n.momentum_buffer()));
  }
  // With no leaf inline in the manifest, the steps and the groups' parameter numbers come
  // through the restore's batched reads, after the optimizer has taken them: read at once.
  ckpt::save(tmp / "out_of_line", o, {.inline_threshold = 0});
  Optimizers later;
  ckpt::restore_into(tmp / "out_of_line", later);
  for (const auto& p : later.model.parameters())
    CHECK(static_cast<torch::optim::AdamParamState&>(*later.adam.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())))
              .step() == 3);
  // Into an optimizer that holds state: filled in place, the same memory.
  const auto key0 = c10::guts::to_string(fresh.model.parameters()[0].unsafeGetTensorImpl());
  auto& held = static_cast<torch::optim::AdamParamState&>(*fresh.adam.state().at(key0));
  const void* held_mem = held.exp_avg().data_ptr();
  held.exp_avg().zero_();
  held.step(99);
  ckpt::restore_into(tmp / "c", fresh);
  auto& again = static_cast<torch::optim::AdamParamState&>(*fresh.adam.state().at(key0));
  CHECK(again.exp_avg().data_ptr() == held_mem);
  CHECK(again.step() == 3);
  CHECK(same_bits(again.exp_avg(),
                  static_cast<torch::optim::AdamParamState&>(
                      *o.adam.state().at(c10::guts::to_string(o.model.parameters()[0].unsafeGetTensorImpl())))
                      .exp_avg()));
  // An optimizer over fewer parameters: PyTorch's "doesn't match the size of optimizer's group".
  AdamOnly one;
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", one, {.partial = true}), ckpt::ShapeMismatchError,
                    "adam.param_groups.0.params");
}

TEST_CASE("torch: training resumed in a new process continues bit for bit") {
  TempDir tmp;
  constexpr int n = 5, m = 4;
  // Process 1 trains n steps, saving every step with the manager (async); process 2
  // restores the latest into a fresh model and optimizer, trains m more and saves.
  run(self_exe() + " --torch-train " + (tmp / "run").string() + " " + std::to_string(n));
  run(self_exe() + " --torch-resume " + (tmp / "run").string() + " " + std::to_string(m) + " " +
      (tmp / "resumed").string());
  // This process trains n + m steps without a break.
  torch::set_num_threads(1);
  torch::manual_seed(0);
  TrainState straight;
  for (int i = 0; i < n + m; ++i) train_step(straight);
  TrainState resumed;
  ckpt::restore_into(tmp / "resumed", resumed);
  CHECK(resumed.step == n + m);
  const auto a = leaves_of(straight), b = leaves_of(resumed);
  REQUIRE(a.size() == b.size());
  std::size_t params = 0;
  for (const auto& [path, bytes] : a) {
    INFO(path);
    REQUIRE(b.count(path));
    CHECK(b.at(path) == bytes);
    params += path.rfind("model.", 0) == 0;
  }
  CHECK(params == 9);  // two Linear layers' weight and bias, BatchNorm's weight, bias and 3 buffers
  // And training moved the weights: the comparison is not of two fresh models.
  torch::manual_seed(0);
  Net initial;
  CHECK_FALSE(same_bits(straight.model.layers[0]->named_parameters()["weight"],
                        initial.layers[0]->named_parameters()["weight"]));
}

#if CKPT_TEST_TORCH_MPI
// Tensor parallel and data parallel at once: each rank holds its rows of an embedding
// (a Sharded tensor), and the same module and optimizer as every other rank.
struct ParallelState {
  std::int64_t step = 0;
  ckpt::Sharded<at::Tensor> embedding;
  Net model;
  torch::optim::Adam opt{model.parameters()};
};

constexpr std::int64_t embedding_rows = 6, embedding_cols = 4;

// A training step on a batch that depends only on the step: the same on every rank.
void train_step_on(Net& model, torch::optim::Adam& opt, std::int64_t step) {
  const at::Tensor x = at::linspace(-1, 1, 16 * 8, at::kFloat).reshape({16, 8}) * static_cast<double>(step + 1);
  opt.zero_grad();
  const at::Tensor loss = (model.forward(x) - x.narrow(1, 0, 4).sin()).pow(2).mean();
  loss.backward();
  opt.step();
}

at::Tensor global_embedding() {
  return at::arange(embedding_rows * embedding_cols, at::kFloat).reshape({embedding_rows, embedding_cols});
}

// One rank of `mpirun -np 2 ckpt_torch_tests --torch-mpi <dir>`: saves two steps with
// the MPI manager (async), restores the latest into a fresh state, and checks its rows
// and its module. Exit code 0 when every check held.
int mpi_child_main(const fs::path& dir) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  {
    torch::set_num_threads(1);
    const ckpt::mpi::Comm world(MPI_COMM_WORLD);
    const auto rows = embedding_rows / world.size();
    const auto mine = [&] { return global_embedding().narrow(0, world.rank() * rows, rows).clone(); };
    auto sharded = [&](at::Tensor local) {
      return ckpt::Sharded<at::Tensor>{{std::size_t(embedding_rows), std::size_t(embedding_cols)},
                                       {std::size_t(world.rank() * rows), 0}, std::move(local)};
    };
    torch::manual_seed(0);
    ParallelState s;
    s.embedding = sharded(mine());
    {
      ckpt::mpi::CheckpointManager<ParallelState, ckpt::async_save> mgr(world, dir, {.max_to_keep = 1});
      for (int i = 0; i < 2; ++i) {
        train_step_on(s.model, s.opt, s.step);
        ++s.step;
        mgr.save(s.step, s);
      }
      mgr.wait_until_finished();
    }
    ParallelState back;  // fresh: other weights, no optimizer state
    back.embedding = sharded(at::zeros({rows, embedding_cols}));
    ckpt::mpi::CheckpointManager<ParallelState> mgr(world, dir, {.read_only = true});
    mgr.restore_latest_into(back);
    rc = back.step == 2 && back.embedding.local.equal(mine()) &&
                 leaves_of(back.model) == leaves_of(s.model) && leaves_of(back.opt) == leaves_of(s.opt)
             ? 0
             : 1;
  }
  MPI_Finalize();
  return rc;
}

TEST_CASE("torch: MPI ranks save Sharded tensors and a replicated module as one checkpoint") {
  TempDir tmp;
  run(std::string(CKPT_MPIEXEC) + " -np 2 --oversubscribe --allow-run-as-root " + self_exe() + " --torch-mpi " +
      (tmp / "run").string());
  // One process reads the whole embedding the two ranks wrote, and the module.
  struct Whole {
    std::int64_t step = 0;
    at::Tensor embedding;
    Net model;
    torch::optim::Adam opt{model.parameters()};
  };
  Whole w;
  ckpt::CheckpointManager<Whole> mgr(tmp / "run", {.read_only = true});
  CHECK(mgr.all_steps() == std::vector<std::int64_t>{2});
  mgr.restore_latest_into(w);
  CHECK(w.step == 2);
  CHECK(same_bits(w.embedding, global_embedding()));
  torch::manual_seed(0);
  ParallelState trained;
  for (; trained.step < 2; ++trained.step) train_step_on(trained.model, trained.opt, trained.step);
  CHECK(leaves_of(w.model) == leaves_of(trained.model));
  CHECK(leaves_of(w.opt) == leaves_of(trained.opt));
}
#endif

}  // namespace torch_test

int main(int argc, char** argv) {
  if (argc > 3 && (std::string(argv[1]) == "--torch-train" || std::string(argv[1]) == "--torch-resume"))
    return torch_test::child_main(argc, argv);
#if CKPT_TEST_TORCH_MPI
  if (argc == 3 && std::string(argv[1]) == "--torch-mpi") return torch_test::mpi_child_main(argv[2]);
#endif
  return doctest::Context(argc, argv).run();
}
