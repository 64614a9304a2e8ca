// ckpt/format/interop/weight_map.hpp — the index of a Hugging Face sharded checkpoint,
// as model.safetensors.index.json and pytorch_model.bin.index.json both hold it:
// {"weight_map": {tensor name: file name}, ...}. Every file must be a plain name in the
// index's own directory (no path, no "..": nothing outside the checkpoint is opened),
// and an index names at most max_weight_map_files files.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <ckpt/detail/quote.hpp>
#include <ckpt/error.hpp>
#include <ckpt/io/untrusted.hpp>

namespace ckpt::detail::interop {

inline constexpr std::size_t max_weight_map_files = 100'000;

struct WeightMap {
  std::map<std::string, std::string> file_of;  // tensor name -> the file holding it
  std::vector<std::string> files;              // each file once, sorted
};

inline bool plain_file_name(const std::string& s) {
  return !s.empty() && s.size() < 256 && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// The weight_map of an index file's bytes; index_name names the file in messages.
inline WeightMap parse_weight_map(std::span<const std::byte> raw, const std::string& index_name,
                                  const std::string& checkpoint) {
  const auto j = parse_json(raw, checkpoint, "", index_name);
  const auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (wm == j.end() || !wm->is_object())
    throw CorruptCheckpointError(checkpoint, "", index_name + " has no weight_map object");
  WeightMap out;
  std::set<std::string> files;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string() || !plain_file_name(it.value().get<std::string>()))
      throw CorruptCheckpointError(checkpoint, safe_text(it.key(), 200),
                                   "weight_map entry is not a file name inside the checkpoint directory");
    const auto& f = it.value().get_ref<const std::string&>();
    out.file_of[it.key()] = f;
    if (files.insert(f).second && files.size() > max_weight_map_files)
      throw CorruptCheckpointError(checkpoint, "", "weight_map names too many files");
  }
  out.files.assign(files.begin(), files.end());
  return out;
}

}  // namespace ckpt::detail::interop
