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
#include <cstring>
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

// Runs the Python reader's tests (python/tests, with pytest) on the checkpoints a test
// case wrote into `fixtures` (CKPT_PY_FIXTURES), those marked `marker` (a pytest -m
// expression); fails the test case when pytest fails, or skips anything: with fixtures
// given, python/tests/conftest.py makes a skip a failure.
inline void python_reader_tests(const fs::path& fixtures, const std::string& marker) {
  const std::string cmd = "CKPT_PY_FIXTURES='" + fixtures.string() + "' PYTHONDONTWRITEBYTECODE=1 " +
                          std::string(CKPT_PYTHON) + " -m pytest -q -p no:cacheprovider -m '" + marker + "' '" +
                          std::string(CKPT_SOURCE_DIR) + "/python/tests' 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  MESSAGE(out);
  REQUIRE(rc == 0);
  CHECK(out.find(" passed") != std::string::npos);
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

// A leaf's bytes made up as they are asked for, checkable piece by piece: tests of
// leaves larger than a memory budget never hold one. Word w (8 bytes) is a mix of w and
// the seed.
class PatternStream final : public ckpt::LeafStream {
 public:
  PatternStream(std::uint64_t bytes, std::uint64_t seed) : bytes_(bytes), seed_(seed) {}
  std::uint64_t size() const override { return bytes_; }
  void read(std::uint64_t offset, std::span<std::byte> dst) const override { fill(seed_, offset, dst); }
  static std::uint64_t word(std::uint64_t seed, std::uint64_t w) { return (w + seed) * 0x9E3779B97F4A7C15ull ^ (w >> 7); }
  static void fill(std::uint64_t seed, std::uint64_t offset, std::span<std::byte> dst) {
    if (offset % 8 == 0 && dst.size() % 8 == 0) {  // whole words (what writers ask for): fast
      for (std::size_t i = 0; i < dst.size(); i += 8) {
        const std::uint64_t w = word(seed, (offset + i) / 8);
        std::memcpy(dst.data() + i, &w, 8);  // little-endian, as the byte loop below
      }
      return;
    }
    for (std::size_t i = 0; i < dst.size(); ++i) {
      const std::uint64_t at = offset + i;
      dst[i] = static_cast<std::byte>(word(seed, at / 8) >> (8 * (at % 8)));
    }
  }
  // Whether bytes [offset, offset + b.size()) hold the pattern.
  static bool matches(std::uint64_t seed, std::uint64_t offset, std::span<const std::byte> b) {
    std::vector<std::byte> want(b.size());
    fill(seed, offset, want);
    return std::equal(b.begin(), b.end(), want.begin());
  }

 private:
  std::uint64_t bytes_, seed_;
};

// This process's resident-set high-water mark (VmHWM), in bytes; reset_peak_rss()
// starts a new one from the current resident set (Linux's clear_refs "5").
inline std::uint64_t status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::string(field).size()));
  return 0;
}
inline std::uint64_t peak_rss_bytes() { return status_kib("VmHWM:") * 1024; }
inline std::uint64_t rss_bytes() { return status_kib("VmRSS:") * 1024; }
inline void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// A counter of /proc/self/io (all of this process's threads).
inline std::uint64_t proc_io(const std::string& field) {
  std::ifstream f("/proc/self/io");
  std::string key;
  std::uint64_t v = 0;
  while (f >> key >> v)
    if (key == field) return v;
  return 0;
}
// Bytes this process has read through read(2)/pread(2) so far (rchar).
inline std::uint64_t bytes_read() { return proc_io("rchar:"); }
// Read system calls (read, pread, readv, preadv, ...) made so far (syscr).
inline std::uint64_t read_calls() { return proc_io("syscr:"); }

// Reads boxes of leaf p (each dimension: every origin and extent, or in a long one
// those at its ends and middle) through
// Index::read_box and compares it with the same box cut from the whole leaf; returns
// "" or the first box that differs, and counts the boxes in `boxes`.
inline std::string boxes_agree(const ckpt::Index& index, const ckpt::Path& p, std::size_t& boxes) {
  const ckpt::IndexEntry* e = index.find(p);
  if (!e) return "no leaf " + p.str();
  std::vector<std::byte> whole(e->length);
  index.read(*e, whole);
  const std::size_t es = ckpt::dtype_size(e->type), rank = e->shape.size();
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> choices(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    // cut points: all of them in a short dimension, else the ends, the middle and their neighbours
    const std::int64_t s = e->shape[k];
    std::vector<std::int64_t> cuts;
    if (s <= 12) {
      for (std::int64_t c = 0; c <= s; ++c) cuts.push_back(c);
    } else {
      cuts = {0, 1, 2, s / 2 - 1, s / 2, s / 2 + 1, s - 2, s - 1, s};
    }
    for (std::size_t a = 0; a < cuts.size(); ++a)
      for (std::size_t b = a + 1; b < cuts.size(); ++b) choices[k].push_back({cuts[a], cuts[b] - cuts[a]});
  }
  std::vector<std::size_t> pick(rank, 0);
  for (;;) {
    ckpt::Shape origin(rank), shape(rank);
    for (std::size_t k = 0; k < rank; ++k) std::tie(origin[k], shape[k]) = choices[k][pick[k]];
    std::vector<std::byte> want(static_cast<std::size_t>(ckpt::element_count(shape)) * es), got(want.size());
    // the box cut from the whole: element by element, row-major on both sides
    std::vector<std::int64_t> at(rank, 0);
    for (std::size_t i = 0; i < want.size() / es; ++i) {
      std::size_t src = 0;
      for (std::size_t k = 0; k < rank; ++k) src = src * static_cast<std::size_t>(e->shape[k]) + static_cast<std::size_t>(origin[k] + at[k]);
      std::memcpy(want.data() + i * es, whole.data() + src * es, es);
      for (std::size_t k = rank; k-- > 0;) {
        if (++at[k] < shape[k]) break;
        at[k] = 0;
      }
    }
    index.read_box(*e, origin, shape, got);
    ++boxes;
    if (got != want) return "box at " + ckpt::shape_str(origin) + " of shape " + ckpt::shape_str(shape) + " differs";
    std::size_t k = rank;
    while (k-- > 0) {
      if (++pick[k] < choices[k].size()) break;
      pick[k] = 0;
    }
    if (k == static_cast<std::size_t>(-1)) return "";
  }
}

}  // namespace test

// Sanitizers' shadow memory and quarantines make resident-set and address-space figures
// meaningless: tests that measure them run their cases without those checks.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CKPT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CKPT_TEST_SANITIZED 1
#endif
#endif
