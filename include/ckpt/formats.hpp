// ckpt/formats.hpp — every interop format: Orbax (with OCDBT), t5x, zarr v2 and v3, Flax msgpack,
// safetensors, PyTorch files, and TensorFlow checkpoints (read-only).
//
// Opt-in: <ckpt/ckpt.hpp> reads and writes the native format only, so that a program
// that never meets another format does not compile their readers. Including this header
// (or one format's header) registers the format: restore, restore_tree, metadata and the
// manager then detect it by themselves.
#pragma once

#include <ckpt/ckpt.hpp>

#include <ckpt/format/flax.hpp>
#include <ckpt/format/orbax.hpp>
#include <ckpt/format/pytorch.hpp>
#include <ckpt/format/safetensors.hpp>
#include <ckpt/format/t5x.hpp>
#include <ckpt/format/tensorflow.hpp>
#include <ckpt/format/zarr.hpp>
#include <ckpt/format/zarr3.hpp>
#include <ckpt/flax_checkpoints.hpp>
#include <ckpt/t5x_checkpoints.hpp>

