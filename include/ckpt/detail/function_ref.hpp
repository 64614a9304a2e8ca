// ckpt/detail/function_ref.hpp — a non-owning reference to a callable (C++26's
// std::function_ref, cut down): what a virtual function takes as a callback that it
// calls while it runs, with no allocation and no copy of the callable.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace ckpt::detail {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f) noexcept  // NOLINT: converts like a std::function parameter would
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace ckpt::detail
