// ckpt/format/tensorflow.hpp — ckpt::tensorflow: TensorFlow checkpoints (tensor bundles V2), read-only.
//
// Registered, so restore<T>, restore_tree, metadata and the CLI (`ckpt convert
// model.ckpt-0 out --to native`) take a checkpoint prefix, PREFIX.index, a directory
// with a `checkpoint` state file or a SavedModel directory. Paths are the variable
// names split at '/'. ckpt::tf::convert (tf/convert.hpp) maps the names to a train
// state's paths, as t5x's convert_from_tf_checkpoint does.
#pragma once

#include <filesystem>
#include <memory>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/format/tf/bundle.hpp>
#include <ckpt/format/tf/convert.hpp>

namespace ckpt {

struct tensorflow {
  static constexpr const char* name = "tensorflow";
  // A prefix whose .index ends in the table magic, or a directory that resolves to one.
  // A directory's `checkpoint` file must be TF's text state file (t5x and Flax steps
  // hold a msgpack file of that name).
  static bool detect(const std::filesystem::path& p) {
    try {
      const auto prefix = tf::find_prefix(p);
      if (!prefix) return false;
      const auto index = detail::tf_bundle::with_suffix(*prefix, ".index");
      if (!detail::tf_bundle::is_file(index)) return detail::tf_bundle::is_file(*prefix);  // V1: open() explains
      io::File f = io::File::open_read(index);
      const std::uint64_t n = f.size(index);
      if (n < tf::table::footer_size) return false;
      std::byte tail[8];
      io::pread_exact(f, tail, n - 8, index);
      return tf::table::TableReader::has_magic(tail);
    } catch (const std::exception&) {
      return false;
    }
  }
  // TensorFlow writes the index last (after the data shards), then the state file.
  static bool is_committed(const std::filesystem::path& p) { return detect(p); }
  static std::shared_ptr<const Index> open(const std::filesystem::path& p) { return tf::open_bundle(p); }
};
static_assert(readable_format<tensorflow>);

// After the formats that write (their directories may hold files named `checkpoint`).
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool tensorflow_registered = register_format<tensorflow>(50);
#endif

}  // namespace ckpt
