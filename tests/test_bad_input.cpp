// tests/test_bad_input.cpp — hostile and broken input: flipped bytes, truncated,
// missing and empty files, garbage and hostile manifests (huge shapes, file names
// pointing outside the checkpoint, msgpack bombs), arbitrary map keys, and saves
// killed with SIGKILL. Each must give a ckpt::Error naming the checkpoint (and the
// leaf, when one is involved), never a crash, a hang or an allocation out of
// proportion to the files.
#include "support.hpp"

// The manifest format, to forge hostile ones. The single header (CKPT_USE_SINGLE_INCLUDE)
// holds these already and has no separate files.
#if __has_include(<ckpt/format/native/manifest.hpp>)
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/io/checksum.hpp>
#endif

// The library includes only the parts of msgpack-cxx it uses; these tests pack
// containers (std::vector, std::map) into hand-made manifests.
#include <msgpack.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

// RLIMIT_AS cannot bound a sanitizer's process: its shadow memory alone exceeds any
// useful limit. Those builds still run every case, without the address-space limit.
#ifdef CKPT_TEST_SANITIZED
#define CKPT_TEST_NO_RLIMIT_AS 1
#endif

namespace bad_input {

namespace fs = std::filesystem;
using Bytes = std::vector<char>;

struct Small {
  std::int64_t step = 0;
  std::vector<float> a;         // 12000 bytes: in data-0
  std::vector<double> b;        // 16000 bytes: in data-0, after a
  std::vector<std::int32_t> c;  // inline in the manifest
};

inline Small make_small() {
  Small s;
  s.step = 7;
  for (int i = 0; i < 3000; ++i) s.a.push_back(static_cast<float>(i) * 0.5f);
  for (int i = 0; i < 2000; ++i) s.b.push_back(static_cast<double>(i) * -0.25);
  s.c = {1, 2, 3};
  return s;
}

inline bool same(const Small& x, const Small& y) { return x.step == y.step && x.a == y.a && x.b == y.b && x.c == y.c; }

struct OneFloat {
  float x = 0;
};

inline fs::path save_small(const test::TempDir& t, const std::string& name = "ck") {
  const fs::path d = t / name;
  ckpt::save(d, make_small());
  return d;
}

// What a call threw, if it was an E.
struct Caught {
  bool thrown = false;
  std::string what, checkpoint, path;
};

template <class E, class F>
Caught catch_error(F&& f) {
  Caught c;
  try {
    f();
  } catch (const E& e) {
    c = {true, e.what(), e.checkpoint(), e.path()};
  } catch (const std::exception& e) {
    c.what = std::string("<wrong exception type> ") + e.what();
  }
  return c;
}

// expr throws exactly E (or a subclass), naming the checkpoint dir, the tree path leaf
// ("" when the error is about the whole checkpoint) and containing needle.
#define CHECK_CKPT_ERROR(E, expr, dir, leaf, needle)                          \
  do {                                                                        \
    const Caught c_ = catch_error<E>([&] { (void)(expr); });                  \
    INFO("message: " << c_.what);                                             \
    CHECK(c_.thrown);                                                         \
    CHECK(c_.checkpoint == (dir).string());                                   \
    CHECK(c_.what.find((dir).string()) != std::string::npos);                 \
    const std::string leaf_ = (leaf);                                         \
    if (!leaf_.empty()) {                                                     \
      CHECK(c_.path == leaf_);                                                \
      CHECK(c_.what.find((dir).string() + ": " + leaf_ + ": ") != std::string::npos); \
    }                                                                         \
    CHECK(c_.what.find(needle) != std::string::npos);                         \
  } while (0)

inline Bytes file_bytes(const fs::path& p) { return test::read_bytes(p); }

inline void flip_byte(const fs::path& p, std::size_t at, unsigned char mask = 0x01) {
  Bytes b = test::read_bytes(p);
  REQUIRE(at < b.size());
  b[at] = static_cast<char>(static_cast<unsigned char>(b[at]) ^ mask);
  test::write_bytes(p, b);
}

// Replaces the manifest and writes a commit marker that matches it, so that the
// manifest parser itself (not the checksum in front of it) sees the bytes.
inline void set_manifest(const fs::path& dir, const Bytes& manifest) {
  test::write_bytes(dir / "manifest", manifest);
  const std::string commit = ckpt::detail::native::encode_commit(
      {manifest.size(), ckpt::io::xxh3(std::as_bytes(std::span(manifest)))});
  test::write_bytes(dir / "commit", Bytes(commit.begin(), commit.end()));
}

// Re-encodes the checkpoint's manifest after f edits its entries.
template <class F>
void edit_entries(const fs::path& dir, F&& f) {
  const auto index = ckpt::open_index(dir);  // keeps the inline bytes alive while encoding
  ckpt::IndexEntries entries = index->entries();
  f(entries);
  set_manifest(dir, ckpt::detail::native::encode_manifest(index->info(), entries));
}

inline ckpt::IndexEntry& entry(ckpt::IndexEntries& es, const std::string& dotted) {
  for (auto& e : es)
    if (e.path.str() == dotted) return e;
  FAIL("no entry " << dotted);
  return es.front();
}

// --- hand-made msgpack ---------------------------------------------------------

using Pk = msgpack::packer<msgpack::sbuffer>;

inline void pstr(Pk& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

inline Bytes bytes_of(const msgpack::sbuffer& b) { return Bytes(b.data(), b.data() + b.size()); }

// A valid manifest with one inline float32 scalar leaf "x" = 1.5 (for OneFloat). The
// value of the key named `key` (top level or leaf level: their names differ) is packed
// by `value` instead, or left out when value is empty.
inline Bytes manifest_with(std::string_view key = "", const std::function<void(Pk&)>& value = nullptr,
                           bool replace = true) {
  const float x = 1.5f;
  const auto x_bytes = std::as_bytes(std::span(&x, 1));
  msgpack::sbuffer buf;
  Pk pk(buf);
  struct Kv {
    std::string_view k;
    std::function<void(Pk&)> v;
  };
  auto pack_map = [&](const std::vector<Kv>& kvs) {
    std::uint32_t n = 0;
    for (const auto& kv : kvs) n += (kv.k != key || (replace && value)) ? 1 : 0;
    pk.pack_map(n);
    for (const auto& kv : kvs) {
      if (kv.k == key && !(replace && value)) continue;
      pstr(pk, kv.k);
      if (kv.k == key) value(pk); else kv.v(pk);
    }
  };
  const std::vector<Kv> leaf = {
      {"path", [](Pk& p) { p.pack_array(1); pstr(p, "x"); }},
      {"dtype", [](Pk& p) { pstr(p, "float32"); }},
      {"shape", [](Pk& p) { p.pack_array(0); }},
      {"file", [](Pk& p) { p.pack_nil(); }},
      {"offset", [](Pk& p) { p.pack(std::uint64_t{0}); }},
      {"length", [](Pk& p) { p.pack(std::uint64_t{4}); }},
      {"xxh3", [&](Pk& p) { p.pack(ckpt::io::xxh3(x_bytes)); }},
      {"inline", [&](Pk& p) { p.pack_bin(4); p.pack_bin_body(reinterpret_cast<const char*>(x_bytes.data()), 4); }},
  };
  const std::vector<Kv> top = {
      {"format", [](Pk& p) { pstr(p, "ckpt-native"); }},
      {"format_version", [](Pk& p) { p.pack(std::uint64_t{1}); }},
      {"library_version", [](Pk& p) { pstr(p, "0"); }},
      {"type", [](Pk& p) { pstr(p, "OneFloat"); }},
      {"fingerprint", [](Pk& p) { p.pack(std::uint64_t{0}); }},
      {"schema", [](Pk& p) { p.pack_array(1); p.pack_array(3); pstr(p, "x"); pstr(p, "float32"); p.pack(0); }},
      {"leaves", [&](Pk& p) { p.pack_array(1); pack_map(leaf); }},
  };
  pack_map(top);
  return bytes_of(buf);
}

// --- running something in a child process ------------------------------------

inline std::uint64_t address_space_now() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t pages = 0;
  f >> pages;
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Runs f in a forked child (the test process runs no threads here) and returns its exit
// code, or minus the signal that ended it. alarm() turns a hang into SIGALRM; with
// extra_address_space, the child may map at most that much more memory than it has,
// so an allocation out of proportion to the files fails instead of succeeding lazily.
inline int run_in_child(const std::function<int()>& f, std::uint64_t extra_address_space = 0,
                        unsigned timeout_s = 20) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(timeout_s);
#ifndef CKPT_TEST_NO_RLIMIT_AS
    if (extra_address_space) {
      const rlim_t lim = address_space_now() + extra_address_space;
      const rlimit rl{lim, lim};
      if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(90);
    }
#else
    (void)extra_address_space;
#endif
    int rc = 91;
    try {
      rc = f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: uncaught %s\n", e.what());
    } catch (...) {
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// In a child: 0 when f throws an E whose message names dir and is not a failed
// allocation turned into an error, 1 otherwise (printing why).
template <class E, class F>
int child_expects(F&& f, const fs::path& dir) {
  const Caught c = catch_error<E>(f);
  if (c.thrown && c.what.find(dir.string()) != std::string::npos && c.what.find("alloc") == std::string::npos)
    return 0;
  std::fprintf(stderr, "child: %s\n", c.thrown ? c.what.c_str() : ("not thrown: " + c.what).c_str());
  return 1;
}

}  // namespace bad_input

namespace bad_input {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart
using ckpt::CorruptCheckpointError;

TEST_CASE("bad input: a crafted manifest is valid before it is altered") {
  // Every "hostile manifest" case below changes one thing in this one.
  test::TempDir t;
  const fs::path dir = t / "ck";
  fs::create_directories(dir);
  set_manifest(dir, manifest_with());
  CHECK(ckpt::restore<OneFloat>(dir).x == 1.5f);
}

TEST_CASE("bad input: a missing checkpoint, manifest, commit marker or data file") {
  test::TempDir t;
  SUBCASE("no directory") {
    const fs::path dir = t / "nothing";
    CHECK_CKPT_ERROR(ckpt::Error, ckpt::restore<Small>(dir), dir, "", "nothing exists at this path");
    CHECK_CKPT_ERROR(ckpt::Error, ckpt::metadata(dir), dir, "", "nothing exists at this path");
  }
  SUBCASE("a file that is no checkpoint") {  // a file could be Flax msgpack: detection says it is not
    const fs::path dir = t / "file";
    test::write_bytes(dir, Bytes{'x'});
    CHECK_CKPT_ERROR(ckpt::Error, ckpt::restore<Small>(dir), dir, "", "not a checkpoint in any format");
  }
  SUBCASE("an empty directory") {
    const fs::path dir = t / "empty";
    fs::create_directories(dir);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "no commit marker");
  }
  SUBCASE("no commit marker") {
    const fs::path dir = save_small(t);
    fs::remove(dir / "commit");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "no commit marker");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, "", "no commit marker");
  }
  SUBCASE("the commit marker is a directory") {
    const fs::path dir = save_small(t);
    fs::remove(dir / "commit");
    fs::create_directory(dir / "commit");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "no commit marker");
  }
  SUBCASE("no manifest") {
    const fs::path dir = save_small(t);
    fs::remove(dir / "manifest");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "manifest");
  }
  SUBCASE("no data file") {
    const fs::path dir = save_small(t);
    fs::remove(dir / "data-0");
    // The first leaf stored in data-0 is named.
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "data-0");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, "a", "missing");
  }
  SUBCASE("a data file that is a directory") {
    const fs::path dir = save_small(t);
    fs::remove(dir / "data-0");
    fs::create_directory(dir / "data-0");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "data-0");
  }
}

TEST_CASE("bad input: empty files") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  SUBCASE("empty commit marker") {
    test::write_bytes(dir / "commit", {});
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "commit marker is malformed");
  }
  SUBCASE("empty manifest, commit marker unchanged") {
    test::write_bytes(dir / "manifest", {});
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "truncated");
  }
  SUBCASE("empty manifest with a commit marker that matches it") {
    set_manifest(dir, {});
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "msgpack");
  }
  SUBCASE("empty data file") {
    test::write_bytes(dir / "data-0", {});
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "outside data-0");
  }
}

TEST_CASE("bad input: a flipped byte in a data file names the leaf") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  const auto index = ckpt::open_index(dir);
  for (const auto& e : index->entries()) {
    if (e.file.empty()) continue;
    CAPTURE(e.path.str());
    for (std::uint64_t at : {e.offset, e.offset + e.length / 2, e.offset + e.length - 1}) {
      flip_byte(dir / e.file, at);
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, e.path.str(), "checksum mismatch");
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore_tree(dir), dir, e.path.str(), "checksum mismatch");
      // metadata reads no data; reading the leaf through it checks the bytes.
      const ckpt::Tree md = ckpt::metadata(dir);
      CHECK_CKPT_ERROR(CorruptCheckpointError, md.leaf(e.path).bytes(), dir, e.path.str(), "checksum mismatch");
      flip_byte(dir / e.file, at);  // back
      CHECK(same(ckpt::restore<Small>(dir), make_small()));
    }
  }
}

TEST_CASE("bad input: a flipped byte anywhere in the manifest is caught before parsing") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  const Bytes original = file_bytes(dir / "manifest");
  REQUIRE(!original.empty());
  for (std::size_t at = 0; at < original.size(); at += 3) {  // every third byte: the test stays fast
    CAPTURE(at);
    for (unsigned char mask : {at % 2 ? 0x01 : 0x80}) {
      Bytes m = original;
      m[at] = static_cast<char>(static_cast<unsigned char>(m[at]) ^ mask);
      test::write_bytes(dir / "manifest", m);
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, "", "manifest checksum mismatch");
    }
  }
}

TEST_CASE("bad input: a flipped byte in the commit marker gives an error or the intact checkpoint") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  const Bytes original = file_bytes(dir / "commit");
  int errors = 0;
  for (std::size_t at = 0; at < original.size(); ++at) {
    CAPTURE(at);
    Bytes m = original;
    m[at] = static_cast<char>(static_cast<unsigned char>(m[at]) ^ 0x01);
    test::write_bytes(dir / "commit", m);
    // Flipping a separator can leave every number intact: then the manifest is still
    // the one the writer wrote, and restoring it is right.
    Small r;
    const Caught c = catch_error<CorruptCheckpointError>([&] { r = ckpt::restore<Small>(dir); });
    if (!c.thrown) CHECK(same(r, make_small()));
    if (c.thrown) {
      ++errors;
      CHECK(c.checkpoint == dir.string());
      CHECK(c.what.find(dir.string()) != std::string::npos);
    } else {
      CHECK(c.what.empty());  // nor any other exception
    }
  }
  CHECK(errors > static_cast<int>(original.size()) - 4);
}

TEST_CASE("bad input: truncated files") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  SUBCASE("data file") {
    const auto size = fs::file_size(dir / "data-0");
    const auto index = ckpt::open_index(dir);
    const ckpt::IndexEntry* b = index->find(ckpt::Path::parse("b"));
    REQUIRE(b);
    REQUIRE(b->offset > 0);
    for (std::uint64_t keep : {std::uint64_t{1}, b->offset / 2, b->offset + 1, b->offset + b->length - 1}) {
      CAPTURE(keep);
      REQUIRE(keep < size);
      fs::resize_file(dir / "data-0", keep);
      const Caught c = catch_error<CorruptCheckpointError>([&] { (void)ckpt::restore<Small>(dir); });
      INFO(c.what);
      CHECK(c.thrown);
      CHECK(c.checkpoint == dir.string());
      CHECK((c.path == "a" || c.path == "b"));
      CHECK(c.what.find(dir.string() + ": " + c.path + ": ") != std::string::npos);
      CHECK(c.what.find("truncated") != std::string::npos);
      // Refused at open, before any leaf is read.
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, c.path, "outside data-0");
    }
  }
  SUBCASE("manifest") {
    const Bytes m = file_bytes(dir / "manifest");
    for (std::size_t keep : {std::size_t{0}, std::size_t{1}, m.size() / 2, m.size() - 1}) {
      CAPTURE(keep);
      test::write_bytes(dir / "manifest", Bytes(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(keep)));
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "truncated");
    }
    // Longer than recorded: refused without reading it whole.
    Bytes longer = m;
    longer.resize(m.size() + 100000, 'x');
    test::write_bytes(dir / "manifest", longer);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "larger than");
  }
  SUBCASE("commit marker") {
    const Bytes m = file_bytes(dir / "commit");
    for (std::size_t keep : {std::size_t{1}, std::size_t{18}, std::size_t{19}, std::size_t{30}, m.size() - 5}) {
      CAPTURE(keep);
      test::write_bytes(dir / "commit", Bytes(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(keep)));
      const Caught c = catch_error<CorruptCheckpointError>([&] { (void)ckpt::restore<Small>(dir); });
      INFO(c.what);
      CHECK(c.thrown);
      CHECK(c.checkpoint == dir.string());
      CHECK(c.what.find(dir.string()) != std::string::npos);
    }
  }
}

TEST_CASE("bad input: garbage commit markers") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  auto with_commit = [&](const std::string& text) { test::write_bytes(dir / "commit", Bytes(text.begin(), text.end())); };
  const std::string head = "ckpt-native commit\n";
  SUBCASE("random bytes") {
    std::mt19937 rng(7);
    for (int i = 0; i < 50; ++i) {
      std::string s(static_cast<std::size_t>(rng() % 200), '\0');
      for (auto& ch : s) ch = static_cast<char>(rng());
      if (i % 2) s = head + s;
      with_commit(s);
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "");
    }
  }
  SUBCASE("numbers out of range") {
    with_commit(head + "manifest-bytes 99999999999999999999999999\nmanifest-xxh3 0\n");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "malformed");
    with_commit(head + "manifest-bytes 8589934592\nmanifest-xxh3 0\n");  // 8 GiB
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "implausible");
    with_commit(head + "manifest-bytes -1\nmanifest-xxh3 0\n");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "malformed");
    with_commit(head + "manifest-bytes 100\nmanifest-xxh3 zz\n");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "malformed");
  }
  SUBCASE("a huge commit marker") {
    const std::string good(file_bytes(dir / "commit").data(), file_bytes(dir / "commit").size());
    with_commit(good + std::string(1 << 20, ' '));
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "", "commit");
  }
}

TEST_CASE("bad input: hostile data file names in the manifest") {
  test::TempDir t;
  // A file in the checkpoint's parent that a hostile name could reach.
  test::write_bytes(t / "outside", Bytes(1 << 16, 'o'));
  const fs::path dir = save_small(t);
  const Bytes original = file_bytes(dir / "manifest");
  const std::vector<std::string> names = {
      "../outside", "../../etc/passwd", "/etc/passwd", "data-0/../data-0", "data-0/../../outside",
      "./data-0",   "data-",            "data-0/",     "manifest",         "commit",
      "data-x",     "data-0 ",          std::string("data-0\0x", 8), "DATA-0", "data-1234567890123",
      "..",         ".",                "/",           "\\data-0"};
  for (const auto& name : names) {
    CAPTURE(name);
    edit_entries(dir, [&](auto& es) { entry(es, "a").file = name; });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "is not one ckpt writes");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, "a", "data file name");
    set_manifest(dir, original);  // edit_entries needs a readable checkpoint
  }
  // data-1 is a name ckpt writes, but not in this checkpoint.
  edit_entries(dir, [&](auto& es) { entry(es, "b").file = "data-1"; });
  CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "b", "data-1 is missing");
}

TEST_CASE("bad input: huge shapes, lengths and offsets over small files") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  const Bytes original = file_bytes(dir / "manifest");
  const std::int64_t huge = std::int64_t{1} << 40;  // 4 TiB of float32
  auto restore_in_bounded_child = [&] {
    // 64 MiB more than the child has: a 4 TiB (or even a 1 GiB) buffer cannot be made.
    CHECK(run_in_child([&] { return child_expects<CorruptCheckpointError>([&] { (void)ckpt::restore<Small>(dir); }, dir); },
                       std::uint64_t{64} << 20) == 0);
  };
  SUBCASE("a shape whose length matches, over a small data file") {
    edit_entries(dir, [&](auto& es) {
      entry(es, "a").shape = {huge};
      entry(es, "a").length = static_cast<std::uint64_t>(huge) * 4;
    });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "outside data-0");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, "a", "outside data-0");
    restore_in_bounded_child();
  }
  SUBCASE("a shape that does not match the length") {
    edit_entries(dir, [&](auto& es) { entry(es, "a").shape = {huge}; });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "bytes are recorded");
    restore_in_bounded_child();
  }
  SUBCASE("a shape whose element count overflows") {
    edit_entries(dir, [&](auto& es) {
      entry(es, "a").shape = {std::int64_t{1} << 62, 4};
      entry(es, "a").length = 0;
    });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "invalid");
    set_manifest(dir, original);
    edit_entries(dir, [&](auto& es) {
      entry(es, "a").shape = {std::int64_t{1} << 32, std::int64_t{1} << 32, std::int64_t{1} << 32};
      entry(es, "a").length = 16;
    });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "invalid");
  }
  SUBCASE("a negative dimension") {
    edit_entries(dir, [&](auto& es) { entry(es, "a").shape = {-1}; });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "a", "invalid");
  }
  SUBCASE("a huge inline leaf") {
    edit_entries(dir, [&](auto& es) {
      entry(es, "c").shape = {huge};
      entry(es, "c").length = static_cast<std::uint64_t>(huge) * 4;
    });
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "c", "inline bytes");
    restore_in_bounded_child();
  }
  SUBCASE("offsets past the end, and offset + length wrapping around") {
    for (std::uint64_t off : {std::uint64_t{1} << 20, ~std::uint64_t{0} - 4095, ~std::uint64_t{0}}) {
      CAPTURE(off);
      edit_entries(dir, [&](auto& es) { entry(es, "b").offset = off; });
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(dir), dir, "b", "outside data-0");
      set_manifest(dir, original);
    }
  }
}

TEST_CASE("bad input: hostile manifests with wrong types and values") {
  test::TempDir t;
  const fs::path dir = t / "ck";
  fs::create_directories(dir);
  struct Case {
    std::string key;
    std::function<void(Pk&)> value;  // empty: the key is left out
    std::string needle;
    bool names_leaf;
  };
  const auto str = [](std::string s) { return [s](Pk& p) { pstr(p, s); }; };
  const auto u64 = [](std::uint64_t v) { return [v](Pk& p) { p.pack(v); }; };
  const auto i64 = [](std::int64_t v) { return [v](Pk& p) { p.pack(v); }; };
  const auto nil = [](Pk& p) { p.pack_nil(); };
  const std::vector<Case> cases = {
      {"format", u64(5), "format", false},
      {"format", str("orbax"), "orbax", false},
      {"format", nullptr, "missing key \"format\"", false},
      {"format_version", str("1"), "format_version", false},
      {"format_version", u64(99), "newer", false},
      {"format_version", i64(-1), "format_version", false},
      {"library_version", nil, "library_version", false},
      {"type", u64(1), "type", false},
      {"fingerprint", str("x"), "fingerprint", false},
      {"fingerprint", [](Pk& p) { p.pack(1.5); }, "fingerprint", false},
      {"schema", [](Pk& p) { p.pack_map(0); }, "schema", false},
      {"schema", [](Pk& p) { p.pack_array(1); p.pack_array(2); pstr(p, "x"); pstr(p, "float32"); }, "3 items", false},
      {"schema", [](Pk& p) { p.pack_array(1); p.pack(1); }, "schema entry", false},
      {"leaves", nil, "leaves", false},
      {"leaves", [](Pk& p) { p.pack_map(0); }, "leaves", false},
      {"leaves", [](Pk& p) { p.pack_array(1); p.pack(1); }, "expected a map", false},
      {"leaves", nullptr, "missing key \"leaves\"", false},
      {"path", str("x"), "path", false},
      {"path", [](Pk& p) { p.pack_array(1); p.pack(1); }, "path segment", false},
      {"path", nullptr, "missing key \"path\"", false},
      {"dtype", u64(3), "dtype", true},
      {"dtype", str("float128"), "unknown dtype", true},
      {"dtype", nullptr, "missing key \"dtype\"", true},
      {"shape", str("[]"), "shape", true},
      {"shape", [](Pk& p) { p.pack_array(1); pstr(p, "1"); }, "shape", true},
      {"shape", [](Pk& p) { p.pack_array(1); p.pack(~std::uint64_t{0}); }, "shape", true},
      {"shape", [](Pk& p) { p.pack_array(1); p.pack(std::int64_t{-5}); }, "invalid", true},
      {"shape", [](Pk& p) { p.pack_array(1); p.pack(std::int64_t{1} << 40); }, "bytes are recorded", true},
      {"offset", i64(-1), "offset", true},
      {"length", str("4"), "length", true},
      {"length", u64(5), "bytes are recorded", true},
      {"length", u64(~std::uint64_t{0}), "bytes are recorded", true},
      {"xxh3", nil, "xxh3", true},
      {"file", u64(0), "file", true},
      {"file", str("../../etc/passwd"), "not one ckpt writes", true},
      {"file", str("/etc/passwd"), "not one ckpt writes", true},
      {"file", str(""), "not one ckpt writes", true},
      {"file", nullptr, "missing key \"file\"", true},
      {"inline", str("abcd"), "inline bytes", true},
      {"inline", [](Pk& p) { p.pack_bin(3); p.pack_bin_body("abc", 3); }, "inline bytes", true},
      {"inline", nullptr, "missing key \"inline\"", true},
  };
  SUBCASE("one key at a time") {
    for (const auto& c : cases) {
      CAPTURE(c.key);
      CAPTURE(c.needle);
      set_manifest(dir, manifest_with(c.key, c.value));
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, c.names_leaf ? "x" : "", c.needle);
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, c.names_leaf ? "x" : "", c.needle);
    }
  }
  SUBCASE("the root is not a map") {
    for (const auto& pack : std::vector<std::function<void(Pk&)>>{
             nil, u64(1), str("manifest"), [](Pk& p) { p.pack_array(0); }}) {
      msgpack::sbuffer b;
      Pk pk(b);
      pack(pk);
      set_manifest(dir, bytes_of(b));
      CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, "", "expected a map");
    }
  }
  SUBCASE("a leaf twice, and a leaf that is also an inner node") {
    const auto two_leaves = [&](std::vector<std::string> second) {
      const Bytes one = manifest_with();
      msgpack::object_handle oh = msgpack::unpack(one.data(), one.size());
      // Repack with the leaf list doubled, the second copy under another path.
      msgpack::sbuffer b;
      Pk pk(b);
      const auto& root = oh.get().via.map;
      pk.pack_map(root.size);
      for (std::uint32_t i = 0; i < root.size; ++i) {
        pk.pack(root.ptr[i].key);
        if (root.ptr[i].key.as<std::string>() != "leaves") { pk.pack(root.ptr[i].val); continue; }
        const msgpack::object& leaf = root.ptr[i].val.via.array.ptr[0];
        pk.pack_array(2);
        pk.pack(leaf);
        pk.pack_map(leaf.via.map.size);
        for (std::uint32_t j = 0; j < leaf.via.map.size; ++j) {
          pk.pack(leaf.via.map.ptr[j].key);
          if (leaf.via.map.ptr[j].key.as<std::string>() == "path") pk.pack(second);
          else pk.pack(leaf.via.map.ptr[j].val);
        }
      }
      return bytes_of(b);
    };
    set_manifest(dir, two_leaves({"x"}));
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, "x", "twice");
    set_manifest(dir, two_leaves({"x", "y"}));
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, "x", "both a leaf and an inner node");
  }
  SUBCASE("trailing bytes after the manifest") {
    Bytes m = manifest_with();
    m.push_back('\xc0');
    set_manifest(dir, m);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, "", "msgpack");
  }
  SUBCASE("more leaves claimed than the manifest's bytes could hold") {
    // No first pass checks the counts (the decoder does, as it reads): a count of
    // leaves, or of a leaf's path segments, that the bytes left cannot hold is refused
    // before anything is allocated for it.
    Bytes m = manifest_with();
    const std::string key = "\xa6leaves\x91";  // "leaves", then an array of one
    const auto at = std::search(m.begin(), m.end(), key.begin(), key.end());
    REQUIRE(at != m.end());
    const auto header = at + 7;
    Bytes huge = m;
    huge.erase(huge.begin() + (header - m.begin()));
    const char many[] = {'\xdd', '\x00', '\x10', '\x00', '\x00'};  // 2^20 leaves
    huge.insert(huge.begin() + (header - m.begin()), std::begin(many), std::end(many));
    set_manifest(dir, huge);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, "", "more items than the bytes left");
    const std::string path = "\xa4path\x91";  // the leaf's path: an array of one segment
    Bytes segments = m;
    const auto p = std::search(segments.begin(), segments.end(), path.begin(), path.end());
    REQUIRE(p != segments.end());
    const auto seg_header = p + 5;
    const auto seg_at = seg_header - segments.begin();
    segments.erase(segments.begin() + seg_at);
    const char lots[] = {'\xdd', '\x7f', '\xff', '\xff', '\xff'};  // 2^31 - 1 segments
    segments.insert(segments.begin() + seg_at, std::begin(lots), std::end(lots));
    set_manifest(dir, segments);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<OneFloat>(dir), dir, "", "more items than the bytes left");
  }
}

// The manifest is read key by key from its bytes (detail::mp::MapFields), not through
// msgpack-cxx's object tree; what a reader of the tree accepted, it accepts: keys in
// any order, keys it does not know (with nested values) and keys that are not strings
// stepped over, the first of two equal keys taken.
TEST_CASE("native manifest: keys in any order, unknown and repeated keys") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  const Bytes original = file_bytes(dir / "manifest");
  msgpack::object_handle oh = msgpack::unpack(original.data(), original.size());
  const auto reversed = [](Pk& pk, const msgpack::object& map, auto&& value) {
    const auto& m = map.via.map;
    pk.pack_map(m.size + 3);
    pk.pack(7);  // a key that is not a string
    pk.pack_array(2);
    pk.pack(1);
    pk.pack_nil();
    pstr(pk, "from_a_later_version");
    pk.pack_map(1);
    pstr(pk, "nested");
    pk.pack_array(1);
    pk.pack(1.5);
    for (std::uint32_t i = m.size; i-- > 0;) {
      pk.pack(m.ptr[i].key);
      value(pk, m.ptr[i]);
    }
    pstr(pk, "format");  // a second "format": the first one counts
    pstr(pk, "not-ckpt");
  };
  msgpack::sbuffer b;
  Pk pk(b);
  reversed(pk, oh.get(), [&](Pk& p, const msgpack::object_kv& kv) {
    if (kv.key.as<std::string>() != "leaves") return p.pack(kv.val), void();
    p.pack_array(kv.val.via.array.size);
    for (std::uint32_t i = 0; i < kv.val.via.array.size; ++i)
      reversed(p, kv.val.via.array.ptr[i], [](Pk& q, const msgpack::object_kv& leaf_kv) { q.pack(leaf_kv.val); });
  });
  const ckpt::IndexInfo before = ckpt::open_index(dir)->info();
  // The writer's layout is read by decode_leaf_as_written, any other by decode_leaf's
  // key lookups: both must make the same entries of the same leaves.
  const ckpt::IndexEntries as_written = ckpt::open_index(dir)->entries();
  set_manifest(dir, bytes_of(b));
  CHECK(same(ckpt::restore<Small>(dir), make_small()));
  {
    const auto index = ckpt::open_index(dir);
    REQUIRE(index->entries().size() == as_written.size());
    for (std::size_t i = 0; i < as_written.size(); ++i) {
      const ckpt::IndexEntry &x = as_written[i], &y = index->entries()[i];
      CAPTURE(x.path.str());
      CHECK(x.path == y.path);
      CHECK(x.type == y.type);
      CHECK(x.shape == y.shape);
      CHECK(x.file == y.file);
      CHECK(x.offset == y.offset);
      CHECK(x.length == y.length);
      CHECK(x.checksum == y.checksum);
      CHECK(x.codec == y.codec);
      CHECK(x.inline_bytes.size() == y.inline_bytes.size());
      CHECK(x.chunk_bytes == y.chunk_bytes);
      CHECK(x.chunk_xxh3.vec() == y.chunk_xxh3.vec());
    }
  }
  const ckpt::IndexInfo after = ckpt::open_index(dir)->info();
  CHECK(after.format == "ckpt-native");
  CHECK(after.type_name == before.type_name);
  CHECK(after.fingerprint == before.fingerprint);
  CHECK(after.schema == before.schema);
}

TEST_CASE("bad input: msgpack headers claiming more than the file holds") {
  test::TempDir t;
  const fs::path dir = t / "ck";
  fs::create_directories(dir);
  auto raw = [](std::initializer_list<unsigned char> b) {
    Bytes v;
    for (auto c : b) v.push_back(static_cast<char>(c));
    return v;
  };
  // Each refused in a child that may not map 256 MiB more than it has: a header is not
  // a promise, and nothing may be allocated on its word alone.
  const std::uint64_t limit = std::uint64_t{256} << 20;
  auto refused = [&](const Bytes& m) {
    set_manifest(dir, m);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(dir), dir, "", "msgpack");
    CHECK(run_in_child([&] { return child_expects<CorruptCheckpointError>([&] { (void)ckpt::metadata(dir); }, dir); },
                       limit) == 0);
  };
  SUBCASE("single headers") {
    refused(raw({0xdd, 0xff, 0xff, 0xff, 0xff}));              // array32 of 2^32-1 items
    refused(raw({0xdf, 0xff, 0xff, 0xff, 0xff}));              // map32 of 2^32-1 pairs
    refused(raw({0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b'}));    // str32 of 4 GiB
    refused(raw({0xc6, 0xff, 0xff, 0xff, 0xff, 0, 0}));        // bin32 of 4 GiB
    refused(raw({0xc9, 0xff, 0xff, 0xff, 0xff, 1, 0}));        // ext32 of 4 GiB
    refused(raw({0xdc, 0xff, 0xff}));                          // array16 of 65535 items, no items
    refused(raw({0x81, 0xa6, 'l', 'e', 'a', 'v', 'e', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff}));
    refused(raw({0xc1}));                                      // the one never-used byte
  }
  SUBCASE("nested headers, each within the file's size, together far beyond it") {
    // 60 nested arrays each claiming n items, the innermost holding them: ~1 MiB of
    // file whose headers ask for 60 * n * 24 bytes (~1.4 GiB) of msgpack objects.
    const std::uint32_t n = 1u << 20;
    Bytes m;
    auto header = [&](Bytes& b, unsigned char tag) {
      b.push_back(static_cast<char>(tag));
      for (int shift : {24, 16, 8, 0}) b.push_back(static_cast<char>((n >> shift) & 0xff));
    };
    for (int level = 0; level < 60; ++level) header(m, 0xdd);
    m.resize(m.size() + n, '\x00');
    refused(m);
    // The same with maps: 32 bytes per claimed pair.
    Bytes mm;
    for (int level = 0; level < 60; ++level) {
      header(mm, 0xdf);
      mm.push_back('\x00');  // the key of the first pair; its value is the next map
    }
    mm.resize(mm.size() + 2 * n, '\x00');
    refused(mm);
  }
  SUBCASE("deep nesting") {
    Bytes arrays(100000, '\x91');  // [[[[...]]]]
    arrays.push_back('\xc0');
    refused(arrays);
    Bytes maps;
    for (int i = 0; i < 50000; ++i) {
      maps.push_back('\x81');
      maps.push_back('\x00');
    }
    maps.push_back('\xc0');
    refused(maps);
  }
}

TEST_CASE("bad input: garbage and mutated manifests never crash") {
  test::TempDir t;
  const fs::path dir = save_small(t);
  const Bytes original = file_bytes(dir / "manifest");
  std::mt19937 rng(12345);
  int opened = 0;
  for (int i = 0; i < 400; ++i) {
    CAPTURE(i);
    Bytes m;
    if (i < 100) {  // random bytes
      m.resize(rng() % 512);
      for (auto& c : m) c = static_cast<char>(rng());
    } else {  // the real manifest with a few bytes changed, cut short or spliced
      m = original;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits; ++k) {
        const std::size_t at = rng() % m.size();
        switch (rng() % 4) {
          case 0: m[at] = static_cast<char>(rng()); break;
          case 1: m[at] = static_cast<char>(static_cast<unsigned char>(m[at]) ^ (1u << (rng() % 8))); break;
          case 2: m.resize(std::max<std::size_t>(at, 1)); break;
          default: m[at] = static_cast<char>(std::array<unsigned char, 6>{0xdd, 0xdf, 0xdb, 0xc6, 0xff, 0xcf}[rng() % 6]);
        }
      }
    }
    set_manifest(dir, m);
    // Any outcome but a ckpt::Error naming the checkpoint is a failure; success is
    // possible (a changed fingerprint), and then the data must still verify.
    const Caught c = catch_error<ckpt::Error>([&] {
      const ckpt::Tree tree = ckpt::restore_tree(dir);
      (void)tree;
      (void)ckpt::restore<Small>(dir);
      ++opened;
    });
    if (c.thrown) {
      CHECK(c.what.find(dir.string()) != std::string::npos);
    } else {
      INFO(c.what);
      CHECK(c.what.empty());
    }
  }
  MESSAGE("mutated manifests that still restored: " << opened);
}

TEST_CASE("bad input: a FIFO in place of a file does not hang") {
  test::TempDir t;
  for (const char* name : {"data-0", "manifest"}) {
    CAPTURE(name);
    const fs::path dir = save_small(t, std::string("ck-") + name);
    fs::remove(dir / name);
    REQUIRE(::mkfifo((dir / name).c_str(), 0600) == 0);
    // In a child with an alarm: a blocking open would otherwise hang the test run.
    CHECK(run_in_child([&] { return child_expects<CorruptCheckpointError>([&] { (void)ckpt::restore<Small>(dir); }, dir); },
                       0, 5) == 0);
  }
}

struct Keyed {
  std::map<std::string, float> m;
  std::map<std::string, std::vector<float>> big;  // large leaves under the same keys: data files
  std::map<std::string, std::map<std::string, std::int32_t>> nested;
};

TEST_CASE("bad input: map keys with '.', '/', '\\\\', NUL and more round-trip") {
  test::TempDir t;
  const std::vector<std::string> keys = {
      "a.b", "a/b", "a\\b", std::string("a\0b", 3), "", std::string(1, '\0'), ".", "..", "../x",
      "/etc/passwd", "\\", "\\0", "\\.", "a.b.c\\.d", "\xc3\xbc\xe2\x9c\x93 \xd1\x8e", "data-0", "manifest",
      "commit", ".tmp-x", std::string("\\\0.", 3), "x\n\ty", "1", "01"};
  Keyed k;
  float v = 0.5f;
  for (const auto& key : keys) {
    k.m[key] = v;
    k.big[key] = std::vector<float>(2000, v);  // 8000 bytes: over the inline threshold
    k.nested[key][key] = static_cast<std::int32_t>(v * 4);
    v += 1.0f;
  }
  const fs::path dir = t / "ck";
  ckpt::save(dir, k);

  const Keyed r = ckpt::restore<Keyed>(dir);
  CHECK(r.m == k.m);
  CHECK(r.big == k.big);
  CHECK(r.nested == k.nested);

  // The dotted forms escape the keys, and parse back into the same segments.
  const ckpt::Tree md = ckpt::metadata(dir);
  std::set<std::vector<std::string>> segments;
  for (const auto& p : md.paths()) segments.insert(ckpt::Path::parse(p).segments());
  for (const auto& key : keys) {
    CAPTURE(key);
    const std::string dotted = "m." + ckpt::Path::escape(key);
    CHECK(ckpt::Path::parse(dotted).segments() == std::vector<std::string>{"m", key});
    CHECK(md.contains(dotted));
    CHECK(segments.count({"m", key}) == 1);
    CHECK(segments.count({"big", key}) == 1);
    CHECK(segments.count({"nested", key, key}) == 1);
    CHECK(md.leaf(dotted).as<float>() == k.m.at(key));
    CHECK(md.leaf(ckpt::Path({"big", key})).as<std::vector<float>>() == k.big.at(key));
  }
  CHECK(md.size() == 3 * keys.size());

  // A subtree by its escaped dotted path.
  const auto big = ckpt::restore<std::map<std::string, std::vector<float>>>(dir, {.subtree = "big"});
  CHECK(big == k.big);
  const auto inner = ckpt::restore<std::map<std::string, std::int32_t>>(
      dir, {.subtree = "nested." + ckpt::Path::escape("a.b")});
  CHECK(inner == k.nested.at("a.b"));

  // No key reached the file system: the checkpoint holds the writer's names only,
  // and nothing appeared beside it.
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    CAPTURE(name);
    CHECK((name == "manifest" || name == "commit" || name.rfind("data-", 0) == 0));
    CHECK(f.is_regular_file());
  }
  std::vector<std::string> beside;
  for (const auto& f : fs::directory_iterator(t.path())) beside.push_back(f.path().filename().string());
  CHECK(beside == std::vector<std::string>{"ck"});

  // A dangling or unknown escape is an error, not a guess.
  CHECK_THROWS_CKPT(ckpt::Path::parse("m.a\\"), ckpt::Error, "path ends with a lone '\\'");
  CHECK_THROWS_CKPT(ckpt::Path::parse("m.a\\x"), ckpt::Error, "unknown escape '\\x' in path");
}

struct KillState {
  std::int64_t round = 0;
  std::vector<float> w1, w2, w3;
  std::vector<std::int64_t> w4;
};

inline void fill_round(KillState& s, std::int64_t round) {
  s.round = round;
  std::fill(s.w1.begin(), s.w1.end(), static_cast<float>(round));
  std::fill(s.w2.begin(), s.w2.end(), static_cast<float>(-round));
  std::fill(s.w3.begin(), s.w3.end(), static_cast<float>(round) + 0.5f);
  std::fill(s.w4.begin(), s.w4.end(), round);
}

// Whole and from one save: every leaf carries the same round.
inline bool is_whole_round(const KillState& s) {
  const auto r = s.round;
  auto all = [](const auto& v, auto x) { return std::all_of(v.begin(), v.end(), [&](auto e) { return e == x; }); };
  return r > 0 && s.w1.size() == (std::size_t{12} << 20) && s.w2.size() == s.w1.size() && s.w3.size() == s.w1.size() &&
         s.w4.size() == (std::size_t{6} << 20) && all(s.w1, static_cast<float>(r)) && all(s.w2, static_cast<float>(-r)) &&
         all(s.w3, static_cast<float>(r) + 0.5f) && all(s.w4, r);
}

TEST_CASE("bad input: a save killed at any moment leaves no checkpoint or a whole one") {
  test::TempDir t;
  // 4 leaves of 48 MiB: 192 MiB a save, so a kill lands mid-write, mid-fsync or mid-commit.
  KillState state;
  state.w1.resize(std::size_t{12} << 20);
  state.w2.resize(state.w1.size());
  state.w3.resize(state.w1.size());
  state.w4.resize(std::size_t{6} << 20);

  // A fresh seed per run on purpose (runs probe different moments); a failure prints it.
  const unsigned seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  // Delays spread over a few saves, jittered so that runs probe different moments.
  const std::vector<int> delays_ms = {0, 20, 90, 200, 350, 600, 900, 1400};
  int whole = 0, absent = 0;
  for (std::size_t it = 0; it < delays_ms.size(); ++it) {
    const fs::path root = t / ("run-" + std::to_string(it));
    fs::create_directories(root);
    const fs::path target = root / "target";
    const bool preexisting = it % 2 == 1;  // odd runs overwrite an existing checkpoint
    if (preexisting) {
      fill_round(state, 1000);
      ckpt::save(target, state);
    }
    const int delay = delays_ms[it] + static_cast<int>(rng() % 60);
    CAPTURE(it);
    CAPTURE(delay);

    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child saves round after round, overwriting target and adding fresh paths.
      try {
        for (std::int64_t round = 1;; ++round) {
          fill_round(state, round);
          ckpt::save(target, state, {.force = true, .data_files = round % 2 ? 1u : 2u});
          fill_round(state, round + 500);
          ckpt::save(root / ("fresh-" + std::to_string(round)), state);
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    CHECK(WIFSIGNALED(status));  // it was still saving, not dead of an error

    for (const auto& f : fs::directory_iterator(root)) {
      const std::string name = f.path().filename().string();
      CAPTURE(name);
      if (name.rfind(".tmp-", 0) == 0) continue;  // what a killed save may leave, and nothing else
      REQUIRE((name == "target" || name.rfind("fresh-", 0) == 0));
      KillState r;
      const Caught c = catch_error<ckpt::Error>([&] { r = ckpt::restore<KillState>(f.path()); });
      INFO(c.what);
      CHECK(!c.thrown);
      CHECK(c.what.empty());
      CHECK(is_whole_round(r));
      if (name == "target") {
        CHECK((r.round == 1000 || r.round < 500));
      } else {
        CHECK(r.round == std::stoll(name.substr(6)) + 500);
      }
      if (name == "target") ++whole;
    }
    if (!fs::exists(target)) {
      CHECK(!preexisting);  // an overwrite never leaves the path empty
      ++absent;
    }
    fs::remove_all(root);
  }
  MESSAGE("killed saves: target whole " << whole << " times, absent " << absent << " times");
}

// ---------------------------------------------------------------------------------
// Regressions of the reliability campaign (issue 13): each case crashed, escaped as a
// foreign exception, read outside the checkpoint, named the wrong directory or left
// garbage behind before its fix.

struct Arr {
  std::vector<float> a;
};

// Runs the ckpt tool; {exit code or -signal, stdout, stderr}.
struct CliRun {
  int rc = -1;
  std::string out, err;
};
inline CliRun run_cli(const std::string& args) {
  test::TempDir tmp;
  const std::string cmd = std::string(CKPT_CLI) + " " + args + " >" + (tmp / "out").string() + " 2>" +
                          (tmp / "err").string();
  const int st = std::system(cmd.c_str());
  auto slurp = [](const fs::path& p) {
    auto v = test::read_bytes(p);
    return std::string(v.begin(), v.end());
  };
  CliRun r;
  // system() runs sh, which reports a child killed by signal N as exit code 128 + N
  r.rc = WIFEXITED(st) ? (WEXITSTATUS(st) > 128 ? -(WEXITSTATUS(st) - 128) : WEXITSTATUS(st)) : -WTERMSIG(st);
  r.out = slurp(tmp / "out");
  r.err = slurp(tmp / "err");
  return r;
}
inline bool have_cli() { return fs::exists(CKPT_CLI); }

inline std::string text_of(const fs::path& p) {
  const auto v = test::read_bytes(p);
  return std::string(v.begin(), v.end());
}
inline void write_text(const fs::path& p, const std::string& s) { test::write_bytes(p, Bytes(s.begin(), s.end())); }

// `depth` nested JSON arrays: [[[...]]]
inline std::string deep_json_array(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Replaces the value of "key" in a JSON object file by raw JSON text.
inline void set_json_key(const fs::path& file, const std::string& key, const std::string& raw_value) {
  auto j = nlohmann::json::parse(text_of(file));
  j[key] = nullptr;
  std::string s = j.dump();
  const std::string needle = "\"" + key + "\":null";
  const auto at = s.find(needle);
  REQUIRE(at != std::string::npos);
  s.replace(at, needle.size(), "\"" + key + "\":" + raw_value);
  write_text(file, s);
}

// Replaces the first occurrence of `from` by `to` (same length) in a binary file.
inline void patch_bytes(const fs::path& file, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  Bytes b = test::read_bytes(file);
  const auto it = std::search(b.begin(), b.end(), from.begin(), from.end());
  REQUIRE(it != b.end());
  std::copy(to.begin(), to.end(), it);
  test::write_bytes(file, b);
}

// In a child (a crash must not take the test run down): restore_tree throws an E naming dir.
template <class E = CorruptCheckpointError>
int child_restore_tree_expects(const fs::path& dir) {
  return run_in_child([&] { return child_expects<E>([&] { (void)ckpt::restore_tree(dir); }, dir); }, 0, 60);
}

TEST_CASE("regression: deeply nested JSON in .zarray (dtype, order, fill_value) is refused, not a stack overflow") {
  test::TempDir t;
  const std::string deep = deep_json_array(100000);  // 200 KB
  for (const std::string key : {"dtype", "order", "fill_value", "shape", "compressor", "filters"}) {
    CAPTURE(key);
    const fs::path z = t / ("z-" + key), o = t / ("o-" + key), x = t / ("t-" + key);
    ckpt::save<ckpt::zarr_v2>(z, Arr{{1, 2, 3}});
    ckpt::save<ckpt::orbax_without_ocdbt>(o, Arr{{1, 2, 3}});  // its arrays are files: .zarray
    ckpt::save<ckpt::t5x>(x, Arr{{1, 2, 3}});
    set_json_key(z / "a/.zarray", key, deep);
    set_json_key(o / "default/a/.zarray", key, deep);
    set_json_key(x / "a/.zarray", key, deep);
    CHECK(child_restore_tree_expects(z) == 0);
    CHECK(child_restore_tree_expects(o) == 0);
    CHECK(child_restore_tree_expects(x) == 0);
    CHECK(run_in_child([&] { return child_expects<CorruptCheckpointError>([&] { (void)ckpt::metadata(z); }, z); }) == 0);
    if (have_cli()) {
      const CliRun r = run_cli("verify " + z.string());
      INFO(r.err);
      CHECK(r.rc == 2);
      CHECK(r.err.find(z.string()) != std::string::npos);
    }
  }
  // Orbax's _METADATA and _strings.json, deep anywhere
  const fs::path o = t / "o-meta";
  ckpt::save<ckpt::orbax>(o, Arr{{1, 2, 3}});
  set_json_key(o / "default/_METADATA", "use_zarr3", deep);
  CHECK(child_restore_tree_expects(o) == 0);
}

TEST_CASE("regression: a zarr chunk far larger than its array is refused before anything is allocated") {
  // Found while fuzzing the zarr reader: chunks of 2^34 floats for a 10-element array,
  // with a 1 MiB zstd chunk file, made the reader allocate 64 GiB for the chunk.
  test::TempDir t;
  const fs::path z = t / "z";
  ckpt::save<ckpt::zarr_v2>(z, Arr{std::vector<float>(10, 1.0f)});
  set_json_key(z / "a/.zarray", "chunks", "[17179869184]");
  test::write_bytes(z / "a/0", Bytes(std::size_t{1} << 20, 'x'));
  CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore_tree(z), z, "a", "far larger than the array");
  CHECK(run_in_child([&] { return child_expects<CorruptCheckpointError>([&] { (void)ckpt::restore_tree(z); }, z); },
                     std::uint64_t{512} << 20) == 0);
}

TEST_CASE("regression: step metadata with timestamps out of int64's range is refused, not converted (UB)") {
  // Found by fuzzing the manager's step metadata (UBSan): a timestamp of 1.8e21 was
  // converted to int64 (undefined behaviour), and extreme timestamps overflowed when
  // keep_time_interval subtracted them.
  test::TempDir t;
  const fs::path root = t / "run";
  {
    ckpt::CheckpointManager<Small> mgr(root);
    mgr.save(1, make_small(), {{"loss", 1.0}});
    mgr.save(2, make_small(), {{"loss", 2.0}});
    mgr.save(3, make_small(), {{"loss", 3.0}});
  }
  set_json_key(root / "1" / "_CHECKPOINT_METADATA", "init_timestamp_nsecs", "1796017208208519511319");
  set_json_key(root / "2" / "_CHECKPOINT_METADATA", "init_timestamp_nsecs", "-9223372036854775808");
  set_json_key(root / "3" / "_CHECKPOINT_METADATA", "init_timestamp_nsecs", "9223372036854775807");
  ckpt::CheckpointManager<Small> mgr(root, {.keep_time_interval = std::chrono::hours(1)});
  CHECK(mgr.all_steps() == std::vector<std::int64_t>{1, 2, 3});
  CHECK(mgr.metrics(1).empty());  // its metadata is refused: the step counts, without it
  CHECK(mgr.metrics(2).at("loss") == 2.0);
  mgr.save(4, make_small(), {{"loss", 4.0}});  // prunes by time over the extreme timestamps
  CHECK(same(mgr.restore(), make_small()));
}

TEST_CASE("regression: deeply nested custom_metadata in one step's _CHECKPOINT_METADATA does not stop the manager") {
  test::TempDir t;
  const fs::path root = t / "run";
  {
    ckpt::CheckpointManager<Small> mgr(root);
    mgr.save(1, make_small(), {{"loss", 1.0}});
    mgr.save(2, make_small(), {{"loss", 0.5}});
  }
  set_json_key(root / "1" / "_CHECKPOINT_METADATA", "custom_metadata", deep_json_array(100000));
  for (const bool read_only : {true, false}) {
    CAPTURE(read_only);
    const int rc = run_in_child(
        [&] {
          ckpt::CheckpointManager<Small> mgr(root, {.read_only = read_only});
          if (mgr.all_steps() != std::vector<std::int64_t>{1, 2}) return 2;
          if (!same(mgr.restore(1), make_small()) || !same(mgr.restore(), make_small())) return 3;
          if (!mgr.custom_metadata(1).is_null()) return 4;  // unreadable metadata: the step counts, without it
          return 0;
        },
        0, 60);
    CHECK(rc == 0);
  }
  // the ckpt tool lists the root
  if (have_cli()) {
    const CliRun r = run_cli("ls " + root.string());
    INFO(r.err);
    CHECK(r.rc == 0);
    set_json_key(root / "2" / "_CHECKPOINT_METADATA", "metrics", "{\"x\":" + deep_json_array(100000) + "}");
    const CliRun r2 = run_cli("ls --json " + root.string());
    INFO(r2.err);
    CHECK(r2.rc == 0);
  }
}

TEST_CASE("regression: invalid UTF-8 in a t5x TensorStore spec is a ckpt::Error naming the checkpoint") {
  test::TempDir t;
  // (from, to): a spec's string replaced by bytes that are not UTF-8, same length
  const std::vector<std::pair<std::string, std::string>> patches = {
      {"\xa6" "driver\xa4zarr", "\xa6" "driver\xa4\xff\xfe\xfd\xfc"},
      {"\xa4" "file", "\xa4\xc3\x28\xa0\xa1"},
      {"\xa7" "float32", "\xa7\xe2\x28\xa1\xff\xfe\x80\x81"},
      {"\xa2" "id\xa4zstd", "\xa2" "id\xa4\xf0\x28\x8c\xbc"},
  };
  int n = 0;
  for (const auto& [from, to] : patches) {
    const fs::path x = t / ("t" + std::to_string(n++));
    ckpt::save<ckpt::basic_t5x<ckpt::io::codec::zstd>>(x, Arr{{1, 2, 3}});
    fs::remove(x / "a/.zarray");  // so the spec's metadata is what is read
    patch_bytes(x / "checkpoint", from, to);
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore_tree(x), x, "a", "");
    CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(x), x, "a", "");
    if (have_cli()) {
      const CliRun r = run_cli("tree --json " + x.string());
      INFO(r.err);
      CHECK(r.rc == 2);
      CHECK(r.err.find(x.string()) != std::string::npos);
      CHECK(r.err.find("type_error") == std::string::npos);
    }
  }
}

TEST_CASE("regression: the native reader refuses symlinks for manifest, commit and data files") {
  test::TempDir t;
  const fs::path real = save_small(t, "real");
  // A checkpoint directory made of links to another checkpoint's files
  const fs::path links = t / "links";
  fs::create_directories(links);
  for (const char* f : {"manifest", "commit", "data-0"}) fs::create_symlink(real / f, links / f);
  CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(links), links, "", "");
  CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::metadata(links), links, "", "");
  CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore_tree(links), links, "", "");
  // One link at a time
  for (const char* f : {"manifest", "commit", "data-0"}) {
    CAPTURE(f);
    const fs::path d = save_small(t, std::string("one-") + f);
    fs::copy_file(d / f, t / (std::string("outside-") + f));
    fs::remove(d / f);
    fs::create_symlink(t / (std::string("outside-") + f), d / f);
    const Caught c = catch_error<CorruptCheckpointError>([&] { (void)ckpt::restore<Small>(d); });
    INFO(c.what);
    CHECK(c.thrown);
    CHECK(c.checkpoint == d.string());
  }
  // A linked data-0 read without checksums would return an outside file's bytes
  const fs::path d = save_small(t, "nocheck");
  Bytes outside = test::read_bytes(d / "data-0");
  std::fill(outside.begin(), outside.end(), '\x42');
  test::write_bytes(t / "outside-data", outside);
  fs::remove(d / "data-0");
  fs::create_symlink(t / "outside-data", d / "data-0");
  CHECK_CKPT_ERROR(CorruptCheckpointError, ckpt::restore<Small>(d, {.verify_checksums = false}), d, "a", "");
  if (have_cli()) {
    const CliRun r = run_cli("convert " + links.string() + " " + (t / "converted").string() + " --to native");
    CHECK(r.rc == 2);
    CHECK(!fs::exists(t / "converted"));
  }
}

TEST_CASE("regression: the manager neither lists nor restores a step directory that is a symlink") {
  test::TempDir t;
  const fs::path root = t / "run", other = t / "other";
  {
    ckpt::CheckpointManager<Small> mgr(root);
    mgr.save(1, make_small());
    mgr.save(2, make_small());
  }
  Small s = make_small();
  s.step = 99;
  ckpt::save(other, s);
  fs::create_symlink(other, root / "3");
  for (const bool read_only : {true, false}) {
    CAPTURE(read_only);
    ckpt::CheckpointManager<Small> mgr(root, {.read_only = read_only});
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{1, 2});
    CHECK(mgr.latest_step() == 2);
    CHECK(mgr.restore().step == 7);
    CHECK_THROWS_AS(mgr.restore(3), ckpt::Error);
  }
  CHECK(fs::is_symlink(root / "3"));  // left alone
  CHECK(ckpt::restore<Small>(other).step == 99);
}

TEST_CASE("regression: writer errors name the checkpoint asked for, not the staging directory") {
  test::TempDir t;
  struct WithString {
    std::vector<float> a{1, 2};
    std::string s = "x";
  };
  const fs::path z = t / "z";
  const Caught c = catch_error<ckpt::Error>([&] { ckpt::save<ckpt::zarr_v2>(z, WithString{}); });
  INFO(c.what);
  CHECK(c.thrown);
  CHECK(c.checkpoint == z.string());
  CHECK(c.what.find(".tmp-") == std::string::npos);
  // An I/O failure while writing (a file size limit), in a child
  const fs::path n = t / "n";
  const int rc = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) return 5;
    const Caught e = catch_error<ckpt::Error>([&] { ckpt::save(n, make_small()); });
    std::fprintf(stderr, "child: %s\n", e.what.c_str());
    if (!e.thrown) return 2;
    if (e.checkpoint != n.string()) return 3;
    if (e.what.find(".tmp-") != std::string::npos) return 4;
    return 0;
  });
  CHECK(rc == 0);
  CHECK(!fs::exists(n));
}

TEST_CASE("regression: a key holding NUL does not cut an error message short") {
  test::TempDir t;
  struct Nested {
    std::map<std::string, std::map<std::string, float>> m;
  };
  Nested v;
  const std::string k1("a.b\0c", 5), k2("b\0c.k", 5);
  v.m[k1]["k"] = 1;
  v.m["a"][k2] = 2;  // both are the Orbax / t5x name "m.a.b\0c.k"
  for (int format = 0; format < 2; ++format) {
    CAPTURE(format);
    const fs::path d = t / ("d" + std::to_string(format));
    const Caught c = catch_error<ckpt::Error>([&] {
      if (format == 0) ckpt::save<ckpt::orbax>(d, v);
      else {
        struct Big {
          std::map<std::string, std::map<std::string, std::vector<float>>> m;
        } b;
        b.m[k1]["k"] = {1, 2};
        b.m["a"][k2] = {3, 4};
        ckpt::save<ckpt::t5x>(d, b);
      }
    });
    INFO(c.what);
    CHECK(c.thrown);
    CHECK(c.what.find('\0') == std::string::npos);
    CHECK(std::strlen(c.what.c_str()) == c.what.size());
    CHECK(c.what.find(format == 0 ? "Orbax" : "t5x") != std::string::npos);  // the part after the NUL is there
  }
}

TEST_CASE("regression: a killed plain save's staging directory is collected by the next save and by `ckpt gc`") {
  test::TempDir t;
  KillState state;
  state.w1.resize(std::size_t{4} << 20);
  state.w2.resize(state.w1.size());
  state.w3.resize(state.w1.size());
  state.w4.resize(std::size_t{2} << 20);
  const fs::path target = t / "target";
  auto leftovers = [&](const std::string& name) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(t.path()))
      if (e.path().filename().string().rfind(".tmp-" + name + "-", 0) == 0) ++n;
    return n;
  };
  // Kill saves until one leaves its staging directory behind. The child says when its
  // first save starts, so that a slow or loaded machine (ASan at -O0 beside other
  // builds) does not make every kill land before any save began.
  std::mt19937 rng(13);
  for (int attempt = 0; attempt < 40 && leftovers("target") == 0; ++attempt) {
    int started[2];
    REQUIRE(::pipe(started) == 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(started[0]);
      try {
        for (std::int64_t round = 1;; ++round) {
          fill_round(state, round);
          if (round == 1 && ::write(started[1], "s", 1) != 1) ::_exit(4);
          ckpt::save(target, state, {.force = true});
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    ::close(started[1]);
    char c;
    while (::read(started[0], &c, 1) < 0 && errno == EINTR) {}
    ::close(started[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 60));
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  }
  const int before = leftovers("target");
  REQUIRE(before > 0);
  // A staging directory of a save still in progress (this process's) is not touched.
  ckpt::io::StagingDir live(target);
  test::write_bytes(live.path() / "partial", Bytes(10, 'x'));
  fill_round(state, 77);
  ckpt::save(target, state, {.force = true});
  CHECK(leftovers("target") == 1);  // the live one only
  CHECK(fs::exists(live.path() / "partial"));
  CHECK(ckpt::restore<KillState>(target).round == 77);
  MESSAGE("staging directories left by killed saves: " << before);

  // `ckpt gc DIR` collects stale ones (a pretend leftover of another target) and keeps live ones.
  fs::create_directories(t / ".tmp-other-123abc" / "sub");
  test::write_bytes(t / ".tmp-other-123abc" / "sub" / "f", Bytes(1000, 'x'));
  if (have_cli()) {
    const CliRun r = run_cli("gc " + t.path().string());
    INFO(r.out << r.err);
    CHECK(r.rc == 0);
    CHECK(!fs::exists(t / ".tmp-other-123abc"));
    CHECK(fs::exists(live.path() / "partial"));
    CHECK(r.out.find(".tmp-other-123abc") != std::string::npos);
  }
}

// ---------------------------------------------------------------------------------
// Every reader against every kind of hostile file, through every way in: restore<T>,
// restore_tree, metadata (then each leaf), the manager (native steps) and the ckpt
// tool. Each file of a checkpoint in turn is replaced by a link out of the checkpoint,
// a hard link, a FIFO, a device, a bit-flipped, truncated, deeply nested or invalid
// UTF-8 version of itself. Allowed outcomes: a ckpt::Error naming the checkpoint, or
// a restore of exactly the saved values (a file the reader did not need); never a
// crash, a hang, a foreign exception, or other values. Files outside the checkpoint
// (the links' targets, a sentinel) are never changed.

struct H {
  std::int64_t step = 0;
  std::vector<float> a;        // a native data file, a zarr array
  std::vector<std::int32_t> c;  // inline / a small array
};

inline H make_h() {
  H h;
  h.step = 11;
  for (int i = 0; i < 2000; ++i) h.a.push_back(static_cast<float>(i) * 0.25f - 7.0f);
  h.c = {3, 1, 4, 1, 5};
  return h;
}
inline bool same_h(const H& x, const H& y) { return x.step == y.step && x.a == y.a && x.c == y.c; }

enum class Kind { json, msgpack, binary };
inline Kind kind_of(const fs::path& f) {
  const std::string n = f.filename().string();
  if (n == ".zarray" || n == ".zgroup" || n == "_METADATA" || n == "_CHECKPOINT_METADATA" || n == "_strings.json") return Kind::json;
  if (n == "checkpoint" || n == "manifest" || n == "ckpt.msgpack") return Kind::msgpack;
  return Kind::binary;
}

struct Outside {  // a file outside every checkpoint, and what it held
  fs::path path;
  Bytes bytes;
  fs::file_time_type mtime;
};

// In a child: every library entry point on `c`; 0 when each gave an allowed outcome.
// values_may_differ: a flipped bit in array data of a format without checksums reads
// as a flipped value (nothing can tell); every other success must give the saved values.
inline int library_entry_points(const fs::path& c, bool native, const fs::path& manager_root, bool values_may_differ) {
  const H want = make_h();
  int bad = 0;
  auto allowed = [&](const char* what, const std::function<void()>& f) {
    try {
      f();
    } catch (const ckpt::Error& e) {
      const std::string w = e.what();
      if (w.find(c.string()) == std::string::npos || e.checkpoint().rfind(c.string(), 0) != 0) {
        std::fprintf(stderr, "child: %s: an error that does not name %s: %s\n", what, c.c_str(), w.c_str());
        ++bad;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s: not a ckpt::Error: %s\n", what, e.what());
      ++bad;
    }
  };
  auto expect_same = [&](const char* what, const H& got) {
    if (!values_may_differ && !same_h(got, want)) {
      std::fprintf(stderr, "child: %s: restored other values without an error\n", what);
      ++bad;
    }
  };
  allowed("restore", [&] { expect_same("restore", ckpt::restore<H>(c)); });
  allowed("restore_tree", [&] {
    const ckpt::Tree t = ckpt::restore_tree(c);
    H h;
    h.step = t.leaf("step").as<std::int64_t>();
    h.a = t.leaf("a").as<std::vector<float>>();
    h.c = t.leaf("c").as<std::vector<std::int32_t>>();
    expect_same("restore_tree", h);
  });
  allowed("metadata", [&] {
    const ckpt::Tree t = ckpt::metadata(c);
    for (const auto& p : t.paths()) (void)t.leaf(p).bytes();
  });
  if (native) {
    allowed("manager", [&] {
      ckpt::CheckpointManager<H> mgr(manager_root, {.read_only = true});
      for (const auto s : mgr.all_steps()) expect_same("manager", mgr.restore(s));
    });
  }
  return bad == 0 ? 0 : 1;
}

TEST_CASE("hostile input: links out, hard links, FIFOs, devices, bit flips, truncation, deep nesting, invalid UTF-8 in every file of every format") {
  test::TempDir t;
  const bool cli = have_cli();
  const H h = make_h();
  struct Fmt {
    std::string name;
    std::function<void(const fs::path&)> save;
    bool single_file;
  };
  const std::vector<Fmt> formats = {
      {"native", [&](const fs::path& p) { ckpt::save(p, h); }, false},
      {"flax", [&](const fs::path& p) { ckpt::save<ckpt::flax>(p, h); }, true},
      {"t5x", [&](const fs::path& p) { ckpt::save<ckpt::t5x>(p, h); }, false},
      {"orbax", [&](const fs::path& p) { ckpt::save<ckpt::orbax>(p, h); }, false},  // OCDBT
      {"orbax-dirs", [&](const fs::path& p) { ckpt::save<ckpt::orbax_without_ocdbt>(p, h); }, false},
      {"zarr", [&](const fs::path& p) { ckpt::save<ckpt::zarr_v2>(p, h); }, false},
  };
  std::vector<Outside> outside;
  const fs::path out_dir = t / "outside";
  fs::create_directories(out_dir);
  auto add_outside = [&](const Bytes& b) {
    Outside o{out_dir / ("f" + std::to_string(outside.size())), b, {}};
    test::write_bytes(o.path, b);
    o.mtime = fs::last_write_time(o.path);
    outside.push_back(o);
    return o.path;
  };
  add_outside(Bytes(100, 's'));  // the sentinel
  const bool can_mknod = [&] {
    const fs::path p = t / "probe-dev";
    const bool ok = ::mknod(p.c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0;
    fs::remove(p);
    return ok;
  }();
  int cases = 0, errors = 0, untouched = 0;
  for (const auto& fmt : formats) {
    CAPTURE(fmt.name);
    const fs::path orig_root = t / ("orig-" + fmt.name);
    fs::create_directories(orig_root);
    const fs::path orig = orig_root / (fmt.single_file ? "ckpt.msgpack" : "1");
    fmt.save(orig);
    std::vector<fs::path> files;  // relative
    if (fmt.single_file) files.push_back("");
    else
      for (const auto& e : fs::recursive_directory_iterator(orig))
        if (e.is_regular_file()) files.push_back(fs::relative(e.path(), orig));
    std::sort(files.begin(), files.end());
    REQUIRE(!files.empty());

    for (const auto& rel : files) {
      const Kind kind = kind_of(fmt.single_file ? orig : orig / rel);
      const Bytes original = test::read_bytes(fmt.single_file ? orig : orig / rel);
      std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> attacks;
      auto replace = [](const fs::path& f, const Bytes& b) {
        fs::remove(f);
        test::write_bytes(f, b);
      };
      if (!fmt.single_file) {
        attacks.push_back({"link out", [&, original](const fs::path& f) {
                             Bytes b = original;
                             for (auto& ch : b) ch = static_cast<char>(ch ^ 0x20);  // other content: reading it shows
                             fs::remove(f);
                             fs::create_symlink(add_outside(b), f);
                           }});
      }
      attacks.push_back({"FIFO", [](const fs::path& f) {
                           fs::remove(f);
                           REQUIRE(::mkfifo(f.c_str(), 0600) == 0);
                         }});
      if (can_mknod)
        attacks.push_back({"device", [](const fs::path& f) {
                             fs::remove(f);
                             REQUIRE(::mknod(f.c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0);
                           }});
      for (const double at : {0.0, 0.5, 0.999})
        attacks.push_back({"bit flip at " + std::to_string(at), [at, original, replace](const fs::path& f) {
                             if (original.empty()) return;
                             Bytes b = original;
                             const auto i = static_cast<std::size_t>(at * static_cast<double>(b.size() - 1));
                             b[i] = static_cast<char>(b[i] ^ 0x10);
                             replace(f, b);
                           }});
      for (const double keep : {0.0, 0.5})
        attacks.push_back({"truncated to " + std::to_string(keep), [keep, original, replace](const fs::path& f) {
                             replace(f, Bytes(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(keep * static_cast<double>(original.size()))));
                           }});
      const bool native_manifest = fmt.name == "native" && rel == "manifest";
      auto hostile = [&, native_manifest, replace](const Bytes& b) {
        return [b, native_manifest, replace](const fs::path& f) {
          if (native_manifest) set_manifest(f.parent_path(), b);  // with a matching commit: the parser sees it
          else replace(f, b);
        };
      };
      if (kind == Kind::json) {
        const std::string deep = deep_json_array(100000), utf8 = "{\"zarr_format\": 2, \"\xff\xfe\": \"\xc3\x28\", \"dtype\": \"\xe2\x82\"}";
        attacks.push_back({"deep JSON", hostile(Bytes(deep.begin(), deep.end()))});
        attacks.push_back({"invalid UTF-8 JSON", hostile(Bytes(utf8.begin(), utf8.end()))});
      } else if (kind == Kind::msgpack) {
        Bytes deep(100000, '\x91');
        deep.push_back('\xc0');
        attacks.push_back({"deep msgpack", hostile(deep)});
        // the original with every string made invalid UTF-8 where it is 4+ bytes of ASCII letters
        Bytes bad = original;
        for (std::size_t i = 0; i + 4 < bad.size(); ++i)
          if (std::isalpha(static_cast<unsigned char>(bad[i])) && std::isalpha(static_cast<unsigned char>(bad[i + 1])) &&
              std::isalpha(static_cast<unsigned char>(bad[i + 2])) && std::isalpha(static_cast<unsigned char>(bad[i + 3])))
            bad[i + 1] = '\xff';
        attacks.push_back({"invalid UTF-8 msgpack", hostile(bad)});
      }

      for (const auto& one : attacks) {  // not a structured binding: clang 14 cannot CAPTURE one
        const std::string& what = one.first;
        const auto& attack = one.second;
        CAPTURE(rel.string());
        CAPTURE(what);
        const fs::path root = t / ("case-" + std::to_string(cases++));
        fs::create_directories(root);
        const fs::path c = root / (fmt.single_file ? "ckpt.msgpack" : "1");
        if (fmt.single_file) fs::copy_file(orig, c);
        else fs::copy(orig, c, fs::copy_options::recursive);
        attack(fmt.single_file ? c : c / rel);
        const bool may_differ = fmt.name != "native" && what.rfind("bit flip", 0) == 0;
        const int rc = run_in_child([&] { return library_entry_points(c, fmt.name == "native", root, may_differ); }, 0, 30);
        CHECK(rc == 0);
        // what the ckpt tool makes of it: exit 0 (verify: 1 naming broken leaves) or 2 with a message naming it
        if (cli) {
          for (const std::string cmd : {"verify", "tree --json"}) {
            const CliRun r = run_cli(cmd + " " + c.string());
            INFO(cmd << ": exit " << r.rc << ": " << r.err);
            CHECK(r.rc >= 0);
            CHECK(r.rc <= 2);
            if (r.rc == 2) CHECK(r.err.find(c.string()) != std::string::npos);
            if (r.rc == 0 && cmd == "tree --json") CHECK(nlohmann::json::accept(r.out));
            if (cmd == "verify") (r.rc == 0 ? untouched : errors)++;
          }
        }
        fs::remove_all(root);
      }
    }

    // The other commands, once per format, on a checkpoint with a link out and a FIFO
    if (cli && !fmt.single_file) {
      const fs::path root = t / ("cli-" + fmt.name), c = root / "1";
      fs::create_directories(root);
      fs::copy(orig, c, fs::copy_options::recursive);
      const fs::path f = c / files.back();
      fs::remove(f);
      fs::create_symlink(add_outside(Bytes(64, 'L')), f);
      for (const std::string& cmd : std::vector<std::string>{"show " + c.string() + " a", "diff " + orig.string() + " " + c.string(),
                                    "convert " + c.string() + " " + (root / "conv").string() + " --to native",
                                    "ls " + root.string(), "ls --json " + root.string()}) {
        const CliRun r = run_cli(cmd);
        INFO(cmd << ": exit " << r.rc << ": " << r.err);
        CHECK(r.rc >= 0);
        CHECK(r.rc <= 2);
      }
    }

    // Hard links to outside files are the checkpoint's own files: read as they are, and
    // deleting or replacing the checkpoint (a forced save, a pruning manager, gc) unlinks
    // them without touching what they share bytes with.
    if (!fmt.single_file) {
      const fs::path root = t / ("hard-" + fmt.name), c = root / "1";
      fs::create_directories(root);
      fs::copy(orig, c, fs::copy_options::recursive);
      for (const auto& rel : files) {
        const fs::path o = add_outside(test::read_bytes(c / rel));
        fs::remove(c / rel);
        fs::create_hard_link(o, c / rel);
      }
      CHECK(same_h(ckpt::restore<H>(c), h));
      if (fmt.name == "native") {
        ckpt::CheckpointManager<H> mgr(root, {.max_to_keep = 1});
        CHECK(mgr.all_steps() == std::vector<std::int64_t>{1});
        mgr.save(2, h);  // prunes step 1
        CHECK(mgr.all_steps() == std::vector<std::int64_t>{2});
      } else {
        ckpt::save(c, h, {.force = true});  // replaces it (as native)
      }
      (void)ckpt::gc(root);
      fs::remove_all(root);
    }
  }
  // Nothing outside any checkpoint changed.
  for (const auto& o : outside) {
    CAPTURE(o.path);
    CHECK(fs::is_regular_file(o.path));
    CHECK(test::read_bytes(o.path) == o.bytes);
    CHECK(fs::last_write_time(o.path) == o.mtime);
  }
  MESSAGE(cases << " hostile checkpoints: `ckpt verify` refused " << errors << " and passed " << untouched
                << " (a file it does not need, or a flipped bit in a format without checksums)");
}

}  // namespace bad_input
