// ckpt/leaf/lazy.hpp — ckpt::lazy<U>: a leaf whose bytes are read on first use.
//
// In a target struct, lazy<U> fields make restore cost the manifest only: dtype and
// shape are known at once, the data is read (and checked) on the first get(). Copies
// share the loaded value. Saving a lazy leaf saves its value (reading it first).
#pragma once

#include <memory>
#include <mutex>

#include <ckpt/leaf/codec.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

template <class U>
class lazy {
  static_assert(leaf<U>, CKPT_STATIC_ERROR("ckpt::lazy<U> needs a leaf type U",
                                           "Use a number, string, vector or xtensor for U; make a struct's fields "
                                           "lazy one by one.",
                                           CKPT_NAMED_ABOVE));

 public:
  lazy() = default;
  lazy(U value) : state_(std::make_shared<State>()) {  // NOLINT: a value is a loaded lazy leaf
    std::call_once(state_->once, [&] { state_->value = std::move(value); });
  }

  bool has_source() const noexcept { return state_ != nullptr; }
  ckpt::dtype dtype() const noexcept { return state_ && state_->source ? state_->source->type() : leaf_codec<U>::type; }
  Shape shape() const {
    if (state_ && state_->source) return state_->source->shape();
    return state_ ? leaf_codec<U>::save(get()).shape : Shape{};
  }

  // The value, read from the checkpoint on the first call (thread-safe).
  const U& get() const {
    if (!state_) throw Error("", "", "ckpt::lazy::get() on an empty lazy leaf (never restored nor assigned)");
    std::call_once(state_->once, [&] {
      leaf_codec<U>::restore(state_->value, *state_->source);
      state_->read = true;
    });
    return state_->value;
  }
  bool loaded() const { return state_ && (state_->source == nullptr || state_->read); }

 private:
  friend struct leaf_codec<lazy<U>>;
  struct State {
    std::once_flag once;
    std::shared_ptr<const LeafSource> source;  // null for a value given in memory
    U value{};
    bool read = false;
  };
  std::shared_ptr<State> state_;
};

template <class U>
struct leaf_codec<lazy<U>> {
  static constexpr dtype type = leaf_codec<U>::type;
  static constexpr int rank = leaf_codec<U>::rank;
  static LeafBytes save(const lazy<U>& l) { return leaf_codec<U>::save(l.get()); }
  static void restore(lazy<U>& l, const LeafSource& src) {
    // A wrong dtype shows now, not at the first get(); a codec whose dtype is known only
    // at run time (dtype::none: a torch::Tensor) checks it when it reads.
    if (type != dtype::none) src.expect_castable(type);
    if (rank >= 0 && static_cast<int>(src.shape().size()) != rank)
      throw ShapeMismatchError(src.checkpoint(), src.path(),
                               "rank " + std::to_string(src.shape().size()) + " (shape " + shape_str(src.shape()) +
                                   ") in checkpoint, rank " + std::to_string(rank) + " in target");
    auto retained = src.retain();
    if (!retained) throw Error(src.checkpoint(), src.path(), "this source cannot be read lazily");
    l.state_ = std::make_shared<typename lazy<U>::State>();
    l.state_->source = std::move(retained);
  }
};

}  // namespace ckpt
