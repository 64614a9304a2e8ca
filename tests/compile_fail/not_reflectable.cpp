// A class with private members and no ckpt_fields cannot be saved; the error says
// what to add and names the type.
#include <ckpt/ckpt.hpp>

class Secret {
 public:
  int value() const { return v_; }
#ifndef CKPT_SHOULD_FAIL
  friend constexpr auto ckpt_fields(ckpt::type_tag<Secret>) { return ckpt::fields(ckpt::field("v", &Secret::v_)); }
#endif
 private:
  int v_ = 1;
};

void f() { ckpt::save("/nonexistent/never-run", Secret{}); }

// expect: ******** ckpt: this type is neither a leaf nor a struct ckpt can reflect
// expect: or specialize ckpt::leaf_codec<T>.
// expect: ckpt_fields
// expect: CKPT_ERROR_this_type_is_neither_a_leaf_nor_a_struct_ckpt_can_reflect<Secret>
