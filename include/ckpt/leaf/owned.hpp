// ckpt/leaf/owned.hpp — ckpt::owned_leaf<U>: a leaf computed while a value is saved.
//
// Leaf codecs borrow the value's memory, which must outlive the save. A child that a
// node makes up on the spot (node_children, tree/node.hpp: an optimizer's list of
// parameter indices) lives no longer than the call that lists it: wrapped in
// owned_leaf, its bytes are copied into the snapshot instead.
#pragma once

#include <ckpt/leaf/codec.hpp>

namespace ckpt {

template <class U>
struct owned_leaf {
  U value{};
};

template <class U>
struct leaf_codec<owned_leaf<U>> {
  static constexpr dtype type = leaf_codec<U>::type;
  static constexpr int rank = leaf_codec<U>::rank;
  static LeafBytes save(const owned_leaf<U>& l) {
    LeafBytes b = leaf_codec<U>::save(l.value);
    b.make_owned();
    return b;
  }
  static void restore(owned_leaf<U>& l, const LeafSource& src) { leaf_codec<U>::restore(l.value, src); }
};

}  // namespace ckpt
