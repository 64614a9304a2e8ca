// Restoring into new versions of a struct (migrations and chains), dynamic
// transforms, and abstract (allocate-only) targets. Casts and lazy leaves are in
// test_leaves.cpp.
#include "support.hpp"

namespace migrate_test {

using test::Dense;

// Version 1 of a training state.
struct StateV1 {
  std::int64_t step = 0;
  Dense dense;
  std::vector<float> mu;
  float lr = 0;
  std::vector<Dense> layers;
  std::optional<std::int32_t> seed;
  std::string dropped_note;  // gone in version 2
};

struct Schedule {
  float lr = 0;
  std::int64_t warmup = 0;
};
// Version 2: renamed leaves and subtrees, a new struct filled from the old value,
// a widened dtype (kernel float32 -> float64), a dropped field.
struct DenseV2 {
  xt::xtensor<double, 2> kernel;
  xt::xtensor<float, 1> bias;
};
struct StateV2 {
  std::int64_t step = 0;
  DenseV2 encoder;                 // was "dense"
  std::vector<float> first_moment;  // was "mu"
  Schedule schedule;               // lr moved in, warmup computed
  std::vector<Dense> layers;
  std::optional<std::int64_t> seed;  // int32 -> int64
};
// Version 3: the kernel flattened (a rank change) by a transform.
struct EncoderV3 {
  xt::xtensor<double, 1> kernel;
  xt::xtensor<float, 1> bias;
};
struct StateV3 {
  std::int64_t step = 0;
  EncoderV3 encoder;
  std::vector<float> first_moment;
  Schedule schedule;
  std::vector<Dense> layers;
};

StateV1 make_v1() {
  StateV1 s;
  s.step = 120;
  s.dense.kernel = {{1, 2, 3}, {4, 5, 6}};
  s.dense.bias = {0.5f, -0.5f, 1.5f};
  s.mu = {0.1f, 0.2f};
  s.lr = 0.25f;
  s.layers = {{xt::ones<float>({2, 2}), xt::zeros<float>({2})}};
  s.seed = 7;
  s.dropped_note = "old";
  return s;
}

const auto m12 = ckpt::migration<StateV1, StateV2>(
    ckpt::rename<"dense", "encoder">, ckpt::rename<"mu", "first_moment">, ckpt::rename<"lr", "schedule.lr">,
    ckpt::fill<"schedule.warmup">([](const StateV1& old) { return old.step / 10; }));

const auto m23 = ckpt::migration<StateV2, StateV3>(ckpt::transform<"encoder.kernel">(
    [](const xt::xtensor<double, 2>& k) { return xt::xtensor<double, 1>(xt::flatten(k)); }));

void check_v2(const StateV2& r) {
  CHECK(r.step == 120);
  CHECK(r.encoder.kernel == xt::xtensor<double, 2>{{1, 2, 3}, {4, 5, 6}});
  CHECK(r.encoder.bias == xt::xtensor<float, 1>{0.5f, -0.5f, 1.5f});
  CHECK(r.first_moment == std::vector<float>{0.1f, 0.2f});
  CHECK(r.schedule.lr == 0.25f);
  CHECK(r.schedule.warmup == 12);
  REQUIRE(r.layers.size() == 1);
  CHECK(r.layers[0].kernel == xt::ones<float>({2, 2}));
  CHECK(r.seed == std::optional<std::int64_t>(7));
}

}  // namespace migrate_test

namespace migrate_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("a migration restores an old checkpoint into the new struct") {
  test::TempDir tmp;
  ckpt::save(tmp / "v1", make_v1());
  check_v2(ckpt::restore<StateV2>(tmp / "v1", m12));
  StateV2 into;
  ckpt::restore_into(tmp / "v1", into, m12);
  check_v2(into);
}

TEST_CASE("a migration restores strictly: what it drops is used, a leaf outside the old type is not") {
  test::TempDir tmp;
  // m12 drops dropped_note on purpose and moves dense, mu and lr: no .partial needed
  // (the restore reads the whole old value, which the migration then consumes).
  ckpt::save(tmp / "v1", make_v1());
  check_v2(ckpt::restore<StateV2>(tmp / "v1", m12));
  const StateV3 v3 = ckpt::restore<StateV3>(tmp / "v1", ckpt::chain(m12, m23));
  CHECK(v3.encoder.kernel == xt::xtensor<double, 1>{1, 2, 3, 4, 5, 6});
  // A leaf beside the old type's (added by a save transform) is used by neither version.
  ckpt::save(tmp / "extra", make_v1(), {.transform = [](ckpt::Snapshot& s) { s.set("extra", std::vector<int>{1}); }});
  CHECK_THROWS_CKPT(ckpt::restore<StateV2>(tmp / "extra", m12), ckpt::UnusedLeafError,
                    "the target does not use 1 leaf of the checkpoint: extra");
  CHECK_THROWS_CKPT(ckpt::restore<StateV3>(tmp / "extra", ckpt::chain(m12, m23)), ckpt::UnusedLeafError, "extra");
  check_v2(ckpt::restore<StateV2>(tmp / "extra", m12, {.partial = true}));
  StateV2 into;
  ckpt::restore_into(tmp / "extra", into, m12, {.partial = true});
  check_v2(into);
}

TEST_CASE("a migration also accepts a checkpoint already in the new version") {
  test::TempDir tmp;
  ckpt::save(tmp / "v1", make_v1());
  const StateV2 v2 = ckpt::restore<StateV2>(tmp / "v1", m12);
  ckpt::save(tmp / "v2", v2);
  check_v2(ckpt::restore<StateV2>(tmp / "v2", m12));
}

TEST_CASE("a checkpoint of another schema is refused, naming the first differing path") {
  test::TempDir tmp;
  struct Other {
    std::int64_t step = 0;
    xt::xtensor<float, 2> weights;
  };
  ckpt::save(tmp / "other", Other{});
  try {
    (void)ckpt::restore<StateV2>(tmp / "other", m12);
    FAIL("expected ckpt::Error");
  } catch (const ckpt::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find((tmp / "other").string()) != std::string::npos);
    CHECK(msg.find("first difference at weights") != std::string::npos);
    CHECK(msg.find("dense.kernel") != std::string::npos);
  }
}

TEST_CASE("a chain restores a checkpoint of any version into the newest") {
  test::TempDir tmp;
  const auto chain = ckpt::chain(m12, m23);
  ckpt::save(tmp / "v1", make_v1());
  const StateV2 v2 = ckpt::restore<StateV2>(tmp / "v1", m12);
  ckpt::save(tmp / "v2", v2);
  StateV3 v3 = ckpt::restore<StateV3>(tmp / "v2", chain);
  ckpt::save(tmp / "v3", v3);
  for (const char* dir : {"v1", "v2", "v3"}) {
    CAPTURE(dir);
    const StateV3 r = ckpt::restore<StateV3>(tmp / dir, chain);
    CHECK(r.step == 120);
    CHECK(r.encoder.kernel == xt::xtensor<double, 1>{1, 2, 3, 4, 5, 6});
    CHECK(r.schedule.warmup == 12);
    CHECK(r.first_moment.size() == 2);
  }
}

TEST_CASE("dynamic transforms edit the tree before the restore and the snapshot before the save") {
  test::TempDir tmp;
  ckpt::save(tmp / "v1", make_v1());
  // t5x-style state_transformation_fns: rename, drop and add leaves at run time.
  const auto r = ckpt::restore<StateV3>(
      tmp / "v1", {.transform = [](ckpt::Tree& t) {
        CHECK(t.rename("dense", "encoder") == 2);
        t.rename("mu", "first_moment");
        t.rename("lr", "schedule.lr");
        t.erase("dropped_note");
        t.erase("seed");  // gone in version 3
        const auto k = t.leaf("encoder.kernel").as<xt::xarray<double>>();
        t.set("encoder.kernel", xt::xtensor<double, 1>(xt::flatten(k)));
        t.set("schedule.warmup", std::int64_t{99});
      }});
  CHECK(r.encoder.kernel == xt::xtensor<double, 1>{1, 2, 3, 4, 5, 6});
  CHECK(r.schedule.warmup == 99);
  CHECK(r.schedule.lr == 0.25f);
  CHECK(r.first_moment == std::vector<float>{0.1f, 0.2f});

  ckpt::save(tmp / "edited", make_v1(), {.transform = [](ckpt::Snapshot& s) {
    CHECK(s.rename("dense", "encoder") == 2);
    CHECK(s.erase("dropped_note") == 1);
    CHECK(s.erase("never_there") == 0);
    CHECK_THROWS_WITH_AS(s.rename("never_there", "x"), doctest::Contains("never_there"), ckpt::MissingLeafError);
    s.set("extra", std::vector<int>{1, 2, 3});
  }});
  const auto md = ckpt::metadata(tmp / "edited");
  CHECK(md.contains("encoder.kernel"));
  CHECK_FALSE(md.contains("dense.kernel"));
  CHECK_FALSE(md.contains("dropped_note"));
  CHECK(md.leaf("extra").as<std::vector<int>>() == std::vector<int>{1, 2, 3});
}

TEST_CASE("allocate<T> sizes a target from metadata alone; restore_into then fills it in place") {
  test::TempDir tmp;
  StateV1 s = make_v1();
  s.layers.resize(3);
  ckpt::save(tmp / "c", s);
  StateV1 target = ckpt::allocate<StateV1>(tmp / "c");
  CHECK(target.dense.kernel.shape()[0] == 2);
  CHECK(target.dense.kernel.shape()[1] == 3);
  CHECK(target.dense.kernel == xt::zeros<float>({2, 3}));
  CHECK(target.layers.size() == 3);
  CHECK(target.step == 0);
  const float* kernel_memory = target.dense.kernel.data();
  ckpt::restore_into(tmp / "c", target);
  CHECK(target.dense.kernel.data() == kernel_memory);
  CHECK(target.dense.kernel == s.dense.kernel);
  CHECK(target.step == 120);
}

TEST_CASE("the manager restores steps of an older version through a migration or a chain") {
  test::TempDir tmp;
  {
    ckpt::CheckpointManager<StateV1> old_mgr(tmp / "run");
    StateV1 s = make_v1();
    old_mgr.save(100, s);
    s.step = 200;
    old_mgr.save(200, s);
  }
  ckpt::CheckpointManager<StateV3> mgr(tmp / "run");
  CHECK(mgr.latest_step() == 200);
  const StateV3 latest = mgr.restore(std::nullopt, ckpt::chain(m12, m23));
  CHECK(latest.step == 200);
  CHECK(latest.encoder.kernel == xt::xtensor<double, 1>{1, 2, 3, 4, 5, 6});
  CHECK(latest.schedule.warmup == 20);
  ckpt::CheckpointManager<StateV2, ckpt::sync_save> mgr2(tmp / "run2");
  ckpt::save(tmp / "run2" / "7", make_v1());  // a step written outside, by version 1
  mgr2.reload();
  CHECK(mgr2.restore(7, m12).schedule.lr == 0.25f);
}

}  // namespace migrate_test
