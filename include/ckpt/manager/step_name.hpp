// ckpt/manager/step_name.hpp — step numbers to directory names and back.
//
// step_prefix "" gives "42", "checkpoint_" gives "checkpoint_42"; a fixed length of 6
// gives "000042". Parsing accepts the prefix followed by decimal digits of any length,
// so a root written with another fixed length still reads (as Orbax does). The one
// parser of step names: the manager, ckpt::flax's checkpoint files and `ckpt ls` use it.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt {

// The step a run of decimal digits spells; none when it is empty, holds anything but
// digits, or overflows int64.
inline std::optional<std::int64_t> parse_step_digits(std::string_view digits) {
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

struct StepNaming {
  std::string prefix;
  int fixed_length = 0;

  std::string name(std::int64_t step) const {
    std::string digits = std::to_string(step);
    if (fixed_length > 0 && digits.size() < static_cast<std::size_t>(fixed_length))
      digits.insert(0, static_cast<std::size_t>(fixed_length) - digits.size(), '0');
    return prefix + digits;
  }

  std::optional<std::int64_t> parse(std::string_view name) const {
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return std::nullopt;
    return parse_step_digits(name.substr(prefix.size()));
  }

  // The step of a name whose prefix is not known: its trailing digits ("checkpoint_42",
  // "step-7", "42"), as `ckpt ls` reads a root written by anything.
  static std::optional<std::int64_t> trailing_step(std::string_view name) {
    const auto last = name.find_last_not_of("0123456789");
    return parse_step_digits(last == std::string_view::npos ? name : name.substr(last + 1));
  }

  // (step, path) of every entry of dir whose name this naming parses, by step.
  std::vector<std::pair<std::int64_t, std::filesystem::path>> list(const std::filesystem::path& dir) const {
    std::vector<std::pair<std::int64_t, std::filesystem::path>> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (const auto step = parse(it->path().filename().string())) out.emplace_back(*step, it->path());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace ckpt
