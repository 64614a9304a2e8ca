// A rule naming a path the old type lacks is a compile error naming the path.
#include <ckpt/ckpt.hpp>
#include <ckpt/migrate.hpp>

struct V1 {
  std::vector<float> mu;
};
struct V2 {
  std::vector<float> first_moment;
};

auto make() {
#ifdef CKPT_SHOULD_FAIL
  return ckpt::migration<V1, V2>(ckpt::rename<"mom", "first_moment">);
#else
  return ckpt::migration<V1, V2>(ckpt::rename<"mu", "first_moment">);
#endif
}

// expect: ckpt: a migration rule names a path the old type lacks
// expect: CKPT_ERROR_migration_a_rule_names_a_path_that_the_old_type_lacks<V1,
// expect-gcc: fixed_string<3>{"mom"}
// expect-clang: text_chars<'m', 'o', 'm'>
