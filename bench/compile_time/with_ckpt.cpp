// What the README promises: one include, ckpt::save and ckpt::restore<T>.
#include <ckpt/ckpt.hpp>

#include "state.hpp"

int main(int argc, char** argv) {
  ResearchState s;
  s.w0 = xt::ones<float>({4, 4});
  const char* dir = argc > 1 ? argv[1] : "/tmp/ckpt-compile-time";
  ckpt::save(dir, s, {.force = true});
  const auto r = ckpt::restore<ResearchState>(dir);
  return r.w0 == s.w0 ? 0 : 1;
}
