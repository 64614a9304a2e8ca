// A leaf of the new type with no source in the old one (and no rule) is a compile
// error naming its path.
#include <ckpt/ckpt.hpp>
#include <ckpt/migrate.hpp>

struct V1 {
  std::int64_t step = 0;
};
struct Schedule {
  float lr = 0;
};
struct V2 {
  std::int64_t step = 0;
  Schedule schedule;
};

auto make() {
#ifdef CKPT_SHOULD_FAIL
  return ckpt::migration<V1, V2>();
#else
  return ckpt::migration<V1, V2>(ckpt::fill<"schedule.lr">([](const V1&) { return 0.1f; }));
#endif
}

// expect: ckpt: a leaf of the new type has no source in the old type
// expect: CKPT_ERROR_migration_this_leaf_of_the_new_type_has_no_source_in_the_old_type<V2,
// expect-gcc: fixed_string<11>{"schedule.lr"}
// expect-clang: text_chars<'s', 'c', 'h', 'e', 'd', 'u', 'l', 'e', '.', 'l', 'r'>
