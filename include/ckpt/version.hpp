// ckpt/version.hpp — the library's version, recorded in every checkpoint it writes.
// The one place it is written: CMakeLists.txt and meson.build read the three numbers here.
#pragma once

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0

#define CKPT_DETAIL_STRINGIFY_(x) #x
#define CKPT_DETAIL_STRINGIFY(x) CKPT_DETAIL_STRINGIFY_(x)
#define CKPT_VERSION_STRING                                                                      \
  CKPT_DETAIL_STRINGIFY(CKPT_VERSION_MAJOR) "." CKPT_DETAIL_STRINGIFY(CKPT_VERSION_MINOR) "." \
      CKPT_DETAIL_STRINGIFY(CKPT_VERSION_PATCH)

namespace ckpt {
inline constexpr const char* library_version = CKPT_VERSION_STRING;
}  // namespace ckpt
