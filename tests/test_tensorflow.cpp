// TensorFlow checkpoints (tensor bundles V2) in: crc32c, the real TF-Serving and Mesh TF
// T5 checkpoints, bundles of every dtype written here and cross-checked by an independent
// Python decoder, name translation into a train state, hostile index and data files.
#include "support.hpp"

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstring>
#include <map>
#include <set>

#include "../examples/t5_mesh_tf_translator.hpp"

namespace tensorflow_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path data_dir = fs::path(CKPT_FIXTURES_DIR) / "tf";
const fs::path serving = data_dir / "serving_bundles";
const fs::path mtf = data_dir / "mtf_tiny_t5_partial";

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

// ---- a small tensor-bundle writer, for bundles the fixtures do not have ----------

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_le(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void field_varint(std::string& out, int f, std::uint64_t v) {
  put_varint(out, static_cast<std::uint64_t>(f) << 3);
  put_varint(out, v);
}
void field_bytes(std::string& out, int f, const std::string& b) {
  put_varint(out, (static_cast<std::uint64_t>(f) << 3) | 2);
  put_varint(out, b.size());
  out += b;
}
void field_fixed32(std::string& out, int f, std::uint32_t v) {
  put_varint(out, (static_cast<std::uint64_t>(f) << 3) | 5);
  put_le(out, v, 4);
}

struct Tensor {
  std::string name;
  int tf_dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;  // as stored in the data shard
  std::uint32_t masked_crc;
};

std::string entry_proto(const Tensor& t, std::uint64_t offset, int shard = 0) {
  std::string shape;
  for (auto d : t.shape) {
    std::string dim;
    field_varint(dim, 1, static_cast<std::uint64_t>(d));
    field_bytes(shape, 2, dim);
  }
  std::string e;
  field_varint(e, 1, static_cast<std::uint64_t>(t.tf_dtype));
  field_bytes(e, 2, shape);
  if (shard) field_varint(e, 3, static_cast<std::uint64_t>(shard));
  field_varint(e, 4, offset);
  field_varint(e, 5, t.bytes.size());
  field_fixed32(e, 6, t.masked_crc);
  return e;
}

std::string header_proto(int num_shards, int endianness = 0) {
  std::string version, h;
  field_varint(version, 1, 1);
  field_varint(h, 1, static_cast<std::uint64_t>(num_shards));
  if (endianness) field_varint(h, 2, static_cast<std::uint64_t>(endianness));
  field_bytes(h, 3, version);
  return h;
}

// One uncompressed block: every key stored whole at a restart point, then its trailer.
std::string block(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string b;
  std::vector<std::uint32_t> restarts;
  for (const auto& [k, v] : kv) {
    restarts.push_back(static_cast<std::uint32_t>(b.size()));
    put_varint(b, 0);
    put_varint(b, k.size());
    put_varint(b, v.size());
    b += k;
    b += v;
  }
  if (restarts.empty()) restarts.push_back(0);
  for (auto r : restarts) put_le(b, r, 4);
  put_le(b, restarts.size(), 4);
  return b;
}
void append_block(std::string& file, const std::string& contents, std::uint64_t& off, std::uint64_t& size) {
  off = file.size();
  size = contents.size();
  file += contents;
  file += '\0';
  const std::uint32_t crc = ckpt::io::crc32c(bytes_of(file.substr(static_cast<std::size_t>(off))));
  put_le(file, ckpt::io::crc32c_mask(crc), 4);
}
std::string table(std::vector<std::pair<std::string, std::string>> kv) {
  std::sort(kv.begin(), kv.end());
  std::string f;
  std::uint64_t doff, dsize, moff, msize, ioff, isize;
  append_block(f, block(kv), doff, dsize);
  append_block(f, block({}), moff, msize);
  std::string handle;
  put_varint(handle, doff);
  put_varint(handle, dsize);
  append_block(f, block({{kv.empty() ? std::string() : kv.back().first + "\x7f", handle}}), ioff, isize);
  std::string footer;
  put_varint(footer, moff);
  put_varint(footer, msize);
  put_varint(footer, ioff);
  put_varint(footer, isize);
  footer.resize(40, '\0');
  put_le(footer, 0xdb4775248b80fb57ull, 8);
  return f + footer;
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A bundle with one data shard at prefix.
void write_bundle(const fs::path& prefix, const std::vector<Tensor>& tensors, const std::string& header = header_proto(1)) {
  std::string data;
  std::vector<std::pair<std::string, std::string>> kv{{"", header}};
  for (const auto& t : tensors) {
    kv.emplace_back(t.name, entry_proto(t, data.size()));
    data += t.bytes;
  }
  write_text(prefix.string() + ".index", table(kv));
  write_text(prefix.string() + ".data-00000-of-00001", data);
}

template <class E>
Tensor numeric(std::string name, int code, std::vector<std::int64_t> shape, const std::vector<E>& v) {
  std::string b(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(E));
  return {std::move(name), code, std::move(shape), b, ckpt::io::crc32c_mask(ckpt::io::crc32c(bytes_of(b)))};
}

Tensor string_scalar(std::string name, const std::string& s) {
  std::string len;
  put_le(len, s.size(), 4);
  const std::uint32_t len_crc = ckpt::io::crc32c(bytes_of(len));
  std::string stored;
  put_varint(stored, s.size());
  std::string masked;
  put_le(masked, ckpt::io::crc32c_mask(len_crc), 4);
  stored += masked + s;
  const std::uint32_t crc = ckpt::io::crc32c_extend(len_crc, bytes_of(masked + s));
  return {std::move(name), 7, {}, stored, ckpt::io::crc32c_mask(crc)};
}

// The path of a TF name in a checkpoint where it is no other name's scope: split at '/'.
ckpt::Path tf_path(std::string_view name) {
  const std::vector<std::string_view> one{name};
  return ckpt::detail::interop::FlatNames(one, '/').path(name);
}

// Runs a command; its standard output (the test fails if it exits non-zero).
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  INFO(cmd);
  INFO(out);
  REQUIRE(rc == 0);
  return out;
}

// The tensor names of a safetensors file, with their bytes, parsed by hand.
std::map<std::string, std::string> safetensors_names(const fs::path& file) {
  const auto raw = test::read_bytes(file);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(raw[static_cast<std::size_t>(i)])) << (8 * i);
  const auto h = json::parse(std::string(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n)));
  std::map<std::string, std::string> out;
  for (const auto& item : h.items()) {
    if (item.key() == "__metadata__") continue;
    const auto at = 8 + n + item.value()["data_offsets"][0].get<std::uint64_t>();
    const auto end = 8 + n + item.value()["data_offsets"][1].get<std::uint64_t>();
    out[item.key()] = std::string(raw.begin() + static_cast<std::ptrdiff_t>(at), raw.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

struct Dense {
  xt::xtensor<float, 2> kernel;
  float bias = 0;
};
struct Small {
  Dense layer;
};

// What t5x's checkpoint_importer does to Mesh TF names, for a few of the tiny T5's variables.
ckpt::tensorflow::Translator t5_rules() {
  return ckpt::tensorflow::rules({
      {R"((encoder|decoder)/block_0*(\d+)/layer_0*(\d+)/(SelfAttention|EncDecAttention)/(q|k|v|o))",
       "target.$1.layers_$2.attention_$3.$5.kernel"},
      {R"((encoder|decoder)/block_0*(\d+)/layer_0*(\d+)/DenseReluDense/(wi_0|wi_1|wo)/kernel)", "target.$1.layers_$2.mlp_$3.$4.kernel"},
      {R"((encoder|decoder)/block_0*(\d+)/layer_0*(\d+)/rms_norm/scale)", "target.$1.layers_$2.norm_$3.scale"},
      {R"((encoder|decoder)/block_000/layer_000/SelfAttention/relative_attention_bias)",
       "target.$1.relpos_bias.rel_embedding"},
      {R"((encoder|decoder)/rms_norm/scale)", "target.$1.final_norm.scale"},
      {R"(decoder/logits/kernel)", "target.decoder.logits_dense.kernel"},
      {R"(shared/embedding)", "target.token_embedder.embedding"},
      {R"(global_step)", "step"},
  });
}

}  // namespace tensorflow_test

namespace tensorflow_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("crc32c: the standard check values, masking, and the hardware and table versions agree") {
  CHECK(ckpt::io::crc32c(bytes_of("123456789")) == 0xE3069283u);
  CHECK(ckpt::io::crc32c(bytes_of(std::string(32, '\0'))) == 0x8A9136AAu);
  CHECK(ckpt::io::crc32c(bytes_of(std::string(32, '\xff'))) == 0x62A8AB43u);
  CHECK(ckpt::io::crc32c_extend(ckpt::io::crc32c(bytes_of("1234")), bytes_of("56789")) == 0xE3069283u);
  CHECK(ckpt::io::crc32c_unmask(ckpt::io::crc32c_mask(0xE3069283u)) == 0xE3069283u);
  std::mt19937 rng(7);
  std::string s(1000, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  for (std::size_t n : {0, 1, 7, 8, 9, 63, 1000}) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    CHECK(~ckpt::detail::crc32c::software(~0u, p, n) == ckpt::io::crc32c(bytes_of(s.substr(0, n))));
  }
}

TEST_CASE("TF-Serving's checkpoints (TF 1 and 2, snappy and plain index blocks) read with their values") {
  struct Want { const char* dir; std::vector<std::pair<const char*, float>> scalars; };
  const Want wants[] = {
      {"saved_model_counter/00000123", {{"counter", 0.0f}}},
      {"saved_model_half_plus_three/00000123", {{"a", 0.5f}, {"b", 3.0f}, {"c", 3.0f}}},
      {"saved_model_half_plus_two_cpu/00000123", {{"a", 0.5f}, {"a2", 0.5f}, {"b", 2.0f}, {"c", 3.0f}, {"c2", 3.0f}}},
      {"saved_model_half_plus_two_mkl/00000123", {{"a", 0.5f}, {"b", 2.0f}, {"c", 3.0f}}},
      {"saved_model_half_plus_two_tf2_cpu/00000123",
       {{"a/.ATTRIBUTES/VARIABLE_VALUE", 0.5f}, {"b/.ATTRIBUTES/VARIABLE_VALUE", 2.0f}, {"c/.ATTRIBUTES/VARIABLE_VALUE", 3.0f}}},
  };
  for (const auto& w : wants) {
    CAPTURE(w.dir);
    const fs::path saved_model = serving / w.dir;
    CHECK(ckpt::detect_format(saved_model) == "tensorflow");  // a SavedModel directory
    const auto t = ckpt::tensorflow::restore_tree(saved_model / "variables/variables");
    for (const auto& [name, v] : w.scalars) {
      const auto path = tf_path(name);
      CHECK(t.leaf(path).dtype() == ckpt::dtype::float32);
      CHECK(t.leaf(path).as<float>() == v);
    }
  }
  // the same through the generic entry points, from the prefix and from PREFIX.index
  const auto mkl = ckpt::restore_tree(serving / "saved_model_half_plus_two_mkl/00000123/variables/variables.index");
  CHECK(mkl.size() == 9);
  CHECK(mkl.leaf("conv2d.kernel").shape() == ckpt::Shape{1, 1, 1, 1});
  CHECK(*mkl.leaf("conv2d_1.kernel").as<xt::xarray<double>>().begin() == doctest::Approx(-1.0451120138168335));
  CHECK(mkl.info().format == "tensorflow");
  // TF2's object graph: a scalar string tensor, crc checked through TF's string encoding
  const auto tf2 = ckpt::restore_tree(serving / "saved_model_half_plus_two_tf2_cpu/00000123");
  CHECK(tf2.leaf("_CHECKPOINTABLE_OBJECT_GRAPH").dtype() == ckpt::dtype::string);
  CHECK(tf2.leaf("_CHECKPOINTABLE_OBJECT_GRAPH").byte_length() == 613);  // 619 stored: 2 varint bytes + 4 crc
  CHECK(ckpt::restore_tree(serving / "tf_text_regression/01").size() == 1);
}

TEST_CASE("a V1 checkpoint is refused with a message that says so") {
  const fs::path v1 = serving / "bad_half_plus_two/00000123";
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(v1), doctest::Contains("V1"), ckpt::Error);
}

TEST_CASE("the Mesh TF T5 checkpoint: the index lists all 105 variables; a full read fails naming the missing shard") {
  const auto oracle = json::parse(std::ifstream(mtf / "oracle_index.json"))["tensors"];
  // the directory's `checkpoint` state file names model.ckpt-0
  const auto meta = ckpt::metadata(mtf);
  REQUIRE(meta.size() == 105);
  REQUIRE(oracle.size() == 105);
  for (const auto& item : oracle.items()) {  // no structured binding: clang 14 cannot capture one (CAPTURE)
    const std::string name = item.key();
    const auto& e = item.value();
    CAPTURE(name);
    const auto& l = meta.leaf(tf_path(name));
    CHECK(std::string(ckpt::dtype_name(l.dtype())) == e["dtype"].get<std::string>());
    CHECK(l.shape() == e["shape"].get<ckpt::Shape>());
    CHECK(l.byte_length() == e["size"].get<std::uint64_t>());
  }
  CHECK(meta.leaf("global_step").as<std::int64_t>() == 0);  // in the shard that is there
  CHECK_THROWS_WITH_AS(meta.leaf("shared.embedding").bytes(), doctest::Contains("data-00001-of-00002 is missing"),
                       ckpt::CorruptCheckpointError);
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(mtf / "model.ckpt-0"), doctest::Contains("missing"), ckpt::CorruptCheckpointError);

  // translated as t5x does: every variable needs a rule, the Adafactor slots have none
  CHECK_THROWS_WITH_AS(ckpt::tensorflow::convert(mtf, t5_rules()), doctest::Contains("_slot_v"), ckpt::Error);
  const auto t = ckpt::tensorflow::convert(mtf, t5_rules(), {.skip_unmapped = true});
  CHECK(t.size() == 53);
  CHECK(t.leaf("target.encoder.layers_0.attention_0.q.kernel").shape() == ckpt::Shape{32, 128});
  CHECK(t.leaf("target.token_embedder.embedding").dtype() == ckpt::dtype::bfloat16);
  CHECK(t.leaf("step").as<std::int64_t>() == 0);
  // the worked example's translator (examples/t5_mesh_tf_translator.hpp) maps all 105, as t5x does
  const auto full = ckpt::tensorflow::convert(mtf, t5_example::t5_mesh_tf_translator());
  CHECK(full.size() == 105);
  CHECK(full.leaf("target.encoder.layers_1.attention.query.kernel").shape() == ckpt::Shape{32, 128});
  CHECK(full.leaf("target.decoder.layers_0.encoder_decoder_attention.out.kernel").shape() == ckpt::Shape{128, 32});
  CHECK(full.leaf("target.decoder.layers_0.pre_cross_attention_layer_norm.scale").dtype() == ckpt::dtype::bfloat16);
  CHECK(full.leaf("state.param_states.decoder.logits_dense.kernel.v").dtype() == ckpt::dtype::float32);
  CHECK(full.leaf("target.encoder.relpos_bias.rel_embedding").shape() == ckpt::Shape{2, 32});
  CHECK(full.leaf("state.step").as<std::int64_t>() == 0);
}

TEST_CASE("bundles of every dtype, written here, read back; the independent Python decoder agrees") {
  test::TempDir tmp;
  const fs::path prefix = tmp / "model.ckpt-7";
  std::vector<ckpt::float16> f16 = {ckpt::float16(1.5f), ckpt::float16(-2.0f)};
  std::vector<ckpt::bfloat16> bf16 = {ckpt::bfloat16(3.0f)};
  std::vector<std::complex<float>> c64 = {{1.f, -1.f}};
  std::vector<std::complex<double>> c128 = {{2.0, 0.5}};
  std::vector<std::uint8_t> b = {1, 0, 1};
  const std::vector<Tensor> tensors = {
      numeric<float>("layer/kernel", 1, {2, 2}, {1.f, 2.f, 3.f, 4.f}),
      numeric<float>("layer/bias", 1, {}, {0.25f}),
      numeric<double>("f64", 2, {2}, {1e300, -0.5}),
      numeric<std::int32_t>("i32", 3, {1}, {-7}),
      numeric<std::uint8_t>("u8", 4, {2}, {0, 255}),
      numeric<std::int16_t>("i16", 5, {1}, {-300}),
      numeric<std::int8_t>("i8", 6, {1}, {-100}),
      numeric("c64", 8, {1}, c64),
      numeric<std::int64_t>("i64", 9, {1}, {std::int64_t{1} << 40}),
      numeric("bool", 10, {3}, b),
      numeric("bf16", 14, {1}, bf16),
      numeric<std::uint16_t>("u16", 17, {1}, {65535}),
      numeric("c128", 18, {1}, c128),
      numeric("f16", 19, {2}, f16),
      numeric<std::uint32_t>("u32", 22, {1}, {4000000000u}),
      numeric<std::uint64_t>("u64", 23, {1}, {std::uint64_t{1} << 63}),
      string_scalar("name", "hello bundle"),
  };
  write_bundle(prefix, tensors);
  write_text(tmp / "checkpoint", "model_checkpoint_path: \"model.ckpt-7\"\nall_model_checkpoint_paths: \"model.ckpt-7\"\n");
  const auto t = ckpt::restore_tree(tmp.path());
  CHECK(t.size() == tensors.size());
  CHECK(t.leaf("layer.kernel").as<xt::xtensor<float, 2>>() == xt::xtensor<float, 2>{{1.f, 2.f}, {3.f, 4.f}});
  CHECK(t.leaf("f64").as<std::vector<double>>()[0] == 1e300);
  CHECK(t.leaf("bool").as<std::vector<bool>>() == std::vector<bool>{true, false, true});
  CHECK(t.leaf("bf16").as<std::vector<float>>()[0] == 3.0f);
  CHECK(t.leaf("f16").as<std::vector<float>>()[1] == -2.0f);
  CHECK(t.leaf("c128").as<std::vector<std::complex<double>>>()[0] == std::complex<double>(2.0, 0.5));
  CHECK(t.leaf("u64").as<std::vector<std::uint64_t>>()[0] == std::uint64_t{1} << 63);
  CHECK(t.leaf("name").as<std::string>() == "hello bundle");
  CHECK(t.leaf("i16").as<std::vector<std::int16_t>>()[0] == -300);
  // restore<T> through a rule table; bias is a scalar
  const auto small = ckpt::tensorflow::restore<Small>(
      prefix, ckpt::tensorflow::rules({{"layer/(kernel|bias)", "layer.$1"}, {"f64|i32|u8|i16|i8|c64|i64|bool|bf16|u16|c128|f16|u32|u64|name", ""}}),
      {.skip_unmapped = true});
  CHECK(small.layer.kernel == xt::xtensor<float, 2>{{1.f, 2.f}, {3.f, 4.f}});
  CHECK(small.layer.bias == 0.25f);
  // a callable translator, and a state_transformation_fns-like edit
  const auto renamed = ckpt::tensorflow::convert(
      prefix, [](std::string_view n) -> std::optional<std::string> { return n == "i8" ? std::optional<std::string>("x.i8") : std::nullopt; },
      {.skip_unmapped = true, .transforms = {[](ckpt::Tree& tr) { tr.set("x.extra", 5); }}});
  CHECK(renamed.paths() == std::vector<std::string>{"x.i8", "x.extra"});
  CHECK_THROWS_WITH_AS(ckpt::tensorflow::convert(prefix, ckpt::tensorflow::rules({{".*", "same"}})), doctest::Contains("same path"), ckpt::Error);

  // the independent decoder (pure Python + numpy, its own crc32c) reads this writer's bundle
  const std::string out = test::python(
      "import json, subprocess, sys\n"
      "r = subprocess.run([sys.executable, '" + (mtf / "oracle_tf_bundle.py").string() + "', sys.argv[1] + '/model.ckpt-7', '--json'],"
      " capture_output=True, text=True, check=True)\n"
      "t = json.loads(r.stdout)['tensors']\n"
      "assert all(e['crc_check'] == 'masked-ok' for e in t.values()), t\n"
      "print(t['layer/kernel']['values'], t['name']['values'], t['u64']['values'], t['bf16']['values'])\n",
      tmp.path());
  CHECK(out.find("[1.0, 2.0, 3.0, 4.0] ['hello bundle'] [9223372036854775808] [3.0]") != std::string::npos);
}

// A partitioned variable as tf.train.Saver writes one: an entry with the whole shape
// and the slices' extents (no data), and each slice's bytes under its own key.
std::string sliced_entry_proto(int tf_dtype, const std::vector<std::int64_t>& shape,
                               const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>& slices) {
  std::string sh, e;
  for (auto d : shape) {
    std::string dim;
    field_varint(dim, 1, static_cast<std::uint64_t>(d));
    field_bytes(sh, 2, dim);
  }
  field_varint(e, 1, static_cast<std::uint64_t>(tf_dtype));
  field_bytes(e, 2, sh);
  for (const auto& slice : slices) {
    std::string sp;
    for (const auto& [start, length] : slice) {
      std::string extent;  // a whole dimension is an empty Extent
      if (length >= 0) {
        if (start) field_varint(extent, 1, static_cast<std::uint64_t>(start));
        field_varint(extent, 2, static_cast<std::uint64_t>(length));
      }
      field_bytes(sp, 1, extent);
    }
    field_bytes(e, 7, sp);
  }
  return e;
}

// Bytes written out by hand from TensorFlow's OrderedCode (ordered_code.cc): 0x00 (the
// number 0), the name, 0x00 0x01, the rank as 0x01 <byte>, then start and length of
// each dimension as signed numbers: one byte 0x80 ^ v for -64 <= v < 64 (so 0 is
// 0x80, 2 is 0x82, a whole dimension's -1 is 0x7f).
std::string hand_key(const std::string& name, std::initializer_list<int> dims) {
  std::string k("\x00", 1);
  k += name;
  k += std::string("\x00\x01", 2);
  k += '\x01';
  k += static_cast<char>(dims.size() / 2);
  for (int v : dims) k += static_cast<char>(0x80 ^ v);
  return k;
}

TEST_CASE("partitioned TF variables: slices under TensorFlow's keys assembled into the whole tensor") {
  // The slice key encoding against the examples in TensorFlow's ordered_code.cc comments.
  std::string k;
  ckpt::detail::tf_bundle::ordered_code::write_signed(k, 0x424242);
  CHECK(k == std::string("\xf0\x42\x42\x42", 4));
  k.clear();
  ckpt::detail::tf_bundle::ordered_code::write_signed(k, -0x800);
  CHECK(k == std::string("\x38\x00", 2));
  k.clear();
  ckpt::detail::tf_bundle::ordered_code::write_string(k, std::string("a\0b\xff", 4));
  CHECK(k == std::string("a\x00\xff" "b\xff\x00\x00\x01", 8));

  test::TempDir tmp;
  const fs::path prefix = tmp / "model.ckpt-3";
  // part/w is [4, 3] float32 stored as rows [0, 3) and row [3, 4); a plain tensor beside it
  const std::vector<float> top = {0, 1, 2, 3, 4, 5, 6, 7, 8}, bottom = {9, 10, 11};
  const Tensor t0 = numeric<float>("", 1, {3, 3}, top), t1 = numeric<float>("", 1, {1, 3}, bottom);
  const Tensor plain = numeric<std::int64_t>("global_step", 9, {}, {42});
  auto bundle = [&](const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>& slices,
                    std::vector<std::pair<std::string, std::string>> slice_kv, const std::string& data) {
    std::vector<std::pair<std::string, std::string>> kv{{"", header_proto(1)}, {"part/w", sliced_entry_proto(1, {4, 3}, slices)}};
    kv.emplace_back("global_step", entry_proto(plain, data.size()));
    for (auto& x : slice_kv) kv.push_back(std::move(x));
    write_text(prefix.string() + ".index", table(kv));
    write_text(prefix.string() + ".data-00000-of-00001", data + plain.bytes);
  };
  const std::string data = t0.bytes + t1.bytes;
  const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> rows = {{{0, 3}, {0, -1}}, {{3, 1}, {0, -1}}};
  bundle(rows, {{hand_key("part/w", {0, 3, 0, -1}), entry_proto(t0, 0)}, {hand_key("part/w", {3, 1, 0, -1}), entry_proto(t1, t0.bytes.size())}},
         data);

  const auto t = ckpt::restore_tree(prefix);
  CHECK(t.paths() == std::vector<std::string>{"global_step", "part.w"});
  CHECK(t.leaf("part.w").as<xt::xtensor<float, 2>>() ==
        xt::xtensor<float, 2>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}});
  CHECK(ckpt::metadata(prefix).leaf("part.w").shape() == ckpt::Shape{4, 3});
  // another layout: this rank's box of the variable, read from the slices it meets
  struct Part {
    ckpt::Sharded<xt::xtensor<float, 2>> w;
  };
  struct Model {
    Part part;
  };
  Model m{{{{4, 3}, {2, 1}, xt::xtensor<float, 2>::from_shape({2, 2})}}};
  CHECK_THROWS_CKPT(ckpt::restore_into(prefix, m), ckpt::UnusedLeafError, "global_step");
  ckpt::restore_into(prefix, m, {.partial = true});  // the variable's box, not global_step
  CHECK(m.part.w.local == xt::xtensor<float, 2>{{7, 8}, {10, 11}});

  // a flipped byte in a slice fails its crc32c; the other slice still reads alone
  auto flipped = data;
  flipped[t0.bytes.size() + 1] = static_cast<char>(flipped[t0.bytes.size() + 1] ^ 4);
  bundle(rows, {{hand_key("part/w", {0, 3, 0, -1}), entry_proto(t0, 0)}, {hand_key("part/w", {3, 1, 0, -1}), entry_proto(t1, t0.bytes.size())}},
         flipped);
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(prefix), doctest::Contains("crc32c mismatch"), ckpt::CorruptCheckpointError);
  Model top_only{{{{4, 3}, {0, 0}, xt::xtensor<float, 2>::from_shape({2, 3})}}};
  ckpt::restore_into(prefix, top_only, {.partial = true});
  CHECK(top_only.part.w.local == xt::xtensor<float, 2>{{0, 1, 2}, {3, 4, 5}});

  // slices that are missing, overlap, leave a gap or lie outside: errors naming the variable
  bundle(rows, {{hand_key("part/w", {0, 3, 0, -1}), entry_proto(t0, 0)}}, data);
  CHECK_THROWS_WITH_AS(ckpt::metadata(prefix), doctest::Contains("part/w: the slice at [3,0] of shape [1,3] is missing"),
                       ckpt::CorruptCheckpointError);
  bundle({{{0, 3}, {0, -1}}, {{2, 1}, {0, -1}}},
         {{hand_key("part/w", {0, 3, 0, -1}), entry_proto(t0, 0)}, {hand_key("part/w", {2, 1, 0, -1}), entry_proto(t1, t0.bytes.size())}},
         data);
  CHECK_THROWS_WITH_AS(ckpt::metadata(prefix), doctest::Contains("overlap"), ckpt::CorruptCheckpointError);
  bundle({{{0, 3}, {0, -1}}}, {{hand_key("part/w", {0, 3, 0, -1}), entry_proto(t0, 0)}}, data);
  CHECK_THROWS_WITH_AS(ckpt::metadata(prefix), doctest::Contains("cover 9 of the 12"), ckpt::CorruptCheckpointError);
  bundle({{{0, 3}, {0, -1}}, {{3, 2}, {0, -1}}}, {{hand_key("part/w", {0, 3, 0, -1}), entry_proto(t0, 0)}}, data);
  CHECK_THROWS_WITH_AS(ckpt::metadata(prefix), doctest::Contains("lies outside the shape [4,3]"), ckpt::CorruptCheckpointError);
}

// A string tensor of any shape in TensorFlow's encoding (tensor_bundle.cc WriteStringTensor).
Tensor string_tensor(std::string name, std::vector<std::int64_t> shape, const std::vector<std::string>& v) {
  std::string lens, fixed;
  for (const auto& s : v) {
    put_varint(lens, s.size());
    put_le(fixed, s.size(), 4);
  }
  std::uint32_t crc = ckpt::io::crc32c(bytes_of(fixed));
  std::string masked;
  put_le(masked, ckpt::io::crc32c_mask(crc), 4);
  std::string body = masked;
  for (const auto& s : v) body += s;
  crc = ckpt::io::crc32c_extend(crc, bytes_of(body));
  return {std::move(name), 7, std::move(shape), lens + body, ckpt::io::crc32c_mask(crc)};
}

TEST_CASE("TF string tensors of any shape: one string leaf per element; the independent decoder agrees") {
  test::TempDir tmp;
  const fs::path prefix = tmp / "vocab.ckpt-1";
  const std::vector<std::string> words = {"the", "", std::string("a\0b", 3), "\xc3\xa9t\xc3\xa9"};
  write_bundle(prefix, {string_tensor("table/keys", {2, 2}, words), string_tensor("names", {3}, {"x", "yy", "zzz"}),
                        string_scalar("note", "one")});
  const auto t = ckpt::restore_tree(prefix);
  CHECK(t.paths() == std::vector<std::string>{"names.0", "names.1", "names.2", "note", "table.keys.0.0", "table.keys.0.1",
                                              "table.keys.1.0", "table.keys.1.1"});
  CHECK(t.leaf("table.keys.1.0").as<std::string>() == std::string("a\0b", 3));
  struct Vocab {
    std::vector<std::vector<std::string>> keys;
  };
  struct Strings {
    Vocab table;
    std::vector<std::string> names;
    std::string note;
  };
  // a rule for the tensor's name covers its elements
  const auto s = ckpt::tensorflow::restore<Strings>(prefix, ckpt::tensorflow::rules({{"table/keys", "table.keys"}, {"names|note", "$&"}}));
  CHECK(s.table.keys == std::vector<std::vector<std::string>>{{"the", ""}, {std::string("a\0b", 3), "\xc3\xa9t\xc3\xa9"}});
  CHECK(s.names == std::vector<std::string>{"x", "yy", "zzz"});
  CHECK(s.note == "one");
  const std::string out = test::python(
      "import json, subprocess, sys\n"
      "r = subprocess.run([sys.executable, '" + (mtf / "oracle_tf_bundle.py").string() + "', sys.argv[1] + '/vocab.ckpt-1', '--json'],"
      " capture_output=True, text=True, check=True)\n"
      "t = json.loads(r.stdout)['tensors']\n"
      "assert all(e['crc_check'] == 'masked-ok' for e in t.values()), t\n"
      "print(t['names']['values'], t['table/keys']['shape'])\n",
      tmp.path());
  CHECK(out.find("['x', 'yy', 'zzz'] [2, 2]") != std::string::npos);

  // a flipped string byte: the tensor's crc32c fails when read with verification, not without
  auto data = test::read_bytes(prefix.string() + ".data-00000-of-00001");
  data[9] = static_cast<char>(data[9] ^ 1);  // the 'h' of "the": 4 varint lengths and their crc come first
  test::write_bytes(prefix.string() + ".data-00000-of-00001", data);
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(prefix), doctest::Contains("crc32c"), ckpt::CorruptCheckpointError);
  CHECK(ckpt::restore_tree(prefix, {.verify_checksums = false}).size() == 8);
  // lengths that claim more than is stored
  write_bundle(prefix, {string_tensor("names", {3}, {"x", "yy", "zzz"})});
  data = test::read_bytes(prefix.string() + ".data-00000-of-00001");
  data[0] = 5;  // "x" is 1 byte
  test::write_bytes(prefix.string() + ".data-00000-of-00001", data);
  CHECK_THROWS_WITH_AS(ckpt::metadata(prefix), doctest::Contains("names: string lengths do not match"), ckpt::CorruptCheckpointError);
}

TEST_CASE("hostile TF index and data files: errors naming the checkpoint, never a crash") {
  test::TempDir tmp;
  // every single-byte corruption and every truncation of the real snappy-compressed index
  const auto real = test::read_bytes(mtf / "model.ckpt-0.index");
  fs::copy_file(mtf / "model.ckpt-0.data-00000-of-00002", tmp / "model.ckpt-0.data-00000-of-00002");
  const fs::path prefix = tmp / "model.ckpt-0";
  int opened = 0, refused = 0;
  for (std::size_t i = 0; i < real.size(); ++i) {
    auto b = real;
    b[i] = static_cast<char>(b[i] ^ 0x41);
    test::write_bytes(tmp / "model.ckpt-0.index", b);
    try {
      ckpt::metadata(prefix);
      ++opened;  // the footer's padding is covered by no crc
    } catch (const ckpt::Error&) {
      ++refused;
    }
  }
  // the footer's padding and the unread metaindex block are covered by no check
  CHECK(refused > static_cast<int>(real.size()) - 60);
  for (std::size_t n = 0; n < real.size(); n += 7) {
    test::write_bytes(tmp / "model.ckpt-0.index", std::vector<char>(real.begin(), real.begin() + static_cast<std::ptrdiff_t>(n)));
    CHECK_THROWS_AS(ckpt::tensorflow::open_bundle(prefix), ckpt::Error);
  }
  MESSAGE(opened << " of " << real.size() << " flipped bytes left an index that opens");

  // entries that lie
  struct Case { const char* what; std::vector<Tensor> tensors; std::string header; };
  Tensor big = numeric<float>("x", 1, {4611686018427387904, 4}, {1.f});
  Tensor wrong_size = numeric<float>("x", 1, {3}, {1.f, 2.f});
  const Case cases[] = {
      {"overflowing shape", {big}, header_proto(1)},
      {"size not shape x dtype", {wrong_size}, header_proto(1)},
      {"big endian", {numeric<float>("x", 1, {1}, {1.f})}, header_proto(1, 1)},
      {"no shards", {numeric<float>("x", 1, {1}, {1.f})}, header_proto(0)},
      {"malformed header proto", {numeric<float>("x", 1, {1}, {1.f})}, std::string("\x0a\xff", 2)},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    test::TempDir d;
    write_bundle(d / "p", c.tensors, c.header);
    CHECK_THROWS_AS(ckpt::tensorflow::open_bundle(d / "p"), ckpt::CorruptCheckpointError);
  }
  // data that lies: a flipped byte fails the crc, a short shard fails the bounds
  test::TempDir d;
  write_bundle(d / "p", {numeric<float>("x", 1, {2}, {1.f, 2.f})});
  auto data = test::read_bytes(d / "p.data-00000-of-00001");
  data[5] = static_cast<char>(data[5] ^ 1);
  test::write_bytes(d / "p.data-00000-of-00001", data);
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(d / "p"), doctest::Contains("crc32c mismatch"), ckpt::CorruptCheckpointError);
  CHECK(ckpt::restore_tree(d / "p", {.verify_checksums = false, .lazy = true}).leaf("x").shape() == ckpt::Shape{2});
  data.resize(6);
  test::write_bytes(d / "p.data-00000-of-00001", data);
  CHECK_THROWS_WITH_AS(ckpt::restore_tree(d / "p"), doctest::Contains("past the end"), ckpt::CorruptCheckpointError);
  // a shard id past num_shards, a state file naming nothing
  Tensor s = numeric<float>("x", 1, {1}, {1.f});
  write_text(d / "q.index", table({{"", header_proto(1)}, {"x", entry_proto(s, 0, 3)}}));
  CHECK_THROWS_WITH_AS(ckpt::tensorflow::open_bundle(d / "q"), doctest::Contains("shard 3"), ckpt::CorruptCheckpointError);
  test::TempDir e;
  write_text(e / "checkpoint", "model_checkpoint_path: \"gone-5\"\n");
  CHECK_THROWS_WITH_AS(ckpt::tensorflow::open_bundle(e.path()), doctest::Contains("gone-5"), ckpt::Error);
}

TEST_CASE("ckpt convert model.ckpt-0 out --to native|flax|t5x|orbax") {
  if (!fs::exists(CKPT_CLI)) {
    MESSAGE("the ckpt tool is not built (run `make`); skipped");
    return;
  }
  test::TempDir tmp;
  const std::string src = (serving / "saved_model_half_plus_two_mkl/00000123/variables/variables").string();
  for (const char* to : {"native", "flax", "t5x", "orbax", "safetensors"}) {
    CAPTURE(to);
    const fs::path out = tmp / to;
    const std::string cmd = std::string(CKPT_CLI) + " convert " + src + " " + out.string() + " --to " + to + " >/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    CHECK(*ckpt::restore_tree(out).leaf("conv2d_2.kernel").as<xt::xarray<float>>().begin() == doctest::Approx(1.577943205833435));
  }
  // the partial T5 checkpoint lists, but cannot convert: exit 2 and a message naming the shard
  const std::string cmd = std::string(CKPT_CLI) + " convert " + (mtf / "model.ckpt-0").string() + " " +
                          (tmp / "t5").string() + " --to native 2>" + (tmp / "err").string();
  const int st = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(st) == 2);
  const auto err = test::read_bytes(tmp / "err");
  CHECK(std::string(err.begin(), err.end()).find("data-00001-of-00002 is missing") != std::string::npos);
}

TEST_CASE("TF1 optimizer slots below their variable (w, w/Adam): every variable read, at w.@value, names restored exactly") {
  test::TempDir tmp;
  const fs::path prefix = tmp / "model.ckpt-10";
  // As tf.train.Saver writes a TF1 model trained with Adam, Momentum and an
  // ExponentialMovingAverage: slots are named below their variable.
  const std::vector<std::pair<Tensor, std::string>> want = {
      {numeric<std::int64_t>("global_step", 9, {}, {10}), "global_step"},
      {numeric<float>("beta1_power", 1, {}, {0.9f}), "beta1_power"},
      {numeric<float>("w", 1, {2}, {1.f, 2.f}), "w.@value"},
      {numeric<float>("w/Adam", 1, {2}, {0.1f, 0.2f}), "w.Adam"},
      {numeric<float>("w/Adam_1", 1, {2}, {0.01f, 0.02f}), "w.Adam_1"},
      {numeric<float>("w/ExponentialMovingAverage", 1, {2}, {0.9f, 1.9f}), "w.ExponentialMovingAverage"},
      {numeric<float>("model/encoder", 1, {}, {-1.f}), "model.encoder.@value"},  // a scope two levels up
      {numeric<float>("model/encoder/layer_0/matrix", 1, {2, 3}, {1, 2, 3, 4, 5, 6}), "model.encoder.layer_0.matrix.@value"},
      {numeric<float>("model/encoder/layer_0/matrix/Adam", 1, {2, 3}, {6, 5, 4, 3, 2, 1}), "model.encoder.layer_0.matrix.Adam"},
      {numeric<float>("model/encoder/layer_0/matrix/Adam_1", 1, {2, 3}, {0, 0, 1, 1, 2, 2}),
       "model.encoder.layer_0.matrix.Adam_1"},
      {numeric<float>("model/encoder/layer_0/matrix/ExponentialMovingAverage", 1, {2, 3}, {9, 9, 9, 8, 8, 8}),
       "model.encoder.layer_0.matrix.ExponentialMovingAverage"},
      {numeric<float>("model/encoder/layer_0/bias", 1, {3}, {0.5f, 0.25f, 0.125f}), "model.encoder.layer_0.bias.@value"},
      {numeric<float>("model/encoder/layer_0/bias/Momentum", 1, {3}, {3, 2, 1}), "model.encoder.layer_0.bias.Momentum"},
      {numeric<float>("model/decoder/kernel", 1, {1}, {7.f}), "model.decoder.kernel"},  // no slots: as before
      // real segments that look like the moved value gain an '@': the three never meet
      {numeric<float>("odd", 1, {1}, {5.f}), "odd.@value"},
      {numeric<float>("odd/@value", 1, {1}, {6.f}), "odd.@@value"},
      {numeric<float>("odd/@@value", 1, {1}, {7.f}), "odd.@@@value"},
  };
  std::vector<Tensor> tensors;
  for (const auto& [t, path] : want) tensors.push_back(t);
  write_bundle(prefix, tensors);

  auto check_tree = [&](const ckpt::Tree& t) {
    REQUIRE(t.size() == want.size());
    for (const auto& w : want) {  // no structured binding: clang 14 cannot capture one (CAPTURE)
      const Tensor& tensor = w.first;
      const std::string& path = w.second;
      CAPTURE(path);
      const auto& l = t.leaf(path);
      CHECK(l.shape() == ckpt::Shape(tensor.shape));
      CHECK(l.dtype() == (tensor.tf_dtype == 9 ? ckpt::dtype::int64 : ckpt::dtype::float32));
      const auto b = l.bytes();
      CHECK(std::string(reinterpret_cast<const char*>(b.data()), b.size()) == tensor.bytes);
    }
  };
  const auto t = ckpt::restore_tree(prefix);
  check_tree(t);
  CHECK(t.paths() == ckpt::restore_tree(prefix).paths());  // stable
  check_tree(ckpt::tensorflow::restore_tree(tmp.path() / "model.ckpt-10.index"));
  const auto meta = ckpt::metadata(prefix);
  REQUIRE(meta.size() == want.size());
  for (const auto& w : want) {
    const Tensor& tensor = w.first;
    const std::string& path = w.second;
    CAPTURE(path);
    CHECK(meta.leaf(path).shape() == ckpt::Shape(tensor.shape));
    // the inverse gives back TensorFlow's name
    CHECK(ckpt::tensorflow::variable_name(ckpt::Path::parse(path)) == tensor.name);
  }
  CHECK_FALSE(ckpt::tensorflow::variable_name(ckpt::Path::parse("w.@value.x")));

  // translators see TensorFlow's names, as t5x's convert_from_tf_checkpoint gives them
  std::set<std::string> seen;
  const auto to_state = [&seen](std::string_view n) -> std::optional<std::string> {
    seen.emplace(n);
    std::string name(n);
    if (name == "global_step") return "step";
    if (name == "model/encoder") return "params.model.encoder_scale";  // a state cannot nest below a leaf either
    if (name.starts_with("odd") || name == "beta1_power") return std::nullopt;
    std::string prefix = "params.";
    for (const auto& [tail, to] : {std::pair<std::string, std::string>{"/Adam", "opt.m."}, {"/Adam_1", "opt.v."},
                                   {"/ExponentialMovingAverage", "ema."}, {"/Momentum", "opt.momentum."}})
      if (name.ends_with(tail)) {
        name.resize(name.size() - tail.size());
        prefix = to;
      }
    std::replace(name.begin(), name.end(), '/', '.');
    return prefix + name;
  };
  const auto state = ckpt::tensorflow::convert(prefix, to_state, {.skip_unmapped = true});
  std::set<std::string> names;
  for (const auto& x : tensors) names.insert(x.name);
  CHECK(seen == names);
  auto state_paths = state.paths();
  std::sort(state_paths.begin(), state_paths.end());
  CHECK(state_paths == std::vector<std::string>{"ema.model.encoder.layer_0.matrix", "ema.w", "opt.m.model.encoder.layer_0.matrix",
                                                  "opt.m.w", "opt.momentum.model.encoder.layer_0.bias",
                                                  "opt.v.model.encoder.layer_0.matrix", "opt.v.w", "params.model.decoder.kernel",
                                                  "params.model.encoder.layer_0.bias",
                                                  "params.model.encoder.layer_0.matrix", "params.model.encoder_scale", "params.w",
                                                  "step"});
  CHECK(state.leaf("params.w").as<std::vector<float>>() == std::vector<float>{1.f, 2.f});
  CHECK(state.leaf("opt.v.w").as<std::vector<float>>() == std::vector<float>{0.01f, 0.02f});
  CHECK(state.leaf("params.model.encoder_scale").as<float>() == -1.f);

  // restore<T>: by translation rules on TF's names, or by a transform naming the slots
  struct Slots {
    std::vector<float> w, m, v, ema;
    std::int64_t step = 0;
  };
  const auto by_rules = ckpt::tensorflow::restore<Slots>(
      prefix, ckpt::tensorflow::rules({{"w", "w"}, {"w/Adam", "m"}, {"w/Adam_1", "v"}, {"w/ExponentialMovingAverage", "ema"}, {"global_step", "step"}}),
      {.skip_unmapped = true});
  const auto by_transform = ckpt::restore<Slots>(prefix, {.transform = [](ckpt::Tree& tree) {
                                                            tree.rename("w.Adam", "m");
                                                            tree.rename("w.Adam_1", "v");
                                                            tree.rename("w.ExponentialMovingAverage", "ema");
                                                            tree.rename("w.@value", "w");
                                                            tree.rename("global_step", "step");
                                                            for (const char* other : {"model", "odd", "beta1_power"}) tree.erase(other);
                                                          }});
  for (const Slots& r : {by_rules, by_transform}) {
    CHECK(r.w == std::vector<float>{1.f, 2.f});
    CHECK(r.m == std::vector<float>{0.1f, 0.2f});
    CHECK(r.v == std::vector<float>{0.01f, 0.02f});
    CHECK(r.ema == std::vector<float>{0.9f, 1.9f});
    CHECK(r.step == 10);
  }

  // into the other formats: the same tree; safetensors holds TF's names with '.' for '/'
  std::map<std::string, std::string> flat;
  for (const auto& x : tensors) {
    std::string n = x.name;
    std::replace(n.begin(), n.end(), '/', '.');
    flat[n] = x.bytes;
  }
  for (const char* to : {"native", "orbax", "safetensors"}) {
    CAPTURE(to);
    ckpt::convert(prefix, tmp / to, to);
    check_tree(ckpt::restore_tree(tmp / to));
  }
  CHECK(safetensors_names(tmp / "safetensors/model.safetensors") == flat);
  // and back: safetensors -> native -> safetensors gives the same names and bytes
  ckpt::convert(tmp / "safetensors", tmp / "native2", "native");
  ckpt::convert(tmp / "native2", tmp / "back.safetensors", "safetensors");
  CHECK(safetensors_names(tmp / "back.safetensors") == flat);

  // a string tensor that is also a scope: its elements below vocab.@value
  const fs::path vocab = tmp / "vocab.ckpt-1";
  write_bundle(vocab, {string_tensor("vocab", {2}, {"a", "bc"}), numeric<std::int64_t>("vocab/size", 9, {}, {2})});
  CHECK(ckpt::restore_tree(vocab).paths() == std::vector<std::string>{"vocab.@value.0", "vocab.@value.1", "vocab.size"});
  struct Table {
    std::vector<std::string> keys;
    std::int64_t size = 0;
  };
  const auto table = ckpt::tensorflow::restore<Table>(vocab, ckpt::tensorflow::rules({{"vocab", "keys"}, {"vocab/size", "size"}}));
  CHECK(table.keys == std::vector<std::string>{"a", "bc"});
  CHECK(table.size == 2);
  CHECK_THROWS_WITH_AS(ckpt::tensorflow::convert(vocab, ckpt::tensorflow::rules({{"vocab/size", "size"}})),
                       doctest::Contains("vocab/0, vocab/1"), ckpt::Error);
}

TEST_CASE("ckpt tree, show and convert on a TF1 bundle whose variables are also scopes") {
  if (!fs::exists(CKPT_CLI)) {
    MESSAGE("the ckpt tool is not built (run `make`); skipped");
    return;
  }
  test::TempDir tmp;
  const fs::path prefix = tmp / "model.ckpt-5";
  const std::vector<Tensor> tensors = {
      numeric<std::int64_t>("global_step", 9, {}, {5}),
      numeric<float>("layer_0/matrix", 1, {2}, {1.5f, -2.5f}),
      numeric<float>("layer_0/matrix/Adam", 1, {2}, {0.5f, 0.25f}),
      numeric<float>("layer_0/matrix/Adam_1", 1, {2}, {4.f, 8.f}),
  };
  write_bundle(prefix, tensors);
  const std::string cli = CKPT_CLI;
  auto tree = json::parse(run(cli + " tree --json " + prefix.string()));
  std::vector<std::string> paths;
  for (const auto& l : tree["leaves"]) paths.push_back(l["path"].get<std::string>());
  std::sort(paths.begin(), paths.end());
  CHECK(paths == std::vector<std::string>{"global_step", "layer_0.matrix.@value", "layer_0.matrix.Adam", "layer_0.matrix.Adam_1"});
  CHECK(json::parse(run(cli + " show --json " + prefix.string() + " layer_0.matrix.@value"))["values"] ==
        json::parse("[1.5, -2.5]"));
  CHECK(json::parse(run(cli + " show --json " + prefix.string() + " layer_0.matrix.Adam_1"))["values"] == json::parse("[4.0, 8.0]"));
  const auto tf_tree = ckpt::restore_tree(prefix);
  for (const char* to : {"native", "safetensors", "orbax"}) {
    CAPTURE(to);
    run(cli + " convert " + prefix.string() + " " + (tmp / to).string() + " --to " + to + " >/dev/null");
    const auto back = ckpt::restore_tree(tmp / to);
    REQUIRE(back.paths() == tf_tree.paths());
    for (const auto& l : tf_tree.leaves()) CHECK(back.leaf(l.path().str()).bytes() == l.bytes());
  }
  std::map<std::string, std::string> flat;
  for (const auto& x : tensors) {
    std::string n = x.name;
    std::replace(n.begin(), n.end(), '/', '.');
    flat[n] = x.bytes;
  }
  CHECK(safetensors_names(tmp / "safetensors/model.safetensors") == flat);
  run(cli + " convert " + (tmp / "safetensors").string() + " " + (tmp / "n").string() + " --to native >/dev/null");
  run(cli + " convert " + (tmp / "n").string() + " " + (tmp / "back").string() + " --to safetensors >/dev/null");
  CHECK(safetensors_names(tmp / "back/model.safetensors") == flat);
}

}  // namespace tensorflow_test
