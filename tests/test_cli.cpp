// tests/test_cli.cpp — the ckpt command-line tool (tools/ckpt_cli.cpp), run as a
// program: tree, show, verify, diff, convert, ls and their exit codes.
// CKPT_CLI names the built tool (tests/CMakeLists.txt).

#include "support.hpp"

#include <nlohmann/json.hpp>
#include <sys/wait.h>

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

using namespace cli_test;

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
