// ckpt/manager/step_metadata.hpp — what a manager stores with each step, beside the state.
//
// <step>/_CHECKPOINT_METADATA is a JSON object (the file name and most keys are
// Orbax's):
//   {"step": 42, "format": "native",
//    "init_timestamp_nsecs": ..., "commit_timestamp_nsecs": ...,   // since the Unix epoch
//    "metrics": {"eval/loss": 0.31}, "custom_metadata": {...},
//    "items": {"dataset": "tree", "config": "json"},
//    "finite": true}                    // ManagerOptions::guard_non_finite only
// It is written into the staging directory before the commit, so it appears with the step.
// Non-finite metrics are not stored (the manager drops them; null reads back as absent).
// "finite" is false for a step the guard found NaN or infinities in (its metrics or its
// leaves; the counts are in "save_stats"); a step without the key (saved without the
// guard, by Orbax, by an older ckpt) counts as finite.
//
// A step's metrics are read as Orbax's CheckpointManager reads them: the "metrics" of
// this file where it is present and not empty, else the step's Orbax metrics item, the
// JSON file <step>/metrics/metrics. Orbax 0.11 itself writes the metrics only there and
// "metrics": {} here, in both of its layouts: the v0 API's JsonCheckpointHandler(filename=
// "metrics") and the v1 API's MetricsHandler (which on reading also accepts
// metrics/data.json and metrics/metadata) write the same file. A step ckpt's manager
// saves in Orbax's layout (a format that writes item_handlers here: ckpt::orbax) keeps
// its metrics the same way, so that Orbax's own manager ranks it by best_fn.
#pragma once

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/io/untrusted.hpp>
#include <ckpt/error.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/retain/record.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt::detail::manager {

inline constexpr const char* step_metadata_file = "_CHECKPOINT_METADATA";
// A metadata file larger than this is refused as corrupt (it holds a few numbers and the user's JSON).
inline constexpr std::uint64_t max_step_metadata_bytes = std::uint64_t{64} << 20;

// Orbax's metrics item: the directory <step>/metrics holding the JSON file `metrics`
// (v1's reader also takes the JSON item's other names, data.json and metadata).
inline constexpr const char* orbax_metrics_item = "metrics";
inline constexpr std::array<const char*, 3> orbax_metrics_files = {"metrics", "data.json", "metadata"};
// The item_handlers entry Orbax 0.11's v0 manager writes for it (the fixture's).
inline constexpr const char* orbax_metrics_handler =
    "orbax.checkpoint._src.handlers.json_checkpoint_handler.JsonCheckpointHandler";
// A metrics item larger than this is refused as corrupt (a few named numbers).
inline constexpr std::uint64_t max_metrics_item_bytes = std::uint64_t{1} << 20;

struct StepMetadata {
  std::int64_t step = 0;
  std::string format;
  std::int64_t init_timestamp_nsecs = 0;
  std::int64_t commit_timestamp_nsecs = 0;
  Metrics metrics{};
  // Read: the file's "metrics" was present and not empty (even without a number in it):
  // Orbax then takes it and never looks at the metrics item.
  bool metrics_given = false;
  // Read: item_handlers names a "metrics" item (Orbax wrote the step with one).
  bool names_metrics_item = false;
  nlohmann::json custom_metadata{};  // null when none was given
  std::map<std::string, std::string> items{};
  nlohmann::json save_stats{};  // SaveStats::to_json(); null when absent
  bool finite = true;            // "finite"; true when absent
  bool finite_given = false;     // write "finite" (the guard was on)

  std::chrono::system_clock::time_point init_time() const {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(init_timestamp_nsecs)));
  }
};

inline std::int64_t now_nsecs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline nlohmann::json to_json(const StepMetadata& m) {
  nlohmann::json j = {{"step", m.step},
                      {"format", m.format},
                      {"init_timestamp_nsecs", m.init_timestamp_nsecs},
                      {"commit_timestamp_nsecs", m.commit_timestamp_nsecs},
                      {"metrics", nlohmann::json::object()},
                      {"custom_metadata", m.custom_metadata},
                      {"items", m.items}};
  for (const auto& [k, v] : m.metrics) j["metrics"][k] = v;  // NaN and infinities become null
  if (!m.save_stats.is_null()) j["save_stats"] = m.save_stats;
  if (m.finite_given) j["finite"] = m.finite;
  return j;
}

// The numbers of a metrics JSON value, by name: an object's members by key, nested
// objects and lists joined with '/' ({"eval": {"loss": 0.3}} gives "eval/loss", as the
// flat key "eval/loss" does); strings, booleans and null are no metric. The nesting was
// bounded when the JSON was parsed (detail::parse_json).
inline void add_metrics(const nlohmann::json& j, const std::string& name, Metrics& out) {
  const auto below = [&](const std::string& key) { return name.empty() ? key : name + "/" + key; };
  if (j.is_number()) {
    if (!name.empty()) out[name] = j.get<double>();
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) add_metrics(v, below(k), out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) add_metrics(j[i], below(std::to_string(i)), out);
  }
}

// The metrics of an Orbax metrics item from its file's bytes (`file` relative to the
// step `where`): a JSON object, or a CorruptCheckpointError naming the step and file.
inline Metrics parse_metrics_item(const std::vector<std::byte>& bytes, const std::string& where,
                                  const std::string& file) {
  const auto j = detail::parse_json({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, where, "", file);
  if (!j.is_object())
    throw CorruptCheckpointError(where, "", file + " is not a JSON object of metrics (it is " +
                                                std::string(j.type_name()) + ")");
  Metrics out;
  add_metrics(j, "", out);
  return out;
}

// Writes <step>/_CHECKPOINT_METADATA through the storage, into a step not yet
// committed (a staging directory, an object-store prefix without its marker). A
// format that writes the same file itself (ckpt::orbax, whose layout it is) keeps its
// keys; the manager's keys are merged over them. In Orbax's layout (the format's file
// has item_handlers) the metrics go where Orbax 0.11 writes them: the item
// metrics/metrics, named in item_handlers, with "metrics": {} and an empty
// custom_metadata object left as the format wrote them.
inline void write_step_metadata(const storage::Location& step, const StepMetadata& m) {
  const std::string key = step.key(step_metadata_file);
  nlohmann::json out = to_json(m);
  if (const auto bytes = step.storage->read_all(key, max_step_metadata_bytes)) {
    nlohmann::json merged;
    try {
      merged = detail::parse_json({reinterpret_cast<const char*>(bytes->data()), bytes->size()}, step.url, "",
                                  step_metadata_file);
    } catch (const Error&) {  // not the format's JSON after all: the manager's replaces it
    }
    if (merged.is_object()) {
      const auto handlers = merged.find("item_handlers");
      if (handlers != merged.end() && handlers->is_object()) {
        out.erase("metrics");
        if (m.custom_metadata.is_null()) out.erase("custom_metadata");
        nlohmann::json item = nlohmann::json::object();
        for (const auto& [k, v] : m.metrics)
          if (std::isfinite(v)) item[k] = v;
        if (!item.empty()) {  // as Orbax: no metrics, no item
          const std::string text = item.dump();
          step.storage->put(step.key(std::string(orbax_metrics_item) + "/" + orbax_metrics_files[0]),
                            std::as_bytes(std::span(text)));
          (*handlers)[orbax_metrics_item] = orbax_metrics_handler;
        }
      }
      merged.update(out);
      out = std::move(merged);
    }
    step.storage->remove({key});  // the step is not visible yet: no reader sees the gap
  }
  const std::string text = out.dump(1);
  step.storage->put(key, std::as_bytes(std::span(text)));
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
    if (const auto it = j.find("metrics"); it != j.end() && !it->is_null() && !it->empty()) {
      m.metrics_given = true;
      add_metrics(*it, "", m.metrics);
    }
    if (const auto it = j.find("item_handlers"); it != j.end() && it->is_object())
      m.names_metrics_item = it->contains(orbax_metrics_item);
    if (const auto it = j.find("custom_metadata"); it != j.end()) m.custom_metadata = *it;
    if (const auto it = j.find("items"); it != j.end() && !it->is_null())
      m.items = it->get<std::map<std::string, std::string>>();
    if (const auto it = j.find("save_stats"); it != j.end() && it->is_object()) m.save_stats = *it;
    if (const auto it = j.find("finite"); it != j.end() && it->is_boolean()) {
      m.finite = it->get<bool>();
      m.finite_given = true;
    }
  } catch (const std::exception& e) {
    throw CorruptCheckpointError(where, "", std::string(step_metadata_file) + " is not valid step metadata: " +
                                                detail::safe_text(e.what(), 200));
  }
  return m;
}

}  // namespace ckpt::detail::manager
