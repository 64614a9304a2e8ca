// Every leaf type round-trips with numpy's dtype names, and the inner nodes
// (tuples, vectors of structs, maps, optionals) keep their structure; dtype casts
// (save_dtype, narrowing refused unless asked) and lazy leaves.
#include "support.hpp"

#include <limits>
#include <random>
#include <unordered_map>

namespace leaves_test {

enum class Color : std::uint8_t { red = 1, green = 2 };
enum Plain : int { one = 1, two = 2 };

struct Scalars {
  bool b = false;
  std::int8_t i8 = 0;
  std::int16_t i16 = 0;
  std::int32_t i32 = 0;
  std::int64_t i64 = 0;
  std::uint8_t u8 = 0;
  std::uint16_t u16 = 0;
  std::uint32_t u32 = 0;
  std::uint64_t u64 = 0;
  float f32 = 0;
  double f64 = 0;
  Color color = Color::red;
  Plain plain = one;
  std::complex<float> c64;
  std::complex<double> c128;
  ckpt::bfloat16 bf16;
  ckpt::float16 f16;
  std::string text;
};

struct Arrays {
  std::vector<float> vf;
  std::vector<bool> vb;
  std::vector<std::complex<double>> vc;
  std::array<std::int16_t, 4> ai{};
  xt::xarray<double> xa;
  xt::xtensor<std::int32_t, 3> xt3;
  xt::xtensor_fixed<float, xt::xshape<2, 3>> xf;
  xt::xtensor<ckpt::bfloat16, 1> xbf;
  xt::xarray<bool> xbool;
};

struct Engines {
  std::mt19937 mt;
  std::mt19937_64 mt64;
  std::minstd_rand lcg;
  std::ranlux24 ranlux;
  std::knuth_b knuth;
  std::independent_bits_engine<std::mt19937, 16, std::uint32_t> bits;
};

struct Item {
  std::string name;
  xt::xtensor<float, 1> w;
};

struct Nodes {
  std::tuple<int, std::string, std::vector<float>> tup;
  std::pair<double, std::int64_t> pr;
  std::vector<Item> items;
  std::array<Item, 2> fixed_items;
  std::map<std::string, xt::xarray<float>> named;
  std::unordered_map<std::string, int> counts;
  std::optional<float> some;
  std::optional<float> nothing;
  std::optional<Item> some_item;
  std::vector<std::string> words;
  std::vector<Item> empty_items;
  std::map<std::string, int> empty_map;
};

}  // namespace leaves_test

namespace leaves_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("scalars of every dtype round-trip, with numpy's dtype names") {
  test::TempDir tmp;
  Scalars s;
  s.b = true;
  s.i8 = -128;
  s.i16 = -32768;
  s.i32 = std::numeric_limits<std::int32_t>::min();
  s.i64 = std::numeric_limits<std::int64_t>::max();
  s.u8 = 255;
  s.u16 = 65535;
  s.u32 = 4000000000u;
  s.u64 = std::numeric_limits<std::uint64_t>::max();
  s.f32 = -1.25e-30f;
  s.f64 = std::numeric_limits<double>::denorm_min();
  s.color = Color::green;
  s.plain = two;
  s.c64 = {1.5f, -2.5f};
  s.c128 = {1e300, -1e-300};
  s.bf16 = 3.140625f;
  s.f16 = 65504.0f;
  s.text = std::string("h\xc3\xa9llo\0world", 12);
  ckpt::save(tmp / "c", s);
  const auto r = ckpt::restore<Scalars>(tmp / "c");
  CHECK(r.b == s.b);
  CHECK(r.i8 == s.i8);
  CHECK(r.i16 == s.i16);
  CHECK(r.i32 == s.i32);
  CHECK(r.i64 == s.i64);
  CHECK(r.u8 == s.u8);
  CHECK(r.u16 == s.u16);
  CHECK(r.u32 == s.u32);
  CHECK(r.u64 == s.u64);
  CHECK(r.f32 == s.f32);
  CHECK(r.f64 == s.f64);
  CHECK(r.color == Color::green);
  CHECK(r.plain == two);
  CHECK(r.c64 == s.c64);
  CHECK(r.c128 == s.c128);
  CHECK(r.bf16.bits == s.bf16.bits);
  CHECK(r.f16.bits == s.f16.bits);
  CHECK(r.text == s.text);

  const auto md = ckpt::metadata(tmp / "c");
  const std::vector<std::pair<std::string, std::string>> dtypes = {
      {"b", "bool"},       {"i8", "int8"},       {"i16", "int16"},         {"i32", "int32"},
      {"i64", "int64"},    {"u8", "uint8"},      {"u16", "uint16"},        {"u32", "uint32"},
      {"u64", "uint64"},   {"f32", "float32"},   {"f64", "float64"},       {"color", "uint8"},
      {"plain", "int32"},  {"c64", "complex64"}, {"c128", "complex128"},   {"bf16", "bfloat16"},
      {"f16", "float16"},  {"text", "string"}};
  for (const auto& leaf_dtype : dtypes) {  // no structured binding: clang 14 cannot capture one in CAPTURE
    const std::string& path = leaf_dtype.first;
    const std::string& name = leaf_dtype.second;
    CAPTURE(path);
    CHECK(ckpt::dtype_name(md.leaf(path).dtype()) == name);
    CHECK(md.leaf(path).shape().empty());
  }
}

TEST_CASE("bfloat16 and float16 convert with round-to-nearest-even") {
  CHECK(float(ckpt::bfloat16(1.0f)) == 1.0f);
  CHECK(ckpt::bfloat16(1.0f).bits == 0x3f80);
  CHECK(ckpt::bfloat16(1.00390625f).bits == 0x3f80);  // halfway, rounds to even
  CHECK(ckpt::bfloat16(1.01171875f).bits == 0x3f82);  // halfway, rounds to even (up)
  CHECK(ckpt::float16(1.0f).bits == 0x3c00);
  CHECK(ckpt::float16(-2.0f).bits == 0xc000);
  CHECK(ckpt::float16(65504.0f).bits == 0x7bff);
  CHECK(ckpt::float16(1e6f).bits == 0x7c00);                    // overflow to inf
  CHECK(float(ckpt::float16::from_bits(0x0001)) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(ckpt::float16(std::ldexp(1.0f, -24)).bits == 0x0001);
  CHECK(std::isnan(float(ckpt::float16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(float(ckpt::bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // Every half value survives float and back.
  for (unsigned b = 0; b < 0x10000; ++b) {
    const auto h = ckpt::float16::from_bits(static_cast<std::uint16_t>(b));
    if (std::isnan(float(h))) continue;
    REQUIRE(ckpt::float16(float(h)).bits == b);
  }
}

TEST_CASE("arrays keep dtype, shape and every element") {
  test::TempDir tmp;
  Arrays a;
  a.vf = {1, 2, 3, 4.5f};
  a.vb = {true, false, true, true, false};
  a.vc = {{1, 2}, {3, 4}};
  a.ai = {1, -2, 3, -4};
  a.xa = xt::arange<double>(24).reshape({2, 3, 4});
  a.xt3 = xt::arange<std::int32_t>(60).reshape({3, 4, 5});
  a.xf = {{1, 2, 3}, {4, 5, 6}};
  a.xbf = xt::xtensor<ckpt::bfloat16, 1>::from_shape({3});
  a.xbf(0) = 1.0f;
  a.xbf(1) = -0.5f;
  a.xbf(2) = 256.0f;
  a.xbool = xt::xarray<bool>({{true, false}, {false, true}});
  ckpt::save(tmp / "c", a);
  const auto r = ckpt::restore<Arrays>(tmp / "c");
  CHECK(r.vf == a.vf);
  CHECK(r.vb == a.vb);
  CHECK(r.vc == a.vc);
  CHECK(r.ai == a.ai);
  CHECK(r.xa == a.xa);
  CHECK(r.xa.dimension() == 3);
  CHECK(r.xt3 == a.xt3);
  CHECK(r.xf == a.xf);
  REQUIRE(r.xbf.size() == 3);
  CHECK(float(r.xbf(2)) == 256.0f);
  CHECK(r.xbool == a.xbool);

  const auto md = ckpt::metadata(tmp / "c");
  CHECK(md.leaf("xa").shape() == ckpt::Shape{2, 3, 4});
  CHECK(md.leaf("xt3").shape() == ckpt::Shape{3, 4, 5});
  CHECK(md.leaf("xf").shape() == ckpt::Shape{2, 3});
  CHECK(ckpt::dtype_name(md.leaf("vc").dtype()) == "complex128");
  CHECK(ckpt::dtype_name(md.leaf("xbf").dtype()) == "bfloat16");
  CHECK(ckpt::dtype_name(md.leaf("vb").dtype()) == "bool");
}

TEST_CASE("std::span saves the memory it views and restores into it") {
  test::TempDir tmp;
  std::vector<float> storage = {1, 2, 3};
  struct Viewed {
    std::span<float> view;
  };
  ckpt::save(tmp / "c", Viewed{std::span<float>(storage)});
  std::vector<float> other(3, 0.0f);
  Viewed into{std::span<float>(other)};
  ckpt::restore_into(tmp / "c", into);
  CHECK(other == storage);
  std::vector<float> wrong(2, 0.0f);
  Viewed too_small{std::span<float>(wrong)};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", too_small), ckpt::ShapeMismatchError, "view: shape ");
}

TEST_CASE("random engines continue the same sequence after a restore") {
  test::TempDir tmp;
  Engines e;
  e.mt.seed(1);
  e.mt64.seed(2);
  e.lcg.seed(3);
  e.ranlux.seed(4);
  e.knuth.seed(5);
  e.bits.seed(6);
  for (int i = 0; i < 1000; ++i) {  // move every engine away from its seeded state
    e.mt(); e.mt64(); e.lcg(); e.ranlux(); e.knuth(); e.bits();
  }
  ckpt::save(tmp / "c", e);
  auto r = ckpt::restore<Engines>(tmp / "c");
  for (int i = 0; i < 100; ++i) {
    REQUIRE(r.mt() == e.mt());
    REQUIRE(r.mt64() == e.mt64());
    REQUIRE(r.lcg() == e.lcg());
    REQUIRE(r.ranlux() == e.ranlux());
    REQUIRE(r.knuth() == e.knuth());
    REQUIRE(r.bits() == e.bits());
  }
  CHECK(ckpt::dtype_name(ckpt::metadata(tmp / "c").leaf("mt64").dtype()) == "string");
}

TEST_CASE("inner nodes: tuples, pairs, vectors and arrays of structs, maps, optionals") {
  test::TempDir tmp;
  Nodes n;
  n.tup = {5, "five", {5, 5}};
  n.pr = {2.5, -9};
  n.items = {{"a", {1, 2}}, {"b", {3}}, {"c", {}}};
  n.fixed_items[1].name = "second";
  n.named["x"] = xt::xarray<float>({1.0f, 2.0f});
  n.named["y.z"] = xt::xarray<float>{{3.0f, 4.0f}};
  n.counts = {{"k1", 1}, {"k2", 2}, {"k3", 3}};
  n.some = 1.5f;
  n.some_item = Item{"opt", {9}};
  n.words = {"alpha", "", "gamma"};
  ckpt::save(tmp / "c", n);

  Nodes target;  // non-empty where the checkpoint is empty, to see them cleared
  target.nothing = 4.0f;
  target.empty_items.resize(3);
  target.empty_map["stale"] = 1;
  target.named["stale"] = xt::xarray<float>({7.0f});
  ckpt::restore_into(tmp / "c", target);
  CHECK(target.tup == n.tup);
  CHECK(target.pr == n.pr);
  REQUIRE(target.items.size() == 3);
  CHECK(target.items[1].name == "b");
  CHECK(target.items[1].w == n.items[1].w);
  CHECK(target.items[2].w.size() == 0);
  CHECK(target.fixed_items[1].name == "second");
  CHECK(target.named.size() == 2);
  CHECK(target.named.count("stale") == 0);
  CHECK(target.named["y.z"] == n.named["y.z"]);
  CHECK(target.counts == n.counts);
  CHECK(target.some == 1.5f);
  CHECK(!target.nothing.has_value());
  REQUIRE(target.some_item.has_value());
  CHECK(target.some_item->name == "opt");
  CHECK(target.words == n.words);
  CHECK(target.empty_items.empty());
  CHECK(target.empty_map.empty());

  const auto md = ckpt::metadata(tmp / "c");
  CHECK(md.contains("items.2.w"));
  CHECK(md.contains("named.y\\.z"));
  CHECK(ckpt::dtype_name(md.leaf("nothing").dtype()) == "none");
}

TEST_CASE("a whole value can be a single leaf") {
  test::TempDir tmp;
  xt::xtensor<double, 2> w = {{1, 2}, {3, 4}};
  ckpt::save(tmp / "c", w);
  CHECK(ckpt::restore<xt::xtensor<double, 2>>(tmp / "c") == w);
  CHECK(ckpt::metadata(tmp / "c").paths() == std::vector<std::string>{""});
}

TEST_CASE("a copy of an owning LeafBytes views its own bytes") {
  std::optional<ckpt::LeafBytes> original =
      ckpt::LeafBytes::own(ckpt::dtype::uint8, {3}, {std::byte{1}, std::byte{2}, std::byte{3}});
  const ckpt::LeafBytes copy = *original;
  CHECK(copy.owns());
  CHECK(copy.view.data() != original->view.data());
  original.reset();  // the copy must not point into freed memory (ASan checks this)
  REQUIRE(copy.view.size() == 3);
  CHECK(copy.view[2] == std::byte{3});
  int x = 5;
  const ckpt::LeafBytes borrowed = ckpt::LeafBytes::borrow(ckpt::dtype::int32, {}, &x, sizeof x);
  const ckpt::LeafBytes borrowed_copy = borrowed;
  CHECK_FALSE(borrowed_copy.owns());
  CHECK(borrowed_copy.view.data() == borrowed.view.data());
}

// ---------------------------------------------------------------- dtype casts and lazy leaves

TEST_CASE("save_dtype casts floating leaves on save, optionally only under a prefix") {
  test::TempDir tmp;
  struct Mixed {
    std::int64_t step = 120;
    test::Dense dense;
    std::vector<float> mu = {0.1f, 0.2f};
    float lr = 0.25f;
  };
  Mixed s;
  s.dense.kernel = {{1.0f, 1.00390625f, -2.5f}, {3.0f, 1e-3f, 65504.0f}};
  s.dense.bias = {0.5f, -0.5f, 1.5f};
  ckpt::save(tmp / "all", s, {.save_dtype = ckpt::dtype::bfloat16});
  ckpt::save(tmp / "dense", s, {.save_dtype = ckpt::dtype::float16, .save_dtype_prefix = "dense"});
  const auto all = ckpt::metadata(tmp / "all");
  CHECK(ckpt::dtype_name(all.leaf("dense.kernel").dtype()) == "bfloat16");
  CHECK(ckpt::dtype_name(all.leaf("mu").dtype()) == "bfloat16");
  CHECK(ckpt::dtype_name(all.leaf("lr").dtype()) == "bfloat16");
  CHECK(ckpt::dtype_name(all.leaf("step").dtype()) == "int64");  // not floating: untouched
  const auto dense = ckpt::metadata(tmp / "dense");
  CHECK(ckpt::dtype_name(dense.leaf("dense.kernel").dtype()) == "float16");
  CHECK(ckpt::dtype_name(dense.leaf("mu").dtype()) == "float32");

  // A bfloat16 leaf restores into a float target by itself (a lossless widening).
  const Mixed r = ckpt::restore<Mixed>(tmp / "all");
  CHECK(r.dense.kernel(0, 0) == 1.0f);
  CHECK(r.dense.kernel(0, 1) == 1.0f);  // 1.00390625 rounded to even in bfloat16
  CHECK(r.dense.kernel(0, 2) == -2.5f);
  CHECK(r.dense.kernel(1, 2) == 65536.0f);
  CHECK(r.lr == 0.25f);
  CHECK(ckpt::restore<Mixed>(tmp / "dense").dense.kernel(1, 2) == 65504.0f);
  CHECK_THROWS_CKPT(ckpt::save(tmp / "bad", s, {.save_dtype = ckpt::dtype::int8}), ckpt::Error,
                    "save_dtype must be a real floating dtype, not int8");
}

// What a conversion of one value must give: the cast written directly for the pair, with
// 16-bit floats converted through float (the conversion code goes through one wide type
// per kind instead, which must not change any result).
template <class E>
constexpr bool is_complex_element = std::is_same_v<E, std::complex<float>> || std::is_same_v<E, std::complex<double>>;

template <class To, class From>
To cast_directly(From v) {
  if constexpr (std::is_same_v<From, ckpt::bfloat16> || std::is_same_v<From, ckpt::float16>) {
    return cast_directly<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, ckpt::bfloat16> || std::is_same_v<To, ckpt::float16>) {
    return To(static_cast<float>(v));
  } else if constexpr (is_complex_element<To>) {
    using T = typename To::value_type;
    if constexpr (is_complex_element<From>)
      return To(static_cast<T>(v.real()), static_cast<T>(v.imag()));
    else
      return To(static_cast<T>(v), 0);
  } else {
    return static_cast<To>(v);
  }
}

template <class From>
std::vector<From> conversion_samples() {
  std::vector<From> v;
  if constexpr (std::is_integral_v<From>) {
    for (From x : {From(0), From(1), From(100), std::numeric_limits<From>::max(), std::numeric_limits<From>::min()})
      v.push_back(x);
    if constexpr (sizeof(From) == 8) {
      // 2^60 + 2^36 + 1 is just above halfway between two floats: a direct cast rounds it
      // up; through double it would land on the halfway point and round to even, down.
      v.push_back(static_cast<From>((std::uint64_t{1} << 60) + (std::uint64_t{1} << 36) + 1));
      v.push_back(static_cast<From>((std::uint64_t{1} << 53) + 1));
    }
  } else {
    for (double x : {0.0, 1.0, -2.5, 1.00390625, 65504.0, 65520.0, 1e-8, 3.4e38, 1e300,
                     1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), std::numeric_limits<double>::infinity()}) {
      constexpr bool holds_double = std::is_same_v<From, double> || std::is_same_v<From, std::complex<double>>;
      if (!holds_double && std::abs(x) > 3.5e38 && !std::isinf(x)) continue;  // beyond float's range
      if constexpr (is_complex_element<From>)
        v.push_back(From(static_cast<typename From::value_type>(x), static_cast<typename From::value_type>(-x / 3)));
      else if constexpr (std::is_same_v<From, ckpt::bfloat16> || std::is_same_v<From, ckpt::float16>)
        v.push_back(From(static_cast<float>(x)));
      else
        v.push_back(static_cast<From>(x));
    }
  }
  return v;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

TEST_CASE("convert_elements gives the direct cast's result for every pair of dtypes a cast allows") {
  int pairs = 0;
  for (const ckpt::dtype from : ckpt::all_dtypes) {
    for (const ckpt::dtype to : ckpt::all_dtypes) {
      if (from == to || !ckpt::cast_allowed(from, to, to)) continue;
      ckpt::visit_element_type(from, [&](auto ftag) {
        using From = typename decltype(ftag)::type;
        if constexpr (!std::is_void_v<From> && !std::is_same_v<From, bool>) {
          ckpt::visit_element_type(to, [&](auto ttag) {
            using To = typename decltype(ttag)::type;
            constexpr bool drops_imaginary = is_complex_element<From> && !is_complex_element<To>;
            if constexpr (!std::is_void_v<To> && !std::is_same_v<To, bool> && !drops_imaginary) {
              CAPTURE(ckpt::dtype_name(from));
              CAPTURE(ckpt::dtype_name(to));
              ++pairs;
              const std::vector<From> in = conversion_samples<From>();
              std::vector<To> out(in.size());
              const auto bad = ckpt::convert_elements(from, reinterpret_cast<const std::byte*>(in.data()), to,
                                                      reinterpret_cast<std::byte*>(out.data()), in.size());
              std::size_t expected_bad = in.size();
              for (std::size_t i = 0; i < in.size(); ++i) {
                CAPTURE(i);
                if constexpr (std::is_integral_v<From> && std::is_integral_v<To>) {
                  if (!std::in_range<To>(in[i])) {
                    expected_bad = i;
                    break;
                  }
                }
                CHECK(same_bits(out[i], cast_directly<To>(in[i])));
              }
              if (expected_bad < in.size()) CHECK(bad == expected_bad);
              else CHECK_FALSE(bad.has_value());
            }
          });
        }
      });
    }
  }
  CHECK(pairs > 100);
  // The first value that does not fit, past a block of the conversion's buffer.
  std::vector<std::int64_t> many(1000, 7);
  many[700] = std::int64_t{1} << 40;
  std::vector<std::int32_t> narrow(many.size());
  CHECK(ckpt::convert_elements(ckpt::dtype::int64, reinterpret_cast<const std::byte*>(many.data()), ckpt::dtype::int32,
                               reinterpret_cast<std::byte*>(narrow.data()), many.size()) == std::size_t{700});
  CHECK(narrow[699] == 7);
  // float32 -> bfloat16 over more than one block, against bfloat16's own rounding.
  std::vector<float> f(5000);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) * 1.00390625f - 1000.0f;
  std::vector<ckpt::bfloat16> b(f.size());
  CHECK_FALSE(ckpt::convert_elements(ckpt::dtype::float32, reinterpret_cast<const std::byte*>(f.data()),
                                     ckpt::dtype::bfloat16, reinterpret_cast<std::byte*>(b.data()), f.size()));
  for (std::size_t i = 0; i < f.size(); ++i) REQUIRE(b[i].bits == ckpt::bfloat16(f[i]).bits);
}

TEST_CASE("a narrowing cast nobody asked for is a DtypeMismatchError naming the path") {
  test::TempDir tmp;
  struct Wide {
    std::vector<double> x = {1.5, 2.5};
    std::int64_t big = std::int64_t{1} << 40;
    std::int64_t small = 12;
  };
  struct Narrow {
    std::vector<float> x;
    std::int32_t big = 0;
    std::int32_t small = 0;
  };
  struct NarrowX {
    std::vector<float> x;
  };
  struct NarrowSmall {
    std::int8_t small = 0;
  };
  ckpt::save(tmp / "c", Wide{});
  // NarrowX and NarrowSmall restore one field each: a part, on purpose.
  CHECK_THROWS_WITH_AS(ckpt::restore<NarrowX>(tmp / "c", {.partial = true}),
                       doctest::Contains("x: dtype float64 in checkpoint, float32"), ckpt::DtypeMismatchError);
  const auto x = ckpt::restore<NarrowX>(tmp / "c", {.partial = true, .restore_dtype = ckpt::dtype::float32});
  CHECK(x.x == std::vector<float>{1.5f, 2.5f});
  CHECK_THROWS_WITH_AS(ckpt::restore<Narrow>(tmp / "c", {.restore_dtype = ckpt::dtype::float32}),
                       doctest::Contains("big: element 0 does not fit in int32"), ckpt::DtypeMismatchError);
  CHECK(ckpt::restore<NarrowSmall>(tmp / "c", {.partial = true}).small == 12);  // integer narrowing of values that fit
}

TEST_CASE("lazy leaves: shape and dtype at once, bytes on the first get()") {
  test::TempDir tmp;
  struct Big {
    std::int64_t step = 3;
    xt::xtensor<float, 2> w = xt::ones<float>({256, 256});
    std::vector<double> v = std::vector<double>(5000, 2.0);
  };
  struct LazyBig {
    std::int64_t step = 0;
    ckpt::lazy<xt::xtensor<float, 2>> w;
    ckpt::lazy<std::vector<double>> v;
  };
  ckpt::save(tmp / "c", Big{});
  // Corrupt w's bytes: opening lazily must not notice, reading must.
  const auto md = ckpt::metadata(tmp / "c");
  auto data = test::read_bytes(tmp / "c" / "data-0");
  data[10] ^= 1;
  test::write_bytes(tmp / "c" / "data-0", data);

  LazyBig l = ckpt::restore<LazyBig>(tmp / "c");
  CHECK(l.step == 3);
  CHECK(l.w.shape() == ckpt::Shape{256, 256});
  CHECK(ckpt::dtype_name(l.w.dtype()) == "float32");
  CHECK_FALSE(l.w.loaded());
  CHECK_THROWS_CKPT(l.w.get(), ckpt::CorruptCheckpointError, "w: checksum mismatch");
  CHECK(l.v.get() == std::vector<double>(5000, 2.0));
  CHECK(l.v.loaded());

  const auto tree = ckpt::restore_tree(tmp / "c", {.lazy = true});
  CHECK_FALSE(tree.leaf("w").loaded());
  CHECK(tree.leaf("v").as<std::vector<double>>().size() == 5000);
  CHECK_THROWS_CKPT(ckpt::restore_tree(tmp / "c"), ckpt::CorruptCheckpointError, "w: checksum mismatch");

  // A lazy leaf saves its value, and a wrong dtype shows at restore, not at get().
  struct LazyWrong {
    ckpt::lazy<std::vector<std::int32_t>> v;
  };
  CHECK_THROWS_CKPT(ckpt::restore<LazyWrong>(tmp / "c"), ckpt::DtypeMismatchError,
                    "v: dtype float64 in checkpoint, int32 in target");
  LazyBig fresh;
  fresh.v = ckpt::lazy<std::vector<double>>(std::vector<double>{4, 5});
  fresh.w = ckpt::lazy<xt::xtensor<float, 2>>(xt::xtensor<float, 2>{{1, 2}});
  ckpt::save(tmp / "again", fresh);
  CHECK(ckpt::restore<Big>(tmp / "again").v == std::vector<double>{4, 5});
}

}  // namespace leaves_test
