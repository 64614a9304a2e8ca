# What ckpt's headers need on a consumer's include path and link line, found
# in one place. Included by the top-level CMakeLists.txt and, once installed,
# by ckptConfig.cmake, so `add_subdirectory(ckpt)` and
# `find_package(ckpt CONFIG)` consumers get the same dependencies.
#
# Defines the imported INTERFACE targets ckpt_deps::boost and ckpt_deps::msgpack
# (include dirs are SYSTEM, so warnings in third-party headers never fail a -Werror
# build), finds zstd, xxHash, blosc, lz4 and snappy through pkg-config
# (PkgConfig::CKPT_ZSTD, ...), bzip2 and zlib through CMake's modules, and xtensor,
# nlohmann_json and Threads through their packages. Sets:
#   CKPT_DEPS_FOUND              TRUE when everything was found
#   CKPT_DEPS_NOT_FOUND_MESSAGE  what is missing, and where to get it
#   CKPT_BOOST_INCLUDE_DIR, CKPT_MSGPACK_INCLUDE_DIR (cache)
#
# Boost >= 1.81 (PFR with field names, Hana) and msgpack-cxx are looked up
# first under CKPT_DEPS_PREFIX (default: <ckpt source>/.deps, filled by
# tools/install-deps.sh), then in CKPT_DEPS_HINTS (set by an installed
# ckptConfig.cmake to where the build found them), then in system paths.

set(CKPT_DEPS_FOUND TRUE)
set(CKPT_DEPS_NOT_FOUND_MESSAGE "")
macro(_ckpt_dep_missing what)
  set(CKPT_DEPS_FOUND FALSE)
  string(APPEND CKPT_DEPS_NOT_FOUND_MESSAGE "  ${what}\n")
endmacro()

set(_ckpt_hint_dirs)
if(CKPT_DEPS_PREFIX)
  list(APPEND _ckpt_hint_dirs "${CKPT_DEPS_PREFIX}/usr/include" "${CKPT_DEPS_PREFIX}/include")
endif()
list(APPEND _ckpt_hint_dirs ${CKPT_DEPS_HINTS})

# --- Boost >= 1.81, headers only -------------------------------------------------
find_path(CKPT_BOOST_INCLUDE_DIR NAMES boost/pfr.hpp
  HINTS ${_ckpt_hint_dirs}
  DOC "Directory holding boost/pfr.hpp and boost/hana.hpp (Boost >= 1.81)")
if(CKPT_BOOST_INCLUDE_DIR AND EXISTS "${CKPT_BOOST_INCLUDE_DIR}/boost/version.hpp")
  file(STRINGS "${CKPT_BOOST_INCLUDE_DIR}/boost/version.hpp" _ckpt_boost_line
       REGEX "^#define BOOST_VERSION [0-9]+")
  string(REGEX REPLACE "^#define BOOST_VERSION ([0-9]+).*" "\\1" _ckpt_boost_version "${_ckpt_boost_line}")
  if(NOT _ckpt_boost_version OR _ckpt_boost_version LESS 108100)
    _ckpt_dep_missing("Boost >= 1.81 headers: ${CKPT_BOOST_INCLUDE_DIR} has BOOST_VERSION ${_ckpt_boost_version}; run tools/install-deps.sh or set CKPT_BOOST_INCLUDE_DIR")
  endif()
else()
  _ckpt_dep_missing("Boost >= 1.81 headers (boost/pfr.hpp): run tools/install-deps.sh, or set CKPT_DEPS_PREFIX / CKPT_BOOST_INCLUDE_DIR")
endif()

# --- msgpack-cxx, headers only (ckpt defines MSGPACK_NO_BOOST) -------------------
find_path(CKPT_MSGPACK_INCLUDE_DIR NAMES msgpack.hpp
  HINTS ${_ckpt_hint_dirs}
  DOC "Directory holding msgpack.hpp (msgpack-cxx)")
if(NOT CKPT_MSGPACK_INCLUDE_DIR)
  _ckpt_dep_missing("msgpack-cxx headers (msgpack.hpp): run tools/install-deps.sh, or set CKPT_DEPS_PREFIX / CKPT_MSGPACK_INCLUDE_DIR")
endif()

# --- zstd, xxHash, blosc, lz4 (zarr's chunk compressors), snappy (the blocks of
# TensorFlow checkpoint indexes): their pkg-config files, as imported targets ----
find_package(PkgConfig QUIET)
macro(_ckpt_pkg var module debian)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CKPT_${var} QUIET IMPORTED_TARGET ${module})
  endif()
  if(NOT CKPT_${var}_FOUND)
    _ckpt_dep_missing("${module}, found by pkg-config (Debian: pkg-config ${debian})")
  endif()
endmacro()
_ckpt_pkg(ZSTD libzstd libzstd-dev)
_ckpt_pkg(XXHASH libxxhash libxxhash-dev)
_ckpt_pkg(BLOSC blosc libblosc-dev)
_ckpt_pkg(LZ4 liblz4 liblz4-dev)
_ckpt_pkg(SNAPPY snappy libsnappy-dev)
# --- bzip2 (a zarr chunk compressor): CMake's own module, as zlib below --------
find_package(BZip2 QUIET)
if(NOT BZIP2_FOUND)
  _ckpt_dep_missing("bzip2 (Debian: libbz2-dev)")
endif()
mark_as_advanced(CKPT_BOOST_INCLUDE_DIR CKPT_MSGPACK_INCLUDE_DIR)

# --- CMake packages ------------------------------------------------------------
find_package(xtensor CONFIG QUIET)
if(NOT xtensor_FOUND)
  _ckpt_dep_missing("xtensor + xtl (Debian: libxtensor-dev xtl-dev)")
endif()
find_package(nlohmann_json 3.2 CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  _ckpt_dep_missing("nlohmann_json >= 3.2 (Debian: nlohmann-json3-dev)")
endif()
find_package(ZLIB QUIET)
if(NOT ZLIB_FOUND)
  _ckpt_dep_missing("zlib (Debian: zlib1g-dev)")
endif()
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads QUIET)
if(NOT Threads_FOUND)
  _ckpt_dep_missing("Threads (pthread)")
endif()

# --- imported targets ckpt's INTERFACE target links to -------------------------
if(CKPT_DEPS_FOUND AND NOT TARGET ckpt_deps::boost)
  add_library(ckpt_deps::boost INTERFACE IMPORTED)
  set_target_properties(ckpt_deps::boost PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CKPT_BOOST_INCLUDE_DIR}")
  add_library(ckpt_deps::msgpack INTERFACE IMPORTED)
  set_target_properties(ckpt_deps::msgpack PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CKPT_MSGPACK_INCLUDE_DIR}")
endif()

# What ckpt (and the test-only single-header variant) link to.
set(CKPT_DEPS_TARGETS
  ckpt_deps::boost ckpt_deps::msgpack xtensor nlohmann_json::nlohmann_json
  PkgConfig::CKPT_ZSTD ZLIB::ZLIB PkgConfig::CKPT_XXHASH PkgConfig::CKPT_BLOSC PkgConfig::CKPT_LZ4 BZip2::BZip2
  PkgConfig::CKPT_SNAPPY Threads::Threads)
