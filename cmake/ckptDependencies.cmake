# What ckpt's headers need on a consumer's include path and link line, found
# in one place. Included by the top-level CMakeLists.txt and, once installed,
# by ckptConfig.cmake, so `add_subdirectory(ckpt)` and
# `find_package(ckpt CONFIG)` consumers get the same dependencies.
#
# Defines the imported INTERFACE targets ckpt_deps::boost, ckpt_deps::msgpack,
# ckpt_deps::zstd, ckpt_deps::xxhash and ckpt_deps::snappy (include dirs are SYSTEM, so warnings
# in third-party headers never fail a -Werror build), and finds xtensor,
# nlohmann_json, ZLIB and Threads. Sets:
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

# --- zstd and xxHash: plain find, Debian's zstd CMake package is not portable -----
find_path(CKPT_ZSTD_INCLUDE_DIR NAMES zstd.h)
find_library(CKPT_ZSTD_LIBRARY NAMES zstd)
if(NOT CKPT_ZSTD_INCLUDE_DIR OR NOT CKPT_ZSTD_LIBRARY)
  _ckpt_dep_missing("zstd (Debian: libzstd-dev)")
endif()
find_path(CKPT_XXHASH_INCLUDE_DIR NAMES xxhash.h)
find_library(CKPT_XXHASH_LIBRARY NAMES xxhash)
if(NOT CKPT_XXHASH_INCLUDE_DIR OR NOT CKPT_XXHASH_LIBRARY)
  _ckpt_dep_missing("xxHash (Debian: libxxhash-dev)")
endif()
# blosc, lz4 and bz2: zarr chunk compressors (zarr-python's default is blosc)
find_path(CKPT_BLOSC_INCLUDE_DIR NAMES blosc.h)
find_library(CKPT_BLOSC_LIBRARY NAMES blosc)
if(NOT CKPT_BLOSC_INCLUDE_DIR OR NOT CKPT_BLOSC_LIBRARY)
  _ckpt_dep_missing("blosc (Debian: libblosc-dev)")
endif()
find_path(CKPT_LZ4_INCLUDE_DIR NAMES lz4.h)
find_library(CKPT_LZ4_LIBRARY NAMES lz4)
if(NOT CKPT_LZ4_INCLUDE_DIR OR NOT CKPT_LZ4_LIBRARY)
  _ckpt_dep_missing("lz4 (Debian: liblz4-dev)")
endif()
find_path(CKPT_BZ2_INCLUDE_DIR NAMES bzlib.h)
find_library(CKPT_BZ2_LIBRARY NAMES bz2)
if(NOT CKPT_BZ2_INCLUDE_DIR OR NOT CKPT_BZ2_LIBRARY)
  _ckpt_dep_missing("bzip2 (Debian: libbz2-dev)")
endif()
mark_as_advanced(CKPT_BLOSC_INCLUDE_DIR CKPT_BLOSC_LIBRARY CKPT_LZ4_INCLUDE_DIR CKPT_LZ4_LIBRARY
  CKPT_BZ2_INCLUDE_DIR CKPT_BZ2_LIBRARY)
# snappy: the blocks of TensorFlow checkpoint indexes (format/tf/table.hpp), C API
find_path(CKPT_SNAPPY_INCLUDE_DIR NAMES snappy-c.h)
find_library(CKPT_SNAPPY_LIBRARY NAMES snappy)
if(NOT CKPT_SNAPPY_INCLUDE_DIR OR NOT CKPT_SNAPPY_LIBRARY)
  _ckpt_dep_missing("snappy (Debian: libsnappy-dev)")
endif()
mark_as_advanced(CKPT_BOOST_INCLUDE_DIR CKPT_MSGPACK_INCLUDE_DIR
  CKPT_ZSTD_INCLUDE_DIR CKPT_ZSTD_LIBRARY CKPT_XXHASH_INCLUDE_DIR CKPT_XXHASH_LIBRARY
  CKPT_SNAPPY_INCLUDE_DIR CKPT_SNAPPY_LIBRARY)

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
  add_library(ckpt_deps::zstd INTERFACE IMPORTED)
  set_target_properties(ckpt_deps::zstd PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CKPT_ZSTD_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CKPT_ZSTD_LIBRARY}")
  add_library(ckpt_deps::xxhash INTERFACE IMPORTED)
  set_target_properties(ckpt_deps::xxhash PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CKPT_XXHASH_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CKPT_XXHASH_LIBRARY}")
  foreach(_lib BLOSC LZ4 BZ2)
    string(TOLOWER "${_lib}" _name)
    add_library(ckpt_deps::${_name} INTERFACE IMPORTED)
    set_target_properties(ckpt_deps::${_name} PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${CKPT_${_lib}_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${CKPT_${_lib}_LIBRARY}")
  endforeach()
  add_library(ckpt_deps::snappy INTERFACE IMPORTED)
  set_target_properties(ckpt_deps::snappy PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CKPT_SNAPPY_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CKPT_SNAPPY_LIBRARY}")
endif()

# What ckpt (and the test-only single-header variant) link to.
set(CKPT_DEPS_TARGETS
  ckpt_deps::boost ckpt_deps::msgpack xtensor nlohmann_json::nlohmann_json
  ckpt_deps::zstd ZLIB::ZLIB ckpt_deps::xxhash ckpt_deps::blosc ckpt_deps::lz4 ckpt_deps::bz2
  ckpt_deps::snappy Threads::Threads)
