// ckpt/detail/compile_mode.hpp — header-only, or the machinery compiled once.
//
// ckpt is header-only: include it and it works. The price is that every translation
// unit that saves or restores compiles the machinery beneath (the native format, the
// staging directory, parallel reads, error messages) again. A program defines
// CKPT_SEPARATE_COMPILATION for all of its units and compiles that machinery once, in
// one unit that includes <ckpt/src.hpp>, as Boost.Asio does with
// BOOST_ASIO_SEPARATE_COMPILATION. The build systems' default target does both
// (CMake's ckpt::ckpt, libckpt.a); ckpt::header_only and a plain -I do neither.
//
// In a header, a function of that machinery is declared with CKPT_API and its body
// sits in a `#if CKPT_DEFINE_API` block: inline in header-only mode; in separate mode
// a plain declaration everywhere and a plain definition in the one unit that builds it.
// Mixing the modes across units of one program is an ODR violation: define the macro
// for the whole program or for none of it.
#pragma once

#if defined(CKPT_SEPARATE_COMPILATION)
#define CKPT_API
#if defined(CKPT_BUILDING_LIBRARY)
#define CKPT_DEFINE_API 1
#else
#define CKPT_DEFINE_API 0
#endif
#else
#define CKPT_API inline
#define CKPT_DEFINE_API 1
#endif
