// safetensors both ways: the real files the Python package wrote, round trips through
// restore<T> bit for bit, sharded directories with model.safetensors.index.json, a
// numpy reader that parses what ckpt writes by hand, and hostile headers.
#include "support.hpp"

#include <nlohmann/json.hpp>

#include <cstring>

namespace safetensors_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path samples = fs::path(CKPT_FIXTURES_DIR) / "safetensors";

struct Layer {
  xt::xtensor<float, 2> weight;
  std::vector<float> bias;
};

struct Model {
  std::vector<Layer> layers;
  std::vector<std::uint8_t> u8;
  std::vector<bool> mask;
  std::vector<std::int8_t> i8;
  std::vector<std::int16_t> i16;
  std::vector<std::uint16_t> u16;
  std::vector<std::int32_t> i32;
  std::vector<std::uint32_t> u32;
  std::vector<std::int64_t> i64;
  std::vector<std::uint64_t> u64;
  std::vector<ckpt::float16> f16;
  std::vector<ckpt::bfloat16> bf16;
  std::vector<double> f64;
  std::vector<std::complex<float>> c64;
  std::int64_t step = 0;
};

Model make_model() {
  Model m;
  for (int i = 0; i < 3; ++i) {
    Layer l;
    l.weight = xt::arange<float>(12).reshape({3, 4}) * (0.5f + static_cast<float>(i));
    l.bias = {static_cast<float>(i), -1.5f, 1e-30f};
    m.layers.push_back(l);
  }
  m.u8 = {0, 7, 255};
  m.mask = {true, false, true, true, false};
  m.i8 = {-128, 127};
  m.i16 = {-32768, 9};
  m.u16 = {65535};
  m.i32 = {-5, 1 << 30};
  m.u32 = {4000000000u};
  m.i64 = {-(std::int64_t{1} << 50)};
  m.u64 = {std::uint64_t{1} << 63};
  m.f16 = {ckpt::float16(1.5f), ckpt::float16(-0.125f)};
  m.bf16 = {ckpt::bfloat16(3.0f)};
  m.f64 = {3.141592653589793, -0.0};
  m.c64 = {{1.f, -2.f}};
  m.step = 1234;
  return m;
}

// Every leaf's bytes, by path: what "bit-exact" compares.
std::map<std::string, std::vector<std::byte>> leaf_bytes(const ckpt::Tree& t) {
  std::map<std::string, std::vector<std::byte>> m;
  for (const auto& l : t.leaves()) m[l.path().str() + " " + std::string(ckpt::dtype_name(l.dtype())) + ckpt::shape_str(l.shape())] = l.bytes();
  return m;
}

// A safetensors file from a header text and a data buffer, as a hostile writer would make it.
void write_raw(const fs::path& p, const std::string& header, std::size_t data_bytes, std::uint64_t claimed_len = ~0ull) {
  // Sized once and filled in place (an insert after 8 bytes draws GCC 12 -O3's false -Warray-bounds).
  std::vector<char> b(8 + header.size() + data_bytes, 1);
  const std::uint64_t n = claimed_len == ~0ull ? header.size() : claimed_len;
  for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::copy(header.begin(), header.end(), b.begin() + 8);
  test::write_bytes(p, b);
}

// numpy parses the format by hand (no safetensors package here): header, offsets, values.
const char* py_read = R"(
import sys, json, struct, os, numpy as np
DT = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
      "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?", "C64": "<c8"}
def read(fn, out):
    b = open(fn, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    assert n % 8 == 0, "header not padded to 8"
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    assert meta.get("format") == "pt", meta
    at = 0
    for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        s, e = v["data_offsets"]
        assert s == at, (k, s, at)
        a = np.frombuffer(b[8 + n + s:8 + n + e], DT[v["dtype"]]).reshape(v["shape"])
        assert (8 + n + s) % a.dtype.itemsize == 0, "unaligned " + k
        out[k] = (v["dtype"], a)
        at = e
    assert 8 + n + at == len(b), "trailing bytes"
d = sys.argv[1]
out = {}
if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    files = sorted(set(idx["weight_map"].values()))
    for f in files:
        got = {}
        read(os.path.join(d, f), got)
        assert all(idx["weight_map"][k] == f for k in got), f
        out.update(got)
    assert sorted(out) == sorted(idx["weight_map"]), "weight_map and shards differ"
    assert idx["metadata"]["total_size"] == sum(a.nbytes for _, a in out.values())
    print("shards", len(files))
else:
    read(os.path.join(d, "model.safetensors") if os.path.isdir(d) else d, out)
for k in sorted(out):
    t, a = out[k]
    print(k, t, list(a.shape), a.reshape(-1).tolist()[:4])
)";

// A safetensors file of float32 tensors, written by hand in the given order.
void write_floats(const fs::path& p, const std::vector<std::pair<std::string, std::vector<float>>>& tensors) {
  json h = json::object();
  std::string data;
  for (const auto& [name, v] : tensors) {
    h[name] = {{"dtype", "F32"}, {"shape", {v.size()}}, {"data_offsets", {data.size(), data.size() + 4 * v.size()}}};
    data.append(reinterpret_cast<const char*>(v.data()), 4 * v.size());
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string b;
  for (int i = 0; i < 8; ++i) b += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string all = b + header + data;
  test::write_bytes(p, std::vector<char>(all.begin(), all.end()));
}

// The tensor names of a safetensors file (or of every shard of a directory) with their bytes.
std::map<std::string, std::string> names_and_bytes(const fs::path& p) {
  std::map<std::string, std::string> out;
  std::vector<fs::path> files;
  if (fs::is_directory(p)) {
    for (const auto& e : fs::directory_iterator(p))
      if (e.path().extension() == ".safetensors") files.push_back(e.path());
  } else {
    files.push_back(p);
  }
  for (const auto& f : files) {
    const auto raw = test::read_bytes(f);
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(raw[static_cast<std::size_t>(i)])) << (8 * i);
    const auto h = json::parse(std::string(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n)));
    for (const auto& item : h.items()) {
      if (item.key() == "__metadata__") continue;
      const auto at = 8 + n + item.value()["data_offsets"][0].get<std::uint64_t>();
      const auto end = 8 + n + item.value()["data_offsets"][1].get<std::uint64_t>();
      out[item.key()] = std::string(raw.begin() + static_cast<std::ptrdiff_t>(at), raw.begin() + static_cast<std::ptrdiff_t>(end));
    }
  }
  return out;
}

}  // namespace safetensors_test

namespace safetensors_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("safetensors: the Python package's sample files read with their dtypes, values and metadata") {
  const std::pair<const char*, ckpt::dtype> files[] = {
      {"b", ckpt::dtype::int8},    {"h", ckpt::dtype::int16},   {"i", ckpt::dtype::int32},
      {"B", ckpt::dtype::uint8},   {"H", ckpt::dtype::uint16},  {"I", ckpt::dtype::uint32},
      {"e", ckpt::dtype::float16}, {"f", ckpt::dtype::float32}, {"d", ckpt::dtype::float64}};
  for (const auto& file : files) {  // no structured binding: clang 14 cannot capture one (CAPTURE)
    const char* name = file.first;
    const ckpt::dtype type = file.second;
    CAPTURE(name);
    const fs::path p = samples / (std::string(name) + ".safetensors");
    CHECK(ckpt::detect_format(p) == "safetensors");
    const auto t = ckpt::restore_tree(p);
    REQUIRE(t.leaves().size() == 1);
    const auto& l = t.leaves()[0];
    CHECK(l.path().str() == name);
    CHECK(l.dtype() == type);
    CHECK(l.shape() == ckpt::Shape{6});
    // generate.py: np.array(range(-3, 3)) in that dtype, unsigned types wrapping
    const auto v = l.as<std::vector<double>>();
    const bool is_unsigned = type == ckpt::dtype::uint8 || type == ckpt::dtype::uint16 || type == ckpt::dtype::uint32;
    const double wrap = type == ckpt::dtype::uint8 ? 256.0 : type == ckpt::dtype::uint16 ? 65536.0 : 4294967296.0;
    for (int k = 0; k < 6; ++k) CHECK(v[static_cast<std::size_t>(k)] == (k < 3 && is_unsigned ? wrap + k - 3 : k - 3));
    CHECK(ckpt::safetensors::metadata(p) == std::map<std::string, std::string>{{"test", "a"}});
  }
  // overall.safetensors: nine tensors at unaligned offsets after a 526-byte header
  const auto t = ckpt::restore_tree(samples / "overall.safetensors");
  CHECK(t.leaves().size() == 9);
  CHECK(t.leaf("f").as<std::vector<float>>() == std::vector<float>{-3, -2, -1, 0, 1, 2});
  CHECK(t.leaf("I").as<std::vector<std::uint32_t>>()[0] == 4294967293u);
  CHECK(t.leaf("e").as<std::vector<float>>() == std::vector<float>{-3, -2, -1, 0, 1, 2});
}

TEST_CASE("safetensors round trip: native -> safetensors -> native is bit-exact, through restore<T> and the tree") {
  test::TempDir tmp;
  const Model m = make_model();
  ckpt::save(tmp / "native", m);
  // the file form and the directory form
  ckpt::save<ckpt::safetensors>(tmp / "m.safetensors", ckpt::restore<Model>(tmp / "native"));
  ckpt::save<ckpt::safetensors>(tmp / "dir", ckpt::restore<Model>(tmp / "m.safetensors"));
  CHECK(fs::is_regular_file(tmp / "dir/model.safetensors"));
  ckpt::save(tmp / "native2", ckpt::restore<Model>(tmp / "dir"));
  CHECK(leaf_bytes(ckpt::restore_tree(tmp / "native")) == leaf_bytes(ckpt::restore_tree(tmp / "native2")));
  CHECK(leaf_bytes(ckpt::restore_tree(tmp / "native")) == leaf_bytes(ckpt::restore_tree(tmp / "m.safetensors")));
  const auto back = ckpt::restore<Model>(tmp / "dir");
  CHECK(back.layers.size() == 3);
  CHECK(back.layers[2].weight == m.layers[2].weight);
  CHECK(back.step == 1234);
  CHECK(std::memcmp(back.f16.data(), m.f16.data(), 4) == 0);
  // tensor names are the dotted paths, as Hugging Face names them
  const auto tree = ckpt::metadata(tmp / "m.safetensors");
  CHECK(tree.leaf("layers.1.weight").shape() == ckpt::Shape{3, 4});
  CHECK(tree.leaf("mask").dtype() == ckpt::dtype::bool_);
  CHECK(ckpt::safetensors::metadata(tmp / "m.safetensors").at("format") == "pt");
  // lazy: the leaves are spans into the mapped file until asked for
  const auto lazy = ckpt::restore_tree(tmp / "m.safetensors", {.lazy = true});
  CHECK(lazy.leaf("layers.0.bias").as<std::vector<float>>() == m.layers[0].bias);
  // an existing file is not overwritten unless asked
  CHECK_THROWS_AS(ckpt::save<ckpt::safetensors>(tmp / "m.safetensors", m), ckpt::Error);
  ckpt::save<ckpt::safetensors>(tmp / "m.safetensors", m, {.force = true});
}

TEST_CASE("safetensors: numpy, parsing the bytes by hand, reads what ckpt writes (aligned, padded, no gaps)") {
  test::TempDir tmp;
  ckpt::save<ckpt::safetensors>(tmp / "m.safetensors", make_model());
  const std::string out = test::python(py_read, tmp / "m.safetensors");
  CHECK(out.find("layers.2.weight F32 [3, 4] [0.0, 2.5, 5.0, 7.5]") != std::string::npos);
  CHECK(out.find("mask BOOL [5] [True, False, True, True]") != std::string::npos);
  CHECK(out.find("u64 U64 [1] [9223372036854775808]") != std::string::npos);
  CHECK(out.find("bf16 BF16 [1] [16448]") != std::string::npos);  // 3.0 as bfloat16 bits
  CHECK(out.find("step I64 [] [1234]") != std::string::npos);
  CHECK(out.find("c64 C64 [1] [(1-2j)]") != std::string::npos);
}

TEST_CASE("safetensors shards: max_shard_bytes splits into model-0000i-of-0000n files and an index, read both ways") {
  test::TempDir tmp;
  Model m = make_model();
  for (auto& l : m.layers) l.weight = xt::ones<float>({64, 64});  // 16 KiB each
  ckpt::save<ckpt::safetensors>(tmp / "sharded", m, {.max_shard_bytes = 20000});
  CHECK(fs::exists(tmp / "sharded/model.safetensors.index.json"));
  CHECK(fs::exists(tmp / "sharded/model-00001-of-00003.safetensors"));
  CHECK(fs::exists(tmp / "sharded/model-00003-of-00003.safetensors"));
  CHECK_FALSE(fs::exists(tmp / "sharded/model.safetensors"));
  const std::string out = test::python(py_read, tmp / "sharded");
  CHECK(out.find("shards 3") != std::string::npos);
  const auto back = ckpt::restore<Model>(tmp / "sharded");
  CHECK(back.layers[1].weight == m.layers[1].weight);
  CHECK(back.u64 == m.u64);
  // A conversion streams its arrays: they are counted in the shard split and total_size too.
  ckpt::save(tmp / "native", m);
  const auto converted = ckpt::convert(tmp / "native", tmp / "converted", "safetensors", {.max_shard_bytes = 20000});
  CHECK(fs::exists(tmp / "converted/model-00003-of-00003.safetensors"));
  const auto total = json::parse(std::ifstream(tmp / "converted/model.safetensors.index.json"))["metadata"]["total_size"];
  CHECK(total == json::parse(std::ifstream(tmp / "sharded/model.safetensors.index.json"))["metadata"]["total_size"]);
  CHECK(total == converted.bytes);
  // the index file itself opens too
  CHECK(ckpt::restore_tree(tmp / "sharded/model.safetensors.index.json").leaves().size() ==
        ckpt::restore_tree(tmp / "sharded").leaves().size());

  // a shard the weight_map names but which is gone, and a map pointing at the wrong shard
  fs::copy(tmp / "sharded", tmp / "broken");
  fs::remove(tmp / "broken/model-00002-of-00003.safetensors");
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(tmp / "broken"), doctest::Contains("is missing"), ckpt::CorruptCheckpointError);
  fs::copy(tmp / "sharded", tmp / "moved");
  auto idx = json::parse(std::ifstream(tmp / "moved/model.safetensors.index.json"));
  idx["weight_map"]["layers.2.weight"] = "model-00001-of-00003.safetensors";
  idx["weight_map"]["x"] = "../../etc/passwd";
  std::ofstream(tmp / "moved/model.safetensors.index.json") << idx.dump();
  CHECK_THROWS_AS(ckpt::restore_tree(tmp / "moved"), ckpt::CorruptCheckpointError);
  idx["weight_map"].erase("x");
  std::ofstream(tmp / "moved/model.safetensors.index.json") << idx.dump();
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(tmp / "moved"), doctest::Contains("weight_map"), ckpt::CorruptCheckpointError);
}

TEST_CASE("safetensors: float8 tensors are kept byte for byte; strings and complex128 are refused, naming the leaf") {
  test::TempDir tmp;
  ckpt::Snapshot snap;
  std::vector<std::byte> f8 = {std::byte{0x38}, std::byte{0xb8}, std::byte{0x7e}};
  snap.leaves.push_back({ckpt::Path({"q", "e4m3"}), ckpt::LeafBytes::own(ckpt::dtype::float8_e4m3fn, {3}, f8)});
  snap.leaves.push_back({ckpt::Path({"q", "e5m2"}), ckpt::LeafBytes::own(ckpt::dtype::float8_e5m2, {1, 3}, f8)});
  ckpt::save_snapshot<ckpt::safetensors>(tmp / "f8.safetensors", snap);
  const auto raw = test::read_bytes(tmp / "f8.safetensors");
  const std::string text(raw.begin(), raw.end());
  CHECK(text.find("\"F8_E4M3\"") != std::string::npos);
  CHECK(text.find("\"F8_E5M2\"") != std::string::npos);
  const auto t = ckpt::restore_tree(tmp / "f8.safetensors");
  CHECK(t.leaf("q.e4m3").dtype() == ckpt::dtype::float8_e4m3fn);
  CHECK(t.leaf("q.e5m2").shape() == ckpt::Shape{1, 3});
  CHECK(t.leaf("q.e5m2").bytes() == f8);
  // native keeps them too
  ckpt::save_snapshot(tmp / "native", snap);
  CHECK(ckpt::restore_tree(tmp / "native").leaf("q.e4m3").bytes() == f8);

  struct WithString { std::string name; std::vector<float> w; };
  CHECK_THROWS_WITH_AS(ckpt::save<ckpt::safetensors>(tmp / "s.safetensors", WithString{"x", {1.f}}),
                       doctest::Contains("name"), ckpt::Error);
  struct Complex128 { std::vector<std::complex<double>> z; };
  CHECK_THROWS_WITH_AS(ckpt::save<ckpt::safetensors>(tmp / "z.safetensors", Complex128{{{1.0, 2.0}}}),
                       doctest::Contains("complex128"), ckpt::Error);
  struct Dotted { std::map<std::string, float> m; };
  CHECK_THROWS_WITH_AS(ckpt::save<ckpt::safetensors>(tmp / "d.safetensors", Dotted{{{"a.b", 1.f}}}),
                       doctest::Contains("separator"), ckpt::Error);
  CHECK_FALSE(fs::exists(tmp / "s.safetensors"));
}

TEST_CASE("hostile safetensors headers: every one a CorruptCheckpointError, never a crash or a huge allocation") {
  test::TempDir tmp;
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_raw(tmp / "ok.safetensors", ok, 8);
  CHECK(ckpt::restore_tree(tmp / "ok.safetensors").leaf("a").shape() == ckpt::Shape{2});
  struct Case { const char* what; std::string header; std::size_t data; std::uint64_t claimed = ~0ull; };
  const Case cases[] = {
      {"length past the end", ok, 8, 1000},
      {"length over 100 MB", ok, 8, 200'000'000},
      {"length ~2^64", ok, 8, ~1ull},
      {"not JSON", "{\"a\":", 8},
      {"not an object", "[1,2,3]            ", 8},
      {"tensor not an object", R"({"a":3})", 8},
      {"unknown dtype", R"({"a":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", 8},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8},
      {"float dim", R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8},
      {"overflowing shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8},
      {"end before begin", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8},
      {"offsets past data", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8},
      {"huge offsets", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})", 8},
      {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8},
      {"trailing bytes", ok, 12},
      {"offsets not a pair", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8},
      {"metadata not strings", R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8},
      {"deep nesting", std::string(100000, '[') + std::string(100000, ']'), 0},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const fs::path p = tmp / "bad.safetensors";
    write_raw(p, c.header, c.data, c.claimed);
    CHECK_THROWS_AS(ckpt::safetensors::open(p), ckpt::Error);
  }
  // a short file is not taken for safetensors at all
  test::write_bytes(tmp / "short.safetensors", {'{', '}'});
  CHECK_THROWS_AS(ckpt::safetensors::open(tmp / "short.safetensors"), ckpt::CorruptCheckpointError);
  CHECK(ckpt::detect_format(tmp / "short.safetensors") == "");
}

TEST_CASE("safetensors through the manager and the CLI") {
  test::TempDir tmp;
  {
    ckpt::CheckpointManager<Model, ckpt::safetensors> mgr(tmp / "run", {.max_to_keep = 2});
    Model m = make_model();
    for (int s = 1; s <= 3; ++s) {
      m.step = s;
      mgr.save(s, m);
    }
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2, 3});
    CHECK(fs::exists(tmp / "run/3/model.safetensors"));
    CHECK(mgr.restore(3).step == 3);
  }
  if (!fs::exists(CKPT_CLI)) {
    MESSAGE("the ckpt tool is not built; CLI part skipped");
    return;
  }
  const std::string cmd = std::string(CKPT_CLI) + " convert " + (tmp / "run/3").string() + " " +
                          (tmp / "st").string() + " --to safetensors >/dev/null && " + CKPT_CLI + " tree --json " +
                          (samples / "overall.safetensors").string() + " > " + (tmp / "tree.json").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(fs::exists(tmp / "st/model.safetensors"));
  CHECK(ckpt::restore<Model>(tmp / "st").step == 3);
  const auto j = json::parse(std::ifstream(tmp / "tree.json"));
  CHECK(j["leaves"].size() == 9);
}

TEST_CASE("safetensors names that are also prefixes (a beside a.b): every tensor read, at a.@value; written back to the same names") {
  test::TempDir tmp;
  // As a PyTorch state_dict can hold them: a module's own tensor beside its children's.
  const std::vector<std::pair<std::string, std::vector<float>>> tensors = {
      {"a", {1.f}},
      {"a.b", {2.f, 3.f}},
      {"a.b.c", {4.f}},
      {"a.b_1", {5.f}},  // a sibling, not below a.b
      {"encoder.layers.0.weight", {6.f, 7.f}},  // a plain name: split as before
      {"x", {8.f}},
      {"x.@value", {9.f}},  // a real segment that looks like the moved value: escaped
      {"x.y", {10.f}},
  };
  const std::vector<std::pair<std::string, std::string>> paths = {
      {"a", "a.@value"},        {"a.b", "a.b.@value"},
      {"a.b.c", "a.b.c"},       {"a.b_1", "a.b_1"},
      {"encoder.layers.0.weight", "encoder.layers.0.weight"},
      {"x", "x.@value"},        {"x.@value", "x.@@value"},
      {"x.y", "x.y"},
  };
  std::map<std::string, std::string> flat;
  for (const auto& [name, v] : tensors) flat[name] = std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
  write_floats(tmp / "m.safetensors", tensors);
  auto check_tree = [&](const ckpt::Tree& t) {
    REQUIRE(t.size() == tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      CAPTURE(paths[i].second);
      CHECK(t.leaf(paths[i].second).as<std::vector<float>>() == tensors[i].second);
    }
  };
  const auto t = ckpt::restore_tree(tmp / "m.safetensors");
  check_tree(t);
  CHECK(ckpt::metadata(tmp / "m.safetensors").paths() == t.paths());
  struct A {
    std::vector<float> own, b;
  };
  const auto a = ckpt::restore<A>(tmp / "m.safetensors", {.transform = [](ckpt::Tree& tree) {
                                    tree.rename("a.@value", "own");
                                    tree.rename("a.b.@value", "b");
                                    for (const char* other : {"a", "encoder", "x"}) tree.erase(other);
                                  }});
  CHECK(a.own == std::vector<float>{1.f});
  CHECK(a.b == std::vector<float>{2.f, 3.f});

  // back to safetensors: the original names and bytes, directly, through native, and in shards
  ckpt::convert(tmp / "m.safetensors", tmp / "back.safetensors", "safetensors");
  CHECK(names_and_bytes(tmp / "back.safetensors") == flat);
  ckpt::convert(tmp / "m.safetensors", tmp / "native", "native");
  check_tree(ckpt::restore_tree(tmp / "native"));
  ckpt::convert(tmp / "native", tmp / "again.safetensors", "safetensors");
  CHECK(names_and_bytes(tmp / "again.safetensors") == flat);
  ckpt::convert(tmp / "native", tmp / "shards", "safetensors", {.max_shard_bytes = 8});
  REQUIRE(fs::exists(tmp / "shards/model.safetensors.index.json"));
  CHECK(names_and_bytes(tmp / "shards") == flat);
  const auto index = json::parse(std::ifstream(tmp / "shards/model.safetensors.index.json"));
  std::map<std::string, std::string> mapped;
  for (const auto& item : index["weight_map"].items()) mapped[item.key()] = flat.at(item.key());
  CHECK(mapped == flat);
  check_tree(ckpt::restore_tree(tmp / "shards"));  // the names of every shard decide the paths

  // a tree no names give is refused, naming the path: @value other than last, '.' in a segment
  struct Odd {
    std::map<std::string, std::map<std::string, float>> m;
  };
  CHECK_THROWS_WITH_AS(ckpt::save<ckpt::safetensors>(tmp / "odd.safetensors", Odd{{{"@value", {{"b", 1.f}}}}}),
                       doctest::Contains("m.@value.b"), ckpt::Error);
  CHECK_THROWS_WITH_AS(ckpt::save<ckpt::safetensors>(tmp / "odd.safetensors", Odd{{{"a.b", {{"c", 1.f}}}}}),
                       doctest::Contains("separator"), ckpt::Error);
  CHECK_FALSE(fs::exists(tmp / "odd.safetensors"));
  // a leaf at k.@value with nothing beside it is the name k (which reads back as plain k)
  ckpt::save<ckpt::safetensors>(tmp / "k.safetensors", Odd{{{"k", {{"@value", 1.5f}}}}});
  CHECK(names_and_bytes(tmp / "k.safetensors").count("m.k") == 1);
  CHECK(ckpt::restore_tree(tmp / "k.safetensors").leaf("m.k").as<float>() == 1.5f);
}

}  // namespace safetensors_test
