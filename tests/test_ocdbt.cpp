// Orbax checkpoints in TensorStore's OCDBT key-value store: the real Orbax 0.11
// fixtures (zarr v2 and v3/sharded, direct and composite, damaged variants), what the
// fixtures do not exercise (values out of line, deep B+trees, several generations,
// many keys), hostile databases, and ckpt's own OCDBT writer checked by the
// independent decoder (tests/data/orbax/ocdbt_compat_202603/oracle_ocdbt.py).
#include "support.hpp"

#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace ocdbt_test {

namespace fs = std::filesystem;
using test::python;

const fs::path fixtures = fs::path(CKPT_FIXTURES_DIR) / "orbax/ocdbt_compat_202603/checkpoints";
const fs::path oracle = fs::path(CKPT_FIXTURES_DIR) / "orbax/ocdbt_compat_202603/oracle_ocdbt.py";

void expect_ab(const ckpt::Tree& t, const std::string& prefix = "") {
  CHECK(t.leaf(prefix + "a").as<std::vector<std::int32_t>>() == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(t.leaf(prefix + "b.c").as<std::vector<std::int32_t>>() == std::vector<std::int32_t>{1, 2, 3});
}

std::string error_of(const fs::path& p) {
  try {
    auto t = ckpt::restore_tree(p);
    for (const auto& l : t.leaves()) (void)l.bytes();
  } catch (const ckpt::Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("Orbax 0.11 OCDBT fixtures: v0 (zarr v2) and v1 (zarr v3, sharded) restore, direct and composite") {
  const fs::path v0 = fixtures / "v0_checkpoints/direct_checkpoint";
  for (const char* c : {"checkpoint_metadata_present/pytree_checkpointable_has_metadata",
                        "checkpoint_metadata_missing/pytree_checkpointable_has_metadata",
                        "checkpoint_metadata_present/pytree_checkpointable_missing_metadata",
                        "checkpoint_metadata_missing/pytree_checkpointable_missing_metadata",
                        "non_critical_metadata_alterations/missing_custom_metadata_metadata",
                        "non_critical_metadata_alterations/missing_metrics_metadata",
                        "non_critical_metadata_alterations/missing_item_handlers_metadata",
                        "non_critical_metadata_alterations/missing_pytree_data_file__sharding",
                        "non_critical_metadata_alterations/missing_commit_timestamp_nsecs_metadata",
                        "non_critical_metadata_alterations/missing_init_timestamp_nsecs_metadata",
                        "non_critical_metadata_alterations/missing_pytree_data_dir_array_metadatas",
                        "non_critical_metadata_alterations/missing_performance_metrics_metadata"}) {
    CAPTURE(c);
    const auto t = ckpt::restore_tree(v0 / c);
    CHECK(t.info().format == "orbax");
    CHECK(t.leaves().size() == 2);
    expect_ab(t);
  }
  for (const char* v : {"v0_checkpoints", "v1_checkpoints"}) {
    const fs::path comp = fixtures / v / "composite_checkpoint";
    for (const char* c : {"checkpoint_metadata_present/pytree_checkpointable_has_metadata",
                          "checkpoint_metadata_missing/pytree_checkpointable_has_metadata",
                          "checkpoint_metadata_present/pytree_checkpointable_missing_metadata",
                          "non_critical_metadata_alterations/missing_item_handlers_metadata",
                          "non_critical_metadata_alterations/missing_pytree_data_file__sharding",
                          "non_critical_metadata_alterations/missing_pytree_data_dir_array_metadatas"}) {
      CAPTURE(v);
      CAPTURE(c);
      const auto t = ckpt::restore_tree(comp / c);
      expect_ab(t, "state.");
      CHECK(t.leaf("metadata.metadata").as<std::string>() == "json_data");
      CHECK(t.leaves().size() == 3);
      // the item directory on its own is a checkpoint too
      expect_ab(ckpt::restore_tree(comp / c / "state"));
    }
  }
  // restore<T> into a struct shaped like the pytree
  struct B { std::vector<std::int32_t> c; };
  struct AB { std::vector<std::int32_t> a; B b; };
  const auto ab = ckpt::restore<AB>(v0 / "checkpoint_metadata_present/pytree_checkpointable_has_metadata");
  CHECK(ab.a.size() == 8);
  CHECK(ab.b.c == std::vector<std::int32_t>{1, 2, 3});
  const auto ab3 = ckpt::restore<AB>(fixtures / "v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata/state");
  CHECK(ab3.a[7] == 7);
  // metadata without reading arrays
  const auto idx = ckpt::open_index(fixtures / "v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata");
  const auto* e = idx->find(ckpt::Path({"state", "a"}));
  REQUIRE(e != nullptr);
  CHECK(e->type == ckpt::dtype::int32);
  CHECK(e->shape == ckpt::Shape{8});
}

TEST_CASE("damaged Orbax fixtures: a missing d/ is an error naming the data file; a missing root manifest reads the per-process database; stray items are ignored") {
  for (const char* v : {"v0_checkpoints/direct_checkpoint", "v0_checkpoints/composite_checkpoint", "v1_checkpoints/composite_checkpoint"}) {
    CAPTURE(v);
    const fs::path base = fixtures / v / "critical_metadata_alterations";
    const std::string err = error_of(base / "missing_pytree_data_dir_d");
    CHECK(err.find("data file d/") != std::string::npos);
    CHECK(err.find("missing") != std::string::npos);
    const auto t = ckpt::restore_tree(base / "missing_pytree_data_file_manifest.ocdbt");
    expect_ab(t, std::string(v).find("composite") != std::string::npos ? "state." : "");
  }
  const fs::path v1 = fixtures / "v1_checkpoints/composite_checkpoint";
  // dummy/ is not among _CHECKPOINT_METADATA's item_handlers: not part of the checkpoint
  const auto t = ckpt::restore_tree(v1 / "critical_general_alterations/dummy_checkpointable_added");
  expect_ab(t, "state.");
  CHECK(t.leaves().size() == 3);
  // with the state item deleted, what is left (the JSON item) restores
  const auto m = ckpt::restore_tree(v1 / "non_critical_general_alterations/deleted_checkpointable");
  CHECK(m.leaves().size() == 1);
  CHECK(m.leaf("metadata.metadata").as<std::string>() == "json_data");
}

TEST_CASE("the OCDBT reader agrees with the independent decoder on every fixture database: keys, versions, value sizes") {
  // every directory holding manifest.ocdbt whose data files are all there
  std::vector<fs::path> dbs;
  for (auto& e : fs::recursive_directory_iterator(fixtures))
    if (e.path().filename() == "manifest.ocdbt" && e.path().string().find("missing_pytree_data_dir_d/manifest") == std::string::npos &&
        e.path().string().find("missing_pytree_data_dir_d/state/manifest") == std::string::npos)
      dbs.push_back(e.path().parent_path());
  std::sort(dbs.begin(), dbs.end());
  REQUIRE(dbs.size() >= 70);
  std::string mine;
  for (const auto& d : dbs) {
    auto db = ckpt::detail::ocdbt::Database::open(d, d.string());
    mine += fs::relative(d, fixtures).string() + " gen " + std::to_string(db->latest().generation) + " versions " +
            std::to_string(db->versions().size()) + "\n";
    for (const auto& [k, v] : db->values()) mine += "  " + k + " " + std::to_string(*db->size(k)) + "\n";
  }
  std::string code = "import sys, os, json, importlib.util\n"
                     "spec = importlib.util.spec_from_file_location('o', '" + oracle.string() + "')\n"
                     "o = importlib.util.module_from_spec(spec); spec.loader.exec_module(o)\n"
                     "root = sys.argv[1]\nout = ''\n"
                     "dbs = []\n"
                     "for dp, dn, fn in os.walk(root):\n"
                     "    if 'manifest.ocdbt' in fn and not (dp.endswith('missing_pytree_data_dir_d') or dp.endswith('missing_pytree_data_dir_d/state')): dbs.append(dp)\n"
                     "for d in sorted(dbs):\n"
                     "    db = o.OcdbtDb(d); m = db.manifest()\n"
                     "    out += '%s gen %d versions %d\\n' % (os.path.relpath(d, root), m['versions'][-1]['generation'], len(m['versions']))\n"
                     "    for k, v, h in sorted(db.items()): out += '  %s %d\\n' % (k.decode(), len(v))\n"
                     "print(out, end='')\n";
  CHECK(python(code, fixtures) == mine);
}

// Runs the independent decoder on an OCDBT database; returns its JSON summary.
nlohmann::json oracle_json(const fs::path& db, bool orbax = true) {
  const std::string out = python("import runpy, sys\nsys.argv = ['oracle', sys.argv[1]" + std::string(orbax ? ", '--orbax'" : "") +
                                     ", '--json']\nrunpy.run_path('" + oracle.string() + "', run_name='__main__')\n",
                                 db);
  return nlohmann::json::parse(out);
}

struct Layer {
  std::vector<float> kernel;
  std::vector<float> bias;
};
struct State {
  std::int64_t step = 0;
  Layer dense;
  std::vector<std::int32_t> small;
  std::vector<double> big;
  std::string note = "hello";
  std::vector<std::uint8_t> empty;
};

State make_state() {
  State s;
  s.step = 42;
  for (int i = 0; i < 3000; ++i) s.dense.kernel.push_back(static_cast<float>(i) * 0.5f - 7.f);
  s.dense.bias = {1.f, 2.f, 3.f};
  s.small = {5, 6, 7};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) s.big.push_back(static_cast<double>(rng() % 1000000) / 7.0);
  return s;
}

TEST_CASE("ckpt::save<ckpt::orbax> writes OCDBT + zarr v2 as Orbax 0.11 does; the independent decoder reads every array") {
  test::TempDir tmp;
  const State s = make_state();
  ckpt::save<ckpt::orbax>(tmp / "o", s);
  const fs::path item = tmp / "o/default";
  CHECK(fs::exists(item / "manifest.ocdbt"));
  // Orbax's layout even for one process: its own database, merged into the root one
  CHECK(fs::exists(item / "ocdbt.process_0/manifest.ocdbt"));
  CHECK(!fs::exists(item / "big"));  // no zarr directories: the arrays are in the database
  const auto meta = nlohmann::json::parse(test::read_bytes(item / "_METADATA"));
  CHECK(meta["use_ocdbt"] == true);
  CHECK(meta["use_zarr3"] == false);
  CHECK(meta["tree_metadata"]["('dense', 'kernel')"]["value_metadata"]["write_shape"] == nlohmann::json::array({3000}));
  const auto cm = nlohmann::json::parse(test::read_bytes(tmp / "o/_CHECKPOINT_METADATA"));
  CHECK(cm.contains("custom_metadata"));

  const auto o = oracle_json(item);
  // the manifest mimics Orbax's config field by field
  CHECK(o["manifest"]["config"]["manifest_kind"] == 0);
  CHECK(o["manifest"]["config"]["max_inline_value_bytes"] == 1024);
  CHECK(o["manifest"]["config"]["max_decoded_node_bytes"] == 100000000);
  CHECK(o["manifest"]["config"]["version_tree_arity_log2"] == 4);
  CHECK(o["manifest"]["config"]["compression"] == "zstd");
  CHECK(o["manifest"]["header"]["compression"] == 1);
  CHECK(o["versions"].size() == 1);
  // large chunks are out of line, read with exact ranges; small ones inline
  CHECK(o["keys"]["big/0"]["stored"].get<std::string>().rfind("indirect:ocdbt.process_0/d/", 0) == 0);
  CHECK(o["keys"]["small/0"]["stored"] == "inline");
  CHECK(o["keys"]["dense.bias/.zarray"]["stored"] == "inline");
  const auto& arrays = o["arrays"];
  CHECK(arrays["step"]["values"] == nlohmann::json::array({42}));
  CHECK(arrays["small"]["values"] == nlohmann::json::array({5, 6, 7}));
  CHECK(arrays["dense.bias"]["values"] == nlohmann::json::array({1.0, 2.0, 3.0}));
  CHECK(arrays["dense.kernel"]["shape"] == nlohmann::json::array({3000}));
  double kernel_sum = 0, big_sum = 0;
  for (float x : s.dense.kernel) kernel_sum += x;
  for (double x : s.big) big_sum += x;
  CHECK(arrays["dense.kernel"]["sum"].get<double>() == doctest::Approx(kernel_sum));
  CHECK(arrays["big"]["sum"].get<double>() == doctest::Approx(big_sum));
  CHECK(arrays["big"]["dtype"] == "float64");
  CHECK(arrays["empty"]["shape"] == nlohmann::json::array({0}));
  CHECK(arrays["big"]["meta"]["compressor"]["id"] == "zstd");
  CHECK(arrays["big"]["meta"]["fill_value"].is_null());

  // and ckpt reads it back bit-exact; native -> orbax(OCDBT) -> native is the identity
  const auto back = ckpt::restore<State>(tmp / "o");
  CHECK(back.step == s.step);
  CHECK(back.dense.kernel == s.dense.kernel);
  CHECK(back.dense.bias == s.dense.bias);
  CHECK(back.big == s.big);
  CHECK(back.note == s.note);
  CHECK(back.empty.empty());
  ckpt::save(tmp / "n1", s);
  ckpt::save(tmp / "n2", back);
  for (const char* leaf : {"big", "dense.kernel", "step", "note"}) {
    CAPTURE(leaf);
    CHECK(ckpt::restore_tree(tmp / "n1").leaf(leaf).bytes() == ckpt::restore_tree(tmp / "n2").leaf(leaf).bytes());
  }
  // the non-OCDBT layout on request
  ckpt::save<ckpt::orbax_without_ocdbt>(tmp / "plain", s);
  CHECK(fs::exists(tmp / "plain/default/big/.zarray"));
  CHECK(!fs::exists(tmp / "plain/default/manifest.ocdbt"));
  CHECK(ckpt::restore<State>(tmp / "plain").big == s.big);
  // blosc inside OCDBT: the decoder (numcodecs) reads it too
  ckpt::save<ckpt::basic_orbax<ckpt::io::codec::blosc, 5>>(tmp / "ob", s);
  CHECK(oracle_json(tmp / "ob/default")["arrays"]["big"]["sum"].get<double>() == doctest::Approx(big_sum));
  CHECK(ckpt::restore<State>(tmp / "ob").big == s.big);
}

struct Noisy {
  std::vector<float> noise;        // random normal float32: zstd saves ~7% of it
  std::vector<std::int32_t> ramp;  // 0, 1, 2, ...: zstd saves ~40% of it
};

TEST_CASE("ckpt::orbax stores chunks zstd barely shrinks as stored zstd blocks; the independent decoder reads both kinds") {
  test::TempDir tmp;
  Noisy s;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.02f);
  for (int i = 0; i < 50000; ++i) s.noise.push_back(nd(rng));
  for (int i = 0; i < 50000; ++i) s.ramp.push_back(i);
  const std::size_t raw = 50000 * 4;
  double noise_sum = 0;
  for (float x : s.noise) noise_sum += x;

  // Default: the noise chunk saves under 12%, so it is stored (a zstd frame a few bytes
  // longer than the data); the ramp stays compressed.
  ckpt::save<ckpt::orbax>(tmp / "o", s);
  auto o = oracle_json(tmp / "o/default");
  CHECK(o["keys"]["noise/0"]["len"].get<std::size_t>() >= raw);
  CHECK(o["keys"]["noise/0"]["len"].get<std::size_t>() < raw + 64);
  CHECK(o["keys"]["ramp/0"]["len"].get<std::size_t>() < raw * 3 / 4);  // zstd-1 saves ~40% of it
  CHECK(o["arrays"]["noise"]["meta"]["compressor"]["id"] == "zstd");
  CHECK(o["arrays"]["noise"]["sum"].get<double>() == doctest::Approx(noise_sum));
  CHECK(o["arrays"]["ramp"]["sum"].get<double>() == doctest::Approx(49999.0 * 50000 / 2));
  auto back = ckpt::restore<Noisy>(tmp / "o");
  CHECK(back.noise == s.noise);
  CHECK(back.ramp == s.ramp);

  // MinSavingPercent 0: every chunk compressed, as Orbax writes them.
  ckpt::save<ckpt::basic_orbax<ckpt::io::codec::zstd, 1, ckpt::orbax_layout::ocdbt, 0>>(tmp / "all", s);
  o = oracle_json(tmp / "all/default");
  const auto noise_len = o["keys"]["noise/0"]["len"].get<std::size_t>();
  CHECK(noise_len < raw * 95 / 100);
  CHECK(noise_len > raw * 80 / 100);
  CHECK(o["arrays"]["noise"]["sum"].get<double>() == doctest::Approx(noise_sum));
  CHECK(ckpt::restore<Noisy>(tmp / "all").noise == s.noise);

  // The same rule in the directory layout, where zarr-python's numcodecs decodes the chunk.
  ckpt::save<ckpt::orbax_without_ocdbt>(tmp / "dirs", s);
  CHECK(fs::file_size(tmp / "dirs/default/noise/0") >= raw);
  const std::string got = python(
      "import sys, zarr, numpy\na = zarr.open_array(sys.argv[1], mode='r')\n"
      "print(repr(float(numpy.asarray(a[:], dtype=numpy.float64).sum())))\n",
      tmp / "dirs/default/noise");
  CHECK(std::stod(got) == doctest::Approx(noise_sum));
}

TEST_CASE("OCDBT beyond the fixtures: many keys over several B+tree levels, out-of-line values, several generations") {
  test::TempDir tmp;
  const fs::path db = tmp / "db";
  std::map<std::string, std::string> expect;
  {
    ckpt::detail::ocdbt::WriterOptions opt;
    opt.target_node_bytes = 600;  // small nodes: three levels for 5000 keys
    opt.max_inline_value_bytes = 64;
    ckpt::detail::ocdbt::Writer w(db, opt);
    for (int i = 0; i < 5000; ++i) {
      const std::string k = "param_" + std::to_string(i * 7919 % 5000) + (i % 3 ? "/0" : "/.zarray");
      std::string v(static_cast<std::size_t>(i % 150), static_cast<char>('a' + i % 26));
      w.put(k, std::as_bytes(std::span(v)));
      expect[k] = v;
    }
    w.commit();
  }
  auto d = ckpt::detail::ocdbt::Database::open(db, db.string());
  CHECK(d->latest().root_height >= 2);
  CHECK(d->values().size() == 5000);
  std::size_t indirect = 0;
  for (const auto& [k, v] : d->values()) {
    indirect += v.file != SIZE_MAX;
    std::string got(static_cast<std::size_t>(*d->size(k)), '\0');
    d->read(k, 0, std::as_writable_bytes(std::span(got)));
    REQUIRE(got == expect[k]);
  }
  CHECK(indirect > 1000);
  // a prefix listing
  std::vector<std::string> under;
  for (const auto& [k, v] : expect)
    if (k.rfind("param_12/", 0) == 0) under.push_back(k);
  CHECK(under.size() == 1);
  CHECK(d->list("param_12/", 10) == under);
  // the independent decoder walks the same tree
  auto o = oracle_json(db, false);
  CHECK(o["keys"].size() == 5000);
  int interior = 0;
  for (const auto& n : o["btree_nodes"]) interior += n[0].get<int>() > 0;
  CHECK(interior >= 3);
  for (const auto& [k, v] : expect) REQUIRE(o["keys"][k]["len"] == v.size());

  // a second and third generation: the latest wins, older roots stay in the manifest
  for (int g = 2; g <= 3; ++g) {
    ckpt::detail::ocdbt::Writer w(db);
    const std::string v = "generation " + std::to_string(g);
    w.put("only", std::as_bytes(std::span(v)));
    w.commit();
  }
  d = ckpt::detail::ocdbt::Database::open(db, db.string());
  CHECK(d->versions().size() == 3);
  CHECK(d->latest().generation == 3);
  REQUIRE(d->values().size() == 1);
  CHECK(d->values().begin()->second.bytes == "generation 3");
  o = oracle_json(db, false);
  CHECK(o["versions"].size() == 3);
  CHECK(o["keys"].size() == 1);
  CHECK(o["keys"]["only"]["len"] == 12);
}

TEST_CASE("crc32c known answers, masked form, and the numbered manifest kind") {
  const std::string digits = "123456789";
  CHECK(ckpt::io::crc32c(std::as_bytes(std::span(digits))) == 0xE3069283u);
  const std::string a = "1234", b = "56789";
  CHECK(ckpt::io::crc32c(std::as_bytes(std::span(b)), ckpt::io::crc32c(std::as_bytes(std::span(a)))) == 0xE3069283u);
  CHECK(ckpt::io::crc32c({}) == 0u);
  CHECK(ckpt::io::crc32c_unmask(ckpt::io::crc32c_mask(0xE3069283u)) == 0xE3069283u);
  CHECK(ckpt::io::crc32c_mask(0u) == 0xa282ead8u);

  // numbered kind: manifest.ocdbt holds the config only, manifest.<16 hex> the versions
  test::TempDir tmp;
  const fs::path db = tmp / "db";
  {
    ckpt::detail::ocdbt::Writer w(db);
    const std::string v = "value";
    w.put("k", std::as_bytes(std::span(v)));
    w.commit();
  }
  const auto uuid = ckpt::detail::ocdbt::Database::open(db, "x")->config().uuid;
  fs::rename(db / "manifest.ocdbt", db / "manifest.0000000000000001");
  std::vector<std::byte> cfg;
  for (auto x : uuid) cfg.push_back(static_cast<std::byte>(x));
  cfg.push_back(std::byte{1});
  ckpt::detail::ocdbt::put_varint(cfg, 1024);
  ckpt::detail::ocdbt::put_varint(cfg, 100000000);
  cfg.push_back(std::byte{4});
  ckpt::detail::ocdbt::put_varint(cfg, 0);
  ckpt::io::write_file_synced(db / "manifest.ocdbt", ckpt::detail::ocdbt::encode_envelope(cfg, ckpt::detail::ocdbt::manifest_magic, true, 0));
  const auto d = ckpt::detail::ocdbt::Database::open(db, "x");
  CHECK(d->config().manifest_kind == 1);
  REQUIRE(d->values().size() == 1);
  CHECK(d->values().at("k").bytes == "value");
  fs::remove(db / "manifest.0000000000000001");
  CHECK_THROWS_AS(ckpt::detail::ocdbt::Database::open(db, "x"), ckpt::CorruptCheckpointError);
}

// Rewrites `file` (an OCDBT manifest or node) with a new body, valid envelope and CRC.
void rewrite(const fs::path& file, const std::vector<std::byte>& body, std::uint32_t magic) {
  const auto enc = ckpt::detail::ocdbt::encode_envelope(body, magic, false, 0);
  fs::remove(file);
  ckpt::io::write_file_synced(file, enc);
}

std::vector<std::byte> manifest_prefix(std::uint64_t max_decoded = 1 << 20) {
  std::vector<std::byte> b(16, std::byte{1});
  b.push_back(std::byte{0});
  ckpt::detail::ocdbt::put_varint(b, 1024);
  ckpt::detail::ocdbt::put_varint(b, max_decoded);
  b.push_back(std::byte{4});
  ckpt::detail::ocdbt::put_varint(b, 0);
  return b;
}

TEST_CASE("hostile OCDBT databases: bad CRCs, magic, lengths, counts, offsets, heights, cycles and zstd bombs are errors") {
  test::TempDir tmp;
  struct S { std::vector<float> a; std::vector<float> b; };
  S s;
  s.a.assign(2000, 1.5f);
  s.b = {1, 2};
  auto fresh = [&](const std::string& n) {
    ckpt::save<ckpt::orbax>(tmp / n, s);
    return tmp / n / "default";
  };
  auto err = [&](const fs::path& p, const std::string& what) {
    const std::string e = error_of(p.parent_path());
    CAPTURE(e);
    CHECK(e.find(what) != std::string::npos);
  };
  {  // one flipped bit in the manifest
    const auto item = fresh("crc");
    auto m = test::read_bytes(item / "manifest.ocdbt");
    m[m.size() / 2] ^= 1;
    fs::remove(item / "manifest.ocdbt");
    test::write_bytes(item / "manifest.ocdbt", m);
    err(item, "crc32c mismatch");
  }
  {  // truncated, and wrong magic
    const auto item = fresh("trunc");
    auto m = test::read_bytes(item / "manifest.ocdbt");
    m.resize(10);
    fs::remove(item / "manifest.ocdbt");
    test::write_bytes(item / "manifest.ocdbt", m);
    err(item, "too short");
    std::vector<char> junk(100, 'x');
    fs::remove(item / "manifest.ocdbt");
    test::write_bytes(item / "manifest.ocdbt", junk);
    err(item, "magic");
  }
  {  // counts far beyond the bytes there
    const auto item = fresh("count");
    auto b = manifest_prefix();
    ckpt::detail::ocdbt::put_varint(b, 1ull << 40);  // data files
    rewrite(item / "manifest.ocdbt", b, ckpt::detail::ocdbt::manifest_magic);
    err(item, "data file count");
    b = manifest_prefix();
    ckpt::detail::ocdbt::put_varint(b, 0);
    ckpt::detail::ocdbt::put_varint(b, 1ull << 62);  // versions
    rewrite(item / "manifest.ocdbt", b, ckpt::detail::ocdbt::manifest_magic);
    err(item, "version count");
  }
  {  // a data file path that leaves the database
    const auto item = fresh("escape");
    auto b = manifest_prefix();
    ckpt::detail::ocdbt::write_data_file_table(b, {"../../../etc/passwd"});
    rewrite(item / "manifest.ocdbt", b, ckpt::detail::ocdbt::manifest_magic);
    err(item, "leaves the database");
  }
  // a root reference past the end of its file, a height mismatch, a node referring to itself
  auto with_root = [&](const fs::path& item, const std::string& file, std::uint64_t off, std::uint64_t len, int height) {
    auto b = manifest_prefix();
    ckpt::detail::ocdbt::write_data_file_table(b, {file});
    ckpt::detail::ocdbt::put_varint(b, 1);
    ckpt::detail::ocdbt::put_varint(b, 1);
    b.push_back(static_cast<std::byte>(height));
    for (std::uint64_t x : {std::uint64_t{0}, off, len, std::uint64_t{1}, len, std::uint64_t{0}}) ckpt::detail::ocdbt::put_varint(b, x);
    ckpt::detail::ocdbt::put_le(b, 0, 8);
    ckpt::detail::ocdbt::put_varint(b, 0);
    rewrite(item / "manifest.ocdbt", b, ckpt::detail::ocdbt::manifest_magic);
  };
  {
    const auto item = fresh("past");
    std::string data;
    for (auto& e : fs::directory_iterator(item / "d")) data = "d/" + e.path().filename().string();
    with_root(item, data, 1ull << 50, 100, 0);
    err(item, "past the end");
  }
  {
    const auto item = fresh("cycle");
    fs::create_directories(item / "d");
    // an interior node (height 1) whose only child is itself
    std::vector<std::byte> node{std::byte{1}};
    ckpt::detail::ocdbt::write_data_file_table(node, {"d/self"});
    ckpt::detail::ocdbt::put_varint(node, 1);
    ckpt::detail::ocdbt::put_varint(node, 1);  // key suffix length
    ckpt::detail::ocdbt::put_varint(node, 0);  // subtree common prefix
    node.push_back(std::byte{'k'});
    std::vector<std::byte> enc;
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::vector<std::byte> n2 = node;
      for (std::uint64_t x : {std::uint64_t{0}, std::uint64_t{0}, static_cast<std::uint64_t>(enc.size()), std::uint64_t{1}, std::uint64_t{1}, std::uint64_t{0}})
        ckpt::detail::ocdbt::put_varint(n2, x);
      enc = ckpt::detail::ocdbt::encode_envelope(n2, ckpt::detail::ocdbt::btree_magic, false, 0);
    }
    ckpt::io::write_file_synced(item / "d/self", enc);
    with_root(item, "d/self", 0, enc.size(), 1);
    err(item, "height 1 where 0 was expected");
    with_root(item, "d/self", 0, enc.size(), 0);
    err(item, "height 1 where 0 was expected");
  }
  {  // a node whose zstd body would decompress to 300 MB
    const auto item = fresh("bomb");
    std::vector<std::byte> zeros(300u << 20);
    const auto enc = ckpt::detail::ocdbt::encode_envelope(zeros, ckpt::detail::ocdbt::btree_magic, true, 1);
    ckpt::io::write_file_synced(item / "d/bomb", enc);
    with_root(item, "d/bomb", 0, enc.size(), 0);
    err(item, "decompresses to more than");
  }
}

TEST_CASE("Orbax 0.5 aggregated arrays: _METADATA marks them skip_deserialize and the msgpack checkpoint file holds them") {
  test::TempDir tmp;
  // what Orbax 0.5 wrote for a tree whose `a` was aggregated and `b` stored as zarr
  python(R"PY(
import sys, os, json, msgpack, numpy as np, zarr
item = sys.argv[1] + "/step/default"
os.makedirs(item)
def ext(a):
    return msgpack.ExtType(1, msgpack.packb((list(a.shape), a.dtype.name, a.tobytes())))
a = np.arange(6, dtype="<f4").reshape(2, 3)
open(item + "/checkpoint", "wb").write(msgpack.packb({"a": ext(a), "b": "PLACEHOLDER://b", "n": 3}))
z = zarr.open_array(item + "/b", mode="w", shape=(4,), chunks=(4,), dtype="<i8", compressor=None)
z[...] = [9, 8, 7, 6]
def entry(k, t, skip):
    return {"key_metadata": [{"key": k, "key_type": 2}], "value_metadata": {"value_type": t, "skip_deserialize": skip}}
json.dump({"tree_metadata": {"('a',)": entry("a", "np.ndarray", True), "('b',)": entry("b", "np.ndarray", False),
           "('n',)": entry("n", "scalar", True)}, "use_zarr3": False}, open(item + "/_METADATA", "w"))
json.dump({"item_handlers": {"default": "PyTreeCheckpointHandler"}, "metrics": {}}, open(sys.argv[1] + "/step/_CHECKPOINT_METADATA", "w"))
)PY", tmp.path());
  const auto t = ckpt::restore_tree(tmp / "step");
  const auto a = t.leaf("a").as<xt::xtensor<float, 2>>();
  CHECK(a.shape(0) == 2);
  CHECK(a(1, 2) == 5.f);
  CHECK(t.leaf("b").as<std::vector<std::int64_t>>() == std::vector<std::int64_t>{9, 8, 7, 6});
  CHECK(t.leaf("n").as<std::int64_t>() == 3);
}

struct Run {
  int rc;
  std::string out, err;
};
Run cli(const std::string& args) {
  test::TempDir tmp;
  const std::string cmd = std::string(CKPT_CLI) + " " + args + " >" + (tmp / "out").string() + " 2>" + (tmp / "err").string();
  const int st = std::system(cmd.c_str());
  auto slurp = [](const fs::path& p) {
    auto v = test::read_bytes(p);
    return std::string(v.begin(), v.end());
  };
  return {WEXITSTATUS(st), slurp(tmp / "out"), slurp(tmp / "err")};
}

TEST_CASE("an Orbax CheckpointManager root: the manager and `ckpt ls` list its OCDBT steps with their metrics; `ckpt convert --to orbax` writes OCDBT") {
  test::TempDir tmp;
  const fs::path src = fixtures / "v0_checkpoints/direct_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata";
  for (int step : {100, 200}) {
    const fs::path d = tmp / "root" / std::to_string(step);
    fs::create_directories(d.parent_path());
    fs::copy(src, d, fs::copy_options::recursive);
    auto j = nlohmann::json::parse(test::read_bytes(d / "_CHECKPOINT_METADATA"));
    j["metrics"] = {{"loss", step == 100 ? 0.5 : 0.25}};
    const std::string text = j.dump();
    fs::remove(d / "_CHECKPOINT_METADATA");
    test::write_bytes(d / "_CHECKPOINT_METADATA", {text.begin(), text.end()});
  }
  struct B { std::vector<std::int32_t> c; };
  struct AB { std::vector<std::int32_t> a; B b; };
  ckpt::CheckpointManager<AB, ckpt::orbax> mgr(tmp / "root");
  CHECK(mgr.all_steps() == std::vector<std::int64_t>{100, 200});
  CHECK(mgr.metrics(200).at("loss") == 0.25);
  CHECK(mgr.restore().b.c == std::vector<std::int32_t>{1, 2, 3});
  if (!fs::exists(CKPT_CLI)) {
    MESSAGE("the ckpt tool is not built (run `make`); CLI part skipped");
    return;
  }
  auto r = cli("ls --json " + (tmp / "root").string());
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["steps"].size() == 2);
  CHECK(j["steps"][0]["step"] == 100);
  CHECK(j["steps"][0]["format"] == "orbax");
  CHECK(j["steps"][1]["metrics"]["loss"] == 0.25);
  r = cli("tree " + (tmp / "root/200").string());
  CHECK(r.rc == 0);
  CHECK(r.out.find("b.c") != std::string::npos);
  r = cli("convert " + (tmp / "root/100").string() + " " + (tmp / "conv").string() + " --to orbax");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(fs::exists(tmp / "conv/default/manifest.ocdbt"));
  CHECK(oracle_json(tmp / "conv/default")["arrays"]["b.c"]["values"] == nlohmann::json::array({1, 2, 3}));
  CHECK(cli("diff " + (tmp / "root/100").string() + " " + (tmp / "conv").string()).rc == 0);
}

}  // namespace ocdbt_test
