// The compiled part of ckpt for CKPT_SEPARATE_COMPILATION builds (the CMake target
// ckpt::ckpt, libckpt.a): everything the headers declare with CKPT_API, compiled once.
#include <ckpt/src.hpp>
