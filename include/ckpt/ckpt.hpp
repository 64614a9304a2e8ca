// ckpt/ckpt.hpp — save and restore C++ training state (the native format).
//
//   ckpt::save("/tmp/run/1", state);
//   auto s = ckpt::restore<TrainState>("/tmp/run/1");
//
// The pipeline, in the order data flows on save: tree/ (reflect a struct into
// paths), leaf/ (a value into dtype, shape and bytes), snapshot.hpp, format/
// (bytes into files), io/ (files, fsync, atomic commit); and back through index.hpp.
//
// Opt-in, so that a program pays to compile only what it uses:
//   <ckpt/manager.hpp>  CheckpointManager: numbered steps in a root directory, with exec/
//                       (sync or async saves) and retain/ (which steps to save and keep)
//   <ckpt/migrate.hpp>  restore into a new version of a struct (migrations, chains)
//   <ckpt/formats.hpp>  the interop formats: Orbax, t5x, zarr v2, Flax msgpack
//   <ckpt/src.hpp>      the compiled part, for CKPT_SEPARATE_COMPILATION builds
#pragma once

#include <ckpt/version.hpp>
#include <ckpt/error.hpp>
#include <ckpt/options.hpp>

#include <ckpt/leaf/dtype.hpp>
#include <ckpt/leaf/half.hpp>
#include <ckpt/leaf/convert.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/leaf/scalar.hpp>
#include <ckpt/leaf/string.hpp>
#include <ckpt/leaf/sequence.hpp>
#include <ckpt/leaf/xtensor.hpp>
#include <ckpt/leaf/random_engine.hpp>
#include <ckpt/leaf/lazy.hpp>
#include <ckpt/leaf/sharded.hpp>

#include <ckpt/tree/path.hpp>
#include <ckpt/tree/reflect.hpp>
#include <ckpt/tree/node.hpp>
#include <ckpt/tree/walk.hpp>
#include <ckpt/tree/schema.hpp>

#include <ckpt/snapshot.hpp>
#include <ckpt/snapshot_edit.hpp>
#include <ckpt/index.hpp>
#include <ckpt/restore/fill.hpp>
#include <ckpt/restore/tree.hpp>
#include <ckpt/format/format.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/save.hpp>
#include <ckpt/restore.hpp>
#include <ckpt/convert.hpp>
