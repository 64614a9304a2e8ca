// ckpt/leaf/torch_tensor.hpp — libtorch's torch::Tensor as a leaf (<ckpt/torch.hpp>).
//
// A tensor's dtype and rank are known only at run time: its codec says dtype::none and
// rank -1 in the schema, and checks the checkpoint's leaf when it reads.
//
// Save: a contiguous CPU tensor is borrowed, zero-copy: the leaf's bytes are the
// tensor's own memory (from its data pointer on), so two tensors sharing a storage (tied
// weights) give the same pointer to a writer. A non-contiguous, CUDA or other-device
// tensor is saved as its contiguous values, copied to host. An undefined tensor is an
// empty node.
//
// Restore: into a defined tensor of the checkpoint's shape, the bytes are read into its
// own memory (converted to its dtype where ckpt's casts allow: leaf/convert.hpp), on
// its device (a CUDA tensor is read on the host and copied). Into an undefined tensor,
// or one of another shape where restore<T> resizes (not restore_into), a new CPU
// tensor of the checkpoint's dtype is allocated. Parameters of a Module always keep
// their shape (tree/torch_module.hpp), as load_state_dict does.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <ckpt/error.hpp>
#include <ckpt/leaf/array_restore.hpp>
#include <ckpt/leaf/codec.hpp>

namespace ckpt {

namespace detail::torch_leaf {

// The dtype of a libtorch scalar type; dtype::none when numpy has no name for it.
inline dtype dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return dtype::bool_;
    case c10::ScalarType::Char: return dtype::int8;
    case c10::ScalarType::Short: return dtype::int16;
    case c10::ScalarType::Int: return dtype::int32;
    case c10::ScalarType::Long: return dtype::int64;
    case c10::ScalarType::Byte: return dtype::uint8;
    case c10::ScalarType::Half: return dtype::float16;
    case c10::ScalarType::BFloat16: return dtype::bfloat16;
    case c10::ScalarType::Float: return dtype::float32;
    case c10::ScalarType::Double: return dtype::float64;
    case c10::ScalarType::ComplexFloat: return dtype::complex64;
    case c10::ScalarType::ComplexDouble: return dtype::complex128;
    default: return dtype::none;
  }
}

// The libtorch scalar type of a dtype; false when libtorch has none (uint16..uint64, string).
inline bool scalar_type_of(dtype d, c10::ScalarType& out) {
  switch (d) {
    case dtype::bool_: out = c10::ScalarType::Bool; return true;
    case dtype::int8: out = c10::ScalarType::Char; return true;
    case dtype::int16: out = c10::ScalarType::Short; return true;
    case dtype::int32: out = c10::ScalarType::Int; return true;
    case dtype::int64: out = c10::ScalarType::Long; return true;
    case dtype::uint8: out = c10::ScalarType::Byte; return true;
    case dtype::float16: out = c10::ScalarType::Half; return true;
    case dtype::bfloat16: out = c10::ScalarType::BFloat16; return true;
    case dtype::float32: out = c10::ScalarType::Float; return true;
    case dtype::float64: out = c10::ScalarType::Double; return true;
    case dtype::complex64: out = c10::ScalarType::ComplexFloat; return true;
    case dtype::complex128: out = c10::ScalarType::ComplexDouble; return true;
    default: return false;
  }
}

inline Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

inline LeafBytes save(const at::Tensor& t) {
  if (!t.defined()) return LeafBytes::own(dtype::none, {}, {});
  if (t.layout() != c10::kStrided)
    throw Error("", "", "a torch::Tensor of a sparse or other non-strided layout cannot be saved: call to_dense() first");
  const dtype d = dtype_of(t.scalar_type());
  if (d == dtype::none)
    throw Error("", "", std::string("the torch::Tensor's dtype ") + c10::toString(t.scalar_type()) +
                            " has no numpy name: convert it (e.g. to(torch::kFloat)) before saving");
  if (t.is_cpu() && t.is_contiguous())
    return LeafBytes::borrow(d, shape_of(t), t.data_ptr(), t.nbytes());
  const at::Tensor c = t.to(c10::kCPU).contiguous();
  std::vector<std::byte> bytes(c.nbytes());
  if (!bytes.empty()) std::memcpy(bytes.data(), c.data_ptr(), bytes.size());
  return LeafBytes::own(d, shape_of(t), std::move(bytes));
}

// Reads the checkpoint's leaf into a contiguous CPU tensor c of its shape, as c's dtype.
// `now`: the bytes are needed before the codec returns (they are copied on, to another
// device or layout); otherwise the read may be deferred until the restore returns, as
// restores batch them.
inline void read_into(at::Tensor& c, const LeafSource& src, bool now = false) {
  const dtype want = dtype_of(c.scalar_type());
  const std::span<std::byte> dst{static_cast<std::byte*>(c.data_ptr()), c.nbytes()};
  if (now && !src.shape_only() && src.type() == want) src.read_into(dst);
  else src.read_as(want, dst);
  if (want == dtype::bool_ && !src.shape_only()) {
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0; i < c.nbytes(); ++i)
      if (b[i] > 1) throw CorruptCheckpointError(src.checkpoint(), src.path(), "bool byte is neither 0 nor 1");
  }
}

// keep_shape: the target is a Module's parameter or buffer, which never changes shape.
inline void restore(at::Tensor& t, const LeafSource& src, bool keep_shape, bool now = false) {
  if (src.type() == dtype::none) {  // saved undefined
    if (keep_shape && t.defined())
      throw Error(src.checkpoint(), src.path(), "an undefined tensor in checkpoint, a defined one in target");
    t = at::Tensor();
    return;
  }
  const Shape& shape = src.shape();
  const bool same_shape = t.defined() && t.sizes().equals(c10::IntArrayRef(shape.data(), shape.size()));
  if (t.defined() && !same_shape && (keep_shape || (src.check_dynamic_shapes() && t.numel() != 0)))
    src.fail_shape(shape_of(t));
  if (same_shape) {  // in place, in the target's dtype and on its device
    src.expect_castable(dtype_of(t.scalar_type()));
    if (t.is_cpu() && t.is_contiguous()) return read_into(t, src);
    at::Tensor c = at::empty(t.sizes(), t.options().device(c10::kCPU));
    read_into(c, src, true);
    c10::NoGradGuard no_grad;
    t.copy_(c);
    return;
  }
  c10::ScalarType st{};
  if (!scalar_type_of(src.type(), st))
    throw DtypeMismatchError(src.checkpoint(), src.path(),
                             "dtype " + std::string(dtype_name(src.type())) + " in checkpoint has no libtorch dtype");
  if (element_count(shape) < 0) src.fail_shape(shape);
  at::Tensor c = at::empty(c10::IntArrayRef(shape.data(), shape.size()), at::TensorOptions().dtype(st));
  const bool other_device = t.defined() && !t.is_cpu();
  read_into(c, src, now || other_device);
  t = other_device ? c.to(t.device()) : std::move(c);
}

}  // namespace detail::torch_leaf

template <>
struct leaf_codec<at::Tensor> {
  static constexpr dtype type = dtype::none;  // known only at run time
  static constexpr int rank = -1;
  static LeafBytes save(const at::Tensor& t) { return detail::torch_leaf::save(t); }
  static void restore(at::Tensor& t, const LeafSource& src) { detail::torch_leaf::restore(t, src, false); }
};

}  // namespace ckpt
