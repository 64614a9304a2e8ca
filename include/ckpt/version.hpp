// ckpt/version.hpp — the library's version, recorded in every checkpoint it writes.
#pragma once

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0

namespace ckpt {
inline constexpr const char* library_version = "0.1.0";
}
