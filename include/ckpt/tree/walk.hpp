// ckpt/tree/walk.hpp — visit every leaf of a value with its path (the save direction).
//
// The visitor has two members:
//   void leaf(const Path&, const U&);  // for every leaf, U resolved at compile time
//   void none(const Path&);            // for an empty optional or an empty container
// Empty nodes are recorded so that restore can tell "empty" from "missing".
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <ckpt/tree/node.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt {

template <class T, class Visitor>
void walk(const T& value, Path& path, Visitor& visit) {
  constexpr node::kind k = node::kind_v<T>;
  node::require_node<T>();
  if constexpr (k == node::kind::leaf) {
    visit.leaf(path, value);
  } else if constexpr (k == node::kind::optional) {
    if (value) walk(*value, path, visit);
    else visit.none(path);
  } else if constexpr (k == node::kind::tuple) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((path.push(std::to_string(I)), walk(std::get<I>(value), path, visit), path.pop()), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (k == node::kind::sequence) {
    if (value.size() == 0) visit.none(path);
    for (std::size_t i = 0; i < value.size(); ++i) {
      path.push(std::to_string(i));
      walk(value[i], path, visit);
      path.pop();
    }
  } else if constexpr (k == node::kind::map) {
    if (value.empty()) visit.none(path);
    std::vector<const typename T::value_type*> items;  // sorted, so unordered maps save deterministically
    for (const auto& kv : value) items.push_back(&kv);
    std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    for (const auto* kv : items) {
      path.push(kv->first);
      walk(kv->second, path, visit);
      path.pop();
    }
  } else if constexpr (k == node::kind::listed) {
    bool any = false;
    node_children<T>::save(value, [&](const ChildPath& child, const auto& c) {
      any = true;
      for (const auto& seg : child) path.push(seg);
      walk(c, path, visit);
      for (std::size_t i = 0; i < child.size(); ++i) path.pop();
    });
    if (!any) visit.none(path);
  } else if constexpr (k == node::kind::structure) {
    reflect::for_each_field(value, [&](std::string_view name, const auto& field) {
      path.push(std::string(name));
      walk(field, path, visit);
      path.pop();
    });
  }
}

}  // namespace ckpt
