// tests/support.hpp — what every test file shares: a temporary directory that cleans
// up after itself, and small file helpers. Tests include only <ckpt/ckpt.hpp> from the
// library, so they also run against the single header.
#pragma once

#include <doctest/doctest.h>

#include <ckpt/formats.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/migrate.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace test {

namespace fs = std::filesystem;

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

}  // namespace test
