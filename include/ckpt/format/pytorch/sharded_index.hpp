// ckpt/format/pytorch/sharded_index.hpp — Hugging Face's sharded PyTorch checkpoint:
// pytorch_model.bin.index.json, whose {"weight_map": {name: file}} names the torch.save
// file holding each tensor, read as one checkpoint (as safetensors' index is). Every
// file it names must lie in the index's directory, and every tensor must be in the file
// the map says.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/format/interop/weight_map.hpp>
#include <ckpt/format/pytorch/reader.hpp>

namespace ckpt {

namespace detail::pytorch {

// Hugging Face's sharded checkpoint: the index's weight_map names each tensor's file;
// open_shard(file) gives its Source, nullopt when it is missing.
template <class OpenShard>
std::shared_ptr<const Index> open_sharded_with(std::span<const std::byte> raw, const std::string& index_name,
                                               const std::string& checkpoint, OpenShard open_shard) {
  const interop::WeightMap map = interop::parse_weight_map(raw, index_name, checkpoint);
  const auto& weight_map = map.file_of;
  const auto& files = map.files;
  std::vector<std::string_view> names;
  for (const auto& kv : weight_map) names.emplace_back(kv.first);
  const interop::FlatNames paths(names, '.');
  interop::IndexBuilder b(checkpoint);
  Loader l(b, checkpoint);
  std::vector<Opened> opened;  // each shard's parse, alive while its entries are added
  opened.reserve(files.size());
  std::size_t before = 0;
  for (const auto& f : files) {
    std::optional<Source> src = open_shard(f);
    if (!src) throw CorruptCheckpointError(checkpoint, "", "shard " + quote_for_message(f) + " named by the weight_map is missing");
    opened.push_back(open_archive(std::move(*src), checkpoint));
    l.add(opened.back(), &paths);
    for (std::size_t i = before; i < l.top_names().size(); ++i) {
      const std::string& name = l.top_names()[i];
      const auto it = weight_map.find(name);
      if (it == weight_map.end() || it->second != f)
        throw CorruptCheckpointError(checkpoint, ckpt::detail::safe_text(name, 200),
                                     f + " holds tensor " + quote_for_message(name) + ", which the weight_map of " +
                                         index_name + " puts elsewhere or nowhere");
    }
    before = l.top_names().size();
  }
  if (l.top_names().size() != weight_map.size())
    throw CorruptCheckpointError(checkpoint, "",
                                 "the weight_map names " + std::to_string(weight_map.size()) + " tensors but the shards hold " +
                                     std::to_string(l.top_names().size()));
  return b.build(info("pytorch-sharded"));
}

inline std::shared_ptr<const Index> open_sharded(const fs::path& index_path, const std::string& checkpoint) {
  const fs::path dir = index_path.parent_path().empty() ? fs::path(".") : index_path.parent_path();
  const auto raw = io::read_file(index_path, max_index_json_bytes);
  return open_sharded_with(raw, index_path.filename().string(), checkpoint, [&](const std::string& f) -> std::optional<Source> {
    std::error_code ec;
    if (!fs::is_regular_file(dir / f, ec)) return std::nullopt;
    return local_source(dir / f);
  });
}

inline bool is_index_json(const fs::path& p) { return p.filename().string().ends_with(".bin.index.json"); }

}  // namespace detail::pytorch

}  // namespace ckpt
