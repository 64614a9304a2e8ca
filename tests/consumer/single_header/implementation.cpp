// The one unit of the program that compiles ckpt's machinery: CKPT_IMPLEMENTATION before
// the first include, then every part the program's units include (here the core and the
// interop formats, which this unit also registers for restore to detect).
#define CKPT_IMPLEMENTATION
#include <ckpt/ckpt.hpp>
#include <ckpt/formats.hpp>
