// The Python reader (python/): this side writes native checkpoints of every kind into a
// temporary directory, then pytest reads them (python/tests). The values are formulas
// both sides know (python/tests/conftest.py spells the same ones), so the Python side
// checks what it reads, not only that it reads. Sharded saves by several ranks are
// written and read by test_sharded.cpp's "mpi np2" case.
#include "support.hpp"

#include <complex>
#include <map>
#include <optional>

namespace python_reader_test {

// No anonymous namespace: clang's -Wundefined-internal flags the reflection's field
// probes (detail/field_names.hpp) of a struct with internal linkage holding an optional.
using test::TempDir;

enum class Color : std::int16_t { red = 1, green = 7 };

struct Layer {
  xt::xtensor<float, 1> w;
};

// One leaf of every kind the native format stores.
struct Kinds {
  bool flag = true;
  std::int8_t i8 = -5;
  std::uint16_t u16 = 65000;
  std::int32_t i32 = -123456;
  std::uint64_t u64 = std::uint64_t{1} << 60;
  float f32 = 1.5f;
  double f64 = -2.25;
  std::complex<float> c64{1.f, -2.f};
  std::complex<double> c128{3., 4.};
  ckpt::bfloat16 bf16{-0.375f};
  ckpt::float16 f16{0.099975586f};  // exact in float16
  Color color = Color::green;
  std::string text = "h\xc3\xa9llo, ckpt";
  std::string empty_text;
  std::optional<std::int32_t> nothing;
  std::optional<std::int32_t> something = 42;
  std::vector<double> vec{0.5, 1.5, 2.5};
  std::vector<bool> bits{true, false, true, true};
  std::array<std::int32_t, 3> arr{7, 8, 9};
  std::vector<float> no_floats;                    // an empty array: shape [0]
  std::vector<Layer> no_layers;                    // an empty list of subtrees: an empty node
  std::map<std::string, float> no_entries;         // an empty map: an empty node
  xt::xtensor<float, 2> small;                     // inline
  xt::xtensor<float, 2> large;                     // out of line (12 KiB)
  xt::xtensor<std::int64_t, 3> ints;               // out of line
  xt::xtensor<ckpt::bfloat16, 1> bf_array;         // out of line (4 KiB)
  xt::xtensor<std::uint8_t, 1> blob;               // bytes, out of line
  xt::xtensor<double, 2> zero_rows;                // no elements
  std::map<std::string, std::int32_t> names;       // keys needing escapes in dotted paths
  std::vector<Layer> layers;                       // list indices in paths
  std::mt19937_64 rng{12345};                      // a string leaf
};

Kinds make_kinds() {
  Kinds k;
  k.small = xt::xtensor<float, 2>::from_shape({2, 3});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) k.small(i, j) = static_cast<float>(i * 3 + j) - 2.5f;
  k.large = xt::xtensor<float, 2>::from_shape({64, 48});
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 48; ++j) k.large(i, j) = static_cast<float>(i) * 0.5f + static_cast<float>(j) * 0.25f;
  k.ints = xt::xtensor<std::int64_t, 3>::from_shape({30, 4, 5});
  for (std::size_t i = 0; i < 30; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t l = 0; l < 5; ++l)
        k.ints(i, j, l) = static_cast<std::int64_t>(i * 100 + j * 10 + l) - 250;
  k.bf_array = xt::xtensor<ckpt::bfloat16, 1>::from_shape({2048});
  for (std::size_t i = 0; i < 2048; ++i) k.bf_array(i) = ckpt::bfloat16(static_cast<float>(i % 64) * 0.5f - 8.f);
  k.blob = xt::xtensor<std::uint8_t, 1>::from_shape({5000});
  for (std::size_t i = 0; i < 5000; ++i) k.blob(i) = static_cast<std::uint8_t>(i * 7 % 256);
  k.zero_rows = xt::xtensor<double, 2>::from_shape({0, 3});
  k.names = {{"a.b", 1}, {"back\\slash", 2}, {"plain", 3}};
  for (std::size_t l = 0; l < 2; ++l) {
    Layer layer;
    layer.w = xt::xtensor<float, 1>::from_shape({3});
    for (std::size_t i = 0; i < 3; ++i) layer.w(i) = static_cast<float>(l * 10 + i);
    k.layers.push_back(layer);
  }
  return k;
}

// Format version 2: a leaf longer than one checksum chunk (3 MiB).
struct Chunked {
  std::int64_t step = 3;
  std::vector<float> big;
};

// Format version 3: 1,100 leaves fit a record (inline and in data files); a leaf with
// chunk checksums stays a map among them.
struct Records {
  std::vector<Layer> layers;
  std::vector<float> big;
};

Records make_records() {
  Records r;
  for (std::size_t l = 0; l < 1100; ++l) {
    Layer layer;
    const std::size_t n = l % 100 == 0 ? 1100 : 4;  // every hundredth out of line
    layer.w = xt::xtensor<float, 1>::from_shape({n});
    for (std::size_t i = 0; i < n; ++i) layer.w(i) = static_cast<float>(l) + static_cast<float>(i) * 0.5f;
    r.layers.push_back(std::move(layer));
  }
  r.big.resize(600 * 1024);
  for (std::size_t i = 0; i < r.big.size(); ++i) r.big[i] = static_cast<float>(i % 1000) * 0.25f;
  return r;
}

// A manager's state: a frozen leaf (hard-linked by incremental steps) and a trained one.
struct Model {
  std::int64_t step = 0;
  std::vector<float> frozen;  // 2 MiB
  std::vector<float> head;    // 1.5 MiB, changes every step
};

Model make_model(std::int64_t step) {
  Model m;
  m.step = step;
  m.frozen.resize(512 * 1024);
  m.head.resize(384 * 1024);
  for (std::size_t i = 0; i < m.frozen.size(); ++i) m.frozen[i] = static_cast<float>(i % 1000) * 0.25f;
  for (std::size_t i = 0; i < m.head.size(); ++i) m.head[i] = static_cast<float>(step) + static_cast<float>(i % 99);
  return m;
}

struct Position {
  std::int64_t epoch = 0;
  std::int64_t offset = 0;
};

struct ShardedState {
  std::int64_t step = 0;
  ckpt::Sharded<xt::xtensor<float, 2>> w;
};

TEST_CASE("the Python reader reads what the C++ side writes: every leaf kind, format versions 1 to 3, incremental steps, damage") {
  TempDir dir;
  ckpt::save(dir / "kinds", make_kinds());
  {
    Chunked c;
    c.big.resize(768 * 1024);
    for (std::size_t i = 0; i < c.big.size(); ++i) c.big[i] = static_cast<float>(i % 1000) * 0.25f;
    ckpt::save(dir / "chunked", c);
  }
  ckpt::save(dir / "records", make_records());
  {  // one process holding the whole 6x5 array as one box
    ShardedState s;
    s.step = 7;
    s.w = {{6, 5}, {0, 0}, xt::xtensor<float, 2>::from_shape({6, 5})};
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t j = 0; j < 5; ++j) s.w.local(i, j) = static_cast<float>(100 * i + j);
    ckpt::save(dir / "sharded_one", s);
  }
  {  // incremental steps with metrics, items and custom metadata; the first step's NaN is dropped
    ckpt::CheckpointManager<Model> mgr(dir / "run", {.max_to_keep = 3, .step_prefix = "step_", .incremental = true});
    for (std::int64_t step = 0; step < 4; ++step) {
      const double loss = step == 0 ? std::nan("") : 1.0 / static_cast<double>(step + 1);
      REQUIRE(mgr.save(step * 10, make_model(step * 10), {{"loss", loss}, {"acc", 0.5 + 0.1 * static_cast<double>(step)}},
                       {.items = {{"dataset", ckpt::tree_item(Position{step, step * 100})},
                                  {"config", ckpt::json_item({{"lr", 0.001}, {"name", "run"}})}},
                        .custom_metadata = {{"host", "test"}, {"step_again", step * 10}}}));
    }
    REQUIRE(mgr.all_steps() == std::vector<std::int64_t>{10, 20, 30});
  }
  {  // guard_non_finite: the second step's head holds a NaN
    ckpt::CheckpointManager<Model> mgr(dir / "guarded", {.guard_non_finite = true});
    Model m = make_model(1);
    REQUIRE(mgr.save(1, m, {{"loss", 0.5}}));
    m.head[3] = std::nanf("");
    REQUIRE(mgr.save(2, m, {{"loss", 0.4}}));
  }
  test::python_reader_tests(dir.path(), "not mpi");
}

}  // namespace python_reader_test
