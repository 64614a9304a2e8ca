// ckpt/leaf/owned.hpp — ckpt::owned_leaf<U>: a leaf computed while a value is saved.
//
// Leaf codecs borrow the value's memory, which must outlive the save. A child that a
// node makes up on the spot (node_children, tree/node.hpp: an optimizer's list of
// parameter indices) lives no longer than the call that lists it: wrapped in
// owned_leaf, its bytes are copied into the snapshot instead. Restored, it is read at
// once, not with the restore's batched reads (LeafSource::read_into_deferred), which run
// after the node has looked at the value and let it go.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include <ckpt/leaf/codec.hpp>

namespace ckpt {

namespace detail {

// A source whose deferred reads happen at once, for a destination that does not
// outlive the codec's call.
class ImmediateSource final : public LeafSource {
 public:
  explicit ImmediateSource(const LeafSource& src) : src_(src) {}
  dtype type() const override { return src_.type(); }
  const Shape& shape() const override { return src_.shape(); }
  std::uint64_t byte_length() const override { return src_.byte_length(); }
  void read_into(std::span<std::byte> dst) const override { src_.read_into(dst); }
  void read_into_deferred(std::span<std::byte> dst) const override { src_.read_into(dst); }
  const std::string& checkpoint() const override { return src_.checkpoint(); }
  std::string path() const override { return src_.path(); }
  bool check_dynamic_shapes() const override { return src_.check_dynamic_shapes(); }
  std::optional<ckpt::dtype> requested_dtype() const override { return src_.requested_dtype(); }
  bool shape_only() const override { return src_.shape_only(); }
  void read_box(const Shape& origin, const Shape& shape, std::span<std::byte> dst) const override {
    src_.read_box(origin, shape, dst);
  }
  bool box_held_by(int rank, Shape& origin, Shape& shape) const override { return src_.box_held_by(rank, origin, shape); }
  std::uint64_t max_memory() const override { return src_.max_memory(); }
  void read_pieces(std::size_t piece,
                   const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const override {
    src_.read_pieces(piece, fn);
  }

 private:
  const LeafSource& src_;
};

}  // namespace detail

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
  static void restore(owned_leaf<U>& l, const LeafSource& src) {
    leaf_codec<U>::restore(l.value, detail::ImmediateSource(src));
  }
};

}  // namespace ckpt
