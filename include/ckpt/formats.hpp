// ckpt/formats.hpp — every interop format: Orbax, t5x, zarr v2, Flax msgpack and safetensors,
// and TensorFlow checkpoints (read-only).
//
// Opt-in: <ckpt/ckpt.hpp> reads and writes the native format only, so that a program
// that never meets another format does not compile their readers. Including this header
// (or one format's header) registers the format: restore, restore_tree, metadata and the
// manager then detect it by themselves.
#pragma once

#include <ckpt/ckpt.hpp>

#include <ckpt/format/flax.hpp>
#include <ckpt/format/orbax.hpp>
#include <ckpt/format/safetensors.hpp>
#include <ckpt/format/t5x.hpp>
#include <ckpt/format/tensorflow.hpp>
#include <ckpt/format/zarr.hpp>
#include <ckpt/flax_checkpoints.hpp>
#include <ckpt/t5x_checkpoints.hpp>

namespace ckpt {
static_assert(format_policy<flax_msgpack>);
static_assert(format_policy<t5x>);
static_assert(format_policy<orbax>);
static_assert(format_policy<zarr_v2>);
static_assert(format_policy<safetensors>);
}  // namespace ckpt
