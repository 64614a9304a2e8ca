// ckpt/t5x_checkpoints.hpp — the path helpers of t5x/checkpoints.py: where a step's
// checkpoint lives, which steps exist, which steps still hold a dataset checkpoint.
//
// t5x names a step's directory checkpoint_<step> (zero-padded with
// step_format_fixed_length) and puts its msgpack file `checkpoint` inside; the
// data-iterator state ("dataset checkpoint") is saved beside it (t5x: train_ds-*
// files; a ckpt manager: the item ManagerOptions::dataset_item). Step names are parsed
// by the manager's one parser (manager/step_name.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/manager/items.hpp>
#include <ckpt/manager/step_name.hpp>

namespace ckpt::t5x_checkpoints {

namespace fs = std::filesystem;

inline constexpr const char* step_prefix = "checkpoint_";
inline constexpr const char* checkpoint_file = "checkpoint";

// <checkpoints_dir>/checkpoint_<step>, the step zero-padded to step_format_fixed_length digits.
inline fs::path get_checkpoint_dir(const fs::path& checkpoints_dir, std::int64_t step,
                                   std::optional<int> step_format_fixed_length = std::nullopt) {
  return checkpoints_dir / StepNaming{step_prefix, step_format_fixed_length.value_or(0)}.name(step);
}

// (checkpoints_dir, step) of a path .../checkpoint_<step>; an Error when the last
// component is not of that form (t5x raises ValueError).
inline std::pair<fs::path, std::int64_t> get_step_from_checkpoint_dir(const fs::path& checkpoint_dir) {
  fs::path p = checkpoint_dir;
  if (p.filename().empty()) p = p.parent_path();  // "checkpoint_5/"
  const auto step = StepNaming{step_prefix, 0}.parse(p.filename().string());
  if (!step) throw Error(checkpoint_dir.string(), "", "not a t5x checkpoint directory (checkpoint_<step>)");
  return {p.parent_path(), *step};
}

// Steps of the checkpoint_<step> directories holding a `checkpoint` file, ascending.
inline std::vector<std::int64_t> all_steps(const fs::path& checkpoints_dir) {
  std::vector<std::int64_t> out;
  std::error_code ec;
  const StepNaming naming{step_prefix, 0};
  for (fs::directory_iterator it(checkpoints_dir, ec), end; !ec && it != end; it.increment(ec))
    if (const auto s = naming.parse(it->path().filename().string()); s && fs::exists(it->path() / checkpoint_file))
      out.push_back(*s);
  std::sort(out.begin(), out.end());
  return out;
}

inline std::optional<std::int64_t> latest_step(const fs::path& checkpoints_dir) {
  const auto s = all_steps(checkpoints_dir);
  if (s.empty()) return std::nullopt;
  return s.back();
}

// The checkpoint file to restore, as t5x's find_checkpoint: a file is itself; a
// directory with a step is that step's directory's `checkpoint`; a directory without a
// step is its own `checkpoint` (a checkpoint_<step> directory) or, failing that, the
// latest step's. An Error when the file does not exist.
inline fs::path find_checkpoint(const fs::path& path, std::optional<std::int64_t> step = std::nullopt) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(path, ec)) {
    if (step) {
      file = get_checkpoint_dir(path, *step) / checkpoint_file;
      if (!fs::exists(file, ec)) {  // the step may be written zero-padded
        const StepNaming naming{step_prefix, 0};
        for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
          if (naming.parse(it->path().filename().string()) == step) file = it->path() / checkpoint_file;
      }
    } else if (fs::exists(path / checkpoint_file, ec)) {
      file = path / checkpoint_file;
    } else if (const auto latest = latest_step(path)) {
      return find_checkpoint(path, *latest);
    } else {
      file = path / checkpoint_file;
    }
  }
  if (!fs::exists(file, ec))
    throw Error(path.string(), "",
                "no t5x checkpoint" + (step ? " for step " + std::to_string(*step) : std::string()) + " (" +
                    file.string() + " does not exist)");
  return file;
}

// Does the step directory hold a dataset checkpoint: t5x's train_ds-* files, or a ckpt
// manager's item `item` (items/<item>/ or items/<item>.json)?
inline bool has_dataset_checkpoint(const fs::path& step_dir, const std::string& item = "dataset") {
  std::error_code ec;
  const fs::path items = step_dir / detail::manager::items_dir;
  if (fs::exists(items / item, ec) || fs::exists(items / (item + ".json"), ec)) return true;
  for (fs::directory_iterator it(step_dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().starts_with("train_ds-")) return true;
  return false;
}

// Steps whose directory (named <step_prefix><step>) holds a dataset checkpoint, ascending.
inline std::vector<std::int64_t> all_dataset_checkpoint_steps(const fs::path& checkpoints_dir,
                                                              const std::string& item = "dataset",
                                                              const std::string& prefix = step_prefix) {
  std::vector<std::int64_t> out;
  std::error_code ec;
  const StepNaming naming{prefix, 0};
  for (fs::directory_iterator it(checkpoints_dir, ec), end; !ec && it != end; it.increment(ec))
    if (const auto s = naming.parse(it->path().filename().string()); s && has_dataset_checkpoint(it->path(), item))
      out.push_back(*s);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ckpt::t5x_checkpoints
