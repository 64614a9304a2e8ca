// Tree::Leaf::as<U> reads one leaf: U must be a leaf type, not a struct.
#include <ckpt/ckpt.hpp>

struct Pair {
  float a = 0, b = 0;
};

float f(const ckpt::Tree& t) {
#ifdef CKPT_SHOULD_FAIL
  return t.leaf("x").as<Pair>().a;
#else
  return t.leaf("x").as<float>();
#endif
}

// expect: ******** ckpt: Tree::Leaf::as<U>() needs a leaf type U
// expect: Ask for a number, string, vector or xtensor
