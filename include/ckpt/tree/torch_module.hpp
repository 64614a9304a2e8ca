// ckpt/tree/torch_module.hpp — a libtorch torch::nn::Module as a tree node (<ckpt/torch.hpp>).
//
// A Module, held by value, by std::shared_ptr or by a ModuleHolder (torch::nn::Linear,
// torch::nn::Sequential, TORCH_MODULE(Net)), is a node whose children are its named
// parameters and buffers under PyTorch's own names, split at the dots: "layers.0.weight"
// is the leaf at path layers.0.weight, "bn.running_mean" at bn.running_mean, as in
// Python's module.state_dict().
//
// Restore fills the module's own tensors in place (their memory, dtype and device stay),
// and, as load_state_dict(strict=True) does, refuses a checkpoint whose tensor has
// another shape, one that lacks a parameter or buffer (MissingLeafError), or one with
// leaves the module does not have (UnusedLeafError, unless the restore is partial).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <ckpt/leaf/torch_tensor.hpp>
#include <ckpt/tree/node.hpp>

namespace ckpt {

namespace detail::torch_tree {

// A Module's tensor: filled in place, never resized nor replaced.
struct ModuleTensor {
  at::Tensor tensor;
};

// "layers.0.weight" -> {"layers", "0", "weight"}.
inline ChildPath split_name(const std::string& name) {
  ChildPath out(1);
  for (char c : name) {
    if (c == '.') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

template <class F>
void save_module(const torch::nn::Module& m, F&& f) {
  for (const auto& kv : m.named_parameters()) f(split_name(kv.key()), kv.value());
  for (const auto& kv : m.named_buffers()) f(split_name(kv.key()), kv.value());
}

template <class F>
void restore_module(torch::nn::Module& m, F&& f) {
  for (const auto& kv : m.named_parameters()) {
    ModuleTensor t{kv.value()};
    f(split_name(kv.key()), t);
  }
  for (const auto& kv : m.named_buffers()) {
    ModuleTensor t{kv.value()};
    f(split_name(kv.key()), t);
  }
}

template <class T>
concept module_holder = requires { typename T::ContainedType; } &&
                        std::is_base_of_v<torch::nn::ModuleHolder<typename T::ContainedType>, T>;

}  // namespace detail::torch_tree

template <>
struct leaf_codec<detail::torch_tree::ModuleTensor> {
  static constexpr dtype type = dtype::none;
  static constexpr int rank = -1;
  static LeafBytes save(const detail::torch_tree::ModuleTensor& t) { return detail::torch_leaf::save(t.tensor); }
  static void restore(detail::torch_tree::ModuleTensor& t, const LeafSource& src) {
    detail::torch_leaf::restore(t.tensor, src, true);
  }
};

template <class M>
  requires std::is_base_of_v<torch::nn::Module, M>
struct node_children<M> {
  static constexpr bool listed = true;
  template <class F>
  static void save(const M& m, F&& f) {
    detail::torch_tree::save_module(m, f);
  }
  template <class F>
  static void restore(M& m, const ChildLookup&, F&& f) {
    detail::torch_tree::restore_module(m, f);
  }
};

template <class M>
  requires std::is_base_of_v<torch::nn::Module, M>
struct node_children<std::shared_ptr<M>> {
  static constexpr bool listed = true;
  template <class F>
  static void save(const std::shared_ptr<M>& m, F&& f) {
    if (m) detail::torch_tree::save_module(*m, f);
  }
  template <class F>
  static void restore(std::shared_ptr<M>& m, const ChildLookup&, F&& f) {
    if (!m) throw Error("a std::shared_ptr to a torch::nn::Module must hold the module before it is restored into");
    detail::torch_tree::restore_module(*m, f);
  }
};

template <detail::torch_tree::module_holder H>
struct node_children<H> {
  static constexpr bool listed = true;
  template <class F>
  static void save(const H& h, F&& f) {
    if (!h.is_empty()) detail::torch_tree::save_module(*h.ptr(), f);
  }
  template <class F>
  static void restore(H& h, const ChildLookup&, F&& f) {
    if (h.is_empty()) throw Error("an empty torch::nn::ModuleHolder (constructed with nullptr) cannot be restored into");
    detail::torch_tree::restore_module(*h.ptr(), f);
  }
};

}  // namespace ckpt
