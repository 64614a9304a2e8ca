// The implementation unit of a single-header program that uses the core alone: ckpt's
// machinery compiled once, for with_ckpt.cpp built with CKPT_SEPARATE_COMPILATION.
#define CKPT_IMPLEMENTATION
#include <ckpt/ckpt.hpp>
