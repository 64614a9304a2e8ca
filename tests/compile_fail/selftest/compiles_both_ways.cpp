// Broken on purpose (harness self-test): nothing fails with CKPT_SHOULD_FAIL.
#include <ckpt/ckpt.hpp>
struct Fine { int x = 0; };
void f() { ckpt::save("/nonexistent/never-run", Fine{}); }
// expect: this never appears
