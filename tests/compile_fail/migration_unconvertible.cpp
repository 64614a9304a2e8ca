// A leaf whose old type does not convert without loss into the new one is a compile
// error naming the path and both types.
#include <ckpt/ckpt.hpp>
#include <ckpt/migrate.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

struct V1 {
  xt::xtensor<double, 2> kernel;
};
struct V2 {
#ifdef CKPT_SHOULD_FAIL
  xt::xtensor<float, 2> kernel;  // float64 -> float32 narrows
#else
  xt::xtensor<long double, 2>* unused = nullptr;  // not saved: see ckpt_fields below
  xt::xtensor<double, 2> kernel;
  friend constexpr auto ckpt_fields(ckpt::type_tag<V2>) { return ckpt::fields(ckpt::field("kernel", &V2::kernel)); }
#endif
};

auto make() { return ckpt::migration<V1, V2>(); }

// expect: ckpt: a leaf does not convert from the old type to the new one
// expect: CKPT_ERROR_migration_this_leaf_does_not_convert_from_the_old_type_to_the_new_type<
// expect-gcc: fixed_string<6>{"kernel"}
// expect-clang: text_chars<'k', 'e', 'r', 'n', 'e', 'l'>
