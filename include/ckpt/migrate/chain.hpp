// ckpt/migrate/chain.hpp — ckpt::chain(m12, m23, ...): migrations from version to
// version, so a checkpoint written by any version restores into the newest.
#pragma once

#include <tuple>
#include <type_traits>

#include <ckpt/migrate/migration.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

template <class... M>
  requires(sizeof...(M) >= 1)
class Chain {
 public:
  using migrations = std::tuple<M...>;
  static constexpr std::size_t count = sizeof...(M);
  // Version I: the old type of migration I, or the newest type for I == count.
  template <std::size_t I>
  using version = std::conditional_t<(I < count), typename std::tuple_element_t<(I < count ? I : 0), migrations>::old_type,
                                     typename std::tuple_element_t<count - 1, migrations>::new_type>;
  using new_type = version<count>;

  explicit constexpr Chain(M... m) : m_(std::move(m)...) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      static_assert((std::is_same_v<typename std::tuple_element_t<I, migrations>::new_type, version<I + 1>> && ...),
                    CKPT_STATIC_ERROR("ckpt::chain: each migration's new type must be the next migration's old type",
                                      "List the migrations oldest first: chain(m12, m23, ...), with no version skipped.",
                                      CKPT_NAMED_ABOVE));
    }(std::make_index_sequence<count - 1>{});
  }

  // Migrates a value of version I to the newest version.
  template <std::size_t I>
  new_type apply_from(const version<I>& v) const {
    if constexpr (I == count) return v;
    else return apply_from<I + 1>(std::get<I>(m_).apply(v));
  }

 private:
  std::tuple<M...> m_;
};

template <class... M>
constexpr Chain<M...> chain(M... m) {
  return Chain<M...>(std::move(m)...);
}

}  // namespace ckpt
