// ckpt/all.hpp — every part of ckpt: the core, migrations, the manager, the interop
// formats and the memory storage (not S3 or GCS, which need libcurl: <ckpt/storage/s3.hpp>,
// <ckpt/storage/gcs.hpp>, CMake targets ckpt::s3, ckpt::gcs). Convenient, and the slowest to compile; include the parts you use instead
// (see ckpt.hpp). single_include/ckpt/all.hpp is this header in the single-header edition.
#pragma once

#include <ckpt/ckpt.hpp>
#include <ckpt/migrate.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/formats.hpp>
#include <ckpt/leaf/stats.hpp>
#include <ckpt/storage/memory.hpp>
#include <ckpt/storage/posix.hpp>
