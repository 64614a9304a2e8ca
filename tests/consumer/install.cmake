# cmake -DCKPT_BINARY_DIR=<ckpt build> -DPREFIX=<dir> -DLIBDIR=<lib dir> -P install.cmake
# Installs ckpt from its build tree into a fresh PREFIX.
file(REMOVE_RECURSE "${PREFIX}")
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
