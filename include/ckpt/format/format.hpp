// ckpt/format/format.hpp — what a storage format is: the concepts every format policy meets.
//
// A format turns a Snapshot into objects and objects into an Index; it never sees the
// C++ type being saved, nor where the objects go: it writes them through the storage
// concept (a staging directory, S3, memory), and the publish step (save.hpp) makes them
// a checkpoint. Formats that only read (TensorFlow bundles) meet readable_format;
// formats that also write meet format_policy and can be given to save<Format> and to
// the CheckpointManager.
#pragma once

#include <concepts>
#include <filesystem>
#include <memory>

#include <ckpt/index.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/storage/storage.hpp>

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
    readable_format<F> && requires(const Snapshot& s, const storage::Location& l, const SaveOptions& o) {
      // Writes every leaf of s as objects under l (which the caller publishes), through
      // l.storage alone: put for small objects, create for streamed ones.
      F::write_to(s, l, o);
    };

}  // namespace ckpt
