// ckpt/format/tensorflow.hpp — ckpt::tensorflow: TensorFlow checkpoints (tensor bundles V2), read-only.
//
// Registered, so restore<T>, restore_tree, metadata and the CLI (`ckpt convert
// model.ckpt-0 out --to native`) take a checkpoint prefix, PREFIX.index, a directory
// with a `checkpoint` state file or a SavedModel directory. Paths are the variable
// names split at '/'. ckpt::tensorflow::convert (tf/convert.hpp) maps the names to a train
// state's paths, as t5x's convert_from_tf_checkpoint does.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
      const auto prefix = detail::tf::find_prefix(p);
      if (!prefix) return false;
      const auto index = detail::tf_bundle::with_suffix(*prefix, ".index");
      if (!detail::tf_bundle::is_file(index)) return detail::tf_bundle::is_file(*prefix);  // V1: open() explains
      io::File f = io::File::open_read(index);
      const std::uint64_t n = f.size(index);
      if (n < detail::tf::table::footer_size) return false;
      std::byte tail[8];
      io::pread_exact(f, tail, n - 8, index);
      return detail::tf::table::TableReader::has_magic(tail);
    } catch (const std::exception&) {
      return false;
    }
  }
  // TensorFlow writes the index last (after the data shards), then the state file.
  static bool is_committed(const std::filesystem::path& p) { return detect(p); }
  static std::shared_ptr<const Index> open(const std::filesystem::path& p) { return detail::tf::open_bundle(p); }

  // TF variable names to a train state's paths (format/tf/convert.hpp), as t5x's
  // convert_from_tf_checkpoint does: tensorflow::convert(prefix, tensorflow::rules({...})).
  using Translator = detail::tf::Translator;
  using Rule = detail::tf::Rule;
  using ConvertOptions = detail::tf::ConvertOptions;
  static Translator rules(std::vector<Rule> table) { return detail::tf::rules(std::move(table)); }
  static std::optional<std::string> variable_name(const Path& p) { return detail::tf::variable_name(p); }
  static Tree restore_tree(const std::filesystem::path& prefix_or_dir, const RestoreOptions& opts = {}) {
    return detail::tf::restore_tree(prefix_or_dir, opts);
  }
  static Tree convert(const std::filesystem::path& prefix_or_dir, const Translator& translate,
                      const ConvertOptions& opts = {}) {
    return detail::tf::convert(prefix_or_dir, translate, opts);
  }
  template <class T>
  static T restore(const std::filesystem::path& prefix_or_dir, const Translator& translate,
                   const ConvertOptions& copts = {}, const RestoreOptions& ropts = {}) {
    return detail::tf::restore<T>(prefix_or_dir, translate, copts, ropts);
  }
  // The bundle's Index, its paths the variable names split at '/'.
  static std::shared_ptr<const Index> open_bundle(const std::filesystem::path& prefix_or_dir) {
    return detail::tf::open_bundle(prefix_or_dir);
  }
};
static_assert(readable_format<tensorflow>);

// The earlier spelling of ckpt::tensorflow's functions.
namespace [[deprecated("ckpt::tf is now ckpt::tensorflow (tensorflow::convert, tensorflow::rules, ...)")]] tf {
using detail::tf::ConvertOptions;
using detail::tf::convert;
using detail::tf::open_bundle;
using detail::tf::restore;
using detail::tf::restore_tree;
using detail::tf::Rule;
using detail::tf::rules;
using detail::tf::Translator;
using detail::tf::variable_name;
}  // namespace detail::tf

// After the formats that write (their directories may hold files named `checkpoint`).
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool tensorflow_registered = register_format<tensorflow>(50);
#endif

}  // namespace ckpt
