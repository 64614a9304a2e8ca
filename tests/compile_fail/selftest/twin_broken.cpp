// Broken on purpose (harness self-test): it fails with the expected message, but its
// passing twin does not compile either, so the failure proves nothing.
#include <ckpt/ckpt.hpp>
class Secret {
  int v_ = 1;
};
void f() { ckpt::save("/nonexistent/never-run", Secret{}); }
// expect: ckpt: this type is neither a leaf
