// ckpt/migrate/migration.hpp — ckpt::migration<Old, New>(rules...): how a value of an
// old version of a struct becomes a value of the new version, checked at compile time.
//
// Every leaf of New must have a source: a rule (rules.hpp) or, failing that, the same
// path in Old holding a leaf that converts without loss (same dtype, or a widening
// such as float32 -> float64, with a compatible rank). Leaves of Old that New lacks
// are dropped. A leaf with no source, a rule naming a path a type lacks, or a leaf
// that does not convert fails to compile, naming the path.
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

#include <ckpt/leaf/codec.hpp>
#include <ckpt/migrate/rules.hpp>
#include <ckpt/migrate/type_path.hpp>
#include <ckpt/tree/node.hpp>
#include <ckpt/tree/schema.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

namespace migrate {

// The name of each template is the error message; the compiler prints the path in it.
template <class New, class Path>
struct CKPT_ERROR_migration_this_leaf_of_the_new_type_has_no_source_in_the_old_type;
template <class Path, class OldLeaf, class NewLeaf>
struct CKPT_ERROR_migration_this_leaf_does_not_convert_from_the_old_type_to_the_new_type;
template <class Old, class Path>
struct CKPT_ERROR_migration_a_rule_names_a_path_that_the_old_type_lacks;
template <class New, class Path>
struct CKPT_ERROR_migration_a_rule_names_a_path_that_the_new_type_lacks;
template <class Path>
struct CKPT_ERROR_migration_a_rename_path_cannot_contain_a_wildcard;

struct absent {};  // "no counterpart in Old"

// A leaf in memory, read by a codec: how one leaf type converts into another.
class MemoryLeafSource final : public LeafSource {
 public:
  MemoryLeafSource(const LeafBytes& b, std::string path) : b_(b), path_(std::move(path)) {}
  dtype type() const override { return b_.type; }
  const Shape& shape() const override { return b_.shape; }
  std::uint64_t byte_length() const override { return b_.view.size(); }
  void read_into(std::span<std::byte> dst) const override { std::copy(b_.view.begin(), b_.view.end(), dst.begin()); }
  const std::string& checkpoint() const override {
    static const std::string name = "<migration>";
    return name;
  }
  std::string path() const override { return path_; }
  bool check_dynamic_shapes() const override { return false; }

 private:
  const LeafBytes& b_;
  std::string path_;
};

template <class O, class N>
consteval bool leaf_converts() {
  if constexpr (std::is_same_v<O, N>) {
    return true;
  } else {
    constexpr cast_kind c = classify_cast(leaf_codec<O>::type, leaf_codec<N>::type);
    constexpr int ro = leaf_codec<O>::rank, rn = leaf_codec<N>::rank;
    return (c == cast_kind::exact || c == cast_kind::lossless) && (ro == rn || ro < 0 || rn < 0);
  }
}

}  // namespace migrate

template <class Old, class New, class... Rules>
class Migration {
 public:
  using old_type = Old;
  using new_type = New;

  explicit constexpr Migration(Rules... rules) : rules_(std::move(rules)...) {
    (check_rule<Rules>(), ...);
  }

  // The new value made from an old one.
  New apply(const Old& old) const {
    New out{};
    node<"", New, "", Old, false>(out, &old, old);
    return out;
  }

 private:
  template <class R>
  static consteval void check_rule() {
    using namespace migrate;
    constexpr std::string_view target = R::target.view();
    if constexpr (!has_path<New>(target)) {
      static_assert(node::always_false<R>,
                    CKPT_STATIC_ERROR("a migration rule names a path the new type lacks",
                                      "Correct the rule's path: dotted field names of the new type, e.g. \"opt.mu\".",
                                      "The next error (CKPT_ERROR_...) names the new type and the path."));
      (void)sizeof(CKPT_ERROR_migration_a_rule_names_a_path_that_the_new_type_lacks<New, detail::printable<R::target>>);
    }
    if constexpr (R::kind != rule_kind::fill) {
      constexpr std::string_view source = R::source.view();
      if constexpr (!has_path<Old>(source)) {
        static_assert(node::always_false<R>,
                      CKPT_STATIC_ERROR("a migration rule names a path the old type lacks",
                                        "Correct the rule's path: dotted field names of the old type, e.g. \"opt.mu\".",
                                        "The next error (CKPT_ERROR_...) names the old type and the path."));
        (void)sizeof(CKPT_ERROR_migration_a_rule_names_a_path_that_the_old_type_lacks<Old, detail::printable<R::source>>);
      } else if constexpr (R::kind == rule_kind::rename && find_char(source, '*') != std::string_view::npos) {
        static_assert(node::always_false<R>,
                      CKPT_STATIC_ERROR("a rename's source cannot contain \"*\"",
                                        "Rename each leaf or subtree by its own path.",
                                        "The next error (CKPT_ERROR_...) names the path."));
        (void)sizeof(CKPT_ERROR_migration_a_rename_path_cannot_contain_a_wildcard<detail::printable<R::source>>);
      }
    }
  }

  // Index of the first rule of kind K whose target is P, or no_field.
  template <migrate::rule_kind K, detail::fixed_string P>
  static consteval std::size_t rule_at() {
    std::size_t found = migrate::no_field, i = 0;
    ((Rules::kind == K && Rules::target.view() == P.view() && found == migrate::no_field ? (found = i) : 0, ++i), ...);
    return found;
  }

  template <detail::fixed_string NP, class N>
  static void no_source() {
    static_assert(node::always_false<N>,
                  CKPT_STATIC_ERROR("a leaf of the new type has no source in the old type",
                                    "Add ckpt::rename<\"old.path\", \"new.path\">, ckpt::fill<\"path\">(fn) or "
                                    "ckpt::transform<\"path\">(fn) to the migration.",
                                    "The next error (CKPT_ERROR_...) names the new type and the path."));
    (void)sizeof(migrate::CKPT_ERROR_migration_this_leaf_of_the_new_type_has_no_source_in_the_old_type<
                 New, detail::printable<NP>>);
  }
  template <detail::fixed_string NP, class O, class N>
  static void no_conversion() {
    static_assert(node::always_false<N>,
                  CKPT_STATIC_ERROR("a leaf does not convert from the old type to the new one",
                                    "Only lossless casts of a compatible rank happen by themselves; use "
                                    "ckpt::transform<\"path\">(fn).",
                                    "The next error (CKPT_ERROR_...) names the path and both leaf types."));
    (void)sizeof(migrate::CKPT_ERROR_migration_this_leaf_does_not_convert_from_the_old_type_to_the_new_type<
                 detail::printable<NP>, O, N>);
  }

  // Fills n (at new path NP) from o (at old path OP; null when O is absent).
  template <detail::fixed_string NP, class N, detail::fixed_string OP, class O, bool Renamed>
  void node(N& n, const O* o, const Old& root) const {
    using namespace migrate;
    constexpr std::size_t fill_i = rule_at<rule_kind::fill, NP>();
    constexpr std::size_t transform_i = rule_at<rule_kind::transform, NP>();
    constexpr std::size_t rename_i = rule_at<rule_kind::rename, NP>();
    constexpr node::kind k = node::kind_v<N>;
    if constexpr (fill_i != no_field) {
      n = std::get<fill_i>(rules_).fn(root);
    } else if constexpr (transform_i != no_field && !std::is_same_v<O, absent>) {
      n = std::get<transform_i>(rules_).fn(*o);
    } else if constexpr (rename_i != no_field && !Renamed) {
      using R = std::tuple_element_t<rename_i, std::tuple<Rules...>>;
      using Source = type_at<R::source, Old>;
      node<NP, N, R::source, Source, true>(n, &get_at<R::source>(root), root);
    } else if constexpr (std::is_same_v<O, absent>) {
      if constexpr (k == node::kind::structure) {
        for_fields<NP, N, OP, O>(n, o, root);
      } else if constexpr (k == node::kind::tuple) {
        for_items<NP, N, OP, O>(n, o, root);
      } else {
        no_source<NP, N>();
      }
    } else if constexpr (k == node::kind::leaf) {
      if constexpr (node::kind_v<O> != node::kind::leaf || !leaf_converts<O, N>()) {
        no_conversion<NP, O, N>();
      } else if constexpr (std::is_same_v<O, N>) {
        n = *o;
      } else {
        const LeafBytes bytes = leaf_codec<O>::save(*o);
        leaf_codec<N>::restore(n, MemoryLeafSource(bytes, std::string(NP.view())));
      }
    } else if constexpr (k == node::kind::structure) {
      if constexpr (node::kind_v<O> != node::kind::structure) no_conversion<NP, O, N>();
      else for_fields<NP, N, OP, O>(n, o, root);
    } else if constexpr (k == node::kind::optional) {
      using N2 = typename node::optional_traits<N>::value_type;
      if constexpr (node::kind_v<O> == node::kind::optional) {
        if (*o) {
          n.emplace();
          node<NP, N2, OP, typename node::optional_traits<O>::value_type, true>(*n, &**o, root);
        } else {
          n.reset();
        }
      } else {
        n.emplace();
        node<NP, N2, OP, O, true>(*n, o, root);
      }
    } else if constexpr (k == node::kind::sequence) {
      if constexpr (node::kind_v<O> != node::kind::sequence) {
        no_conversion<NP, O, N>();
      } else {
        using N2 = typename node::sequence_traits<N>::value_type;
        using O2 = typename node::sequence_traits<O>::value_type;
        if constexpr (node::sequence_traits<N>::resizable) {
          n.resize(o->size());
        } else if (n.size() != o->size()) {
          throw ShapeMismatchError("<migration>", std::string(NP.view()),
                                   std::to_string(o->size()) + " items in the old value, " +
                                       std::to_string(n.size()) + " in the new type");
        }
        for (std::size_t i = 0; i < o->size(); ++i)
          node<join<NP, "*">(), N2, join<OP, "*">(), O2, false>(n[i], &(*o)[i], root);
      }
    } else if constexpr (k == node::kind::map) {
      if constexpr (node::kind_v<O> != node::kind::map) {
        no_conversion<NP, O, N>();
      } else {
        using N2 = typename node::map_traits<N>::mapped_type;
        using O2 = typename node::map_traits<O>::mapped_type;
        n.clear();
        for (const auto& [key, value] : *o) node<join<NP, "*">(), N2, join<OP, "*">(), O2, false>(n[key], &value, root);
      }
    } else if constexpr (k == node::kind::tuple) {
      if constexpr (node::kind_v<O> != node::kind::tuple) no_conversion<NP, O, N>();
      else for_items<NP, N, OP, O>(n, o, root);
    }
  }

  template <detail::fixed_string NP, class N, detail::fixed_string OP, class O>
  void for_fields(N& n, const O* o, const Old& root) const {
    using namespace migrate;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (field<NP, N, OP, O, I>(n, o, root), ...);
    }(std::make_index_sequence<reflect::field_count<N>()>{});
  }

  template <detail::fixed_string NP, class N, detail::fixed_string OP, class O, std::size_t I>
  void field(N& n, const O* o, const Old& root) const {
    using namespace migrate;
    constexpr std::string_view name = reflect::field_name<N, I>();
    constexpr auto seg = detail::make_fixed_string<name.size()>(name);
    using F = reflect::field_type<N, I>;
    auto& target = reflect::get_field<I>(n);
    if constexpr (std::is_same_v<O, absent>) {
      node<join<NP, seg>(), F, join<OP, seg>(), absent, false>(target, nullptr, root);
    } else {
      constexpr std::size_t j = field_index<O>(name);
      if constexpr (j == no_field) {
        node<join<NP, seg>(), F, join<OP, seg>(), absent, false>(target, nullptr, root);
      } else {
        node<join<NP, seg>(), F, join<OP, seg>(), reflect::field_type<O, j>, false>(
            target, &reflect::get_field<j>(*o), root);
      }
    }
  }

  template <detail::fixed_string NP, class N, detail::fixed_string OP, class O>
  void for_items(N& n, const O* o, const Old& root) const {
    using namespace migrate;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (item<NP, N, OP, O, I>(n, o, root), ...);
    }(std::make_index_sequence<std::tuple_size_v<N>>{});
  }

  template <detail::fixed_string NP, class N, detail::fixed_string OP, class O, std::size_t I>
  void item(N& n, const O* o, const Old& root) const {
    using namespace migrate;
    constexpr auto seg = index_segment<I>();
    using F = std::remove_cvref_t<std::tuple_element_t<I, N>>;
    if constexpr (std::is_same_v<O, absent> || I >= std::tuple_size_v<O>) {
      node<join<NP, seg>(), F, join<OP, seg>(), absent, false>(std::get<I>(n), nullptr, root);
    } else {
      node<join<NP, seg>(), F, join<OP, seg>(), std::remove_cvref_t<std::tuple_element_t<I, O>>, false>(
          std::get<I>(n), &std::get<I>(*o), root);
    }
  }

  std::tuple<Rules...> rules_;
};

// Builds the migration from Old to New; compiling it checks every leaf of New has a source.
template <class Old, class New, class... Rules>
constexpr Migration<Old, New, Rules...> migration(Rules... rules) {
  node::require_tree<Old>();
  node::require_tree<New>();
  [[maybe_unused]] constexpr auto instantiate = &Migration<Old, New, Rules...>::apply;
  return Migration<Old, New, Rules...>(std::move(rules)...);
}

}  // namespace ckpt
