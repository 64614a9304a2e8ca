// ckpt/storage/kvstore.hpp — the objects under a storage::Location as an io::KvStore:
// what every format but the native one reads a checkpoint on an object store through.
//
// A committed checkpoint does not change, so the store lists its objects once, with
// their sizes (S3: one LIST request per thousand objects), and answers every size and
// listing from that; a read is one ranged get of exactly the bytes asked for. Nothing is
// downloaded whole and nothing is written anywhere: a restore of one subtree fetches the
// formats' metadata and that subtree's values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::storage {

class LocationKv final : public io::KvStore {
 public:
  explicit LocationKv(Location loc) : loc_(std::move(loc)) {
    const std::string dir = loc_.prefix.empty() ? std::string() : loc_.prefix + "/";
    for (auto& o : loc_.storage->list_sizes(dir)) sizes_.emplace(o.key.substr(dir.size()), o.size);
  }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    const auto it = sizes_.find(key);
    if (it == sizes_.end()) return std::nullopt;
    return it->second;
  }

  void read(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    const auto n = size(key);
    if (!n) throw Error(describe(), key, "missing");
    if (offset > *n || dst.size() > *n - offset)
      throw CorruptCheckpointError(loc_.url, "", "object " + key.substr(0, 200) + " holds " + std::to_string(*n) +
                                                     " bytes, fewer than needed");
    if (!dst.empty()) loc_.storage->get(loc_.key(key), offset, dst);
  }

  std::vector<std::string> list(const std::string& prefix, std::size_t max) const override {
    std::vector<std::string> out;
    for (auto it = sizes_.lower_bound(prefix); it != sizes_.end() && it->first.starts_with(prefix); ++it) {
      if (out.size() >= max) throw Error(describe(), prefix, "more than " + std::to_string(max) + " objects");
      out.push_back(it->first);
    }
    return out;
  }

  std::string describe() const override { return loc_.url; }

 private:
  Location loc_;
  std::map<std::string, std::uint64_t, std::less<>> sizes_;
};

}  // namespace ckpt::storage
