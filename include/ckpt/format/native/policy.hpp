// ckpt/format/native/policy.hpp — the declaration of ckpt::native, the default format's
// policy type; its definitions are in format/native.hpp.
//
// Declared apart so that the format registry can list the native format without
// compiling it: the registry adds it when the list is first used, and only a program
// that opens or saves a checkpoint instantiates that.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

namespace ckpt {

class Index;
struct Snapshot;
struct SaveOptions;
struct SnapshotLeaf;
namespace io {
class KvStore;
}
namespace storage {
struct Location;
}

struct native {
  static constexpr const char* name = "native";
  // Writes streamed leaves (ckpt::convert) through buffers within SaveOptions::max_memory.
  static constexpr bool writes_streams = true;
  static void write(const Snapshot& s, const std::filesystem::path& dir, const SaveOptions& o);
  static bool detect(const std::filesystem::path& dir);
  // The commit marker is written last, after every data file and the manifest are durable.
  static bool is_committed(const std::filesystem::path& dir);
  static std::shared_ptr<const Index> open(const std::filesystem::path& dir);
  // Through the storage concept (what the publish step and open_index use on object
  // stores): the data objects streamed from the leaves and read by coalesced ranges
  // (Storage::get_many), not through a key-value store.
  static bool detect_in(const io::KvStore& kv);
  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& o);
  static std::shared_ptr<const Index> open_location(const storage::Location& loc);
  // Sharded leaves (boxes of global arrays) are stored by this format alone.
  static constexpr bool stores_boxes = true;
  // Throws unless a Sharded leaf's box lies inside its global shape (dir names the checkpoint).
  static void check_box(const std::string& dir, const SnapshotLeaf& leaf);
};

}  // namespace ckpt
