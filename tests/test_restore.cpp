// The restore API: restore<T>, restore_into, subtrees, partial targets, missing
// leaves, shape and dtype checks, restore_tree and metadata.
#include "support.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace restore_test {

using test::Dense;
using test::Params;
struct Adam {
  Params mu, nu;
  std::int64_t count = 0;
};
struct TrainState {
  std::int64_t step = 0;
  Params params;
  Adam opt;
  std::mt19937_64 rng;
  std::map<std::string, float> config;
};

using test::StepOnly;
// A newer version with a field the checkpoint lacks.
struct WithExtra {
  std::int64_t step = 0;
  std::vector<float> extra = {9, 9};
  double other = 1.5;
};
struct FixedShapes {
  xt::xtensor_fixed<float, xt::xshape<3, 2>> kernel;  // the checkpoint has [2,3]
};
struct WrongRank {
  xt::xtensor<float, 3> kernel;
};
struct WrongDtype {
  xt::xtensor<std::int32_t, 2> kernel;  // float32 never converts to an integer
};

Dense dense(std::size_t in, std::size_t out, float base) {
  Dense d;
  d.kernel = xt::arange<float>(static_cast<float>(in * out)).reshape({in, out}) + base;
  d.bias = xt::arange<float>(static_cast<float>(out)) - base;
  return d;
}

TrainState make_state() {
  TrainState s;
  s.step = 1234;
  s.params = {dense(2, 3, 0.5f), dense(3, 2, 100.0f)};
  s.opt.mu = {dense(2, 3, 1.0f), dense(3, 2, 2.0f)};
  s.opt.nu = {dense(2, 3, 3.0f), dense(3, 2, 4.0f)};
  s.opt.count = 77;
  s.rng.seed(5);
  s.rng.discard(10);
  s.config = {{"lr", 0.001f}, {"warmup", 100.0f}};
  return s;
}

void check_equal(const Dense& a, const Dense& b) {
  CHECK(a.kernel == b.kernel);
  CHECK(a.bias == b.bias);
}

}  // namespace restore_test

namespace restore_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("restore<T> gives back every field of the saved state") {
  test::TempDir tmp;
  TrainState s = make_state();
  ckpt::save(tmp / "c", s);
  TrainState r = ckpt::restore<TrainState>(tmp / "c");
  CHECK(r.step == 1234);
  check_equal(r.params.encoder, s.params.encoder);
  check_equal(r.params.decoder, s.params.decoder);
  check_equal(r.opt.nu.decoder, s.opt.nu.decoder);
  CHECK(r.opt.count == 77);
  CHECK(r.rng() == s.rng());
  CHECK(r.config == s.config);
}

TEST_CASE("restore_into reads into an existing value of the same shapes") {
  test::TempDir tmp;
  TrainState s = make_state();
  ckpt::save(tmp / "c", s);
  TrainState target = make_state();
  target.params.encoder.kernel.fill(0.0f);
  const float* before = target.params.encoder.kernel.data();
  ckpt::restore_into(tmp / "c", target);
  CHECK(target.params.encoder.kernel == s.params.encoder.kernel);
  CHECK(target.params.encoder.kernel.data() == before);  // read in place, not reallocated
}

TEST_CASE("restore_into refuses a non-empty array of another shape, naming the path") {
  test::TempDir tmp;
  ckpt::save(tmp / "c", make_state());
  TrainState target = make_state();
  target.params.encoder.kernel = xt::zeros<float>({3, 2});
  try {
    ckpt::restore_into(tmp / "c", target);
    FAIL("expected ShapeMismatchError");
  } catch (const ckpt::ShapeMismatchError& e) {
    const std::string msg = e.what();
    CHECK(msg.find((tmp / "c").string()) != std::string::npos);
    CHECK(msg.find("params.encoder.kernel") != std::string::npos);
    CHECK(msg.find("[2,3] in checkpoint, [3,2] in target") != std::string::npos);
    CHECK(e.path() == "params.encoder.kernel");
  }
}

TEST_CASE("fixed-rank and fixed-shape targets check rank and shape") {
  test::TempDir tmp;
  struct One {
    xt::xtensor<float, 2> kernel = xt::zeros<float>({2, 3});
  };
  ckpt::save(tmp / "c", One{});
  CHECK_THROWS_CKPT(ckpt::restore<FixedShapes>(tmp / "c"), ckpt::ShapeMismatchError, "kernel: shape ");
  CHECK_THROWS_WITH_AS(ckpt::restore<WrongRank>(tmp / "c"), doctest::Contains("rank 2"), ckpt::ShapeMismatchError);
  CHECK_THROWS_WITH_AS(ckpt::restore<WrongDtype>(tmp / "c"),
                       doctest::Contains("kernel: dtype float32 in checkpoint, int32 in target"),
                       ckpt::DtypeMismatchError);
}

TEST_CASE("a subtree restores into a type of its own") {
  test::TempDir tmp;
  TrainState s = make_state();
  ckpt::save(tmp / "c", s);
  const Params p = ckpt::restore<Params>(tmp / "c", {.subtree = "params"});
  check_equal(p.encoder, s.params.encoder);
  check_equal(p.decoder, s.params.decoder);
  const Dense nu_dec = ckpt::restore<Dense>(tmp / "c", {.subtree = "opt.nu.decoder"});
  check_equal(nu_dec, s.opt.nu.decoder);
  CHECK(ckpt::restore<float>(tmp / "c", {.subtree = "config.lr"}) == 0.001f);
  CHECK_THROWS_CKPT(ckpt::restore<Params>(tmp / "c", {.subtree = "nope"}), ckpt::MissingLeafError,
                    "missing from the checkpoint");
}

// A model of N layers (a tuple: its size is the target's, not the checkpoint's).
struct Layer {
  std::vector<float> w, b;
  bool operator==(const Layer&) const = default;
};
template <std::size_t... I>
auto layers_of(std::index_sequence<I...>) -> std::tuple<decltype((void)I, Layer{})...>;
template <std::size_t N>
using Layers = decltype(layers_of(std::make_index_sequence<N>{}));
template <std::size_t N>
struct Model {
  Layers<N> layers;
  std::vector<float> head;
};
struct Headless {
  Layers<16> layers;
};

Model<16> model16() {
  Model<16> m;
  float k = 0;
  std::apply([&](auto&... l) { ((l.w = {k, k + 0.5f}, l.b = {-k}, k += 1), ...); }, m.layers);
  m.head = {7, 8, 9};
  return m;
}

// Both restore paths: ckpt::restore reads a local native checkpoint through its leaf
// table; restore_from_index through its Index (as any other format or storage).
template <class T>
T via_index(const std::filesystem::path& dir, const ckpt::RestoreOptions& opts = {}) {
  T value{};
  ckpt::detail::restore_from_index(ckpt::open_index(dir), value, opts, false);
  return value;
}

TEST_CASE("strict restores: a target that leaves checkpoint leaves unused is refused, naming them") {
  test::TempDir tmp;
  const Model<16> m = model16();
  ckpt::save(tmp / "c", m);
  const std::string dir = (tmp / "c").string();
  for (const bool table : {true, false}) {
    CAPTURE(table);
    const auto restore = [&]<class T>(std::type_identity<T>, const ckpt::RestoreOptions& o = {}) {
      return table ? ckpt::restore<T>(tmp / "c", o) : via_index<T>(tmp / "c", o);
    };
    // A 12-layer model from a 16-layer checkpoint: layers 12 to 15 named, and counted.
    try {
      (void)restore(std::type_identity<Model<12>>{});
      FAIL("restored 12 of 16 layers without asking");
    } catch (const ckpt::UnusedLeafError& e) {
      CHECK(e.checkpoint() == dir);
      CHECK(e.unused_count() == 8);
      CHECK(e.unused_paths() == std::vector<std::string>{"layers.12.w", "layers.12.b", "layers.13.w", "layers.13.b",
                                                         "layers.14.w", "layers.14.b", "layers.15.w", "layers.15.b"});
      CHECK(std::string(e.what()) == dir + ": the target does not use 8 leaves of the checkpoint: layers.12.w, "
                                           "layers.12.b, layers.13.w, layers.13.b, layers.14.w, layers.14.b, "
                                           "layers.15.w, layers.15.b; restore a part on purpose with "
                                           "RestoreOptions{.partial = true}");
    }
    // A struct that lacks the head.
    CHECK_THROWS_CKPT(restore(std::type_identity<Headless>{}), ckpt::UnusedLeafError,
                      ": the target does not use 1 leaf of the checkpoint: head; restore a part on purpose");
    // More than the message names: the first ones, and how many are left.
    try {
      (void)restore(std::type_identity<StepOnly>{}, {.allow_missing = true});
      FAIL("restored 1 field of 33 leaves without asking");
    } catch (const ckpt::UnusedLeafError& e) {
      CHECK(e.unused_count() == 33);
      CHECK(e.unused_paths().size() == ckpt::UnusedLeafError::named);
      CHECK(e.unused_paths().front() == "layers.0.w");
      CHECK(std::string(e.what()).find("layers.3.b, ... (25 more); restore a part") != std::string::npos);
    }

    // .partial = true restores the part on purpose.
    const Model<12> part = restore(std::type_identity<Model<12>>{}, {.partial = true});
    CHECK(std::get<11>(part.layers).w == std::get<11>(m.layers).w);
    CHECK(std::get<0>(part.layers).b == std::get<0>(m.layers).b);
    CHECK(part.head == m.head);
    CHECK(restore(std::type_identity<Headless>{}, {.partial = true}).layers == m.layers);
    // The whole model is strict and restores.
    const Model<16> whole = restore(std::type_identity<Model<16>>{});
    CHECK(whole.layers == m.layers);
    CHECK(whole.head == m.head);

    // A subtree: strict within it, the leaves outside it are not unused.
    CHECK(restore(std::type_identity<Layers<16>>{}, {.subtree = "layers"}) == m.layers);
    CHECK(restore(std::type_identity<Layer>{}, {.subtree = "layers.3"}).w == std::get<3>(m.layers).w);
    CHECK(restore(std::type_identity<std::vector<float>>{}, {.subtree = "head"}) == m.head);
    try {
      (void)restore(std::type_identity<Layers<12>>{}, {.subtree = "layers"});
      FAIL("restored 12 of the subtree's 16 layers without asking");
    } catch (const ckpt::UnusedLeafError& e) {
      CHECK(e.unused_count() == 8);  // not the head
      CHECK(e.unused_paths().front() == "layers.12.w");
    }
    CHECK(std::get<11>(restore(std::type_identity<Layers<12>>{}, {.subtree = "layers", .partial = true})).w ==
          std::get<11>(m.layers).w);
  }

  // restore_into refuses the same.
  Model<12> into;
  std::apply([](auto&... l) { ((l.w = {-1.0f, -1.0f}, l.b = {-1.0f}), ...); }, into.layers);
  into.head = {-1, -1, -1};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", into), ckpt::UnusedLeafError, "layers.12.w");
  ckpt::restore_into(tmp / "c", into, {.partial = true});
  CHECK(std::get<3>(into.layers).w == std::get<3>(m.layers).w);
  CHECK(into.head == m.head);

  // A transform's tree is what the target must use: dropping the extra layers on purpose.
  const auto drop = [](ckpt::Tree& t) {
    for (int i = 12; i < 16; ++i) t.erase("layers." + std::to_string(i));
  };
  CHECK(ckpt::restore<Model<12>>(tmp / "c", {.transform = drop}).head == m.head);
}

TEST_CASE("strict restores: empty lists, maps and optionals, lazy and Sharded leaves are used") {
  test::TempDir tmp;
  struct Holder {
    std::vector<float> empty_list;
    std::vector<std::vector<float>> no_items;
    std::map<std::string, float> no_keys;
    std::optional<std::vector<float>> unset;
    ckpt::lazy<std::vector<float>> later;
    ckpt::Sharded<std::vector<float>> part;
  };
  Holder h;
  h.later = std::vector<float>{1, 2};
  h.part.local = {1, 2, 3, 4};
  h.part.global_shape = {4};
  h.part.offset = {0};
  ckpt::save(tmp / "c", h);
  for (const bool table : {true, false}) {
    CAPTURE(table);
    Holder back;
    back.part.global_shape = {4};
    back.part.offset = {1};
    back.part.local.resize(2);
    if (table) ckpt::restore_into(tmp / "c", back);
    else ckpt::detail::restore_from_index(ckpt::open_index(tmp / "c"), back, {}, true);
    CHECK(back.later.get() == std::vector<float>{1, 2});
    CHECK(back.part.local == std::vector<float>{2, 3});
    CHECK_FALSE(back.unset.has_value());
  }
}

TEST_CASE("leaves the checkpoint lacks: MissingLeafError naming every one, or kept with allow_missing") {
  test::TempDir tmp;
  ckpt::save(tmp / "c", StepOnly{42});
  try {
    (void)ckpt::restore<WithExtra>(tmp / "c");
    FAIL("expected MissingLeafError");
  } catch (const ckpt::MissingLeafError& e) {
    CHECK(e.missing_paths() == std::vector<std::string>{"extra", "other"});
    const std::string msg = e.what();
    CHECK(msg.find((tmp / "c").string()) != std::string::npos);
    CHECK(msg.find("extra, other") != std::string::npos);
  }
  WithExtra w = ckpt::restore<WithExtra>(tmp / "c", {.allow_missing = true});
  CHECK(w.step == 42);
  CHECK(w.extra == std::vector<float>{9, 9});
  CHECK(w.other == 1.5);
}

namespace {
// A kind of error of the caller's own, as ckpt::ErrorKind documents it.
class QuotaError : public ckpt::ErrorKind<QuotaError> {
 public:
  using ErrorKind::ErrorKind;
};
// What a save does with a failure in its staging directory: rethrow_about(target, ...).
template <class E>
void rethrown_about(const E& original, const std::string& target, const std::string& what) {
  try {
    throw original;
  } catch (const ckpt::Error& e) {
    e.rethrow_about(target, what);
  }
}
}  // namespace

TEST_CASE("rethrow_about keeps the kind, the path and a kind's own fields, with the new checkpoint") {
  const ckpt::MissingLeafError missing("/run/.tmp-3", {"a", "b"});
  try {
    rethrown_about(missing, "/run/3", "gone");
    FAIL("expected MissingLeafError");
  } catch (const ckpt::MissingLeafError& e) {
    CHECK(e.checkpoint() == "/run/3");
    CHECK(e.path() == "a, b");
    CHECK(e.missing_paths() == std::vector<std::string>{"a", "b"});
    CHECK(std::string(e.what()) == "/run/3: a, b: gone");
  }
  CHECK_THROWS_AS(rethrown_about(ckpt::BackgroundSaveTimeoutError("/r", "", "slow"), "/s", "slow"),
                  ckpt::BackgroundSaveTimeoutError);
  CHECK_THROWS_AS(rethrown_about(ckpt::CorruptCheckpointError("/r", "x", "bad"), "/s", "bad"),
                  ckpt::CorruptCheckpointError);
  CHECK_THROWS_AS(rethrown_about(QuotaError("/r", "", "over quota"), "/s", "over quota"), QuotaError);
  try {
    rethrown_about(ckpt::Error("/r", "p", "plain"), "/s", "still plain");
  } catch (const ckpt::CorruptCheckpointError&) {
    FAIL("a plain Error became another kind");
  } catch (const ckpt::Error& e) {
    CHECK(std::string(e.what()) == "/s: p: still plain");
  }
}

TEST_CASE("restore_tree loads every leaf; as<U> converts to any matching leaf type") {
  test::TempDir tmp;
  TrainState s = make_state();
  ckpt::save(tmp / "c", s);
  const ckpt::Tree t = ckpt::restore_tree(tmp / "c");
  CHECK(t.size() == ckpt::metadata(tmp / "c").size());
  CHECK(t.leaf("params.encoder.kernel").loaded());
  const auto& k = t.leaf("params.encoder.kernel");
  CHECK(ckpt::dtype_name(k.dtype()) == "float32");
  CHECK(k.shape() == ckpt::Shape{2, 3});
  CHECK(k.as<xt::xarray<float>>() == s.params.encoder.kernel);
  CHECK(k.as<xt::xtensor<float, 2>>() == s.params.encoder.kernel);
  const auto flat = t.leaf("params.encoder.bias").as<std::vector<float>>();
  CHECK(flat == std::vector<float>(s.params.encoder.bias.begin(), s.params.encoder.bias.end()));
  CHECK(t.leaf("step").as<std::int64_t>() == 1234);
  CHECK(t.leaf("config.lr").as<float>() == 0.001f);
  CHECK(t.leaf("step").as<std::int32_t>() == 1234);  // integer narrowing: the value fits
  CHECK_THROWS_CKPT(t.leaf("step").as<std::int8_t>(), ckpt::DtypeMismatchError, "step: element 0 does not fit in int8 (dtype int64 in checkpoint)");
  CHECK_THROWS_CKPT(t.leaf("params.encoder.kernel").as<std::vector<float>>(), ckpt::ShapeMismatchError,
                    "params.encoder.kernel: rank 2");
  CHECK_THROWS_CKPT(t.leaf("no.such.leaf"), ckpt::MissingLeafError, "no.such.leaf: leaf missing from the checkpoint");
  auto rng = t.leaf("rng").as<std::mt19937_64>();
  CHECK(rng() == s.rng());
}

TEST_CASE("the index keeps paths in path order: list items by number, then names, whatever order the file has") {
  test::TempDir tmp;
  struct Mixed {
    std::vector<std::int32_t> head;  // saved before the list: not in path order
    std::vector<std::vector<std::int32_t>> items;
    std::map<std::string, std::int32_t> by_name;
  } m;
  m.head = {7};
  for (int i = 0; i < 12; ++i) m.items.push_back({i});
  m.by_name = {{"10", 1}, {"9", 2}, {"b", 3}, {"a", 4}, {"09", 5}};
  ckpt::save(tmp / "c", m);
  const auto index = ckpt::open_index(tmp / "c");
  // 2 before 10 (bytes would put "10" before "2"); all-digit names by length, then
  // digits ("09" is no list index, but sorts among them); then the other names
  std::vector<std::string> numbered;
  for (int i = 0; i < 12; ++i) numbered.push_back(std::to_string(i));
  CHECK(index->children(ckpt::Path({"items"})) == numbered);
  CHECK(index->children(ckpt::Path({"by_name"})) == std::vector<std::string>{"9", "09", "10", "a", "b"});
  CHECK(index->children(ckpt::Path()) == std::vector<std::string>{"by_name", "head", "items"});
  CHECK(index->has_subtree(ckpt::Path({"items"})));
  CHECK(index->has_subtree(ckpt::Path({"items", "11"})));
  CHECK_FALSE(index->has_subtree(ckpt::Path({"items", "12"})));
  for (const auto& e : index->entries()) CHECK(index->find(e.path) == &e);
  CHECK(index->find(ckpt::Path({"items", "1", "0"})) == nullptr);
  const Mixed back = ckpt::restore<Mixed>(tmp / "c");
  CHECK(back.items == m.items);
  CHECK(back.by_name == m.by_name);
  CHECK(back.head == m.head);
}

TEST_CASE("a list restores only from items numbered 0..n-1, each once") {
  test::TempDir tmp;
  struct AsMap {
    std::map<std::string, std::vector<float>> xs;
  };
  struct AsList {
    std::vector<std::vector<float>> xs;  // a list of leaves (a vector<float> is one leaf)
  };
  // The same leaves as a map: its keys become the list's item names.
  const auto restore_keys = [&](std::vector<std::string> keys) {
    AsMap m;
    for (std::size_t i = 0; i < keys.size(); ++i) m.xs[keys[i]] = {static_cast<float>(i)};
    ckpt::save(tmp / "c", m, {.force = true});
    return ckpt::restore<AsList>(tmp / "c").xs;
  };
  std::vector<std::string> twelve;
  for (int i = 11; i >= 0; --i) twelve.push_back(std::to_string(i));
  const auto back = restore_keys(twelve);  // saved in map order, read by number
  REQUIRE(back.size() == 12);
  for (int i = 0; i < 12; ++i) CHECK(back[static_cast<std::size_t>(i)] == std::vector<float>{static_cast<float>(11 - i)});
  for (const auto& bad : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"0", "2"}, "2"}, {{"1"}, "1"}, {{"0", "00"}, "00"}, {{"0", "01"}, "01"}, {{"0", "1", "x"}, "x"},
           {{"999999999"}, "999999999"}, {{"-1", "0"}, "-1"}}) {
    // Not a structured binding: clang 14 cannot capture one in doctest's lambdas.
    const std::vector<std::string>& keys = bad.first;
    const std::string& found = bad.second;
    CAPTURE(found);
    try {
      (void)restore_keys(keys);
      FAIL("restored a list from items " << found);
    } catch (const ckpt::Error& e) {
      CHECK(e.checkpoint() == (tmp / "c").string());
      CHECK(e.path() == "xs");
      CHECK_MESSAGE(std::string(e.what()).find("list items are not numbered 0.." + std::to_string(keys.size() - 1) +
                                               " (found \"" + found + "\")") != std::string::npos,
                    e.what());
    }
  }
  // Items that are not all leaves: a list of leaves in the target, an inner node at
  // item 1 in the checkpoint. Both the leaf table and an Index (a transform asks for
  // one) look the items up one by one then, and name the item.
  struct Nested {
    std::tuple<std::vector<float>, std::map<std::string, std::vector<float>>> xs{{1.0f}, {{"k", {2.0f}}}};
  };
  ckpt::save(tmp / "n", Nested{});
  for (const ckpt::RestoreOptions& opts : {ckpt::RestoreOptions{}, ckpt::RestoreOptions{.transform = [](ckpt::Tree&) {}}}) {
    try {
      (void)ckpt::restore<AsList>(tmp / "n", opts);
      FAIL("restored an inner node into a leaf");
    } catch (const ckpt::Error& e) {
      CHECK(e.path() == "xs.1");
      CHECK_MESSAGE(std::string(e.what()).find("an inner node in the checkpoint, a leaf in the target") != std::string::npos,
                    e.what());
    }
  }
}

TEST_CASE("the sort a restore uses for nearly sorted leaves is stable and says when they were strictly in order") {
  // (key, position): equal keys must keep their positions' order, as std::stable_sort does.
  using Item = std::pair<int, int>;
  const auto by_key = [](const Item& a, const Item& b) { return a.first < b.first; };
  std::mt19937 rng(11);
  for (int runs : {1, 2, 3, 16, 17, 200}) {
    for (int trial = 0; trial < 20; ++trial) {
      // `runs` ascending runs of random length, keys drawn from a small range (ties).
      std::vector<Item> v;
      for (int r = 0; r < runs; ++r) {
        std::vector<int> keys(1 + rng() % 50);
        for (int& k : keys) k = static_cast<int>(rng() % 40);
        std::sort(keys.begin(), keys.end());
        for (int k : keys) v.push_back({k, static_cast<int>(v.size())});
      }
      std::vector<Item> want = v;
      std::stable_sort(want.begin(), want.end(), by_key);
      bool strict = true;
      for (std::size_t k = 1; k < v.size(); ++k) strict = strict && v[k - 1].first < v[k].first;
      CHECK(ckpt::detail::stable_sort_runs(v.begin(), v.end(), by_key) == strict);
      CHECK(v == want);
    }
  }
  // A scalar before a list, as a restore's leaves come: two runs.
  std::vector<Item> leaves{{9, 0}};
  for (int i = 0; i < 1000; ++i) leaves.push_back({i, i + 1});
  CHECK_FALSE(ckpt::detail::stable_sort_runs(leaves.begin(), leaves.end(), by_key));
  CHECK(std::is_sorted(leaves.begin(), leaves.end(), by_key));
  CHECK(leaves[10] == Item{9, 10});
  CHECK(leaves[9] == Item{9, 0});  // the scalar's key equals item 9's: it came first
  std::vector<Item> none;
  CHECK(ckpt::detail::stable_sort_runs(none.begin(), none.end(), by_key));
}

TEST_CASE("metadata reads no data: a corrupted data file shows only when a leaf is read") {
  test::TempDir tmp;
  TrainState s = make_state();
  s.params.encoder.kernel = xt::ones<float>({64, 64});  // 16 KiB: into a data file
  ckpt::save(tmp / "c", s);
  auto data = test::read_bytes(tmp / "c" / "data-0");
  REQUIRE(data.size() >= 16384);
  data[100] ^= 0x40;
  test::write_bytes(tmp / "c" / "data-0", data);

  const auto md = ckpt::metadata(tmp / "c");  // reads the manifest only: no checksum is checked
  CHECK(md.leaf("params.encoder.kernel").shape() == ckpt::Shape{64, 64});
  CHECK_FALSE(md.leaf("params.encoder.kernel").loaded());
  CHECK(md.leaf("step").as<std::int64_t>() == 1234);  // inline leaves still read fine
  CHECK_THROWS_WITH_AS(md.leaf("params.encoder.kernel").as<xt::xarray<float>>(),
                       doctest::Contains("params.encoder.kernel: checksum mismatch"), ckpt::CorruptCheckpointError);
  CHECK_THROWS_CKPT(ckpt::restore_tree(tmp / "c"), ckpt::CorruptCheckpointError,
                    "params.encoder.kernel: checksum mismatch");
}

TEST_CASE("save refuses an existing checkpoint unless forced, and force replaces it whole") {
  test::TempDir tmp;
  ckpt::save(tmp / "c", StepOnly{1});
  CHECK_THROWS_WITH_AS(ckpt::save(tmp / "c", StepOnly{2}), doctest::Contains("already exists"), ckpt::Error);
  CHECK(ckpt::restore<StepOnly>(tmp / "c").step == 1);
  TrainState big = make_state();
  big.params.encoder.kernel = xt::ones<float>({100, 100});
  ckpt::save(tmp / "c", big, {.force = true});
  CHECK(ckpt::restore<TrainState>(tmp / "c").params.encoder.kernel == big.params.encoder.kernel);
  ckpt::save(tmp / "c", StepOnly{3}, {.force = true});
  CHECK(ckpt::restore<StepOnly>(tmp / "c").step == 3);
  CHECK_THROWS_CKPT(ckpt::restore<TrainState>(tmp / "c"), ckpt::MissingLeafError,
                    "leaves missing from the checkpoint");  // old leaves are gone
  // Nothing but the checkpoint is left in the parent: no staging directories.
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(tmp.path())) names.push_back(f.path().filename());
  CHECK(names == std::vector<std::string>{"c"});
}

TEST_CASE("restoring from a directory that is not a checkpoint names it") {
  test::TempDir tmp;
  CHECK_THROWS_WITH_AS(ckpt::restore<StepOnly>(tmp / "absent"), doctest::Contains("absent"), ckpt::Error);
  std::filesystem::create_directories(tmp / "empty");
  CHECK_THROWS_WITH_AS(ckpt::restore<StepOnly>(tmp / "empty"), doctest::Contains("no commit marker"),
                       ckpt::CorruptCheckpointError);
}

TEST_CASE("restore under max_memory: a leaf cast to another dtype is converted a piece at a time") {
  test::TempDir tmp;
  struct Wide {
    std::vector<double> w;
    std::int64_t step = 0;
  };
  struct Narrow {
    std::vector<float> w;
    std::int64_t step = 0;
  };
  constexpr std::size_t n = std::size_t{24} << 20;  // 192 MiB of float64: far above the budget
  constexpr std::uint64_t budget = std::uint64_t{32} << 20;
  {
    Wide s;
    s.w.resize(n);
    for (std::size_t i = 0; i < n; ++i) s.w[i] = static_cast<double>(i % 4099) * 0.5;
    s.step = 3;
    ckpt::save(tmp / "c", s);
  }
  Narrow t;
  t.w.assign(n, -1.0f);  // the target, resident before the restore
  test::reset_peak_rss();
  const std::uint64_t before = test::rss_bytes();
  ckpt::restore_into(tmp / "c", t, {.restore_dtype = ckpt::dtype::float32, .max_memory = budget});
  const std::uint64_t peak = test::peak_rss_bytes();
  CHECK(t.step == 3);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += t.w[i] != static_cast<float>(i % 4099) * 0.5f;
  CHECK(wrong == 0);
#ifndef CKPT_TEST_SANITIZED
  INFO("resident set: " << before << " B before, peak " << peak << " B");
  CHECK(peak < before + budget);
#else
  (void)before, (void)peak;
#endif
  // A corrupted piece is found even though the leaf is never held whole.
  {
    const auto index = ckpt::open_index(tmp / "c");
    const ckpt::IndexEntry* e = index->find(ckpt::Path::parse("w"));
    REQUIRE(e != nullptr);
    std::fstream f(tmp / "c" / e->file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(e->offset + e->length - 100));
    f.put('\x55');
  }
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", t, {.restore_dtype = ckpt::dtype::float32, .max_memory = budget}),
                    ckpt::CorruptCheckpointError, "checksum mismatch in bytes");

  // A format that reads leaves whole (t5x's zarr arrays) refuses a cast that would need
  // more than the budget, naming the leaf, instead of exceeding it.
  struct Kernel {
    xt::xtensor<float, 2> kernel;
  };
  Kernel k;
  const auto fixture = std::filesystem::path(CKPT_FIXTURES_DIR) / "t5x/tiny_t5/checkpoint_1";
  CHECK_THROWS_CKPT(ckpt::restore_into(fixture, k,
                                       {.subtree = "state.param_states", .partial = true,
                                        .restore_dtype = ckpt::dtype::float32, .max_memory = 100}),
                    ckpt::Error, "more than max_memory");
  ckpt::restore_into(fixture, k,
                     {.subtree = "state.param_states", .partial = true, .restore_dtype = ckpt::dtype::float32,
                      .max_memory = 4096});
  CHECK(k.kernel.shape()[0] == 10);
}

// ---- the native format's leaf table (format/native/leaf_table.hpp) --------------------

struct TableInner {
  std::vector<double> w;
  std::string name;
};
// Every kind of leaf a table restore meets: leaves it reads itself (small arrays,
// strings, a scalar in a data file) and leaves it hands to its side index (an empty
// optional, a leaf with chunk checksums), in an order that is not path order.
struct TableMixed {
  std::int64_t step = 0;
  std::string tag;
  std::optional<std::vector<float>> unset;
  std::optional<std::int32_t> some;
  std::vector<std::vector<float>> small;   // 256 bytes each: inline in the manifest
  std::vector<std::vector<float>> medium;  // 4 KiB and more: in a data file
  std::vector<float> big;                  // 3 MiB: chunk checksums
  std::map<std::string, TableInner> named;
  xt::xtensor<float, 2> matrix;
  std::vector<std::vector<std::int16_t>> after;
};

TableMixed table_state() {
  TableMixed m;
  m.step = 41;
  m.tag = "run-7";
  m.some = -3;
  for (int i = 0; i < 300; ++i) m.small.push_back(std::vector<float>(64, static_cast<float>(i) * 0.5f));
  for (int i = 0; i < 200; ++i) m.medium.push_back(std::vector<float>(1024 + 512 * (i % 3), static_cast<float>(i) - 0.25f));
  m.big.resize(std::size_t{3} << 18);
  for (std::size_t i = 0; i < m.big.size(); ++i) m.big[i] = static_cast<float>(i % 1000);
  m.named["b"] = {{1.0, 2.0}, "bee"};
  m.named["a"] = {{3.0}, "ay"};
  m.matrix = xt::arange<float>(12.0f).reshape({3, 4});
  for (int i = 0; i < 11; ++i) m.after.push_back({static_cast<std::int16_t>(i), 7});
  return m;
}

void check_table_state(const TableMixed& a, const TableMixed& b) {
  CHECK(a.step == b.step);
  CHECK(a.tag == b.tag);
  CHECK(a.unset.has_value() == b.unset.has_value());
  CHECK(a.some == b.some);
  CHECK(a.small == b.small);
  CHECK(a.medium == b.medium);
  CHECK(a.big == b.big);
  REQUIRE(a.named.size() == b.named.size());
  for (const auto& [k, v] : a.named) {
    CHECK(b.named.at(k).w == v.w);
    CHECK(b.named.at(k).name == v.name);
  }
  CHECK(a.matrix == b.matrix);
  CHECK(a.after == b.after);
}

TEST_CASE("a local native checkpoint restores through its leaf table, as through its Index") {
  test::TempDir tmp;
  const TableMixed m = table_state();
  ckpt::save(tmp / "c", m);
  // The table serves plain restores, with or without a subtree or a cast...
  CHECK(ckpt::detail::table_fill(tmp / "c", {}, false) != nullptr);
  CHECK(ckpt::detail::table_fill(tmp / "c", {.subtree = "named", .restore_dtype = ckpt::dtype::float32}, true) != nullptr);
  // ...and not what only an Index serves, nor another format, nor a non-checkpoint.
  CHECK(ckpt::detail::table_fill(tmp / "c", {.transform = [](ckpt::Tree&) {}}, false) == nullptr);
  CHECK(ckpt::detail::table_fill(tmp / "c", {.progress = [](const ckpt::Progress&) { return true; }}, false) == nullptr);
  CHECK(ckpt::detail::table_fill(tmp / "c", {.max_memory = 1 << 20}, false) == nullptr);
  std::filesystem::create_directories(tmp / "empty");
  CHECK(ckpt::detail::table_fill(tmp / "empty", {}, false) == nullptr);

  {  // the table fill itself, which must not need the Index for any of these leaves
    TableMixed direct;
    const auto table = ckpt::detail::table_fill(tmp / "c", {}, false);
    ckpt::Path start = table->start();
    ckpt::fill_from_index(direct, start, *table);
    table->finish();
    check_table_state(m, direct);
  }
  const TableMixed via_table = ckpt::restore<TableMixed>(tmp / "c");
  check_table_state(m, via_table);
  TableMixed via_index;
  ckpt::detail::restore_from_index(ckpt::open_index(tmp / "c"), via_index, {}, false);
  check_table_state(m, via_index);

  // Into a value of the same shapes, its arrays already sized.
  TableMixed into = table_state();
  for (auto& v : into.small) std::fill(v.begin(), v.end(), -1.0f);
  for (auto& v : into.medium) std::fill(v.begin(), v.end(), -1.0f);
  std::fill(into.big.begin(), into.big.end(), -1.0f);
  into.step = 0;
  ckpt::restore_into(tmp / "c", into);
  check_table_state(m, into);
  // A non-empty array of another shape is refused, naming it.
  into.small[5].resize(3);
  try {
    ckpt::restore_into(tmp / "c", into);
    FAIL("restored 64 floats into 3");
  } catch (const ckpt::ShapeMismatchError& e) {
    CHECK(e.path() == "small.5");
  }

  // A subtree into its own type, with a cast of its doubles to floats.
  struct Narrow {
    std::vector<float> w;
    std::string name;
  };
  const auto b = ckpt::restore<Narrow>(tmp / "c", {.subtree = "named.b", .restore_dtype = ckpt::dtype::float32});
  CHECK(b.w == std::vector<float>{1.0f, 2.0f});
  CHECK(b.name == "bee");
  CHECK_THROWS_AS(ckpt::restore<Narrow>(tmp / "c", {.subtree = "named.c"}), ckpt::MissingLeafError);

  // Leaves the target has and the checkpoint lacks: all named at once, or kept.
  struct Extra {
    std::int64_t step = 0;
    std::vector<float> missing_a{1.0f};
    std::int32_t missing_b = 5;
  };
  try {
    (void)ckpt::restore<Extra>(tmp / "c");
    FAIL("restored leaves the checkpoint lacks");
  } catch (const ckpt::MissingLeafError& e) {
    CHECK(std::string(e.what()).find("missing_a") != std::string::npos);
    CHECK(std::string(e.what()).find("missing_b") != std::string::npos);
  }
  const Extra kept = ckpt::restore<Extra>(tmp / "c", {.partial = true, .allow_missing = true});
  CHECK(kept.step == 41);
  CHECK(kept.missing_b == 5);

  // Without verification, the same bytes.
  check_table_state(m, ckpt::restore<TableMixed>(tmp / "c", {.verify_checksums = false}));
}

TEST_CASE("a leaf table restore that meets a lazy or a sharded leaf starts again through the Index") {
  test::TempDir tmp;
  struct WithLazy {
    std::vector<std::vector<float>> small;
    ckpt::lazy<std::vector<float>> later;
  };
  WithLazy w;
  for (int i = 0; i < 50; ++i) w.small.push_back({static_cast<float>(i)});
  w.later = std::vector<float>{4.0f, 5.0f};
  ckpt::save(tmp / "c", w);
  WithLazy back;
  back.small.assign(50, {-1.0f});
  ckpt::restore_into(tmp / "c", back);
  CHECK(back.small == w.small);
  CHECK_FALSE(back.later.loaded());
  CHECK(back.later.get() == std::vector<float>{4.0f, 5.0f});

  struct WithSharded {
    std::vector<std::vector<float>> small;
    ckpt::Sharded<std::vector<float>> part;
  };
  WithSharded s;
  s.small = w.small;
  s.part.local = {1, 2, 3, 4, 5, 6};
  s.part.global_shape = {6};
  s.part.offset = {0};
  ckpt::save(tmp / "s", s);
  WithSharded half;
  half.part.global_shape = {6};
  half.part.offset = {2};
  half.part.local.resize(3);
  ckpt::restore_into(tmp / "s", half);
  CHECK(half.small == s.small);
  CHECK(half.part.local == std::vector<float>{3, 4, 5});
}

TEST_CASE("damaged leaves read through the leaf table are refused, naming the leaf") {
  test::TempDir tmp;
  struct Many {
    std::vector<std::vector<float>> leaves;
  };
  Many m;
  for (int i = 0; i < 40; ++i) m.leaves.push_back(std::vector<float>(1024, static_cast<float>(i)));  // in a data file
  const auto fresh = [&] {
    ckpt::save(tmp / "c", m, {.force = true});
    const auto index = ckpt::open_index(tmp / "c");
    return *index->find(ckpt::Path({"leaves", "7"}));
  };
  const auto expect = [&](const std::string& path, const std::string& what) {
    try {
      (void)ckpt::restore<Many>(tmp / "c");
      FAIL("restored a damaged checkpoint");
    } catch (const ckpt::CorruptCheckpointError& e) {
      CHECK(e.checkpoint() == (tmp / "c").string());
      CHECK(e.path() == path);
      CHECK_MESSAGE(std::string(e.what()).find(what) != std::string::npos, e.what());
    }
  };
  {  // one flipped byte in leaf 7, read in a run with its neighbours
    const ckpt::IndexEntry e = fresh();
    auto bytes = test::read_bytes(tmp / "c" / e.file);
    bytes[e.offset + 100] ^= 0x40;
    test::write_bytes(tmp / "c" / e.file, bytes);
    expect("leaves.7", "checksum mismatch");
    // Unverified, the restore takes the bytes as they are.
    const Many raw = ckpt::restore<Many>(tmp / "c", {.verify_checksums = false});
    CHECK(raw.leaves[7] != m.leaves[7]);
    CHECK(raw.leaves[8] == m.leaves[8]);
  }
  {  // the data file cut inside leaf 7
    const ckpt::IndexEntry e = fresh();
    std::filesystem::resize_file(tmp / "c" / e.file, e.offset + 10);
    expect("leaves.7", "lie outside");
  }
  {  // the data file gone: the first leaf in it is named
    const ckpt::IndexEntry e = fresh();
    std::string first;
    const auto index = ckpt::open_index(tmp / "c");
    for (const auto& x : index->entries())
      if (x.file == e.file) {
        first = x.path.str();
        break;
      }
    std::filesystem::remove(tmp / "c" / e.file);
    expect(first, "missing or unreadable");
  }
}

TEST_CASE("a leaf table restore reads while it walks, and stops its reader on any failure") {
  // 3,000 leaves of 4 KiB: the reader thread starts after the first MiB is queued.
  test::TempDir tmp;
  struct Many {
    std::vector<std::vector<float>> leaves;
    std::int32_t after = 0;
  };
  Many m;
  for (int i = 0; i < 3000; ++i) m.leaves.push_back(std::vector<float>(1024, static_cast<float>(i)));
  m.after = 12;
  ckpt::save(tmp / "c", m);
  Many back;
  back.leaves.assign(3000, std::vector<float>(1024, -1.0f));
  ckpt::restore_into(tmp / "c", back);
  CHECK(back.leaves == m.leaves);
  CHECK(back.after == 12);
  // Out of the page cache (where the file system drops pages: ext4, xfs, btrfs), the
  // table gives way to the Index's one stream; the values are the same either way.
  for (const auto& f : std::filesystem::directory_iterator(tmp / "c")) {
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    ::fsync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  back.leaves.assign(3000, std::vector<float>(1024, -1.0f));
  ckpt::restore_into(tmp / "c", back);
  CHECK(back.leaves == m.leaves);

  // A failure in the walk after the reader started: a leaf of another shape.
  back.leaves[2500].resize(7);
  CHECK_THROWS_AS(ckpt::restore_into(tmp / "c", back), ckpt::ShapeMismatchError);
  // A failure after the walk: leaves the checkpoint lacks.
  struct More {
    std::vector<std::vector<float>> leaves;
    std::int32_t after = 0;
    std::vector<float> lacking{1.0f};
  };
  CHECK_THROWS_AS((void)ckpt::restore<More>(tmp / "c"), ckpt::MissingLeafError);
  // A failure in the reads, found by the reader thread or by the walk's own: a flipped byte.
  const auto index = ckpt::open_index(tmp / "c");
  const ckpt::IndexEntry e = *index->find(ckpt::Path({"leaves", "2900"}));
  auto bytes = test::read_bytes(tmp / "c" / e.file);
  bytes[e.offset + 5] ^= 0x01;
  test::write_bytes(tmp / "c" / e.file, bytes);
  try {
    (void)ckpt::restore<Many>(tmp / "c");
    FAIL("restored a flipped byte");
  } catch (const ckpt::CorruptCheckpointError& err) {
    CHECK(err.path() == "leaves.2900");
  }
}

}  // namespace restore_test
