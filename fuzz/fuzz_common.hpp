// fuzz/fuzz_common.hpp — what the libFuzzer targets and the seed generator share.
//
// All targets live in one binary (fuzz/fuzz_readers.cpp: one translation unit, so CI
// compiles the readers once, not once per target); the name it is run under
// (fuzz_<target>, a link CMake makes) or CKPT_FUZZ_TARGET picks the target.
//
// Each target writes its input into a scratch directory as the file(s) of one reader
// and opens and reads the checkpoint through the public API. Any exception other than
// a ckpt::Error is a finding (abort, so that libFuzzer saves the input), as is every
// crash, leak, hang or sanitizer report. The fixed parts a target needs beside its
// input (data files, zarr arrays) are written once per process by the same code the
// seed generator uses, so that seeds and fixed parts match.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/all.hpp>

namespace fuzz {

namespace fs = std::filesystem;

// --- the targets, by name ------------------------------------------------------------

using TargetFn = int (*)(const std::uint8_t* data, std::size_t size);
inline std::map<std::string, TargetFn>& registry() {
  static std::map<std::string, TargetFn> t;
  return t;
}
// `inline const Register registered{"name", &run};` in a target's header adds it.
struct Register {
  Register(const char* name, TargetFn fn) { registry()[name] = fn; }
};

// Readers allocate what a checkpoint declares once it is plausible; leaves larger than
// this are opened but not read (ASan would report the allocation, not a bug).
inline constexpr std::uint64_t max_read_bytes = std::uint64_t{64} << 20;

// A fresh directory for this process, in memory when /dev/shm exists; removed at exit.
inline const fs::path& scratch() {
  static const fs::path dir = [] {
    std::error_code ec;
    fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("ckpt-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(d, ec);
    fs::create_directories(d);
    std::atexit([] {
      std::error_code e;
      fs::remove_all(scratch(), e);
    });
    return d;
  }();
  return dir;
}

inline void write_file(const fs::path& p, const void* data, std::size_t size) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
}
inline void write_file(const fs::path& p, std::string_view s) { write_file(p, s.data(), s.size()); }

// An input made of two files: the bytes before the first NUL, and those after it (no NUL:
// all of it is the first file and the second is empty).
struct TwoFiles {
  std::string_view first, second;
};
inline TwoFiles split_at_nul(const std::uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

inline std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Reads every leaf (checksums verified, then not); a leaf's failure is expected, and
// the rest are still read.
inline void read_all(const ckpt::Index& index) {
  for (const auto& e : index.entries()) {
    if (e.length > max_read_bytes) continue;
    std::vector<std::byte> b(static_cast<std::size_t>(e.length));
    for (const bool verify : {true, false}) {
      try {
        index.read(e, b, verify);
      } catch (const ckpt::Error&) {
      }
    }
  }
}

// Runs f; a ckpt::Error is the expected way to fail, anything else is a finding.
template <class F>
void expect_only_ckpt_errors(F&& f) {
  try {
    f();
  } catch (const ckpt::Error& e) {
    const std::string w = e.what();
    if (w.find('\0') != std::string::npos) {
      std::fprintf(stderr, "fuzz: a message holds NUL\n");
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception that is not a ckpt::Error escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: a non-std exception escaped\n");
    std::abort();
  }
}

// Opens path with the given format and reads everything, also as a Tree.
template <class Format>
void open_and_read(const fs::path& path) {
  expect_only_ckpt_errors([&] {
    const auto index = Format::open(path);
    read_all(*index);
  });
}

// A checkpoint whose files a target overwrites one at a time: the input's first byte
// picks the file (modulo their count), the rest of it is the file's new content; the
// file is put back after the run, so every input starts from the same checkpoint.
class FileSet {
 public:
  explicit FileSet(fs::path dir) : dir_(std::move(dir)) {
    for (fs::recursive_directory_iterator it(dir_), end; it != end; ++it)
      if (it->is_regular_file()) files_.push_back(it->path());
    std::sort(files_.begin(), files_.end());
    for (const auto& f : files_) originals_.push_back(read_text(f));
  }
  const fs::path& dir() const { return dir_; }
  std::size_t size() const { return files_.size(); }
  const std::string& original(std::size_t i) const { return originals_[i]; }

  // Writes the input over its file, runs f, restores the file.
  template <class F>
  void with_input(const std::uint8_t* data, std::size_t size, F&& f) const {
    if (size == 0 || files_.empty()) return;
    const std::size_t i = data[0] % files_.size();
    write_file(files_[i], data + 1, size - 1);
    f();
    write_file(files_[i], originals_[i]);
  }

 private:
  fs::path dir_;
  std::vector<fs::path> files_;
  std::vector<std::string> originals_;
};

// Copies a directory tree (a fixture) into the scratch directory.
inline fs::path copy_to_scratch(const fs::path& from, const std::string& name) {
  const fs::path to = scratch() / name;
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

#ifndef CKPT_FIXTURES_DIR
#error "fuzz targets need CKPT_FIXTURES_DIR (tests/data), as fuzz/CMakeLists.txt defines it"
#endif
inline fs::path fixture(const std::string& rel) { return fs::path(CKPT_FIXTURES_DIR) / rel; }

// --- the states seeds and fixed parts are made of ----------------------------------

struct Inner {
  std::vector<std::int32_t> ids;
  std::string name;
};

struct Mixed {
  std::int64_t step = 0;
  double lr = 0;
  bool flag = false;
  std::vector<float> w;               // large enough for a data file / its own chunk
  std::vector<double> small;          // inline
  std::vector<std::uint8_t> bytes;
  std::vector<std::int16_t> i16;
  std::vector<std::uint64_t> u64;
  std::map<std::string, float> m;     // keys needing escapes
  Inner inner;
};

// Large leaves are zeros, so that a native manifest's checksums match the zero-filled
// data files the native target writes beside it.
inline Mixed mixed_state(int variant) {
  Mixed s;
  s.step = 1000 + variant;
  s.lr = 0.125 * variant;
  s.flag = variant % 2;
  s.w.assign(variant == 0 ? 4096 : 1500 + 100 * static_cast<std::size_t>(variant), 0.0f);
  s.small = {1.5, -2.25, 3.0};
  s.bytes = {1, 2, 3, 255};
  s.i16 = {-3, 7};
  s.u64 = {std::uint64_t{1} << 63};
  s.m["a.b"] = 1.0f;
  s.m[std::string("nul\0key", 7)] = 2.0f;
  s.m["\xc3\xbc"] = 3.0f;
  s.inner.ids = {4, 5, 6};
  s.inner.name = "inner";
  return s;
}

// What the zarr-backed formats (zarr, t5x, Orbax) hold: arrays of several dtypes and ranks.
struct Arrays {
  std::vector<float> a;
  std::vector<std::vector<double>> b;  // not a leaf: b.0, b.1
  std::vector<std::int32_t> c;
  std::int64_t step = 0;
  std::string name;
};

// The same without the string (zarr v2 has no strings).
struct Numeric {
  std::vector<float> a;
  std::vector<std::vector<double>> b;
  std::vector<std::int32_t> c;
  std::int64_t step = 0;
};

inline Arrays arrays_state() {
  Arrays s;
  s.a = {1, 2, 3, 4, 5, 6};
  s.b = {{1.5, 2.5}, {3.5}};
  s.c = {7, 8, 9};
  s.step = 42;
  s.name = "arrays";
  return s;
}

inline Numeric numeric_state() {
  const Arrays a = arrays_state();
  return {a.a, a.b, a.c, a.step};
}

}  // namespace fuzz
