// ckpt/manager/step_metadata.hpp — what a manager stores with each step, beside the state.
//
// <step>/_CHECKPOINT_METADATA is a JSON object (the file name and most keys are
// Orbax's):
//   {"step": 42, "format": "native",
//    "init_timestamp_nsecs": ..., "commit_timestamp_nsecs": ...,   // since the Unix epoch
//    "metrics": {"eval/loss": 0.31}, "custom_metadata": {...},
//    "items": {"dataset": "tree", "config": "json"}}
// It is written into the staging directory before the commit, so it appears with the step.
// Non-finite metrics are not stored (the manager drops them; null reads back as absent).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include <ckpt/io/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/retain/record.hpp>

namespace ckpt::detail::manager {

inline constexpr const char* step_metadata_file = "_CHECKPOINT_METADATA";
// A metadata file larger than this is refused as corrupt (it holds a few numbers and the user's JSON).
inline constexpr std::uint64_t max_step_metadata_bytes = std::uint64_t{64} << 20;

struct StepMetadata {
  std::int64_t step = 0;
  std::string format;
  std::int64_t init_timestamp_nsecs = 0;
  std::int64_t commit_timestamp_nsecs = 0;
  Metrics metrics{};
  nlohmann::json custom_metadata{};  // null when none was given
  std::map<std::string, std::string> items{};
  nlohmann::json save_stats{};  // SaveStats::to_json(); null when absent

  std::chrono::system_clock::time_point init_time() const {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(init_timestamp_nsecs)));
  }
};

inline std::int64_t now_nsecs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string encode(const StepMetadata& m) {
  nlohmann::json j = {{"step", m.step},
                      {"format", m.format},
                      {"init_timestamp_nsecs", m.init_timestamp_nsecs},
                      {"commit_timestamp_nsecs", m.commit_timestamp_nsecs},
                      {"metrics", nlohmann::json::object()},
                      {"custom_metadata", m.custom_metadata},
                      {"items", m.items}};
  for (const auto& [k, v] : m.metrics) j["metrics"][k] = v;  // NaN and infinities become null
  if (!m.save_stats.is_null()) j["save_stats"] = m.save_stats;
  return j.dump(1);
}

// Writes <dir>/_CHECKPOINT_METADATA into a staging directory. A format that writes
// the same file itself (ckpt::orbax, whose layout it is) keeps its keys; the
// manager's keys are merged over them.
inline void write_step_metadata(const std::filesystem::path& dir, const StepMetadata& m) {
  const std::filesystem::path file = dir / step_metadata_file;
  std::string text = encode(m);
  std::error_code ec;
  if (std::filesystem::exists(file, ec)) {
    const auto bytes = io::read_file(file, max_step_metadata_bytes);
    nlohmann::json merged;
    try {
      merged = detail::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, dir.string(), "",
                                  step_metadata_file);
    } catch (const Error&) {  // not the format's JSON after all: the manager's replaces it
    }
    if (merged.is_object()) {
      merged.update(nlohmann::json::parse(text));
      text = merged.dump(1);
    }
    std::filesystem::remove(file);  // the staging directory is not visible yet: no reader sees the gap
  }
  io::write_file_synced(file, std::as_bytes(std::span(text)));
}

// A 64-bit integer field of untrusted JSON: an integer in range, or a float holding one
// (converting anything else would be undefined behaviour); `fallback` when absent.
inline std::int64_t int64_field(const nlohmann::json& j, const char* key, std::optional<std::int64_t> fallback) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (!fallback) throw std::runtime_error(std::string("no \"") + key + "\"");
    return *fallback;
  }
  if (it->is_number_unsigned() && it->get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(it->get<std::uint64_t>());
  if (it->is_number_integer() && !it->is_number_unsigned()) return it->get<std::int64_t>();
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (d >= -9.2e18 && d <= 9.2e18) return static_cast<std::int64_t>(d);  // false for NaN
  }
  throw std::runtime_error(std::string("\"") + key + "\" is not a 64-bit integer");
}

// Reads <dir>/_CHECKPOINT_METADATA; any problem is a CorruptCheckpointError naming dir.
// The JSON is parsed with its nesting bounded (detail::parse_json): custom_metadata is
// copied and handed to the user, who may dump() it.
// parse_step_metadata: the same from the file's bytes (a step on an object store);
// `where` names the step.
inline StepMetadata parse_step_metadata(const std::vector<std::byte>& bytes, const std::string& where);
inline StepMetadata read_step_metadata(const std::filesystem::path& dir) {
  std::vector<std::byte> bytes;
  try {
    bytes = io::read_file(dir / step_metadata_file, max_step_metadata_bytes);
  } catch (const Error& e) {
    throw CorruptCheckpointError(dir.string(), "", std::string(step_metadata_file) + " cannot be read: " + e.what());
  }
  return parse_step_metadata(bytes, dir.string());
}
inline StepMetadata parse_step_metadata(const std::vector<std::byte>& bytes, const std::string& where) {
  const auto j = detail::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, where, "",
                                    step_metadata_file);
  StepMetadata m;
  try {
    if (!j.is_object()) throw std::runtime_error("not a JSON object");
    // Orbax's own file has no "step" (the directory name says it)
    m.step = int64_field(j, "step", -1);
    m.format = j.value("format", std::string());
    m.init_timestamp_nsecs = int64_field(j, "init_timestamp_nsecs", 0);
    m.commit_timestamp_nsecs = int64_field(j, "commit_timestamp_nsecs", 0);
    if (const auto it = j.find("metrics"); it != j.end() && !it->is_null())
      for (const auto& [k, v] : it->items())
        if (v.is_number()) m.metrics[k] = v.get<double>();
    if (const auto it = j.find("custom_metadata"); it != j.end()) m.custom_metadata = *it;
    if (const auto it = j.find("items"); it != j.end() && !it->is_null())
      m.items = it->get<std::map<std::string, std::string>>();
    if (const auto it = j.find("save_stats"); it != j.end() && it->is_object()) m.save_stats = *it;
  } catch (const std::exception& e) {
    throw CorruptCheckpointError(where, "", std::string(step_metadata_file) + " is not valid step metadata: " +
                                                detail::safe_text(e.what(), 200));
  }
  return m;
}

}  // namespace ckpt::detail::manager
