// ckpt/storage/memory.hpp — ckpt::memory: whole checkpoints in this process's memory.
//
//   #include <ckpt/storage/memory.hpp>
//   ckpt::save("mem://fast/step_100", state);          // no disk I/O at all
//   auto s = ckpt::restore<State>("mem://fast/step_100");
//   ckpt::CheckpointManager<State, ckpt::memory> tier("fast", {.max_to_keep = 1});
//
// For tests and as the fast tier of a two-tier setup (Orbax's emergency checkpointing
// keeps a recent step in RAM and older ones on persistent storage; see
// examples/two_tier_manager.cpp). mem://NAME/KEY: NAME is a store (like a bucket),
// created on first use and shared by every user in the process;
// memory_storage_clear(NAME) empties it. Objects are immutable byte strings swapped in whole
// under a mutex, so a put is atomic; the commit marker (storage/object_store.hpp) is
// what makes a checkpoint visible. Nothing survives the process.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ckpt/storage/object_store.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt {

namespace storage {

class MemoryStorage final : public Storage {
 public:
  explicit MemoryStorage(std::string name) : name_(std::move(name)) {}

  std::string root_url() const override { return "mem://" + name_; }

  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override {
    std::size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    auto obj = std::make_shared<std::vector<std::byte>>(total);
    std::size_t at = 0;
    for (const auto& p : pieces) {
      if (!p.empty()) std::memcpy(obj->data() + at, p.data(), p.size());
      at += p.size();
    }
    std::lock_guard lock(mu_);
    objects_[key] = std::move(obj);
  }

  void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    const auto obj = find(key);
    if (!obj) throw Error(url(key), "", "no such object");
    if (offset > obj->size() || dst.size() > obj->size() - offset)
      throw CorruptCheckpointError(url(key), "", "object ends at byte " + std::to_string(obj->size()) + ", before the " +
                                                     std::to_string(offset + dst.size()) + " bytes expected (truncated?)");
    if (!dst.empty()) std::memcpy(dst.data(), obj->data() + offset, dst.size());
  }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    const auto obj = find(key);
    return obj ? std::optional<std::uint64_t>(obj->size()) : std::nullopt;
  }

  std::vector<std::string> list(const std::string& prefix) const override {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix); ++it)
      out.push_back(it->first);
    return out;
  }

  std::vector<Listed> list_sizes(const std::string& prefix) const override {
    std::lock_guard lock(mu_);
    std::vector<Listed> out;
    for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix); ++it)
      out.push_back({it->first, it->second->size()});
    return out;
  }

  void remove(const std::vector<std::string>& keys) override {
    std::lock_guard lock(mu_);
    for (const auto& k : keys) objects_.erase(k);
  }

  // Bytes held, for tests and for sizing a fast tier.
  std::size_t bytes() const {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& [k, v] : objects_) n += v->size();
    return n;
  }

  // The store of that name (created on first use), shared by the whole process.
  static std::shared_ptr<MemoryStorage> named(const std::string& name) {
    auto& reg = registry();
    std::lock_guard lock(reg.mu);
    auto& slot = reg.stores[name];
    if (!slot) slot = std::make_shared<MemoryStorage>(name);
    return slot;
  }
  // Empties the store, as the end of the process would (objects are freed once no
  // reader holds them). The store itself stays, so that managers and URLs keep
  // agreeing on what it holds.
  static void drop(const std::string& name) {
    std::shared_ptr<MemoryStorage> store;
    {
      auto& reg = registry();
      std::lock_guard lock(reg.mu);
      const auto it = reg.stores.find(name);
      if (it == reg.stores.end()) return;
      store = it->second;
    }
    std::lock_guard lock(store->mu_);
    store->objects_.clear();
  }

 private:
  struct Registry {
    std::mutex mu;
    std::map<std::string, std::shared_ptr<MemoryStorage>> stores;
  };
  static Registry& registry() {
    static Registry r;
    return r;
  }
  std::shared_ptr<const std::vector<std::byte>> find(const std::string& key) const {
    std::lock_guard lock(mu_);
    const auto it = objects_.find(key);
    return it == objects_.end() ? nullptr : it->second;
  }

  std::string name_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const std::vector<std::byte>>> objects_;
};

inline Location open_memory_url(const std::string& url) {
  const ParsedUrl u = parse_url(url);
  return Location{MemoryStorage::named(u.bucket), u.prefix, url};
}

inline const bool memory_registered = register_url_scheme(object_scheme("mem", &open_memory_url));

}  // namespace storage

// The storage policy: CheckpointManager<State, ckpt::memory> takes "name/run" as mem://name/run.
struct memory {
  static constexpr std::string_view storage_scheme = "mem";
};

// Frees every checkpoint in the mem://name store.
inline void memory_storage_clear(const std::string& name) { storage::MemoryStorage::drop(name); }

}  // namespace ckpt
