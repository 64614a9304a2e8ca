// ckpt/manager/step_name.hpp — step numbers to directory names and back.
//
// step_prefix "" gives "42", "checkpoint_" gives "checkpoint_42"; a fixed length of 6
// gives "000042". Parsing accepts the prefix followed by decimal digits of any length,
// so a root written with another fixed length still reads (as Orbax does).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt::detail::manager {

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
    const std::string_view digits = name.substr(prefix.size());
    for (char c : digits)
      if (c < '0' || c > '9') return std::nullopt;
    std::int64_t step = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return step;
  }
};

}  // namespace ckpt::detail::manager
