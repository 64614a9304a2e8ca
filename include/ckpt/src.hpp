// ckpt/src.hpp — the one translation unit of a program built with CKPT_SEPARATE_COMPILATION.
//
// Include it in exactly one .cpp file (src/ckpt.cpp, libckpt.a of the CMake target ckpt::ckpt, does), with
// CKPT_SEPARATE_COMPILATION defined for that file and every other file of the program:
// it compiles once what header-only mode compiles in every unit (see
// detail/compile_mode.hpp).
#pragma once

#if !defined(CKPT_SEPARATE_COMPILATION)
#error "ckpt/src.hpp is for CKPT_SEPARATE_COMPILATION builds: define it for every translation unit of the program"
#endif
#if defined(CKPT_API)
#error "ckpt/src.hpp must be included before any other ckpt header in its translation unit"
#endif
#define CKPT_BUILDING_LIBRARY 1

#include <ckpt/ckpt.hpp>
// Every interop format registers itself here, once: in this mode a unit that includes a
// format's header does not instantiate its reader and writer to register it (a third
// of the compile time of a test unit restoring native checkpoints).
// So a program linking the library knows every format, whichever headers it includes.
#include <ckpt/formats.hpp>
