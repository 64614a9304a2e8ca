// Reflection: field names of aggregates (PFR), Hana structs, the ckpt_fields
// customization point, and the paths and schema they produce.
#include "support.hpp"

#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/define_struct.hpp>

namespace reflect_test {

using test::Dense;
using test::Params;
struct Layer {
  std::vector<float> w;
};
struct Model {
  Params params;
  std::vector<Layer> layers;
  std::map<std::string, float> config;
  std::tuple<int, double> pair;
  std::optional<std::int64_t> maybe;
};

struct HanaDefined {
  BOOST_HANA_DEFINE_STRUCT(HanaDefined, (int, alpha), (std::vector<double>, beta));
};
struct HanaAdapted {
  float gamma = 0;
  std::string delta;
};

class Private {
 public:
  Private() = default;
  Private(int a, std::string b) : a_(a), b_(std::move(b)) {}
  int a() const { return a_; }
  const std::string& b() const { return b_; }
  int not_saved() const { return not_saved_; }
  friend constexpr auto ckpt_fields(ckpt::type_tag<Private>) {
    return ckpt::fields(ckpt::field("a", &Private::a_), ckpt::field("b", &Private::b_));
  }

 private:
  int a_ = 0;
  std::string b_;
  int not_saved_ = 42;  // left out of ckpt_fields on purpose
};

// Neither copyable nor movable nor default-constructible, as a libtorch optimizer is.
class Pinned {
 public:
  explicit Pinned(float scale) : scale_(scale) {}
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  float scale() const { return scale_; }
  friend constexpr auto ckpt_fields(ckpt::type_tag<Pinned>) { return ckpt::fields(ckpt::field("scale", &Pinned::scale_)); }

 private:
  float scale_;
};

// A plain aggregate holding one, before and after other fields.
struct HoldsPinned {
  std::int64_t step = 0;
  Pinned pinned{1.5f};
  std::vector<float> weights;
};

struct Mixed {
  HanaDefined h;
  HanaAdapted ha;
  Private p;
};

}  // namespace reflect_test

BOOST_HANA_ADAPT_STRUCT(reflect_test::HanaAdapted, gamma, delta);

namespace reflect_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

namespace {
struct InAnonymousNamespace {  // no linkage: names must still be readable, on GCC and clang
  int first = 1;
  std::vector<float> second = {2};
};
}  // namespace

TEST_CASE("aggregate field names are read at compile time") {
  static_assert(ckpt::reflect::field_count<Dense>() == 2);
  static_assert(ckpt::reflect::field_name<Dense, 0>() == "kernel");
  static_assert(ckpt::reflect::field_name<Dense, 1>() == "bias");
  static_assert(ckpt::reflect::field_name<Model, 3>() == "pair");
  static_assert(ckpt::reflect::field_name<HanaDefined, 1>() == "beta");
  static_assert(ckpt::reflect::field_name<HanaAdapted, 0>() == "gamma");
  CHECK(ckpt::reflect::field_name<Private, 1>() == "b");
  CHECK(ckpt::reflect::field_count<Private>() == 2);
}

TEST_CASE("an aggregate holding a field that is neither copyable nor movable is reflected") {
  static_assert(ckpt::reflect::field_count<HoldsPinned>() == 3);
  static_assert(ckpt::reflect::field_name<HoldsPinned, 1>() == "pinned");
  static_assert(ckpt::reflect::field_name<HoldsPinned, 2>() == "weights");
  test::TempDir tmp;
  HoldsPinned saved{7, Pinned(2.5f), {1, 2, 3}};
  ckpt::save(tmp / "c", saved);
  CHECK(ckpt::metadata(tmp / "c").paths() == std::vector<std::string>{"step", "pinned.scale", "weights"});
  HoldsPinned restored;
  ckpt::restore_into(tmp / "c", restored);
  CHECK(restored.step == 7);
  CHECK(restored.pinned.scale() == 2.5f);
  CHECK(restored.weights == std::vector<float>{1, 2, 3});
}

TEST_CASE("paths join field names, list indices and map keys") {
  test::TempDir tmp;
  Model m;
  m.layers.resize(2);
  m.config["lr"] = 0.5f;
  m.maybe = 3;
  ckpt::save(tmp / "c", m);
  const auto paths = ckpt::metadata(tmp / "c").paths();
  const std::vector<std::string> expected = {
      "params.encoder.kernel", "params.encoder.bias", "params.decoder.kernel", "params.decoder.bias",
      "layers.0.w",            "layers.1.w",          "config.lr",             "pair.0",
      "pair.1",                "maybe"};
  CHECK(paths == expected);
}

TEST_CASE("Hana structs and the ckpt_fields customization point round-trip") {
  test::TempDir tmp;
  Mixed m;
  m.h.alpha = 7;
  m.h.beta = {1.5, 2.5};
  m.ha.gamma = 3.25f;
  m.ha.delta = "delta";
  m.p = Private(11, "bee");
  ckpt::save(tmp / "c", m);

  const auto paths = ckpt::metadata(tmp / "c").paths();
  CHECK(paths == std::vector<std::string>{"h.alpha", "h.beta", "ha.gamma", "ha.delta", "p.a", "p.b"});

  const auto r = ckpt::restore<Mixed>(tmp / "c");
  CHECK(r.h.alpha == 7);
  CHECK(r.h.beta == std::vector<double>{1.5, 2.5});
  CHECK(r.ha.gamma == 3.25f);
  CHECK(r.ha.delta == "delta");
  CHECK(r.p.a() == 11);
  CHECK(r.p.b() == "bee");
  CHECK(r.p.not_saved() == 42);
  CHECK_FALSE(ckpt::metadata(tmp / "c").contains("p.not_saved_"));
}

TEST_CASE("a path's dotted form escapes '.', '\\\\' and NUL and parses back") {
  const ckpt::Path p(std::vector<std::string>{"config", "a.b", "c\\d", std::string("e\0f", 3), "", "g/h"});
  const std::string dotted = p.str();
  CHECK(dotted == std::string("config.a\\.b.c\\\\d.e\\0f..g/h"));
  CHECK(ckpt::Path::parse(dotted) == p);
  CHECK(ckpt::Path::parse("") == ckpt::Path());
  CHECK_THROWS_CKPT(ckpt::Path::parse("a\\"), ckpt::Error, "a\\: path ends with a lone '\\'");
  CHECK_THROWS_CKPT(ckpt::Path::parse("a\\x"), ckpt::Error, "unknown escape '\\x' in path");
}

TEST_CASE("the schema lists every leaf pattern with dtype and rank, and is recorded") {
  const ckpt::Schema s = ckpt::schema_of<Model>();
  const ckpt::Schema expected = {
      {"params.encoder.kernel", "float32", 2}, {"params.encoder.bias", "float32", 1},
      {"params.decoder.kernel", "float32", 2}, {"params.decoder.bias", "float32", 1},
      {"layers.*.w", "float32", 1},            {"config.*", "float32", 0},
      {"pair.0", "int32", 0},                  {"pair.1", "float64", 0},
      {"maybe", "int64", 0}};
  CHECK(s == expected);
  CHECK(ckpt::schema_fingerprint(s) != ckpt::schema_fingerprint(ckpt::schema_of<Params>()));

  test::TempDir tmp;
  ckpt::save(tmp / "c", Model{});
  const auto md = ckpt::metadata(tmp / "c");
  CHECK(md.info().schema == expected);
  CHECK(md.info().fingerprint == ckpt::schema_fingerprint(expected));
  CHECK(md.info().type_name.find("Model") != std::string::npos);
}

TEST_CASE("types in anonymous namespaces and local types are reflected too") {
  struct Local {
    double inside = 0.5;
  };
  static_assert(ckpt::reflect::field_name<InAnonymousNamespace, 1>() == "second");
  static_assert(ckpt::reflect::field_name<Local, 0>() == "inside");
  test::TempDir tmp;
  ckpt::save(tmp / "a", InAnonymousNamespace{});
  ckpt::save(tmp / "l", Local{});
  CHECK(ckpt::metadata(tmp / "a").paths() == std::vector<std::string>{"first", "second"});
  CHECK(ckpt::restore<Local>(tmp / "l").inside == 0.5);
}

}  // namespace reflect_test
