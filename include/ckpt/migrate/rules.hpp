// ckpt/migrate/rules.hpp — the rules a migration between two versions of a struct
// takes where a leaf's source is not simply the same path in the old version.
//
//   ckpt::rename<"opt.mu", "opt.first_moment">  a subtree or leaf moved
//   ckpt::fill<"schedule.warmup">(fn)           computed from the whole old value: fn(const Old&)
//   ckpt::transform<"params.kernel">(fn)        the old value at the same path, changed: fn(const OldLeaf&)
#pragma once

#include <utility>

#include <ckpt/detail/fixed_string.hpp>

namespace ckpt {

namespace migrate {
enum class rule_kind { rename, fill, transform };

template <detail::fixed_string From, detail::fixed_string To>
struct rename_rule {
  static constexpr rule_kind kind = rule_kind::rename;
  static constexpr auto source = From;
  static constexpr auto target = To;
};

template <detail::fixed_string Path, class F>
struct fill_rule {
  static constexpr rule_kind kind = rule_kind::fill;
  static constexpr auto target = Path;
  F fn;
};

template <detail::fixed_string Path, class F>
struct transform_rule {
  static constexpr rule_kind kind = rule_kind::transform;
  static constexpr auto source = Path;
  static constexpr auto target = Path;
  F fn;
};
}  // namespace migrate

template <detail::fixed_string From, detail::fixed_string To>
inline constexpr migrate::rename_rule<From, To> rename{};

template <detail::fixed_string Path, class F>
constexpr migrate::fill_rule<Path, F> fill(F fn) {
  return {std::move(fn)};
}

template <detail::fixed_string Path, class F>
constexpr migrate::transform_rule<Path, F> transform(F fn) {
  return {std::move(fn)};
}

}  // namespace ckpt
