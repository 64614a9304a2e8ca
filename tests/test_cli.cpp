// tests/test_cli.cpp — the ckpt command-line tool (tools/ckpt_cli.cpp), run as a
// program: tree, show, verify, diff, convert, ls and their exit codes.
// CKPT_CLI names the built tool (tests/CMakeLists.txt).

#include "support.hpp"

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <complex>
#include <cstdlib>
#include <fstream>
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
  // Flax's single msgpack file is written from memory: the budget is refused, not exceeded.
  const auto r = cli("convert " + (tmp / "small").string() + " " + (tmp / "f.msgpack").string() +
                     " --to flax --max-memory 32M");
  CHECK(r.rc == 2);
  CHECK(r.err.find("max_memory") != std::string::npos);
  CHECK(!fs::exists(tmp / "f.msgpack"));
}

}  // namespace cli_test
