// ckpt/format/format.hpp — what a storage format is: the concepts every format policy meets.
//
// A format turns a Snapshot into files and files into an Index; it never sees the C++
// type being saved. Formats that only read (TensorFlow bundles) meet readable_format;
// formats that also write meet format_policy and can be given to save<Format> and to
// the CheckpointManager.
#pragma once

#include <concepts>
#include <filesystem>
#include <memory>

#include <ckpt/index.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

template <class F>
concept readable_format = requires(const std::filesystem::path& p) {
  // A short lower-case name: in error messages, `ckpt convert --to NAME`, the manager's step metadata.
  { F::name } -> std::convertible_to<const char*>;
  // Does p hold a checkpoint in this format? Cheap (looks at a few names or bytes), never throws.
  { F::detect(p) } -> std::convertible_to<bool>;
  // Is the checkpoint at p complete: its commit marker, or whatever the format uses to say so.
  // The manager lists only committed steps. Never throws.
  { F::is_committed(p) } -> std::convertible_to<bool>;
  // Reads the format's metadata (no array data) into an Index; an Error naming p when it cannot.
  { F::open(p) } -> std::convertible_to<std::shared_ptr<const Index>>;
};

template <class F>
concept format_policy =
    readable_format<F> && requires(const Snapshot& s, const std::filesystem::path& p, const SaveOptions& o) {
      // Writes every leaf of s into the staging directory p (which the caller publishes).
      F::write(s, p, o);
    };

}  // namespace ckpt
