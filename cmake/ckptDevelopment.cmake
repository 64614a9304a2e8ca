# Settings for ckpt's own targets (tests, examples, bench, tools); never
# applied to consumers and not installed.

# The library the development targets compile against: include/ or, with
# CKPT_USE_SINGLE_INCLUDE, the generated single_include/ (same dependencies).
if(CKPT_USE_SINGLE_INCLUDE)
  if(NOT EXISTS "${PROJECT_SOURCE_DIR}/single_include/ckpt/ckpt.hpp")
    message(FATAL_ERROR "CKPT_USE_SINGLE_INCLUDE=ON but single_include/ckpt/ckpt.hpp "
      "does not exist: run `make single-include` first")
  endif()
  add_library(ckpt_single_include INTERFACE)
  target_compile_features(ckpt_single_include INTERFACE cxx_std_20)
  target_include_directories(ckpt_single_include INTERFACE "${PROJECT_SOURCE_DIR}/single_include")
  target_link_libraries(ckpt_single_include INTERFACE ${CKPT_DEPS_TARGETS})
  set(CKPT_DEV_LIBRARY ckpt_single_include)
else()
  # Our own programs link ckpt::ckpt, as users do: the machinery compiles once
  # (src/ckpt.cpp) instead of in every test file. The single-header build above, the
  # fuzz binary and the pkg-config consumer test cover header-only mode.
  set(CKPT_DEV_LIBRARY ckpt::ckpt)
endif()

set(CKPT_SANITIZE_FLAGS "")
if(CKPT_SANITIZE)
  set(CKPT_SANITIZE_FLAGS -fsanitize=${CKPT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  # GCC 12 with ThreadSanitizer at -O2 reports -Warray-bounds inside libstdc++'s
  # std::string (char_traits.h, a known false positive of GCC 12's inliner): kept as a
  # warning there, so that `make tsan` builds.
  if(CKPT_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND CKPT_SANITIZE_FLAGS -Wno-error=array-bounds)
  endif()
  # GCC 12-14 with AddressSanitizer at -O1 and above reports -Wmaybe-uninitialized
  # inside libstdc++'s <regex> wherever a std::regex is built (GCC bug 105616), here
  # the TensorFlow name translator's (format/tf/convert.hpp): kept as a warning there,
  # so that `make sanitize` builds.
  if(CKPT_SANITIZE MATCHES "address" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND CKPT_SANITIZE_FLAGS -Wno-error=maybe-uninitialized)
  endif()
endif()

# Warnings as errors for our code; third-party headers come in through
# imported targets or SYSTEM dirs, so theirs do not count. include/ is not
# SYSTEM here: warnings from ckpt's own headers must fail the build.
function(ckpt_target_options target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Werror ${CKPT_SANITIZE_FLAGS})
    target_link_options(${target} PRIVATE ${CKPT_SANITIZE_FLAGS})
  elseif(MSVC)
    target_compile_options(${target} PRIVATE /W4 /WX)
  endif()
  set_target_properties(${target} PROPERTIES
    CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
endfunction()

if(TARGET ckpt AND NOT CKPT_USE_SINGLE_INCLUDE)
  ckpt_target_options(ckpt)
endif()

# Benchmarks are built with CKPT_BENCH_OPT (-O2 whatever the build type: their figures
# mean something only optimized); CI, which compiles them but never runs them, sets
# -O0 to keep its time (see .ci/run).
set(CKPT_BENCH_OPT "-O2" CACHE STRING "Optimization flags of the benchmarks (bench/)")
# Examples likewise (CKPT_EXAMPLES_OPT, -O2: the demo trains a model); CI sets -O0, as it
# runs only the short demo (1 s at -O0) and the compile is a third cheaper.
set(CKPT_EXAMPLES_OPT "-O2" CACHE STRING "Optimization flags of the examples (examples/)")

# One executable per <dir>/*.cpp, named after the file, built at CKPT_BENCH_OPT
# (bench/) or CKPT_EXAMPLES_OPT (examples/) whatever the build type, and placed in
# <build>/<dir>/.
function(ckpt_add_executables dir)
  if(NOT IS_DIRECTORY "${PROJECT_SOURCE_DIR}/${dir}")
    return()
  endif()
  file(GLOB sources CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/${dir}/*.cpp")
  foreach(src IN LISTS sources)
    get_filename_component(name "${src}" NAME_WE)
    # torch_*.cpp and bench_torch*.cpp use libtorch: built only where ckpt::torch exists.
    set(needs_torch OFF)
    if(name MATCHES "^(bench_)?torch")
      set(needs_torch ON)
      # (libtorch 1.13's own headers do not compile with clang 14 in C++20.)
      if(NOT TARGET ckpt::torch OR CKPT_USE_SINGLE_INCLUDE OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
        continue()
      endif()
    endif()
    if(TARGET ${name})
      set(name "${dir}_${name}")
    endif()
    add_executable(${name} "${src}")
    target_link_libraries(${name} PRIVATE ${CKPT_DEV_LIBRARY})
    if(needs_torch)
      target_link_libraries(${name} PRIVATE ckpt::torch)
    endif()
    ckpt_target_options(${name})
    if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
      if(dir STREQUAL "bench")
        separate_arguments(program_opt UNIX_COMMAND "${CKPT_BENCH_OPT}")
      else()
        separate_arguments(program_opt UNIX_COMMAND "${CKPT_EXAMPLES_OPT}")
      endif()
      target_compile_options(${name} PRIVATE ${program_opt})
    endif()
    target_compile_definitions(${name} PRIVATE CKPT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
    get_filename_component(stem "${src}" NAME_WE)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME ${stem}
      RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/${dir}")
  endforeach()
endfunction()
