// ckpt/tree/node.hpp — what kind of tree node a C++ type is.
//
// A leaf (leaf/codec.hpp), or an inner node: std::optional, std::tuple/std::pair,
// a sequence of nodes (std::vector, std::array), a map with string keys
// (std::map, std::unordered_map), a node whose children are listed at run time
// (ckpt::node_children, below: a libtorch Module's parameters), or a reflectable
// struct (tree/reflect.hpp).
// Anything else fails to compile with a message naming the type (and the field).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ckpt/detail/fixed_string.hpp>
#include <ckpt/leaf/codec.hpp>
#include <ckpt/tree/reflect.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

// A child's place under a node that lists its children at run time: one path segment
// per element (a Module's "layers.0.weight" is {"layers", "0", "weight"}).
using ChildPath = std::vector<std::string>;

// What a checkpoint holds under such a node, asked while it is restored.
class ChildLookup {
 public:
  // True when a leaf or a subtree lies at `child` under the node.
  virtual bool has(const ChildPath& child) const = 0;

 protected:
  ~ChildLookup() = default;
};

// The customization point for a type whose children are known only at run time.
// A specialization provides
//   static constexpr bool listed = true;
//   static void save(const T&, F&& f);                      // f(const ChildPath&, const Child&) per child
//   static void restore(T&, const ChildLookup&, F&& f);     // f(const ChildPath&, Child&) per child to fill
// where each Child is any tree node. Children given to `save` must stay alive as long
// as the value (a leaf's bytes may point into them); a computed child is wrapped in
// ckpt::owned_leaf, whose bytes are copied. A value that lists no child is saved as an
// empty node.
template <class T>
struct node_children;

template <class T>
concept has_node_children = requires { node_children<T>::listed; };

}  // namespace ckpt

namespace ckpt::node {

template <class T> struct optional_traits : std::false_type {};
template <class U> struct optional_traits<std::optional<U>> : std::true_type { using value_type = U; };

template <class T> struct tuple_traits : std::false_type {};
template <class... U> struct tuple_traits<std::tuple<U...>> : std::true_type {};
template <class A, class B> struct tuple_traits<std::pair<A, B>> : std::true_type {};

template <class T> struct sequence_traits : std::false_type {};
template <class U, class A> struct sequence_traits<std::vector<U, A>> : std::true_type {
  using value_type = U;
  static constexpr bool resizable = true;
};
template <class U, std::size_t N> struct sequence_traits<std::array<U, N>> : std::true_type {
  using value_type = U;
  static constexpr bool resizable = false;
};

template <class T> struct map_traits : std::false_type {};
template <class U, class C, class A> struct map_traits<std::map<std::string, U, C, A>> : std::true_type {
  using mapped_type = U;
};
template <class U, class H, class E, class A>
struct map_traits<std::unordered_map<std::string, U, H, E, A>> : std::true_type {
  using mapped_type = U;
};

enum class kind { leaf, optional, tuple, sequence, map, listed, structure, unsupported };

template <class T>
consteval kind kind_of() {
  if constexpr (leaf<T>) return kind::leaf;
  else if constexpr (optional_traits<T>::value) return kind::optional;
  else if constexpr (tuple_traits<T>::value) return kind::tuple;
  else if constexpr (sequence_traits<T>::value) return kind::sequence;
  else if constexpr (map_traits<T>::value) return kind::map;
  else if constexpr (has_node_children<T>) return kind::listed;
  else if constexpr (reflect::reflectable<T>) return kind::structure;
  else return kind::unsupported;
}

template <class T>
inline constexpr kind kind_v = kind_of<std::remove_cv_t<T>>();

// The name of these templates is the error message: compilers print it with the type
// (and the field) filled in.
template <class Type>
struct CKPT_ERROR_this_type_is_neither_a_leaf_nor_a_struct_ckpt_can_reflect;
template <class Struct, class FieldName, class FieldType>
struct CKPT_ERROR_the_type_of_this_field_is_neither_a_leaf_nor_a_struct_ckpt_can_reflect;

template <class T>
inline constexpr bool always_false = false;

// Fails to compile, naming T, when T is not a tree node.
template <class T>
consteval void require_node() {
  if constexpr (kind_v<T> == kind::unsupported) {
    static_assert(always_false<T>,
                  CKPT_STATIC_ERROR("this type is neither a leaf nor a struct ckpt can reflect",
                                    "Make it an aggregate (a struct with public fields, no base classes, no "
                                    "constructors), declare it with BOOST_HANA_DEFINE_STRUCT / BOOST_HANA_ADAPT_STRUCT, "
                                    "give it\n  friend constexpr auto ckpt_fields(ckpt::type_tag<T>) { return "
                                    "ckpt::fields(ckpt::field(\"name\", &T::member), ...); }\nor specialize "
                                    "ckpt::leaf_codec<T>.",
                                    CKPT_NAMED_NEXT));
    (void)sizeof(CKPT_ERROR_this_type_is_neither_a_leaf_nor_a_struct_ckpt_can_reflect<T>);
  }
}

template <class T>
consteval void require_tree();

// Fails to compile, naming the struct, the field and its type, when a field is not a node.
template <class Struct, std::size_t I>
consteval void require_field() {
  using F = reflect::field_type<Struct, I>;
  if constexpr (kind_v<F> == kind::unsupported) {
    constexpr std::string_view name = reflect::field_name<Struct, I>();
    static_assert(always_false<F>,
                  CKPT_STATIC_ERROR("the type of a field is neither a leaf nor a struct ckpt can reflect",
                                    "Change the field's type, leave the field out with a ckpt_fields customization, "
                                    "or specialize ckpt::leaf_codec for it.",
                                    "The next error (CKPT_ERROR_...) names the struct, the field and the field's type."));
    (void)sizeof(CKPT_ERROR_the_type_of_this_field_is_neither_a_leaf_nor_a_struct_ckpt_can_reflect<
                 Struct, detail::printable<detail::make_fixed_string<name.size()>(name)>, F>);
  } else {
    require_tree<F>();
  }
}

// Checks a whole type recursively, so that the first unsupported field is named.
template <class T>
consteval void require_tree() {
  constexpr kind k = kind_v<T>;
  if constexpr (k == kind::unsupported) {
    require_node<T>();
  } else if constexpr (k == kind::optional) {
    require_tree<typename optional_traits<T>::value_type>();
  } else if constexpr (k == kind::sequence) {
    require_tree<typename sequence_traits<T>::value_type>();
  } else if constexpr (k == kind::map) {
    require_tree<typename map_traits<T>::mapped_type>();
  } else if constexpr (k == kind::tuple) {
    []<std::size_t... I>(std::index_sequence<I...>) {
      (require_tree<std::tuple_element_t<I, T>>(), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (k == kind::structure) {
    []<std::size_t... I>(std::index_sequence<I...>) {
      (require_field<T, I>(), ...);
    }(std::make_index_sequence<reflect::field_count<T>()>{});
  }
}

}  // namespace ckpt::node
