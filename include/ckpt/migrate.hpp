// ckpt/migrate.hpp — restore a checkpoint written by an older version of a struct
// into the new one, through a migration or a chain of them.
//
//   auto m = ckpt::migration<StateV1, StateV2>(ckpt::rename<"opt.mu", "opt.m">);
//   StateV2 s = ckpt::restore<StateV2>(dir, m);
//
// The checkpoint must hold Old's schema (recorded at save; checked at run time,
// naming the first differing path), or New's (then no migration is needed).
#pragma once

#include <filesystem>
#include <string>

#include <ckpt/migrate/chain.hpp>
#include <ckpt/migrate/migration.hpp>
#include <ckpt/restore.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

namespace detail {
// The first path where two schemas differ, described for a message ("" when equal).
inline std::string schema_difference(const Schema& held, const Schema& expected) {
  const std::size_t n = std::min(held.size(), expected.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!(held[i] == expected[i]))
      return held[i].path + " (" + held[i].dtype + ", rank " + std::to_string(held[i].rank) + " in checkpoint; " +
             expected[i].path + " (" + expected[i].dtype + ", rank " + std::to_string(expected[i].rank) +
             ") expected)";
  if (held.size() > n) return held[n].path + " (in checkpoint, not expected)";
  if (expected.size() > n) return expected[n].path + " (expected, not in checkpoint)";
  return "";
}

template <class T>
T restore_version(std::shared_ptr<const Index> index, const RestoreOptions& opts) {
  T value{};
  RestoreOptions whole = opts;
  whole.subtree.clear();  // a migration moves whole values
  restore_from_index(std::move(index), value, whole, false);
  return value;
}
}  // namespace detail

// Restores New from a checkpoint holding Old's (or New's) schema.
template <class New, class Old, class... R>
New restore(const std::filesystem::path& dir, const Migration<Old, New, R...>& m, const RestoreOptions& opts = {}) {
  auto index = open_index(dir);
  const Schema& held = index->info().schema;
  if (held == schema_of<New>()) return detail::restore_version<New>(std::move(index), opts);
  const Schema old_schema = schema_of<Old>();
  if (held != old_schema)
    throw Error(index->checkpoint(), "",
                "the checkpoint does not hold the schema of " + std::string(detail::type_name<Old>()) +
                    " (the migration's old type): first difference at " + detail::schema_difference(held, old_schema));
  return m.apply(detail::restore_version<Old>(std::move(index), opts));
}

// Restores the chain's newest version from a checkpoint written by any version in it.
template <class New, class... M>
  requires(sizeof...(M) >= 1)
New restore(const std::filesystem::path& dir, const Chain<M...>& c, const RestoreOptions& opts = {}) {
  using C = Chain<M...>;
  static_assert(std::is_same_v<New, typename C::new_type>,
                CKPT_STATIC_ERROR("ckpt::restore<New>(dir, chain): New must be the chain's newest type",
                                  "Restore into the new type of the chain's last migration, or add the migration to New.",
                                  CKPT_NAMED_ABOVE));
  auto index = open_index(dir);
  const Schema& held = index->info().schema;
  std::optional<New> out;
  // Newest first: a checkpoint already in the newest version needs no migration.
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (void)((!out && held == schema_of<typename C::template version<C::count - I>>()
                ? (out.emplace(c.template apply_from<C::count - I>(
                       detail::restore_version<typename C::template version<C::count - I>>(index, opts))),
                   true)
                : false) ||
           ...);
  }(std::make_index_sequence<C::count + 1>{});
  if (!out)
    throw Error(index->checkpoint(), "",
                "the checkpoint holds the schema of none of the chain's versions; against the newest, the first "
                "difference is at " +
                    detail::schema_difference(held, schema_of<New>()));
  return std::move(*out);
}

// restore_into counterparts.
template <class New, class Old, class... R>
void restore_into(const std::filesystem::path& dir, New& target, const Migration<Old, New, R...>& m,
                  const RestoreOptions& opts = {}) {
  target = restore<New>(dir, m, opts);
}
template <class New, class... M>
  requires(sizeof...(M) >= 1)
void restore_into(const std::filesystem::path& dir, New& target, const Chain<M...>& c, const RestoreOptions& opts = {}) {
  target = restore<New>(dir, c, opts);
}

}  // namespace ckpt
