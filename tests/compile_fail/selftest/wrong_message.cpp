// Broken on purpose (harness self-test): it fails, but not with the expected message.
#include <ckpt/ckpt.hpp>
#include <xtensor/xtensor.hpp>
struct Fine { int x = 0; };
#ifdef CKPT_SHOULD_FAIL
void f() { this_is_not_declared(); }
#endif
// expect: ckpt: this type is neither a leaf
