# cmake -DPREFIX=<install prefix> -DCXX=<compiler> -DSOURCE=<main.cpp> -DWORK_DIR=<dir> -P pkg_config.cmake
# Builds the consumer with nothing but `pkg-config --cflags --libs ckpt`, then runs it.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/share/pkgconfig")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  message(STATUS "$ ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc})")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run("${PKG_CONFIG}" --cflags ckpt)
separate_arguments(cflags UNIX_COMMAND "${out}")
run("${PKG_CONFIG}" --libs ckpt)
separate_arguments(libs UNIX_COMMAND "${out}")
run("${CXX}" -std=c++20 -O0 -Wall -Wextra -Werror ${cflags} "${SOURCE}" -o "${WORK_DIR}/consumer" ${libs})
run("${WORK_DIR}/consumer" "${WORK_DIR}/run")
