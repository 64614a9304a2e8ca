# cmake -DPREFIX=<install prefix> -DLIBDIR=<lib dir> -DCXX=<compiler> -DSOURCE=<main.cpp> -DWORK_DIR=<dir> -P pkg_config.cmake
# Builds the consumer with nothing but `pkg-config --cflags --libs ckpt` (the compiled
# part linked), then with `ckpt-header-only` (the headers alone), and runs both.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  message(STATUS "$ ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc})")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

foreach(pkg ckpt ckpt-header-only)
  run("${PKG_CONFIG}" --cflags ${pkg})
  separate_arguments(cflags UNIX_COMMAND "${out}")
  run("${PKG_CONFIG}" --libs ${pkg})
  separate_arguments(libs UNIX_COMMAND "${out}")
  run("${CXX}" -std=c++20 -O0 -Wall -Wextra -Werror ${cflags} "${SOURCE}" -o "${WORK_DIR}/consumer-${pkg}" ${libs})
  run("${WORK_DIR}/consumer-${pkg}" "${WORK_DIR}/run-${pkg}")
endforeach()
