// ckpt_tests' CKPT_IMPLEMENTATION unit when it is built against single_include/ (the
// clang sanitizer build of CI): the test files are then compiled with
// CKPT_SEPARATE_COMPILATION, as the units of a program that copies the single header
// are, and ckpt's machinery compiles here once instead of in every test unit. The
// command-line tool and the fuzz targets, one unit each, keep header-only mode tested.
#define CKPT_IMPLEMENTATION
#include <ckpt/all.hpp>
