// tests/test_cli.cpp — the ckpt command-line tool (tools/ckpt_cli.cpp), run as a
// program: tree, show, verify, diff, convert, ls and their exit codes; du, stats and
// diff --rel; report, whose page a headless chromium renders.
// CKPT_CLI names the built tool (tests/CMakeLists.txt).

#include "support.hpp"

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace cli_test {

namespace fs = std::filesystem;

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
}  // namespace cli_test

namespace cli_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("ckpt CLI: tree, show, verify, diff, convert, ls, and exit code 2 on bad input") {
  // A missing tool is a failure, not a skip: a build without it would pass untested.
  INFO("CKPT_CLI = " << CKPT_CLI << " (build it: `make`, or the ckpt_cli target)");
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  const std::string fixture = (fs::path(CKPT_FIXTURES_DIR) / "t5x/tiny_t5/checkpoint_1").string();
  auto r = cli("tree --json " + fixture);
  REQUIRE(r.rc == 0);
  auto j = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& l : j["leaves"])
    if (l["path"] == "state.param_states.kernel") {
      found = true;
      CHECK(l["dtype"] == "float64");
      CHECK(l["shape"] == nlohmann::json::array({10, 5}));
      CHECK(l["bytes"] == 400);
    }
  CHECK(found);

  r = cli("show --json " + fixture + " state.param_states.bias");
  REQUIRE(r.rc == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["dtype"] == "float32");
  CHECK(j["values"].size() == 5);
  const auto bias = ckpt::restore_tree(fixture).leaf("state.param_states.bias").as<std::vector<float>>();
  for (std::size_t i = 0; i < 5; ++i) CHECK(j["values"][i].get<double>() == doctest::Approx(bias[i]));
  r = cli("show " + fixture + " state.param_states.kernel");
  CHECK(r.rc == 0);
  CHECK(r.out.find("mean") != std::string::npos);

  struct C { std::vector<std::complex<float>> z; std::vector<bool> b; std::vector<float> w; };
  ckpt::save(tmp / "n1", C{{{1, -2}}, {true, false}, std::vector<float>(2000, 1.f)});
  ckpt::save(tmp / "n2", C{{{1, -2}}, {true, true}, std::vector<float>(2000, 1.5f)});
  j = nlohmann::json::parse(cli("show --json " + (tmp / "n1").string() + " z").out);
  CHECK(j["values"] == nlohmann::json::parse("[[1.0, -2.0]]"));
  j = nlohmann::json::parse(cli("show --json " + (tmp / "n1").string() + " b").out);
  CHECK(j["values"] == nlohmann::json::parse("[true, false]"));

  CHECK(cli("verify " + (tmp / "n1").string()).rc == 0);
  r = cli("diff --json " + (tmp / "n1").string() + " " + (tmp / "n2").string());
  CHECK(r.rc == 1);
  j = nlohmann::json::parse(r.out);
  CHECK(j["changed"].size() == 2);
  for (const auto& c : j["changed"])
    if (c["path"] == "w") CHECK(c["max_abs_diff"].get<double>() == 0.5);

  // a flipped byte in the data file: verify names the leaf, exit 1
  {
    std::fstream f(tmp / "n1/data-0", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  r = cli("verify " + (tmp / "n1").string());
  CHECK(r.rc == 1);
  CHECK(r.err.find("w") != std::string::npos);

  // convert the t5x fixture into every writable format; each reads back the same
  for (const char* to : {"native", "flax", "t5x", "orbax"}) {
    CAPTURE(to);
    const auto dst = tmp / (std::string("conv_") + to);
    r = cli("convert " + fixture + " " + dst.string() + " --to " + to);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(cli("diff " + fixture + " " + dst.string()).rc == 0);
  }
  fs::create_directories(tmp / "root");
  ckpt::save<ckpt::orbax>(tmp / "root/10", C{{{1, 2}}, {true}, {1.f}});
  ckpt::save(tmp / "root/2", C{{{1, 2}}, {true}, {1.f}});
  r = cli("ls " + (tmp / "root").string());
  CHECK(r.rc == 0);
  CHECK(r.out.find("2 ") < r.out.find("10 "));

  for (const std::string& bad : std::vector<std::string>{"tree /nonexistent/x", "show " + fixture + " no.such.leaf", "frobnicate",
                                "convert " + fixture + " " + (tmp / "x").string() + " --to pickle", "tree",
                                "verify " + (tmp / "root").string()}) {
    CAPTURE(bad);
    r = cli(bad);
    CHECK(r.rc == 2);
    CHECK(!r.err.empty());
  }
}

TEST_CASE("ckpt ls: an Orbax manager root lists each step with the metrics Orbax ranks it by") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  const fs::path root = tmp / "orbax_root";
  fs::copy(fs::path(CKPT_FIXTURES_DIR) / "orbax/managed_0.11.39/v0_has_metrics", root, fs::copy_options::recursive);
  // a step ckpt saved beside it, its metrics in _CHECKPOINT_METADATA
  ckpt::save(root / "5", test::StepOnly{5});
  const auto write = [](const fs::path& p, const std::string& text) { test::write_bytes(p, {text.begin(), text.end()}); };
  write(root / "5/_CHECKPOINT_METADATA", R"({"metrics": {"acc": 0.75}})");
  auto r = cli("ls " + root.string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("loss=0.5") != std::string::npos);  // Orbax's metrics item, 0/metrics/metrics
  CHECK(r.out.find("acc=0.75") != std::string::npos);
  CHECK(r.out.find("loss=0.5") < r.out.find("acc=0.75"));  // by step
  r = cli("ls --json " + root.string());
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["steps"].size() == 2);
  CHECK(j["steps"][0]["name"] == "0");
  CHECK(j["steps"][0]["format"] == "orbax");
  CHECK(j["steps"][0]["metrics"] == nlohmann::json{{"loss", 0.5}});
  CHECK(j["steps"][1]["metrics"] == nlohmann::json{{"acc", 0.75}});
  // A malformed metrics item: exit code 2 and a message naming the step and the file.
  write(root / "0/metrics/metrics", R"({"loss":)");
  for (const char* json_flag : {"", "--json "}) {
    CAPTURE(json_flag);
    r = cli(std::string("ls ") + json_flag + root.string());
    CHECK(r.rc == 2);
    CHECK(r.err.find((root / "0").string()) != std::string::npos);
    CHECK(r.err.find("metrics/metrics") != std::string::npos);
  }
}

// Runs the tool (no shell between) to completion, output to `log`; its exit code and
// peak resident set (wait4's ru_maxrss), in bytes.
struct Measured {
  int rc;
  std::uint64_t peak_rss;
};
Measured measured(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv{const_cast<char*>(CKPT_CLI)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2);
    ::execv(CKPT_CLI, argv.data());
    ::_exit(127);
  }
  int st = 0;
  rusage ru{};
  REQUIRE(::wait4(pid, &st, 0, &ru) == pid);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, static_cast<std::uint64_t>(ru.ru_maxrss) * 1024};
}

TEST_CASE("ckpt convert streams a 1 GiB leaf within --max-memory 128M: the peak resident set stays under it") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
#ifdef CKPT_TEST_SANITIZED
  const std::uint64_t big = std::uint64_t{160} << 20;  // the streamed path runs; resident sets are not measured
#else
  const std::uint64_t big = std::uint64_t{1} << 30;
#endif
  const std::uint64_t mib = std::uint64_t{1} << 20;
  // Sources written streamed too: this process never holds the leaf.
  auto make_source = [&](const fs::path& dir, std::uint64_t bytes) {
    ckpt::Snapshot snap;
    snap.leaves.push_back({ckpt::Path::parse("weights"),
                           ckpt::LeafBytes::streamed(ckpt::dtype::float32, {static_cast<std::int64_t>(bytes / 4)},
                                                     std::make_shared<test::PatternStream>(bytes, 11))});
    const std::int64_t step = 7;
    snap.leaves.push_back({ckpt::Path::parse("step"), ckpt::LeafBytes::borrow(ckpt::dtype::int64, {}, &step, 8)});
    ckpt::save_snapshot(dir, snap);
  };
  make_source(tmp / "big", big);
  make_source(tmp / "small", 96 * mib);  // for the compressing formats (gzip, zstd), which run at 100-400 MB/s
  // The tool's own footprint, measured in this run: a command that opens the same checkpoint.
  const auto base = measured({"tree", (tmp / "big").string()}, tmp / "log");
  REQUIRE(base.rc == 0);
  struct Case {
    std::string to, source;
    std::uint64_t leaf, budget;
  };
  for (const Case& c : {Case{"native", "big", big, 128 * mib}, Case{"safetensors", "big", big, 128 * mib},
                        Case{"t5x", "small", 96 * mib, 32 * mib}, Case{"orbax", "small", 96 * mib, 32 * mib}}) {
    CAPTURE(c.to);
    const fs::path dst = tmp / ("to-" + c.to);
    const std::string budget = std::to_string(c.budget / mib) + "M";
    const auto r = measured({"convert", (tmp / c.source).string(), dst.string(), "--to", c.to, "--max-memory", budget},
                            tmp / "log");
    const auto log = test::read_bytes(tmp / "log");
    INFO(std::string(log.begin(), log.end()));
    REQUIRE(r.rc == 0);
#ifndef CKPT_TEST_SANITIZED
    INFO("peak RSS: convert " << r.peak_rss << " B, tree " << base.peak_rss << " B, budget " << c.budget << " B");
    CHECK(r.peak_rss < base.peak_rss + c.budget);
#endif
    // Back to native from the copy (safetensors reads by range, the zarr formats a leaf
    // whole), then read through an 8 MiB buffer and verified: the pattern, whole.
    const fs::path back = tmp / "back";
    const auto b = measured({"convert", dst.string(), back.string(), "--to", "native", "--max-memory",
                             c.to == "native" || c.to == "safetensors" ? budget : std::to_string(3 * c.leaf / mib) + "M"},
                            tmp / "log");
    REQUIRE(b.rc == 0);
#ifndef CKPT_TEST_SANITIZED
    if (c.to == "native" || c.to == "safetensors") CHECK(b.peak_rss < base.peak_rss + c.budget);
#endif
    const auto index = ckpt::open_index(back);
    const ckpt::IndexEntry* e = index->find(ckpt::Path::parse("weights"));
    REQUIRE(e != nullptr);
    CHECK(e->length == c.leaf);
    std::vector<std::byte> buf(std::size_t{8} << 20);
    std::uint64_t wrong = 0, seen = 0;
    index->read_pieces(*e, buf, true, [&](std::uint64_t at, std::span<const std::byte> p) {
      if (!test::PatternStream::matches(11, at, p)) ++wrong;
      seen += p.size();
    });
    CHECK(wrong == 0);
    CHECK(seen == c.leaf);
    CHECK(ckpt::restore_tree(back, {.lazy = true}).leaf("step").as<std::int64_t>() == 7);
    fs::remove_all(dst);
    fs::remove_all(back);
  }
  // stats reads the 1 GiB leaf through its budget too.
  {
    const auto r = measured({"stats", "--json", (tmp / "big").string(), "--max-memory", "64M"}, tmp / "log");
    const auto log = test::read_bytes(tmp / "log");
    INFO(std::string(log.begin(), log.end()).substr(0, 2000));
    CHECK((r.rc == 0 || r.rc == 1));  // 1: the pattern's bits include NaNs as float32
#ifndef CKPT_TEST_SANITIZED
    INFO("peak RSS: stats " << r.peak_rss << " B, tree " << base.peak_rss << " B");
    CHECK(r.peak_rss < base.peak_rss + 64 * mib);
#endif
  }
  // Flax's single msgpack file is written from memory: the budget is refused, not exceeded.
  const auto r = cli("convert " + (tmp / "small").string() + " " + (tmp / "f.msgpack").string() +
                     " --to flax --max-memory 32M");
  CHECK(r.rc == 2);
  CHECK(r.err.find("max_memory") != std::string::npos);
  CHECK(!fs::exists(tmp / "f.msgpack"));
}

}  // namespace cli_test

namespace cli_test {

// Figures computed here, from the values written, independently of the tool: min, max,
// mean, population std (two passes), L2 of the finite values; NaN and Inf counted apart.
struct Expect {
  std::uint64_t elements = 0, nan = 0, inf = 0;
  std::vector<double> finite;
  void add(double x) {
    ++elements;
    if (std::isnan(x)) ++nan;
    else if (std::isinf(x)) ++inf;
    else finite.push_back(x);
  }
  template <class V>
  Expect& add_all(const V& v) {
    for (const auto& x : v) add(static_cast<double>(x));
    return *this;
  }
  void check(const nlohmann::json& j) const {
    CHECK(j["elements"].get<std::uint64_t>() == elements);
    CHECK(j["nan"].get<std::uint64_t>() == nan);
    CHECK(j["inf"].get<std::uint64_t>() == inf);
    // Sums of squares in units of the largest magnitude, and the norm by hypot: values
    // near 1e201 would overflow x * x.
    double lo = finite.at(0), hi = finite.at(0), big = 0, sum = 0, sq = 0, l2 = 0;
    for (double x : finite) lo = std::min(lo, x), hi = std::max(hi, x), big = std::max(big, std::fabs(x)), sum += x;
    const double mean = sum / static_cast<double>(finite.size());
    for (double x : finite) sq += ((x - mean) / big) * ((x - mean) / big), l2 = std::hypot(l2, x);
    CHECK(j["min"].get<double>() == doctest::Approx(lo).epsilon(1e-15));
    CHECK(j["max"].get<double>() == doctest::Approx(hi).epsilon(1e-15));
    CHECK(j["mean"].get<double>() == doctest::Approx(mean).epsilon(1e-12).scale(big));
    CHECK(j["std"].get<double>() == doctest::Approx(big * std::sqrt(sq / static_cast<double>(finite.size()))).epsilon(1e-12));
    CHECK(j["l2"].get<double>() == doctest::Approx(l2).epsilon(1e-12));
  }
};

const nlohmann::json& row(const nlohmann::json& rows, const std::string& path) {
  for (const auto& r : rows)
    if (r["path"] == path) return r;
  FAIL("no row " << path);
  static const nlohmann::json none;
  return none;
}

struct Layer {
  std::vector<float> w, b;
};
struct Model {
  Layer enc, dec;
  std::vector<double> ema;
  std::vector<std::int32_t> counts;
  std::vector<bool> mask;
  std::vector<ckpt::bfloat16> h;
  std::vector<std::complex<float>> z;
  std::int64_t step = 0;
};

Model make_model(float shift) {
  Model m;
  for (int i = 0; i < 300; ++i) m.enc.w.push_back(std::sin(0.1f * static_cast<float>(i)) + shift * static_cast<float>(i % 7));
  for (int i = 0; i < 20; ++i) m.enc.b.push_back(0.01f * static_cast<float>(i) - shift);
  for (int i = 0; i < 5000; ++i) m.dec.w.push_back(std::cos(0.003f * static_cast<float>(i)) * 1e3f);
  m.dec.b = {1.f, 2.f, 3.f};
  for (int i = 0; i < 40; ++i) m.ema.push_back(1e200 * static_cast<double>(i - 20));  // squares would overflow unscaled
  m.counts = {-5, 0, 7, 1 << 30};
  m.mask = {true, false, true, true};
  m.h = {ckpt::bfloat16(1.5f), ckpt::bfloat16(-0.25f), ckpt::bfloat16(8.f)};
  m.z = {{3, 4}, {0, -1}, {1e-3f, 0}};
  m.step = 42;
  return m;
}

std::uint64_t bytes_of(const Layer& l) { return (l.w.size() + l.b.size()) * sizeof(float); }

TEST_CASE("ckpt du: bytes and elements per subtree, largest first, with dtypes; per step on a manager root") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  const Model m = make_model(0);
  ckpt::save(tmp / "native", m);
  ckpt::save<ckpt::orbax>(tmp / "orbax", m);
  const std::uint64_t total = bytes_of(m.enc) + bytes_of(m.dec) + m.ema.size() * 8 + m.counts.size() * 4 + m.mask.size() +
                              m.h.size() * 2 + m.z.size() * 8 + 8;
  for (const char* which : {"native", "orbax"}) {
    CAPTURE(which);
    auto r = cli("du --json " + (tmp / which).string());
    INFO(r.err);
    REQUIRE(r.rc == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["bytes"] == total);
    CHECK(j["leaves"] == 10);
    CHECK(j["elements"] == 300 + 20 + 5000 + 3 + 40 + 4 + 4 + 3 + 3 + 1);
    CHECK(j["on_disk"].get<std::uint64_t>() > 0);
    // largest first: dec (20 KB), then ema (320 B), enc (1280 B) before it
    const auto& c = j["children"];
    REQUIRE(c.size() == 8);
    CHECK(c[0]["name"] == "dec");
    CHECK(c[0]["bytes"] == bytes_of(m.dec));
    CHECK(c[1]["name"] == "enc");
    CHECK(c[1]["bytes"] == bytes_of(m.enc));
    CHECK(c[1]["elements"] == 320);
    CHECK(c[1]["dtypes"] == nlohmann::json{{"float32", bytes_of(m.enc)}});
    CHECK(c[1]["children"][0]["path"] == "enc.w");  // 1200 bytes before 80
    CHECK(c[1]["children"][0]["shape"] == nlohmann::json::array({300}));
    CHECK(c[2]["name"] == "ema");
    for (std::size_t i = 1; i < c.size(); ++i) CHECK(c[i - 1]["bytes"].get<std::uint64_t>() >= c[i]["bytes"].get<std::uint64_t>());
    CHECK(j["dtypes"]["float64"] == m.ema.size() * 8);
    CHECK(j["dtypes"]["complex64"] == 24);
  }
  // --depth 1: the subtrees summed, not listed
  auto j = nlohmann::json::parse(cli("du --json --depth 1 " + (tmp / "native").string()).out);
  CHECK(j["children"][0]["bytes"] == bytes_of(m.dec));
  CHECK(!j["children"][0].contains("children"));
  auto r = cli("du " + (tmp / "native").string());
  CHECK(r.rc == 0);
  CHECK(r.out.find("enc.w[300]") != std::string::npos);
  CHECK(r.out.find("dec") < r.out.find("enc"));

  // A manager's root: per step, each step's own tree.
  {
    ckpt::CheckpointManager<Model> mgr(tmp / "run");
    mgr.save(1, m);
    Model bigger = m;
    bigger.dec.w.resize(10000, 0.5f);
    mgr.save(2, bigger);
  }
  r = cli("du --json " + (tmp / "run").string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  j = nlohmann::json::parse(r.out);
  REQUIRE(j["steps"].size() == 2);
  CHECK(j["steps"][0]["step"] == 1);
  CHECK(j["steps"][0]["bytes"] == total);
  CHECK(j["steps"][1]["step"] == 2);
  CHECK(j["steps"][1]["bytes"] == total + 5000 * 4);
  CHECK(j["steps"][1]["children"][0]["bytes"] == bytes_of(m.dec) + 5000 * 4);
  CHECK(j["bytes"] == 2 * total + 5000 * 4);
  r = cli("du " + (tmp / "run").string());
  CHECK(r.rc == 0);
  CHECK(r.out.find("step 1") < r.out.find("step 2"));
  r = cli("stats " + (tmp / "run").string());  // stats reads one checkpoint: it says which to give
  CHECK(r.rc == 2);
  CHECK(r.err.find("2 step checkpoints") != std::string::npos);

  test::write_bytes(tmp / "junk.txt", {'x'});
  for (const std::string& bad : {std::string("du /nonexistent/x"), "du --depth -1 " + (tmp / "native").string(),
                                 "du " + (tmp / "junk.txt").string(), std::string("du")}) {
    CAPTURE(bad);
    r = cli(bad);
    CHECK(r.rc == 2);
    CHECK(!r.err.empty());
  }
}

TEST_CASE("ckpt stats: NaN and Inf counts, min, max, mean, std and L2 per leaf and subtree, streamed, every format") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  Model m = make_model(0.5f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  m.enc.w[3] = nan;
  m.enc.w[10] = inf;
  m.enc.w[11] = -inf;
  m.enc.b[0] = nan;
  m.dec.w.resize(100000);  // 400 KB: several pieces under --max-memory 256K
  for (std::size_t i = 5000; i < m.dec.w.size(); ++i) m.dec.w[i] = static_cast<float>(i % 1000) * 1e-3f - 0.4f;
  ckpt::save(tmp / "native", m);
  ckpt::save<ckpt::safetensors>(tmp / "m.safetensors", m);
  ckpt::save<ckpt::t5x>(tmp / "t5x", m);

  Expect w, b, enc, dw, db, dec, ema, counts, mask, h, z, all;
  w.add_all(m.enc.w), b.add_all(m.enc.b), dw.add_all(m.dec.w), db.add_all(m.dec.b), ema.add_all(m.ema);
  counts.add_all(m.counts), mask.add_all(m.mask);
  for (auto x : m.h) h.add(static_cast<float>(x));
  for (auto x : m.z) z.add(std::abs(std::complex<double>(x)));
  enc.add_all(m.enc.w).add_all(m.enc.b);
  dec.add_all(m.dec.w).add_all(m.dec.b);
  for (const Expect* e : {&enc, &dec, &ema, &counts, &mask, &h, &z})
    for (double x : e->finite) all.add(x);
  all.nan = enc.nan, all.inf = enc.inf, all.elements += enc.nan + enc.inf;
  all.add(42);  // step

  for (const std::string which : {"native", "m.safetensors", "t5x"}) {
    CAPTURE(which);
    for (const char* budget : {"", " --max-memory 256K"}) {
      CAPTURE(budget);
      if (which == "t5x" && *budget) continue;  // below: t5x reads leaves whole
      auto r = cli("stats --json " + (tmp / which).string() + budget);
      INFO(r.err);
      REQUIRE(r.rc == 1);  // NaN and Inf found
      const auto j = nlohmann::json::parse(r.out);
      w.check(row(j["leaves"], "enc.w"));
      b.check(row(j["leaves"], "enc.b"));
      dw.check(row(j["leaves"], "dec.w"));
      db.check(row(j["leaves"], "dec.b"));
      ema.check(row(j["leaves"], "ema"));
      counts.check(row(j["leaves"], "counts"));
      mask.check(row(j["leaves"], "mask"));
      h.check(row(j["leaves"], "h"));
      z.check(row(j["leaves"], "z"));
      enc.check(row(j["subtrees"], "enc"));
      dec.check(row(j["subtrees"], "dec"));
      all.check(row(j["subtrees"], ""));
      CHECK(row(j["subtrees"], "enc")["leaves"] == 2);
      CHECK(row(j["leaves"], "enc.w")["dtype"] == "float32");
    }
  }
  // A leaf stored as a box of a global array (Sharded): read a slab of rows at a time.
  struct Boxed {
    ckpt::Sharded<std::vector<float>> v;
    std::vector<float> plain;
  };
  Boxed bx;
  for (int i = 0; i < 200000; ++i) bx.plain.push_back(static_cast<float>((i * 7919) % 1000) * 0.01f - 3.f);
  bx.plain[123456] = nan;
  bx.v = {{200000}, {0}, bx.plain};
  ckpt::save(tmp / "boxed", bx);
  REQUIRE(!ckpt::open_index(tmp / "boxed")->find(ckpt::Path::parse("v"))->boxes.empty());
  {
    auto r = cli("stats --json --max-memory 256K " + (tmp / "boxed").string());
    INFO(r.err);
    REQUIRE(r.rc == 1);
    const auto j = nlohmann::json::parse(r.out);
    Expect e;
    e.add_all(bx.plain);
    e.check(row(j["leaves"], "v"));
    e.check(row(j["leaves"], "plain"));
  }
  // The table names the leaves with NaN or Inf on stderr; exit 1.
  auto r = cli("stats " + (tmp / "native").string());
  CHECK(r.rc == 1);
  CHECK(r.out.find("enc.w") != std::string::npos);
  CHECK(r.err.find("2 leaves hold NaN or Inf: enc.b, enc.w") != std::string::npos);
  r = cli("show " + (tmp / "native").string() + " enc.w");  // show's figures are the same, of the finite values
  CHECK(r.rc == 0);
  CHECK(r.out.find("(1 NaN, 2 Inf)") != std::string::npos);
  // All finite: exit 0.
  ckpt::save(tmp / "finite", make_model(0));
  r = cli("stats " + (tmp / "finite").string());
  CHECK(r.rc == 0);
  CHECK(r.err.empty());

  // t5x reads a leaf whole: 400 KB does not fit half of 256K; a clear error, nothing printed.
  r = cli("stats " + (tmp / "t5x").string() + " --max-memory 256K");
  CHECK(r.rc == 2);
  CHECK(r.err.find("dec.w") != std::string::npos);
  CHECK(r.err.find("--max-memory") != std::string::npos);
  // A flipped byte in dec.w's data: the checksum fails while streaming, naming the leaf.
  fs::copy(tmp / "native", tmp / "broken", fs::copy_options::recursive);
  for (const auto& f : fs::directory_iterator(tmp / "broken"))
    if (f.path().filename().string().rfind("data", 0) == 0 && fs::file_size(f.path()) > 300000) {
      std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      s.seekp(200000);
      s.put('\x7f');
    }
  r = cli("stats " + (tmp / "broken").string() + " --max-memory 256K");
  CHECK(r.rc == 2);
  CHECK(r.err.find("dec.w") != std::string::npos);
  for (const std::string& bad : {std::string("stats /nonexistent/x"), "stats " + tmp.path().string(),
                                 "stats " + (tmp / "native").string() + " --max-memory lots"}) {
    CAPTURE(bad);
    r = cli(bad);
    CHECK(r.rc == 2);
    CHECK(!r.err.empty());
  }
}

TEST_CASE("ckpt diff --rel: each leaf's relative L2 change and largest difference, most moved first") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  const Model a = make_model(0);
  Model b = make_model(0.25f);  // enc moves, dec does not
  b.z[0] = {3, 5};
  b.ema[2] = std::numeric_limits<double>::quiet_NaN();
  ckpt::save(tmp / "a", a);
  ckpt::save<ckpt::orbax>(tmp / "b", b);
  const auto moved = [](const auto& x, const auto& y) {  // ||x-y|| / ||x||, max |x-y|
    double d2 = 0, a2 = 0, mx = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = std::abs(std::complex<double>(x[i]) - std::complex<double>(y[i]));
      d2 += d * d, a2 += std::norm(std::complex<double>(x[i])), mx = std::max(mx, d);
    }
    return std::pair(std::sqrt(d2) / std::sqrt(a2), mx);
  };
  auto r = cli("diff --rel --json " + (tmp / "a").string() + " " + (tmp / "b").string() + " --max-memory 256K");
  INFO(r.err);
  REQUIRE(r.rc == 1);
  const auto j = nlohmann::json::parse(r.out);
  const auto& mv = j["moved"];
  CHECK(mv.size() == 10);
  CHECK(mv[0]["path"] == "ema");  // a NaN difference first
  CHECK(mv[0]["rel_l2"].is_null());
  CHECK(mv[0]["nonfinite_diff"] == 1);
  for (const auto& pf : {std::pair(std::string("enc.w"), moved(a.enc.w, b.enc.w)),
                         std::pair(std::string("enc.b"), moved(a.enc.b, b.enc.b)),
                         std::pair(std::string("z"), moved(a.z, b.z))}) {
    const std::string& path = pf.first;  // not a structured binding: CAPTURE's lambda takes it (clang 14)
    const auto& fig = pf.second;
    CAPTURE(path);
    const auto& x = row(mv, path);
    CHECK(x["rel_l2"].get<double>() == doctest::Approx(fig.first).epsilon(1e-12));
    CHECK(x["max_abs_diff"].get<double>() == doctest::Approx(fig.second).epsilon(1e-12));
    CHECK(row(j["changed"], path)["rel_l2"] == x["rel_l2"]);
  }
  CHECK(row(mv, "dec.w")["rel_l2"] == 0.0);
  CHECK(row(mv, "dec.w")["max_abs_diff"] == 0.0);
  for (std::size_t i = 2; i < mv.size(); ++i) CHECK(mv[i - 1]["rel_l2"].get<double>() >= mv[i]["rel_l2"].get<double>());
  CHECK(j["changed"].size() == 4);  // enc.w, enc.b, z, ema
  CHECK(j["unchanged"] == 6);
  // The table: most moved first.
  r = cli("diff --rel " + (tmp / "a").string() + " " + (tmp / "b").string());
  CHECK(r.rc == 1);
  CHECK(r.out.find("ema") < r.out.find("enc.b"));
  CHECK(r.out.find("enc.b") < r.out.find("dec.w"));
  CHECK(cli("diff --rel " + (tmp / "a").string() + " " + (tmp / "a").string()).rc == 0);
  // A string leaf has no figures: it differs, or not.
  struct Named {
    std::string s;
    std::vector<float> v;
  };
  ckpt::save(tmp / "s1", Named{"abc", {3, 4}});
  ckpt::save(tmp / "s2", Named{"abcd", {3, 4}});
  r = cli("diff --rel --json " + (tmp / "s1").string() + " " + (tmp / "s2").string());
  CHECK(r.rc == 1);
  const auto js = nlohmann::json::parse(r.out);
  REQUIRE(js["changed"].size() == 1);
  CHECK(js["changed"][0] == nlohmann::json{{"path", "s"}});
  CHECK(row(js["moved"], "v")["l2_a"] == 5.0);
  r = cli("diff --rel " + (tmp / "s1").string() + " " + (tmp / "s2").string());
  CHECK(r.out.find("~ s  differs") != std::string::npos);
  r = cli("diff --rel " + (tmp / "a").string() + " /nonexistent/x");
  CHECK(r.rc == 2);
  CHECK(!r.err.empty());
}

struct Diverging {
  std::vector<float> w;
  double lr = 0.1;
};

TEST_CASE("ckpt ls: marks the steps the manager's guard_non_finite found NaN or infinities in") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Diverging s{std::vector<float>(5000, 1.f)};
  {
    ckpt::CheckpointManager<Diverging> mgr(tmp / "run", {.guard_non_finite = true});
    mgr.save(1, s, {{"loss", 0.5}});
    s.w[7] = nan;
    s.w[4000] = -std::numeric_limits<float>::infinity();
    mgr.save(2, s, {{"loss", 0.4}});
    s.w = std::vector<float>(5000, 2.f);
    mgr.save(3, s, {{"loss", std::numeric_limits<double>::quiet_NaN()}});
  }
  auto r = cli("ls " + (tmp / "run").string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(r.out.substr(at, nl - at));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].find("NON-FINITE") == std::string::npos);
  CHECK(lines[1].find("NON-FINITE(2 values, 0 metrics)") != std::string::npos);
  CHECK(lines[1].find("loss=0.4") != std::string::npos);
  CHECK(lines[2].find("NON-FINITE(0 values, 1 metrics)") != std::string::npos);
  r = cli("ls --json " + (tmp / "run").string());
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["steps"].size() == 3);
  CHECK(j["steps"][0]["finite"] == true);
  CHECK(j["steps"][1]["finite"] == false);
  CHECK(j["steps"][1]["save_stats"]["non_finite_values"] == 2);
  CHECK(j["steps"][2]["finite"] == false);
  CHECK(j["steps"][2]["save_stats"]["non_finite_metrics"] == 1);
  // a step saved without the guard counts as finite
  ckpt::CheckpointManager<Diverging>(tmp / "run").save(4, s);
  r = cli("ls --json " + (tmp / "run").string());
  REQUIRE(r.rc == 0);
  CHECK(nlohmann::json::parse(r.out)["steps"][3]["finite"] == true);
}

// ---- ckpt report: the page, rendered by a real browser ------------------------------

// The output of a shell command (stdout and stderr into `log`), and its exit status.
int shell(const std::string& cmd, std::string& log) {
  log.clear();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) log.append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The text between `from` (after it) and the next `to`.
std::string between(const std::string& s, const std::string& from, const std::string& to) {
  const auto a = s.find(from);
  if (a == std::string::npos) return {};
  const auto b = s.find(to, a + from.size());
  return s.substr(a + from.size(), b == std::string::npos ? std::string::npos : b - a - from.size());
}

// The JSON the page embeds (report.hpp escapes '<', '>' and '&' as \u escapes).
nlohmann::json report_data(const std::string& html) {
  return nlohmann::json::parse(between(html, "<script type=\"application/json\" id=\"report-data\">", "</script>"));
}

// Chromium, headless, on a page: `mode` is --dump-dom or --screenshot=FILE; the console
// goes to stderr (--enable-logging=stderr), every message in a line with ":CONSOLE".
struct Browser {
  std::string exe;
  int run(const fs::path& page, const std::string& mode, const std::string& size, std::string& out, std::string& err) const {
    test::TempDir profile;
    const std::string cmd = "timeout 120 " + exe + " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                            " --disable-background-networking --disable-component-update --disable-sync"
                            " --enable-logging=stderr --user-data-dir=" + (profile / "p").string() +
                            " --virtual-time-budget=5000 --window-size=" + size + " " + mode + " file://" + page.string() +
                            " >" + (profile / "out").string() + " 2>" + (profile / "err").string();
    const int st = std::system(cmd.c_str());
    const auto o = test::read_bytes(profile / "out"), e = test::read_bytes(profile / "err");
    out.assign(o.begin(), o.end());
    err.assign(e.begin(), e.end());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
};

// What the page logged: the console lines of chromium's stderr.
std::string console_lines(const std::string& err) {
  std::string out, line;
  for (std::size_t at = 0; at < err.size();) {
    const auto nl = err.find('\n', at);
    line = err.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (line.find(":CONSOLE") != std::string::npos) out += line + "\n";
    at = nl == std::string::npos ? err.size() : nl + 1;
  }
  return out;
}

// The page rendered without a script error: the render finished, window.onerror wrote
// nothing into #errors, and nothing was logged to the console.
void check_rendered(const std::string& dom, const std::string& err) {
  INFO(console_lines(err));
  CHECK(dom.find("data-rendered=\"1\"") != std::string::npos);
  CHECK(dom.find("<pre id=\"errors\"></pre>") != std::string::npos);
  CHECK(console_lines(err).empty());
}

// A small network and its Adam moments, as a training run saves them: the head's
// weights grow faster and faster until, at step 800, they hold a NaN (the moment too).
struct Dense {
  std::vector<float> w, b;
};
struct Adam {
  std::map<std::string, Dense> mu, nu;
  std::int64_t count = 0;
};
struct Net {
  std::map<std::string, Dense> params;
  Adam opt;
  std::int64_t step = 0;
};
Net net_at(std::int64_t step) {
  Net n;
  n.step = n.opt.count = step;
  const double t = static_cast<double>(step) / 100;
  const std::vector<std::pair<std::string, std::size_t>> layers = {{"embed", 4096}, {"layer_0", 2048}, {"layer_1", 2048}, {"head", 512}};
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto& [name, size] = layers[l];
    const double g = 1 + (name == "head" ? 0.02 * t * t * t : 0.01 * t);
    Dense p, m, v;
    for (std::size_t k = 0; k < size; ++k) {
      const double x = static_cast<double>(k);
      p.w.push_back(static_cast<float>(std::sin(0.37 * x + static_cast<double>(l)) * 0.05 * g + 0.002 * std::cos(0.11 * x * t)));
      m.w.push_back(static_cast<float>(1e-3 * std::cos(0.05 * x + 0.1 * t) * g));
      v.w.push_back(static_cast<float>(1e-6 * (1.5 + std::sin(0.07 * x)) * g * g));
    }
    for (std::size_t k = 0; k < size / 64; ++k) {
      const double x = static_cast<double>(k);
      p.b.push_back(static_cast<float>(0.01 * std::sin(x + 0.1 * t)));
      m.b.push_back(static_cast<float>(1e-4 * std::cos(x + 0.1 * t)));
      v.b.push_back(static_cast<float>(1e-8 * (1 + t)));
    }
    n.params[name] = p, n.opt.mu[name] = m, n.opt.nu[name] = v;
  }
  if (step == 800) n.params["head"].w[7] = n.opt.mu["head"].w[7] = std::numeric_limits<float>::quiet_NaN();
  return n;
}

TEST_CASE("ckpt report: one self-contained HTML page, rendered by a headless chromium") {
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  // A run that diverges: eight saves, five kept, the last with NaN in two leaves; its
  // loss, logged every 10 steps to TensorBoard, ends in a NaN.
  std::vector<std::int64_t> kept;
  const auto loss = [](double s) { return s <= 760 ? 2.5 * std::exp(-s / 250) + 0.4 + 0.03 * std::sin(s / 7) : 0.5 + (s - 760) / 10; };
  {
    ckpt::CheckpointManager<Net> mgr(tmp / "run", {.max_to_keep = 5});
    for (std::int64_t step = 100; step <= 800; step += 100) {
      const double l = loss(static_cast<double>(step));
      mgr.save(step, net_at(step), {{"loss", l}, {"accuracy", 0.95 * std::exp(-l / 2)}});
    }
    mgr.wait_until_finished();
    kept = mgr.all_steps();
  }
  ckpt::tensorboard::EventFileWriter tb(tmp / "tb/train");
  for (std::int64_t s = 10; s <= 800; s += 10)
    tb.add_scalar("loss", s == 800 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(loss(static_cast<double>(s))), s);
  tb.flush();
  REQUIRE(kept == std::vector<std::int64_t>{400, 500, 600, 700, 800});
  const std::size_t leaves = ckpt::open_index(tmp / "run/800")->entries().size();
  REQUIRE(leaves == 26);

  // Run in tmp, so that the page names the root as given: "run".
  std::string out;
  const int rc = shell("cd '" + tmp.path().string() + "' && " + CKPT_CLI + " report run -o run.html --tensorboard tb --max-memory 256K", out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("5 steps") != std::string::npos);
  CHECK(out.find("1 step with NaN or Inf") != std::string::npos);
  const fs::path page = tmp / "run.html";
  const auto bytes = test::read_bytes(page);
  const std::string html(bytes.begin(), bytes.end());

  // Nothing is loaded from anywhere: no resource is referenced, a policy forbids loads,
  // and the only URL is the SVG namespace the script creates elements in.
  CHECK(html.find("Content-Security-Policy\" content=\"default-src 'none';") != std::string::npos);
  for (const char* ref : {"src=", "href=", "url(", "@import", "<link", "fetch(", "XMLHttpRequest", "//cdn"}) {
    CAPTURE(ref);
    CHECK(html.find(ref) == std::string::npos);
  }
  CHECK(count(html, "http") == count(html, "'http://www.w3.org/2000/svg'") + count(html, "http-equiv"));

  // The data: every kept step's metrics, statistics and moves as the commands give them.
  const auto data = report_data(html);
  CHECK(data["path"] == "run");
  REQUIRE(data["steps"].size() == kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) {
    CAPTURE(kept[i]);
    const auto& s = data["steps"][i];
    const std::string dir = (tmp / "run" / std::to_string(kept[i])).string();
    CHECK(s["step"] == kept[i]);
    CHECK(s["metrics"]["loss"].get<double>() == doctest::Approx(loss(static_cast<double>(kept[i]))));
    CHECK(s["leaves"].size() == leaves);
    CHECK(s["tree"]["bytes"] == nlohmann::json::parse(cli("du --json " + dir).out)["bytes"]);
    const auto stats = nlohmann::json::parse(cli("stats --json " + dir).out);
    for (const auto& l : stats["leaves"]) {
      CAPTURE(l["path"]);
      auto mine = row(s["leaves"], l["path"].get<std::string>());
      CHECK(mine.contains("bytes"));
      mine.erase("bytes");
      CHECK(mine == l);
    }
    if (i > 0) {  // how far layer_0's bias moved from the step before, computed here
      const auto a = net_at(kept[i - 1]).params["layer_0"].b, b = net_at(kept[i]).params["layer_0"].b;
      double d2 = 0, a2 = 0;
      for (std::size_t k = 0; k < a.size(); ++k) d2 += (a[k] - b[k]) * double(a[k] - b[k]), a2 += a[k] * double(a[k]);
      CHECK(row(s["moved"], "params.layer_0.b")["rel_l2"].get<double>() == doctest::Approx(std::sqrt(d2 / a2)));
    }
  }
  CHECK(row(data["steps"][4]["leaves"], "params.head.w")["nan"] == 1);
  CHECK(row(data["steps"][4]["moved"], "opt.mu.head.w")["nonfinite_diff"] == 1);
  CHECK(data["tensorboard"]["train/loss"].size() == 80);
  CHECK(data["tensorboard"]["train/loss"][79] == nlohmann::json::array({800, nullptr}));

  // A checkpoint whose names would be markup: they stay text.
  struct Named {
    std::map<std::string, std::vector<float>> by_name;
  };
  const std::string evil = "</script><img src=x onerror=alert(1)>", comment = "<!--";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ckpt::save(tmp / "named", Named{{{evil, {1, 2}}, {comment, {nan}}, {"plain & simple", {3}}}});
  const fs::path named = tmp / "named.html";
  auto r = cli("report " + (tmp / "named").string() + " -o " + named.string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto nb = test::read_bytes(named);
  const std::string nhtml(nb.begin(), nb.end());
  CHECK(nhtml.find("</script><img") == std::string::npos);
  CHECK(nhtml.find("<!--") == std::string::npos);
  CHECK(report_data(nhtml)["steps"][0]["leaves"].size() == 3);
  CHECK(row(report_data(nhtml)["steps"][0]["leaves"], "by_name." + evil)["l2"] == doctest::Approx(std::sqrt(5.0)));

  // Bad input: exit 2 and a message.
  for (const std::string& bad : {"report /nonexistent/x -o " + (tmp / "x.html").string(), "report " + (tmp / "named").string(),
                                 "report " + (tmp / "named").string() + " -o " + (tmp / "no/such/dir/x.html").string(),
                                 "report " + (tmp / "run").string() + " -o " + (tmp / "y.html").string() + " --tensorboard /nonexistent"}) {
    CAPTURE(bad);
    r = cli(bad);
    CHECK(r.rc == 2);
    CHECK(!r.err.empty());
  }
  CHECK(!fs::exists(tmp / "y.html"));

  // ---- in a browser ----
  std::string where;
  if (shell("command -v chromium || command -v chromium-browser", where) != 0 || where.empty()) {
    MESSAGE("chromium is not installed: the report's rendering is not checked (tools/install-deps.sh installs it)");
    return;
  }
  const Browser browser{where.substr(0, where.find('\n'))};
  std::string dom, err;
  REQUIRE(browser.run(page, "--dump-dom", "1280,800", dom, err) == 0);
  check_rendered(dom, err);
  // The table: a row per leaf of the latest step, the two with a NaN highlighted.
  const std::string rows = between(dom, "<tbody id=\"leaf-rows\">", "</tbody>");
  CHECK(count(rows, "<tr") == leaves);
  CHECK(count(rows, "<tr class=\"bad\">") == 2);
  for (const std::string leaf : {"params.head.w", "opt.mu.head.w"})
    CHECK(rows.find("<tr class=\"bad\"><td title=\"" + leaf + "\">" + leaf + "</td>") != std::string::npos);
  CHECK(dom.find(std::to_string(leaves) + " of " + std::to_string(leaves) + " leaves (step 800)") != std::string::npos);
  // The metrics: one point per kept step, at that step; TensorBoard's 80, the NaN drawn apart.
  for (const char* metric : {"loss", "accuracy"}) {
    CAPTURE(metric);
    CHECK(count(dom, "data-metric=\"" + std::string(metric) + "\"") == kept.size());
    for (const auto step : kept)
      CHECK(dom.find("data-step=\"" + std::to_string(step) + "\" data-metric=\"" + metric + "\" class=\"pt\"") != std::string::npos);
  }
  CHECK(count(dom, "data-tag=\"train/loss\"") == 80);
  CHECK(count(dom, "data-step=\"800\" data-tag=\"train/loss\" class=\"tb nonfinite\"") == 1);
  // The norms: the leaves with a NaN among those drawn, a point per step, the last one marked.
  for (const std::string leaf : {"params.head.w", "opt.mu.head.w"}) {
    CAPTURE(leaf);
    CHECK(count(dom, "data-leaf=\"" + leaf + "\" class=\"norm") == kept.size());
    CHECK(dom.find("data-step=\"800\" data-leaf=\"" + leaf + "\" class=\"norm nonfinite\"") != std::string::npos);
  }
  // The heat map: a row per numeric leaf, a column per pair of steps; the last change of
  // the two leaves with a NaN is NaN.
  const std::string heat = between(dom, "<table class=\"heat\" id=\"heat\">", "</table>");
  CHECK(count(heat, "<tr data-leaf=") == leaves);
  CHECK(count(heat, "<th>") == kept.size());  // the leaf column, then one per pair
  CHECK(count(heat, "class=\"nonfinite\"") == 2);
  CHECK(between(heat, "<tr data-leaf=\"params.head.w\">", "</tr>").find("class=\"nonfinite\"") != std::string::npos);
  // The treemap: a cell per leaf.
  CHECK(count(between(dom, "<div id=\"treemap\">", "</section>"), "class=\"cell") == leaves);

  // The controls: a filter, a sort by a column and another step, driven by a script
  // appended to a copy of the page.
  {
    std::string driven = html;
    driven.replace(driven.rfind("</body>"), 7, R"(<script>
      const f = document.getElementById('filter');
      f.value = 'HEAD';
      f.dispatchEvent(new Event('input'));
      document.querySelector('#leaf-head th[data-key="l2"]').click();
      const s = document.getElementById('step');
      s.value = '0';
      s.dispatchEvent(new Event('change'));
    </script></body>)");
    test::write_bytes(tmp / "driven.html", std::vector<char>(driven.begin(), driven.end()));
    REQUIRE(browser.run(tmp / "driven.html", "--dump-dom", "1280,800", dom, err) == 0);
    check_rendered(dom, err);
    std::vector<std::pair<double, std::string>> head;  // step 400's leaves matching "head", largest L2 first
    for (const auto& l : data["steps"][0]["leaves"])
      if (l["path"].get<std::string>().find("head") != std::string::npos) head.emplace_back(l["l2"].get<double>(), l["path"]);
    std::sort(head.rbegin(), head.rend());
    REQUIRE(head.size() == 6);
    const std::string shown = between(dom, "<tbody id=\"leaf-rows\">", "</tbody>");
    CHECK(count(shown, "<tr") == head.size());
    CHECK(count(shown, "<tr class=\"bad\">") == 0);  // step 400 holds no NaN
    std::size_t at = 0;
    for (const auto& h : head) {  // in that order
      CAPTURE(h.second);
      const auto next = shown.find("<td title=\"" + h.second + "\">", at);
      CHECK(next != std::string::npos);
      at = next == std::string::npos ? at : next;
    }
    CHECK(dom.find("aria-sort=\"descending\">L2</th>") != std::string::npos);
    CHECK(dom.find("6 of 26 leaves (step 400)") != std::string::npos);
    CHECK(count(between(dom, "<table class=\"heat\" id=\"heat\">", "</table>"), "<tr data-leaf=") == head.size());
  }

  // The names that would be markup are text in the page; no element came from them.
  REQUIRE(browser.run(named, "--dump-dom", "1280,800", dom, err) == 0);
  check_rendered(dom, err);
  CHECK(dom.find("<img") == std::string::npos);
  CHECK(dom.find("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") != std::string::npos);
  CHECK(count(between(dom, "<tbody id=\"leaf-rows\">", "</tbody>"), "<tr") == 3);
  CHECK(count(between(dom, "<tbody id=\"leaf-rows\">", "</tbody>"), "<tr class=\"bad\">") == 1);

  // Screenshots into the test's output folder: a laptop's screen and a phone's.
  const fs::path shots = fs::path(CKPT_TEST_TMPDIR) / "report";
  fs::create_directories(shots);
  for (const auto& shot : {std::pair("report.png", "1280,800"), std::pair("report-phone.png", "390,844")}) {
    const std::string name = shot.first, size = shot.second;  // not a structured binding: clang 14 cannot capture one
    CAPTURE(name);
    fs::remove(shots / name);
    REQUIRE(browser.run(page, "--screenshot=" + (shots / name).string(), size, dom, err) == 0);
    const auto png = test::read_bytes(shots / name);
    REQUIRE(png.size() > 8);
    CHECK(std::string(png.begin() + 1, png.begin() + 4) == "PNG");
  }
  MESSAGE("screenshots of the report: " << (shots / "report.png").string() << ", " << (shots / "report-phone.png").string());
}

}  // namespace cli_test
