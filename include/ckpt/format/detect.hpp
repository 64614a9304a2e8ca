// ckpt/format/detect.hpp — open_index(path): whichever format path holds, detected.
//
// Tried in order: native, Orbax, t5x (and Flax msgpack inside a directory), zarr; a
// regular file is a Flax msgpack file. restore, restore_tree, metadata and the command
// line tool all open checkpoints through here.
#pragma once

#include <filesystem>

#include <ckpt/format/flax.hpp>
#include <ckpt/format/native.hpp>
#include <ckpt/format/orbax.hpp>
#include <ckpt/format/t5x.hpp>
#include <ckpt/format/zarr.hpp>

namespace ckpt {

static_assert(format_policy<flax_msgpack>);
static_assert(format_policy<t5x>);
static_assert(format_policy<orbax>);
static_assert(format_policy<zarr_v2>);

// The name of the format at path ("native", "orbax", "t5x", "zarr", "flax"), or "" when none.
inline std::string detect_format(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::is_regular_file(st)) return flax_msgpack::detect(path) ? flax_msgpack::name : "";
  if (!std::filesystem::is_directory(st)) return "";
  if (native::detect(path)) return native::name;
  if (orbax::detect(path)) return orbax::name;
  if (t5x::detect(path)) return t5x::name;
  if (zarr_v2::detect(path)) return zarr_v2::name;
  return "";
}

// Opens whatever format path holds (a directory, or a Flax msgpack file).
inline std::shared_ptr<const Index> open_index(const std::filesystem::path& path) {
  const std::string f = detect_format(path);
  if (f == native::name) return native::open(path);
  if (f == orbax::name) return orbax::open(path);
  if (f == t5x::name) return t5x::open(path);
  if (f == zarr_v2::name) return zarr_v2::open(path);
  if (f == flax_msgpack::name) return flax_msgpack::open(path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return native::open(path);  // its error says what is missing
  if (!std::filesystem::exists(path, ec)) throw Error(path.string(), "", "no checkpoint here (nothing exists at this path)");
  throw Error(path.string(), "", "not a checkpoint in any format ckpt reads (native, Orbax, t5x, zarr, Flax msgpack)");
}

}  // namespace ckpt
