# cmake -DCKPT_BINARY_DIR=<ckpt build> -DPREFIX=<dir> -P install.cmake
# Installs ckpt from its build tree into a fresh PREFIX.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${CKPT_BINARY_DIR}" --prefix "${PREFIX}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${CKPT_BINARY_DIR} --prefix ${PREFIX} failed: ${rc}")
endif()
foreach(f include/ckpt/ckpt.hpp share/cmake/ckpt/ckptConfig.cmake
          share/cmake/ckpt/ckptConfigVersion.cmake share/cmake/ckpt/ckptTargets.cmake
          share/cmake/ckpt/ckptDependencies.cmake share/pkgconfig/ckpt.pc)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "not installed: ${PREFIX}/${f}")
  endif()
endforeach()
