// tests/support.hpp — what every test file shares: a temporary directory that cleans
// up after itself, small file helpers, a Python runner and tree descriptions. Tests include the
// public headers below (the single header has them too), so they also run against it.
#pragma once

#include <doctest/doctest.h>

#include <ckpt/formats.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/migrate.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

// CHECK_THROWS_CKPT(expr, Kind, "text"): expr throws a Kind (ckpt::Error or one of its
// kinds) whose what() contains text: the path or the reason the error claims. A bare
// CHECK_THROWS_AS(..., ckpt::Error) would also pass on an unrelated failure.
#define CHECK_THROWS_CKPT(expr, Kind, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), Kind)

namespace test {

namespace fs = std::filesystem;

// The structs several test files use, defined once.
struct Dense {
  xt::xtensor<float, 2> kernel;
  xt::xtensor<float, 1> bias;
};
struct Params {
  Dense encoder, decoder;
};
// An older version of a state, with fewer fields: a partial target.
struct StepOnly {
  std::int64_t step = 0;
};

// A fresh directory under CKPT_TEST_TMPDIR (or the system temp dir), removed at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("CKPT_TEST_TMPDIR");
    fs::path root = base && *base ? fs::path(base) : fs::temp_directory_path();
    std::random_device rd;
    path_ = root / ("ckpt-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

inline std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs Python code (CKPT_PYTHON: Debian's python3 with numpy, msgpack and zarr, the
// interop oracles) with `dir` as sys.argv[1]; returns its output, failing the test
// when it exits non-zero.
inline std::string python(const std::string& code, const fs::path& dir) {
  TempDir tmp;
  const auto script = tmp / "check.py";
  {
    std::ofstream f(script);
    f << code;
  }
  const std::string cmd = std::string(CKPT_PYTHON) + " " + script.string() + " " + dir.string() + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  INFO(out);
  REQUIRE(rc == 0);
  return out;
}

// Bytes as lower-case hex, for comparing with what Python prints.
inline std::string hex(const std::vector<std::byte>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto x : b) {
    s += d[static_cast<unsigned>(x) >> 4];
    s += d[static_cast<unsigned>(x) & 15];
  }
  return s;
}

// "path dtype shape hex" per line, sorted: how both sides (C++ and a Python oracle) describe a tree.
inline std::string describe(const ckpt::Tree& t) {
  std::vector<std::string> lines;
  for (const auto& l : t.leaves()) {
    if (l.dtype() == ckpt::dtype::none) continue;
    lines.push_back(l.path().str() + " " + std::string(ckpt::dtype_name(l.dtype())) + " " + ckpt::shape_str(l.shape()) +
                    " " + hex(l.bytes()));
  }
  std::sort(lines.begin(), lines.end());
  std::string s;
  for (auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace test
