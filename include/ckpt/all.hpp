// ckpt/all.hpp — every part of ckpt: the core, migrations, the manager and the interop
// formats. Convenient, and the slowest to compile; include the parts you use instead
// (see ckpt.hpp). single_include/ckpt/ckpt.hpp is this header made into one file.
#pragma once

#include <ckpt/ckpt.hpp>
#include <ckpt/migrate.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/formats.hpp>
