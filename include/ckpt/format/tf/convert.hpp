// ckpt/format/tf/convert.hpp — TensorFlow variable names to tree paths: ckpt::detail::tf::convert.
//
// t5x's Checkpointer.convert_from_tf_checkpoint brings a Mesh TensorFlow T5 checkpoint
// into a train state by mapping each TF variable name to a path of the state. Here a
// translator does that mapping: a callable (name -> dotted path, or nullopt for "not
// mine"), or a table of regex rules tried in order (the first whose pattern matches the
// whole name wins; its replacement may use $1...). A variable no rule maps is an error
// naming every such variable, unless skip_unmapped says to leave them out. Two variables
// mapped to the same path are an error too. Translators see TensorFlow's own names
// (`w`, `w/Adam`), also where the tree puts a variable that is a scope at w.@value.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ckpt/format/tf/bundle.hpp>
#include <ckpt/options.hpp>
#include <ckpt/restore/from_index.hpp>
#include <ckpt/restore/tree.hpp>

namespace ckpt::detail::tf {

// A TF variable name -> a dotted tree path ("" or nullopt: unmapped).
using Translator = std::function<std::optional<std::string>(std::string_view tf_name)>;

struct Rule {
  std::string pattern;      // ECMAScript regex, matched against the whole variable name
  std::string replacement;  // dotted path; $1, $2 ... are the pattern's groups
};

// A translator from rules, compiled once.
inline Translator rules(std::vector<Rule> table) {
  auto compiled = std::make_shared<std::vector<std::pair<std::regex, std::string>>>();
  for (auto& r : table) compiled->emplace_back(std::regex(r.pattern, std::regex::ECMAScript), std::move(r.replacement));
  return [compiled](std::string_view name) -> std::optional<std::string> {
    const std::string s(name);
    for (const auto& [re, rep] : *compiled) {
      std::smatch m;
      if (std::regex_match(s, m, re)) return m.format(rep);
    }
    return std::nullopt;
  };
}

struct ConvertOptions {
  // Leave out variables the translator does not map (else: an error naming them).
  bool skip_unmapped = false;
  // Read nothing until a leaf is asked for (or restored).
  bool lazy = true;
  // Edits of the translated tree, like t5x's state_transformation_fns.
  std::vector<std::function<void(Tree&)>> transforms{};
};

// The TF variable name of a bundle leaf's path (w.Adam -> "w/Adam", w.@value -> "w": the
// inverse of the reader's mapping, format/interop/flat_names.hpp); nullopt for a path
// no variable has (an element of a string tensor below w.@value).
inline std::optional<std::string> variable_name(const Path& p) { return detail::interop::flat_name(p, '/'); }

// A leaf as messages list it: its variable name; an element of a string tensor that is
// also a scope (w.@value.0.1), the tensor's name and the element's indices ("w/0/1").
inline std::string listed_name(const Path& p) {
  const auto& segs = p.segments();
  const auto v = std::find(segs.begin(), segs.end(), detail::interop::value_segment);
  if (v == segs.end() || v + 1 == segs.end()) return variable_name(p).value_or(p.str());
  std::string s = variable_name(Path(std::vector<std::string>(segs.begin(), v + 1))).value_or(p.str());
  for (auto it = v + 1; it != segs.end(); ++it) s += "/" + *it;
  return s;
}

// An element of a string tensor (the leaf name/i/j): the translation of the tensor's
// name with the element's indices appended, so that a rule for the variable covers
// its elements; nullopt when the name has no numeric tail or the tensor no translation.
inline std::optional<std::string> translate_string_element(const Path& p, const Translator& translate) {
  const auto& segs = p.segments();
  std::size_t tail = 0;
  while (tail + 1 < segs.size() && !segs[segs.size() - 1 - tail].empty() &&
         segs[segs.size() - 1 - tail].find_first_not_of("0123456789") == std::string::npos)
    ++tail;
  for (std::size_t k = 1; k <= tail; ++k) {
    const Path tensor(std::vector<std::string>(segs.begin(), segs.end() - static_cast<std::ptrdiff_t>(k)));
    const auto name = variable_name(tensor);
    if (!name) continue;
    auto to = translate(*name);
    if (!to || to->empty()) continue;
    for (auto it = segs.end() - static_cast<std::ptrdiff_t>(k); it != segs.end(); ++it) *to += "." + *it;
    return to;
  }
  return std::nullopt;
}

// Every variable of the TF checkpoint as it is: paths are the names split at '/'
// (a variable that is also a scope at name.@value).
inline Tree restore_tree(const std::filesystem::path& prefix_or_dir, const RestoreOptions& opts = {}) {
  Tree t(open_bundle(prefix_or_dir), false);
  if (opts.transform) opts.transform(t);
  return Tree(t.to_index(), !opts.lazy, opts.verify_checksums);
}

// The checkpoint's variables under the paths translate gives them.
inline Tree convert(const std::filesystem::path& prefix_or_dir, const Translator& translate,
                    const ConvertOptions& opts = {}) {
  const auto index = open_bundle(prefix_or_dir);
  Tree t(index, false);
  std::vector<std::string> unmapped;  // tf names
  std::vector<Path> unmapped_paths;
  struct Move {
    std::string name;  // the tf name (of an element of a string tensor: the tensor's, with its indices)
    Path from;
    std::string to;
  };
  std::vector<Move> moves;
  for (const auto& l : t.leaves()) {
    const auto name = variable_name(l.path());
    std::optional<std::string> to;
    if (name) to = translate(*name);
    if ((!to || to->empty()) && l.dtype() == dtype::string) to = translate_string_element(l.path(), translate);
    const std::string shown = listed_name(l.path());
    if (!to || to->empty()) {
      unmapped.push_back(shown);
      unmapped_paths.push_back(l.path());
    } else {
      moves.push_back({shown, l.path(), *to});
    }
  }
  if (!unmapped.empty() && !opts.skip_unmapped) {
    std::string list;
    for (std::size_t i = 0; i < unmapped.size() && i < 20; ++i) list += (i ? ", " : "") + unmapped[i];
    if (unmapped.size() > 20) list += ", ... (" + std::to_string(unmapped.size()) + " in all)";
    throw Error(index->checkpoint(), "", "no translation for the TensorFlow variables " + list +
                                             " (map them, or pass .skip_unmapped = true)");
  }
  // Rename through temporary names so that one variable's new path can be another's old one.
  for (const auto& p : unmapped_paths) t.erase(p.str());
  std::vector<std::string> tmp_names;
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const std::string tmp = Path::escape("\x01tf-convert-" + std::to_string(i));
    t.rename(moves[i].from.str(), tmp);
    tmp_names.push_back(tmp);
  }
  std::map<std::string, std::string> by_path;
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const std::string canonical = Path::parse(moves[i].to).str();
    if (const auto [it, fresh] = by_path.emplace(canonical, moves[i].name); !fresh)
      throw Error(index->checkpoint(), canonical,
                  "the TensorFlow variables " + it->second + " and " + moves[i].name + " translate to the same path");
    t.rename(tmp_names[i], moves[i].to);
  }
  for (const auto& f : opts.transforms) f(t);
  return Tree(t.to_index(), !opts.lazy);
}

// convert, then restore<T> from the translated tree.
template <class T>
T restore(const std::filesystem::path& prefix_or_dir, const Translator& translate, const ConvertOptions& copts = {},
          const RestoreOptions& ropts = {}) {
  const Tree t = convert(prefix_or_dir, translate, copts);
  T value{};
  detail::restore_from_index(t.to_index(), value, ropts, false);
  return value;
}

}  // namespace ckpt::detail::tf
