// ckpt/tree/schema.hpp — the shape of a type, independent of any value: every leaf's
// path pattern, dtype and rank. Items of vectors and maps appear as "*".
//
// Every checkpoint records the schema of the type that saved it and a fingerprint
// of it, so that a later version of the program can tell which version wrote it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#if CKPT_DEFINE_API
#include <ckpt/io/checksum.hpp>
#endif
#include <ckpt/tree/node.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt {

struct SchemaEntry {
  std::string path;  // dotted, with "*" for any item of a vector or map
  std::string dtype;  // numpy name; "none" marks an optional or container that may be empty
  int rank = 0;       // -1: known only at run time
  friend bool operator==(const SchemaEntry&, const SchemaEntry&) = default;
};

using Schema = std::vector<SchemaEntry>;

namespace detail {
inline std::string schema_join(const std::string& prefix, std::string_view seg) {
  return prefix.empty() ? std::string(seg) : prefix + "." + std::string(seg);
}

template <class T>
void collect_schema(const std::string& prefix, Schema& out) {
  constexpr node::kind k = node::kind_v<T>;
  if constexpr (k == node::kind::leaf) {
    out.push_back({prefix, std::string(dtype_name(leaf_codec<T>::type)), leaf_codec<T>::rank});
  } else if constexpr (k == node::kind::optional) {
    collect_schema<typename node::optional_traits<T>::value_type>(prefix, out);
  } else if constexpr (k == node::kind::tuple) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (collect_schema<std::remove_cv_t<std::tuple_element_t<I, T>>>(schema_join(prefix, std::to_string(I)), out), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (k == node::kind::sequence) {
    collect_schema<typename node::sequence_traits<T>::value_type>(schema_join(prefix, "*"), out);
  } else if constexpr (k == node::kind::map) {
    collect_schema<typename node::map_traits<T>::mapped_type>(schema_join(prefix, "*"), out);
  } else if constexpr (k == node::kind::listed) {
    out.push_back({schema_join(prefix, "*"), "none", -1});  // children known only at run time
  } else if constexpr (k == node::kind::structure) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (collect_schema<reflect::field_type<T, I>>(schema_join(prefix, Path::escape(reflect::field_name<T, I>())), out),
       ...);
    }(std::make_index_sequence<reflect::field_count<T>()>{});
  }
}
}  // namespace detail

template <class T>
Schema schema_of() {
  node::require_tree<T>();
  Schema s;
  detail::collect_schema<T>("", s);
  return s;
}

// xxh3 of the schema's text: equal schemas, equal fingerprints.
CKPT_API std::uint64_t schema_fingerprint(const Schema& s);
#if CKPT_DEFINE_API
CKPT_API std::uint64_t schema_fingerprint(const Schema& s) {
  std::string text;
  for (const auto& e : s) text += e.path + '\x1f' + e.dtype + '\x1f' + std::to_string(e.rank) + '\x1e';
  return io::xxh3(std::as_bytes(std::span(text)));
}
#endif

}  // namespace ckpt
