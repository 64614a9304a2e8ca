// ckpt/tree/torch_optimizer.hpp — libtorch's optimizers as tree nodes (<ckpt/torch.hpp>):
// torch::optim::Adam, AdamW and SGD, under the names of Python's optimizer.state_dict().
//
// Parameters are numbered 0, 1, ... across the param groups in order, as PyTorch numbers
// them; each one that has state holds it under state.<i>:
//   Adam, AdamW: state.<i>.step (int64; Python's float32 step tensor also restores),
//                state.<i>.exp_avg, state.<i>.exp_avg_sq, state.<i>.max_exp_avg_sq (amsgrad)
//   SGD:         state.<i>.momentum_buffer
// and each group j its options and its parameters' numbers:
//   Adam, AdamW: param_groups.<j>.lr, .betas.0, .betas.1, .eps, .weight_decay, .amsgrad, .params
//   SGD:         param_groups.<j>.lr, .momentum, .dampening, .weight_decay, .nesterov, .params
//
// Restore needs the optimizer built over the parameters it will train (a fresh one is
// fine): the checkpoint's state replaces its state parameter by parameter (into the
// tensors it already holds where their shapes match, else new ones on each parameter's
// device), and the groups' options are overwritten. A checkpoint whose group
// holds another number of parameters is refused, as load_state_dict refuses it.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ckpt/leaf/owned.hpp>
#include <ckpt/leaf/scalar.hpp>
#include <ckpt/leaf/sequence.hpp>
#include <ckpt/leaf/torch_tensor.hpp>
#include <ckpt/tree/node.hpp>

namespace ckpt {

namespace detail::torch_tree {

// A group's parameter numbers: saved as computed, checked against the group on restore.
struct GroupParams {
  std::vector<std::int64_t> ids;
  std::size_t expected = 0;
};

// A step count: int64 from C++, a float32 tensor from Python.
struct StepCount {
  std::int64_t value = 0;
};

// A tensor of an optimizer's state, restored onto its parameter's device.
struct StateTensor {
  at::Tensor& tensor;
  c10::Device device;
};

inline std::string state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// What differs between optimizers: their per-parameter state and their options.
template <class Opt>
struct optimizer_fields;

template <class State, class Options>
struct adam_fields {
  using state_type = State;
  using options_type = Options;
  template <class F>
  static void save_state(const State& s, const std::string& i, F&& f) {
    f(ChildPath{"state", i, "step"}, s.step());
    f(ChildPath{"state", i, "exp_avg"}, s.exp_avg());
    f(ChildPath{"state", i, "exp_avg_sq"}, s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) f(ChildPath{"state", i, "max_exp_avg_sq"}, s.max_exp_avg_sq());
  }
  template <class F>
  static void restore_state(State& s, const std::string& i, const ChildLookup& lookup, c10::Device device, F&& f) {
    StepCount step;
    f(ChildPath{"state", i, "step"}, step);
    s.step(step.value);
    StateTensor avg{s.exp_avg(), device}, avg_sq{s.exp_avg_sq(), device}, max_sq{s.max_exp_avg_sq(), device};
    f(ChildPath{"state", i, "exp_avg"}, avg);
    f(ChildPath{"state", i, "exp_avg_sq"}, avg_sq);
    if (lookup.has({"state", i, "max_exp_avg_sq"})) f(ChildPath{"state", i, "max_exp_avg_sq"}, max_sq);
  }
  template <class O, class F>
  static void options(O& o, const std::string& j, F&& f) {
    f(ChildPath{"param_groups", j, "lr"}, o.lr());
    f(ChildPath{"param_groups", j, "betas"}, o.betas());
    f(ChildPath{"param_groups", j, "eps"}, o.eps());
    f(ChildPath{"param_groups", j, "weight_decay"}, o.weight_decay());
    f(ChildPath{"param_groups", j, "amsgrad"}, o.amsgrad());
  }
};

template <>
struct optimizer_fields<torch::optim::Adam> : adam_fields<torch::optim::AdamParamState, torch::optim::AdamOptions> {};
template <>
struct optimizer_fields<torch::optim::AdamW> : adam_fields<torch::optim::AdamWParamState, torch::optim::AdamWOptions> {};

template <>
struct optimizer_fields<torch::optim::SGD> {
  using state_type = torch::optim::SGDParamState;
  using options_type = torch::optim::SGDOptions;
  template <class F>
  static void save_state(const state_type& s, const std::string& i, F&& f) {
    f(ChildPath{"state", i, "momentum_buffer"}, s.momentum_buffer());
  }
  template <class F>
  static void restore_state(state_type& s, const std::string& i, const ChildLookup&, c10::Device device, F&& f) {
    StateTensor buffer{s.momentum_buffer(), device};
    f(ChildPath{"state", i, "momentum_buffer"}, buffer);
  }
  template <class O, class F>
  static void options(O& o, const std::string& j, F&& f) {
    f(ChildPath{"param_groups", j, "lr"}, o.lr());
    f(ChildPath{"param_groups", j, "momentum"}, o.momentum());
    f(ChildPath{"param_groups", j, "dampening"}, o.dampening());
    f(ChildPath{"param_groups", j, "weight_decay"}, o.weight_decay());
    f(ChildPath{"param_groups", j, "nesterov"}, o.nesterov());
  }
};

template <class Opt, class F>
void save_optimizer(const Opt& opt, F&& f) {
  using fields = optimizer_fields<Opt>;
  const auto& states = opt.state();
  std::int64_t i = 0;
  for (std::size_t j = 0; j < opt.param_groups().size(); ++j) {
    const auto& group = opt.param_groups()[j];
    owned_leaf<std::vector<std::int64_t>> ids;
    for (const at::Tensor& p : group.params()) {
      ids.value.push_back(i);
      if (auto it = states.find(state_key(p)); it != states.end())
        fields::save_state(static_cast<const typename fields::state_type&>(*it->second), std::to_string(i), f);
      ++i;
    }
    fields::options(static_cast<const typename fields::options_type&>(group.options()), std::to_string(j), f);
    f(ChildPath{"param_groups", std::to_string(j), "params"}, ids);
  }
}

template <class Opt, class F>
void restore_optimizer(Opt& opt, const ChildLookup& lookup, F&& f) {
  using fields = optimizer_fields<Opt>;
  using state_type = typename fields::state_type;
  auto& states = opt.state();
  std::int64_t i = 0;
  for (std::size_t j = 0; j < opt.param_groups().size(); ++j) {
    auto& group = opt.param_groups()[j];
    const std::string gj = std::to_string(j);
    for (const at::Tensor& p : group.params()) {
      const std::string si = std::to_string(i++);
      if (!lookup.has({"state", si})) {
        states.erase(state_key(p));
        continue;
      }
      // State the optimizer holds is filled in place, as a module's tensors are (no
      // fresh memory, whose first touch costs more than the read); otherwise it is new.
      auto& slot = states[state_key(p)];
      if (!slot) slot = std::make_unique<state_type>();
      auto& st = static_cast<state_type&>(*slot);
      fields::restore_state(st, si, lookup, p.device(), f);
    }
    fields::options(static_cast<typename fields::options_type&>(group.options()), gj, f);
    GroupParams ids{{}, group.params().size()};
    f(ChildPath{"param_groups", gj, "params"}, ids);
  }
}

}  // namespace detail::torch_tree

template <>
struct leaf_codec<detail::torch_tree::GroupParams> {
  static constexpr dtype type = dtype::int64;
  static constexpr int rank = 1;
  static LeafBytes save(const detail::torch_tree::GroupParams& g) {
    return leaf_codec<owned_leaf<std::vector<std::int64_t>>>::save({g.ids});
  }
  static void restore(detail::torch_tree::GroupParams& g, const LeafSource& src) {
    owned_leaf<std::vector<std::int64_t>> ids;  // looked at now: read now
    leaf_codec<owned_leaf<std::vector<std::int64_t>>>::restore(ids, src);
    g.ids = std::move(ids.value);
    if (g.ids.size() != g.expected)
      throw ShapeMismatchError(src.checkpoint(), src.path(),
                               "a param group of " + std::to_string(g.ids.size()) +
                                   " parameters in checkpoint, of " + std::to_string(g.expected) + " in the optimizer");
  }
};

// Read into the tensor in place where it has the checkpoint's shape; otherwise a new one
// on the host, read at once when it then moves to another device.
template <>
struct leaf_codec<detail::torch_tree::StateTensor> {
  static constexpr dtype type = dtype::none;
  static constexpr int rank = -1;
  static LeafBytes save(const detail::torch_tree::StateTensor& t) { return detail::torch_leaf::save(t.tensor); }
  static void restore(detail::torch_tree::StateTensor& t, const LeafSource& src) {
    detail::torch_leaf::restore(t.tensor, src, false, !t.device.is_cpu());
    if (t.tensor.defined() && t.tensor.device() != t.device) t.tensor = t.tensor.to(t.device);
  }
};

template <>
struct leaf_codec<detail::torch_tree::StepCount> {
  static constexpr dtype type = dtype::int64;
  static constexpr int rank = 0;
  static LeafBytes save(const detail::torch_tree::StepCount& s) {
    return leaf_codec<owned_leaf<std::int64_t>>::save({s.value});
  }
  static void restore(detail::torch_tree::StepCount& s, const LeafSource& src) {
    if (src.type() == dtype::int64) {  // handed to the optimizer at once: read now
      owned_leaf<std::int64_t> v;
      leaf_codec<owned_leaf<std::int64_t>>::restore(v, src);
      s.value = v.value;
      return;
    }
    at::Tensor t;  // Python's step: a float32 tensor of shape [] (or [1] when capturable)
    detail::torch_leaf::restore(t, src, false, true);
    if (t.numel() != 1) src.fail_shape({});
    const double v = t.to(c10::kDouble).item<double>();
    if (!(v >= 0 && v < 9.0e15) || std::floor(v) != v)
      throw CorruptCheckpointError(src.checkpoint(), src.path(), "an optimizer step that is not a whole number");
    s.value = static_cast<std::int64_t>(v);
  }
};

template <class Opt>
  requires requires { typename detail::torch_tree::optimizer_fields<Opt>::state_type; }
struct node_children<Opt> {
  static constexpr bool listed = true;
  template <class F>
  static void save(const Opt& o, F&& f) {
    detail::torch_tree::save_optimizer(o, f);
  }
  template <class F>
  static void restore(Opt& o, const ChildLookup& lookup, F&& f) {
    detail::torch_tree::restore_optimizer(o, lookup, f);
  }
};

}  // namespace ckpt
