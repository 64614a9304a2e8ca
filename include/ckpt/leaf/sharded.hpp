// ckpt/leaf/sharded.hpp — ckpt::Sharded<A>: this process's box of a global array.
//
//   struct Layer { ckpt::Sharded<xt::xtensor<float, 2>> w; };   // rows split over processes
//   layer.w = {.global_shape = {10, 4}, .offset = {4, 0}, .local = rows 4..6};
//
// Saved, it is stored as a box of the global array (the native format records the
// global shape and each box; ckpt::mpi::save writes every process's box into one
// checkpoint). Restored:
//   - into a Sharded whose global_shape is set: reads the box at `offset` of local's
//     shape, reading only the stored bytes that intersect it (local must be allocated
//     with the box's shape; an empty local is an empty box);
//   - into a Sharded left empty: the whole global array (offset zeros), or under
//     ckpt::mpi::restore<T> the box this process held when it saved;
//   - into a plain array in place of the Sharded field: the whole global array.
// A is any array leaf: xt::xtensor, xt::xarray, xt::xtensor_fixed, std::vector (1-D).
#pragma once

#include <cstddef>
#include <vector>

#include <ckpt/detail/static_error.hpp>
#include <ckpt/leaf/codec.hpp>

namespace ckpt {

template <class A>
struct Sharded {
  std::vector<std::size_t> global_shape;
  std::vector<std::size_t> offset;
  A local;
};

namespace detail {

// The process rank whose saved box an empty Sharded target takes (ckpt::mpi::restore<T>
// sets it for the duration of its restore); -1: the whole array.
inline thread_local int sharded_restore_rank = -1;

inline Shape to_shape(const std::vector<std::size_t>& v) { return Shape(v.begin(), v.end()); }

// One box of a leaf, seen as a leaf of its own: the array codec of A reads it.
class BoxSource final : public LeafSource {
 public:
  BoxSource(const LeafSource& src, Shape origin, Shape shape)
      : src_(src), origin_(std::move(origin)), shape_(std::move(shape)) {}
  dtype type() const override { return src_.type(); }
  const Shape& shape() const override { return shape_; }
  std::uint64_t byte_length() const override { return box_elements(shape_) * dtype_size(src_.type()); }
  void read_into(std::span<std::byte> dst) const override { src_.read_box(origin_, shape_, dst); }
  const std::string& checkpoint() const override { return src_.checkpoint(); }
  std::string path() const override { return src_.path(); }
  bool check_dynamic_shapes() const override { return src_.check_dynamic_shapes(); }
  std::optional<ckpt::dtype> requested_dtype() const override { return src_.requested_dtype(); }
  bool shape_only() const override { return src_.shape_only(); }

 private:
  const LeafSource& src_;
  Shape origin_, shape_;
};

// The box an empty Sharded target takes: the one `rank` held at save time, else the whole array.
inline void choose_box(const LeafSource& src, int rank, Shape& origin, Shape& shape) {
  if (rank >= 0 && src.box_held_by(rank, origin, shape)) return;
  origin.assign(src.shape().size(), 0);
  shape = src.shape();
}

}  // namespace detail

template <class A>
struct leaf_codec<Sharded<A>> {
  using inner = leaf_codec<A>;
  static_assert(requires { inner::rank; } && inner::rank != 0,
                CKPT_STATIC_ERROR("ckpt::Sharded<A> needs an array leaf A",
                                  "Use an xtensor container or a std::vector of numbers for the local part.",
                                  CKPT_NAMED_ABOVE));
  static constexpr dtype type = inner::type;
  static constexpr int rank = inner::rank;

  static LeafBytes save(const Sharded<A>& s) { return inner::save(s.local); }
  static LeafBox box(const Sharded<A>& s) { return {detail::to_shape(s.global_shape), detail::to_shape(s.offset)}; }

  static void restore(Sharded<A>& s, const LeafSource& src) {
    Shape origin, shape;
    if (s.global_shape.empty() && s.offset.empty()) {
      detail::choose_box(src, detail::sharded_restore_rank, origin, shape);
      s.global_shape.assign(src.shape().begin(), src.shape().end());
      s.offset.assign(origin.begin(), origin.end());
    } else {
      if (detail::to_shape(s.global_shape) != src.shape()) src.fail_shape(detail::to_shape(s.global_shape), "global shape");
      origin = detail::to_shape(s.offset);
      shape = inner::save(s.local).shape;  // the box this process wants: local's shape
      if (detail::box_elements(shape) == 0) return;  // an empty box reads nothing
      if (origin.size() != shape.size())
        throw ShapeMismatchError(src.checkpoint(), src.path(),
                                 "Sharded: offset " + shape_str(origin) + " and local " + shape_str(shape) +
                                     " differ in rank");
    }
    const detail::BoxSource box(src, std::move(origin), std::move(shape));
    inner::restore(s.local, box);
  }
};

}  // namespace ckpt
