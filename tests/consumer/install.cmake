# cmake -DCKPT_BINARY_DIR=<ckpt build> -DPREFIX=<dir> -DLIBDIR=<lib dir> -P install.cmake
# Installs ckpt from its build tree into a fresh PREFIX.
file(REMOVE_RECURSE "${PREFIX}")
# libckpt.a first: a build against the single header (CKPT_USE_SINGLE_INCLUDE, as
# `make clang` configures it) leaves it out of its default target, and the install
# needs it. Elsewhere it is built already, and this returns at once.
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${CKPT_BINARY_DIR}" --target ckpt RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --build ${CKPT_BINARY_DIR} --target ckpt failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${CKPT_BINARY_DIR}" --prefix "${PREFIX}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${CKPT_BINARY_DIR} --prefix ${PREFIX} failed: ${rc}")
endif()
# (lib/: CKPT_INSTALL_LIBDIR of the build, as GNUInstallDirs chose it)
foreach(f include/ckpt/ckpt.hpp ${LIBDIR}/libckpt.a ${LIBDIR}/cmake/ckpt/ckptConfig.cmake
          ${LIBDIR}/cmake/ckpt/ckptConfigVersion.cmake ${LIBDIR}/cmake/ckpt/ckptTargets.cmake
          ${LIBDIR}/cmake/ckpt/ckptDependencies.cmake ${LIBDIR}/pkgconfig/ckpt.pc
          ${LIBDIR}/pkgconfig/ckpt-header-only.pc)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "not installed: ${PREFIX}/${f}")
  endif()
endforeach()
