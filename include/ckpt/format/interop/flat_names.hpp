// ckpt/format/interop/flat_names.hpp — flat tensor names as tree paths, and back.
//
// TensorFlow bundles, safetensors and PyTorch state_dicts name tensors in a flat
// namespace ("layer_0/matrix", "encoder.layers.0.weight"); ckpt's tree is nested. A name
// becomes a path by splitting it at the format's separator ('/' or '.'). A flat
// namespace allows what a tree does not: a name that is a value and also the prefix of
// other names. TF1's optimizers name their slots below their variable (`w`, `w/Adam`,
// `w/Adam_1`, `w/ExponentialMovingAverage`), PyTorch modules may hold `a` and `a.b`.
// Such a name's value goes one level down, to the segment "@value" (TF2's object-based
// checkpoints settle the same clash the same way, with `.ATTRIBUTES/VARIABLE_VALUE`
// below each object):
//
//   w  w/Adam  w/Adam_1  global_step   ->   w.@value  w.Adam  w.Adam_1  global_step
//
// A real segment of the form "@value", "@@value"... gains one '@' so that no real name
// can meet a moved value; every other segment is kept as it is. So a checkpoint with no
// such name and no such segment keeps the paths of a plain split, the paths depend only
// on the set of names (the same checkpoint always gives the same paths), and
// flat_name() is their exact inverse: converting back to a flat format restores the
// original names. The segment is the same for every format, so a tree read from a TF
// bundle writes as safetensors names that read back to the same tree.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt::detail::interop {

// Where the value of a name that is also a prefix of other names goes.
inline constexpr std::string_view value_segment = "@value";

// "@value", "@@value", ...: the segments the mapping reserves (a real one is escaped).
inline bool is_value_like(std::string_view seg) {
  const std::size_t at = seg.find_first_not_of('@');
  return at != 0 && at != std::string_view::npos && seg.substr(at) == value_segment.substr(1);
}

// The paths of one checkpoint's tensor names.
class FlatNames {
 public:
  // names: every tensor name of the checkpoint (in any order); sep: the format's separator.
  template <class Names>
  FlatNames(const Names& names, char sep) : sep_(sep) {
    std::vector<std::string_view> sorted(std::begin(names), std::end(names));
    std::sort(sorted.begin(), sorted.end());
    // n is a prefix of another name iff the first name not below n + sep starts with it.
    for (const std::string_view n : sorted) {
      std::string probe(n);
      probe += sep;
      const auto it = std::lower_bound(sorted.begin(), sorted.end(), std::string_view(probe));
      if (it != sorted.end() && it->starts_with(probe)) inner_.emplace_back(n);
    }
  }

  // The path of a name given to the constructor.
  Path path(std::string_view name) const {
    std::vector<std::string> segs;
    std::size_t at = 0;
    while (true) {
      const std::size_t cut = name.find(sep_, at);
      std::string seg(name.substr(at, cut == std::string_view::npos ? std::string_view::npos : cut - at));
      if (is_value_like(seg)) seg.insert(0, 1, '@');
      segs.push_back(std::move(seg));
      if (cut == std::string_view::npos) break;
      at = cut + 1;
    }
    if (std::binary_search(inner_.begin(), inner_.end(), name)) segs.emplace_back(value_segment);
    return Path(std::move(segs));
  }

  // Names that are also a prefix of others (sorted): their values are at name.@value.
  const std::vector<std::string>& inner() const noexcept { return inner_; }

 private:
  char sep_;
  std::vector<std::string> inner_;
};

// The flat name of a path (FlatNames::path's inverse), or why the path is not one: the
// root, "@value" other than last, a segment holding the separator.
inline std::optional<std::string> flat_name(const Path& p, char sep, std::string* why = nullptr) {
  auto no = [&](std::string w) -> std::optional<std::string> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  const auto& segs = p.segments();
  if (segs.empty()) return no("the root has no name");
  std::string name;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const std::string& seg = segs[i];
    if (seg == value_segment) {
      if (i + 1 != segs.size() || i == 0)
        return no(std::string("segment \"") + std::string(value_segment) +
                  "\" stands for the value of the name above it, so it can only be the last segment and not the first");
      break;
    }
    if (seg.find(sep) != std::string::npos)
      return no("path segment " + quote_for_message(seg) + " holds '" + std::string(1, sep) +
                "', the separator of a name's segments");
    if (i) name += sep;
    if (is_value_like(seg)) name.append(seg, 1);
    else name += seg;
  }
  return name;
}

// flat_name, throwing an Error naming the checkpoint and the path.
inline std::string flat_name_or_throw(const Path& p, char sep, const std::string& checkpoint, std::string_view format) {
  std::string why;
  auto name = flat_name(p, sep, &why);
  if (!name) throw Error(checkpoint, p.str(), std::string(format) + " has no name for this path: " + why);
  return *name;
}

}  // namespace ckpt::detail::interop
