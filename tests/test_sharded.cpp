// tests/test_sharded.cpp — Sharded leaves: boxes of global arrays, saved and restored
// onto other layouts. Built twice: into ckpt_tests (one process, no MPI) and, when MPI is
// found, as ckpt_mpi_tests, run by ctest under mpirun with 2, 3 and 4 processes (the
// test cases named "mpi ..." below, selected by process count).
#include "support.hpp"

#include <numeric>
#include <random>

#include <xtensor/xview.hpp>

namespace fs = std::filesystem;

namespace sharded_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart
namespace {

using test::TempDir;

// A data-iterator position, saved as a per-rank item.
struct Position {
  std::int64_t shard = 0;
  std::vector<std::int64_t> offsets;
};

struct ShardedState {
  std::int64_t step = 0;
  ckpt::Sharded<xt::xtensor<float, 2>> w;
  std::vector<double> bias;  // replicated
};

// ShardedState's next version: `w` renamed.
struct ShardedStateV2 {
  std::int64_t step = 0;
  ckpt::Sharded<xt::xtensor<float, 2>> weight;
  std::vector<double> bias;
};

struct PlainState {
  std::int64_t step = 0;
  xt::xtensor<float, 2> w;
  std::vector<double> bias;
};

// The global array every test slices: element (i, j) = 100 i + j.
xt::xtensor<float, 2> global_w(std::size_t rows, std::size_t cols) {
  xt::xtensor<float, 2> g = xt::zeros<float>({rows, cols});
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) g(i, j) = static_cast<float>(100 * i + j);
  return g;
}

// The box [r0, r0 + nr) x [c0, c0 + nc) of the global array, as a Sharded leaf.
ckpt::Sharded<xt::xtensor<float, 2>> box(std::size_t rows, std::size_t cols, std::size_t r0, std::size_t nr,
                                         std::size_t c0, std::size_t nc) {
  const auto g = global_w(rows, cols);
  ckpt::Sharded<xt::xtensor<float, 2>> s{{rows, cols}, {r0, c0}, xt::zeros<float>({nr, nc})};
  for (std::size_t i = 0; i < nr; ++i)
    for (std::size_t j = 0; j < nc; ++j) s.local(i, j) = g(r0 + i, c0 + j);
  return s;
}

// [begin, size) of part k of n parts of `total` (the first total % n parts one longer).
[[maybe_unused]] std::pair<std::size_t, std::size_t> split(std::size_t total, std::size_t n, std::size_t k) {
  const std::size_t base = total / n, extra = total % n;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

// Copies checkpoint `from` to `to` and re-encodes its manifest after f edits the entry
// of leaf "w", with a matching commit marker.
template <class F>
void edit_leaf_w(const fs::path& from, const fs::path& to, F&& f) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const auto index = ckpt::open_index(to);
  ckpt::IndexEntries entries = index->entries();
  for (auto& e : entries)
    if (e.path.str() == "w") f(e);
  const auto m = ckpt::detail::native::encode_manifest(index->info(), entries);
  test::write_bytes(to / "manifest", m);
  const std::string commit = ckpt::detail::native::encode_commit({m.size(), ckpt::io::xxh3(std::as_bytes(std::span(m)))});
  test::write_bytes(to / "commit", std::vector<char>(commit.begin(), commit.end()));
}

}  // namespace

TEST_CASE("a Sharded leaf saved by one process restores as a plain array, as a box, and as itself") {
  TempDir tmp;
  ShardedState s;
  s.step = 7;
  s.w = box(6, 5, 0, 6, 0, 5);  // one process holding the whole array
  s.bias = {1.5, 2.5};
  ckpt::save(tmp / "c", s);

  const auto plain = ckpt::restore<PlainState>(tmp / "c");  // a plain array in place of the Sharded field
  CHECK(plain.step == 7);
  CHECK(plain.w == global_w(6, 5));
  CHECK(plain.bias == s.bias);

  const auto same = ckpt::restore<ShardedState>(tmp / "c");  // an empty Sharded takes the whole array
  CHECK(same.w.global_shape == std::vector<std::size_t>{6, 5});
  CHECK(same.w.offset == std::vector<std::size_t>{0, 0});
  CHECK(same.w.local == global_w(6, 5));

  ShardedState part;  // a box of another layout: rows 2..5, columns 1..3
  part.w = {{6, 5}, {2, 1}, xt::zeros<float>({3, 3})};
  ckpt::restore_into(tmp / "c", part);
  CHECK(part.w.local == box(6, 5, 2, 3, 1, 3).local);

  const auto md = ckpt::metadata(tmp / "c");  // the global shape
  CHECK(md.leaf("w").shape() == ckpt::Shape{6, 5});
  CHECK(ckpt::restore_tree(tmp / "c").leaf("w").as<xt::xarray<float>>() == global_w(6, 5));
}

TEST_CASE("a Sharded box that does not cover the array restores its part and refuses the rest") {
  TempDir tmp;
  ShardedState s;
  s.w = box(10, 4, 4, 3, 0, 4);  // rows 4..6 only
  ckpt::save(tmp / "c", s);
  ShardedState inside;
  inside.w = {{10, 4}, {5, 1}, xt::zeros<float>({2, 2})};
  ckpt::restore_into(tmp / "c", inside);
  CHECK(inside.w.local == box(10, 4, 5, 2, 1, 2).local);
  CHECK_THROWS_CKPT(ckpt::restore<PlainState>(tmp / "c"), ckpt::CorruptCheckpointError, "in none of the saved boxes");
  ShardedState wrong;
  wrong.w = {{10, 5}, {0, 0}, xt::zeros<float>({2, 2})};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", wrong), ckpt::ShapeMismatchError, "w: global shape [10,4]");
}

TEST_CASE("a Sharded box outside its global shape is refused before anything is written") {
  TempDir tmp;
  ShardedState s;
  s.w = box(10, 4, 8, 2, 0, 4);
  s.w.offset = {9, 0};
  CHECK_THROWS_CKPT(ckpt::save(tmp / "c", s), ckpt::ShapeMismatchError, "w: Sharded: local [2,4] at offset [9,0]");
  CHECK_FALSE(fs::exists(tmp / "c"));
  CHECK_THROWS_CKPT(ckpt::save<ckpt::t5x>(tmp / "t", s), ckpt::Error, "w: the t5x format does not store Sharded leaves");
}

TEST_CASE("a box larger than one checksum piece: partial reads verify the pieces they read") {
  TempDir tmp;
  struct Big {
    ckpt::Sharded<std::vector<std::int32_t>> v;
  };
  Big b;
  const std::size_t n = 3 * (1u << 20) / 4 + 100;  // 3 MiB and a bit: four pieces
  b.v.global_shape = {n};
  b.v.offset = {0};
  b.v.local.resize(n);
  std::iota(b.v.local.begin(), b.v.local.end(), 0);
  ckpt::save(tmp / "c", b);
  Big part;
  part.v = {{n}, {n / 2}, std::vector<std::int32_t>(1000)};
  ckpt::restore_into(tmp / "c", part);
  CHECK(part.v.local.front() == static_cast<std::int32_t>(n / 2));
  CHECK(part.v.local.back() == static_cast<std::int32_t>(n / 2 + 999));
  // The whole box, verified: its xxh3 is that of its pieces' checksums (format v2).
  struct Plain {
    std::vector<std::int32_t> v;
  };
  CHECK(ckpt::restore<Plain>(tmp / "c").v == b.v.local);
  CHECK(ckpt::restore<Big>(tmp / "c").v.local == b.v.local);

  // Flip a byte in the piece the part reads: the partial read notices, with or without a full read.
  fs::path data = tmp / "c" / "data-0";
  auto bytes = test::read_bytes(data);
  bytes[(n / 2) * 4 + 8] ^= 1;
  test::write_bytes(data, bytes);
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", part), ckpt::CorruptCheckpointError, "v: checksum mismatch");
  part.v.offset = {0};  // another piece is intact
  ckpt::restore_into(tmp / "c", part);
  CHECK(part.v.local[10] == 10);
  ckpt::restore_into(tmp / "c", part, {.verify_checksums = false});
}

TEST_CASE("a column strip of a box saved by rows reads and verifies the box's tiles, not its whole rows") {
  TempDir tmp;
  ShardedState s;
  s.step = 3;
  s.w = box(1024, 1024, 0, 1024, 0, 1024);  // 4 MiB of 4 KiB rows
  ckpt::save(tmp / "c", s);
  {  // 4 KiB rows cut into 128-byte tile columns, 512 rows tall (64 KiB tiles)
    const auto index = ckpt::open_index(tmp / "c");
    const ckpt::IndexBox& b = index->find(ckpt::Path({"w"}))->boxes.at(0);
    CHECK(b.tile_bytes == 128);
    CHECK(b.tile_rows == 512);
    CHECK(b.tiles.size() == 2 * 32);
  }
  // Columns [300, 556) of every row: 1 MiB wanted, in tile columns [288, 576).
  auto strip = [&] {
    ShardedState t;
    t.w = {{1024, 1024}, {0, 300}, xt::zeros<float>({1024, 256})};
    return t;
  };
  ShardedState t = strip();
  ckpt::restore_into(tmp / "c", t);  // through io_uring where the kernel allows it
  CHECK(t.w.local == box(1024, 1024, 0, 1024, 300, 256).local);
  // What it reads, counted by the kernel's rchar, which counts read(2)/pread(2) but not
  // io_uring's reads: the same ranges read by pread (CKPT_IO_URING=0).
  t = strip();
  ::setenv("CKPT_IO_URING", "0", 1);
  const std::uint64_t before = test::bytes_read();
  ckpt::restore_into(tmp / "c", t);
  const std::uint64_t read = test::bytes_read() - before;
  ::unsetenv("CKPT_IO_URING");
  CHECK(t.w.local == box(1024, 1024, 0, 1024, 300, 256).local);
  const std::uint64_t wanted = 1024 * 256 * 4, tiles = 1024 * 288 * 4;
  CHECK(read >= tiles);
  CHECK(read < tiles + 64 * 1024);  // and the manifest: not the 4 MiB of whole rows

  // A flipped byte in a tile the strip does not read leaves it readable; the whole box
  // is not. One in a tile it reads fails it, naming the tile.
  const fs::path data = tmp / "c" / "data-0";
  const auto good = test::read_bytes(data);
  auto bytes = good;
  const auto at = [&](std::size_t row, std::size_t col) { return (row * 1024 + col) * 4 + 1; };
  const auto w_offset = ckpt::open_index(tmp / "c")->find(ckpt::Path({"w"}))->boxes.at(0).bytes.offset;
  bytes[w_offset + at(700, 900)] ^= 1;
  test::write_bytes(data, bytes);
  t = strip();
  ckpt::restore_into(tmp / "c", t);
  CHECK(t.w.local == box(1024, 1024, 0, 1024, 300, 256).local);
  CHECK_THROWS_CKPT(ckpt::restore<PlainState>(tmp / "c"), ckpt::CorruptCheckpointError, "w: checksum mismatch");
  bytes = good;
  bytes[w_offset + at(600, 400)] ^= 1;
  test::write_bytes(data, bytes);
  t = strip();
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", t), ckpt::CorruptCheckpointError,
                    "w: checksum mismatch in the tile at row 512, byte 1536 of the box");
  CHECK(read < 2 * wanted);

  // A manifest whose tiles do not fit the box is refused when opened.
  test::write_bytes(data, good);
  auto edit = [&](auto&& f) { edit_leaf_w(tmp / "c", tmp / "e", f); };
  edit([](ckpt::IndexEntry& e) { e.boxes[0].tiles.pop_back(); });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError,
                    "w: manifest: box tiles must hold 64 checksums, not 63");
  edit([](ckpt::IndexEntry& e) { e.boxes[0].tile_rows = 1025; });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError,
                    "w: manifest: box tiles of 128 bytes by 1025 rows do not fit the box of shape [1024,1024]");
  edit([](ckpt::IndexEntry& e) {  // a grid that fits, with checksums of another: the strip's read fails, not a crash
    e.boxes[0].tile_bytes = 4000;
    e.boxes[0].tile_rows = 1024;
    e.boxes[0].tiles.assign(2, 0);
  });
  t = strip();
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "e", t), ckpt::CorruptCheckpointError, "w: checksum mismatch in the tile at row 0");
  // A whole read trusts the box's own checksum; `ckpt verify` also checks the tiles'.
  CHECK(ckpt::restore<PlainState>(tmp / "e").w == global_w(1024, 1024));
  const auto edited = ckpt::open_index(tmp / "e");
  CHECK_THROWS_CKPT(edited->check_box_checksums(*edited->find(ckpt::Path({"w"}))), ckpt::CorruptCheckpointError,
                    "w: the box at [0,0]: its tile checksums do not match its bytes");
  const auto intact = ckpt::open_index(tmp / "c");
  intact->check_box_checksums(*intact->find(ckpt::Path({"w"})));
}

TEST_CASE("hostile boxes in a manifest are refused when the checkpoint is opened") {
  TempDir tmp;
  ShardedState s;
  s.w = box(64, 32, 0, 64, 0, 32);  // 8 KiB: in a data file
  ckpt::save(tmp / "c", s);
  auto edit = [&](auto&& f) { edit_leaf_w(tmp / "c", tmp / "e", f); };
  edit([](ckpt::IndexEntry& e) { e.boxes[0].origin = {1, 0}; });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError, "w: manifest: box at [1,0] of shape [64,32]");
  edit([](ckpt::IndexEntry& e) { e.boxes[0].bytes.length -= 4; });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError, "w: manifest: box of shape [64,32] records");
  edit([](ckpt::IndexEntry& e) { e.boxes[0].bytes.file = "data-7"; });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError, "data file data-7 is missing");
  edit([](ckpt::IndexEntry& e) { e.boxes[0].bytes.offset = 4096; });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError, "lie outside data-0");
  edit([](ckpt::IndexEntry& e) {  // half the array
    e.boxes[0].bytes.shape = {32, 32};
    e.boxes[0].bytes.length /= 2;
  });
  CHECK_THROWS_CKPT(ckpt::restore<PlainState>(tmp / "e"), ckpt::CorruptCheckpointError, "w: checksum mismatch");
  CHECK_THROWS_CKPT(ckpt::restore<PlainState>(tmp / "e", {.verify_checksums = false}), ckpt::CorruptCheckpointError,
                    "w: part of the box at [0,0] of shape [64,32] is in none of the saved boxes");
  edit([](ckpt::IndexEntry& e) {  // tiles as wide as the box's 128-byte rows
    e.boxes[0].tile_bytes = 128;
    e.boxes[0].tile_rows = 16;
    e.boxes[0].tiles.assign(4, 0);
  });
  CHECK_THROWS_CKPT(ckpt::open_index(tmp / "e"), ckpt::CorruptCheckpointError,
                    "w: manifest: box tiles of 128 bytes by 16 rows do not fit the box of shape [64,32]");
  edit([](ckpt::IndexEntry& e) { e.boxes.push_back(e.boxes[0]); });  // the same box twice
  CHECK_THROWS_CKPT(ckpt::restore<PlainState>(tmp / "e"), ckpt::CorruptCheckpointError, "w: saved boxes overlap");
}

TEST_CASE("a restore transform in front of a Sharded target: boxes read through the tree") {
  TempDir tmp;
  ShardedState s;
  s.w = box(12, 6, 0, 12, 0, 6);
  ckpt::save(tmp / "c", s);
  ShardedState part;
  part.w = {{12, 6}, {3, 2}, xt::zeros<float>({4, 3})};
  ckpt::RestoreOptions opts;
  opts.transform = [](ckpt::Tree& t) { t.rename("step", "step"); };
  opts.verify_checksums = false;
  ckpt::restore_into(tmp / "c", part, opts);
  CHECK(part.w.local == box(12, 6, 3, 4, 2, 3).local);
}

TEST_CASE("checkpoints without boxes keep manifest format version 1") {
  TempDir tmp;
  PlainState p;
  p.w = global_w(2, 2);
  ckpt::save(tmp / "c", p);
  const auto md = ckpt::metadata(tmp / "c");
  CHECK(ckpt::open_index(tmp / "c")->info().format_version == 1);
  ShardedState s;
  s.w = box(2, 2, 0, 2, 0, 2);
  ckpt::save(tmp / "s", s);
  CHECK(ckpt::open_index(tmp / "s")->info().format_version == 2);
}

TEST_CASE("a box of a t5x or Orbax array (OCDBT or not) reads only the zarr chunks it meets") {
  TempDir tmp;
  // 64 x 512 floats that do not compress: under an 8 KiB budget each row is a chunk of its
  // own (2 KiB), stored out of line in OCDBT's data files
  PlainState s;
  s.step = 5;
  s.w = xt::zeros<float>({std::size_t{64}, std::size_t{512}});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : s.w) x = u(rng);
  s.bias = {0.25};
  ckpt::save<ckpt::t5x>(tmp / "t5x", s, {.max_memory = 8 << 10});
  ckpt::save<ckpt::orbax_without_ocdbt>(tmp / "orbax", s, {.max_memory = 8 << 10});
  ckpt::save<ckpt::orbax>(tmp / "ocdbt", s, {.max_memory = 8 << 10});
  CHECK(fs::exists(tmp / "t5x/w/63.0"));
  for (const std::string f : {"t5x", "orbax", "ocdbt"}) {
    CAPTURE(f);
    const auto index = ckpt::open_index(tmp / f);
    std::size_t boxes = 0;
    CHECK(test::boxes_agree(*index, ckpt::Path::parse("w"), boxes) == "");
    CHECK(boxes == 36 * 36);
    // two rows of 64 read about 2/64 of the bytes the whole array does
    const ckpt::IndexEntry& e = *index->find(ckpt::Path::parse("w"));
    std::vector<std::byte> whole(e.length), rows(2 * 512 * 4);
    const auto b0 = test::bytes_read();
    index->read(e, whole);
    const auto b1 = test::bytes_read();
    index->read_box(e, {10, 0}, {2, 512}, rows);
    const auto b2 = test::bytes_read();
    CAPTURE(b1 - b0);
    CAPTURE(b2 - b1);
    CHECK(b1 - b0 >= 48 * 2048);  // zstd saves a little on floats in (-1, 1)
    CHECK((b2 - b1) * 16 < b1 - b0);
    // a rank's shard through restore_into: rows 32..63, columns 100..199
    ShardedState part;
    part.w = {{64, 512}, {32, 100}, xt::zeros<float>({std::size_t{32}, std::size_t{100}})};
    ckpt::restore_into(tmp / f, part);
    CHECK(part.w.local == xt::view(s.w, xt::range(32, 64), xt::range(100, 200)));
  }
  // A damaged chunk outside the box does not stop it; the whole array is refused, naming the chunk.
  test::write_bytes(tmp / "t5x/w/63.0", std::vector<char>(100, 'x'));
  ShardedState top;
  top.w = {{64, 512}, {0, 0}, xt::zeros<float>({std::size_t{32}, std::size_t{512}})};
  ckpt::restore_into(tmp / "t5x", top);
  CHECK(top.w.local == xt::view(s.w, xt::range(0, 32), xt::all()));
  CHECK_THROWS_CKPT(ckpt::restore<PlainState>(tmp / "t5x"), ckpt::CorruptCheckpointError, "w: chunk 63.0");
}

}  // namespace sharded_test

#if CKPT_TEST_MPI
// ---- many processes: run under mpirun by ctest (tests/CMakeLists.txt), each case in the
// run whose process count its name says (-tc="*np3*").

#include <ckpt/mpi.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(CKPT_HAVE_GCS)
#include <ckpt/storage/gcs.hpp>
#endif

#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

namespace sharded_test {
namespace {

// One directory every rank sees: rank 0 makes it, the others learn its path; removed
// after every rank is done with it.
class SharedDir {
 public:
  explicit SharedDir(const ckpt::mpi::Comm& comm) : comm_(comm) {
    std::string p;
    if (comm.rank() == 0) {
      dir_.emplace();
      p = dir_->path().string();
    }
    path_ = comm.broadcast(p, 0);
  }
  ~SharedDir() { comm_.barrier(); }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  const ckpt::mpi::Comm& comm_;
  std::optional<TempDir> dir_;
  fs::path path_;
};

// Runs f on rank 0 only; a failure there (an exception out of f) fails the test on rank
// 0 instead of leaving the test case while the other ranks wait in the next collective.
template <class F>
void on_rank0(const ckpt::mpi::Comm& world, F&& f) {
  if (world.rank() != 0) return;
  try {
    f();
  } catch (const std::exception& e) {
    FAIL_CHECK((std::string("rank 0 threw: ") + e.what()));
  }
}

// A communicator of the ranks whose color is `color` (MPI_UNDEFINED: none), freed after.
class SubComm {
 public:
  SubComm(const ckpt::mpi::Comm& parent, int color) {
    MPI_Comm_split(parent.get(), color, parent.rank(), &c_);
    if (c_ != MPI_COMM_NULL) comm_.emplace(c_);
  }
  ~SubComm() {
    if (c_ != MPI_COMM_NULL) MPI_Comm_free(&c_);
  }
  explicit operator bool() const { return comm_.has_value(); }
  const ckpt::mpi::Comm& operator*() const { return *comm_; }

 private:
  MPI_Comm c_ = MPI_COMM_NULL;
  std::optional<ckpt::mpi::Comm> comm_;
};

ShardedState rows_of(std::size_t rows, std::size_t cols, int rank, int size) {
  const auto [r0, nr] = split(rows, static_cast<std::size_t>(size), static_cast<std::size_t>(rank));
  ShardedState s;
  s.step = 42;
  s.w = box(rows, cols, r0, nr, 0, cols);
  s.bias = {0.5, 1.5, 2.5};
  return s;
}

ShardedState cols_target(std::size_t rows, std::size_t cols, int rank, int size) {
  const auto [c0, nc] = split(cols, static_cast<std::size_t>(size), static_cast<std::size_t>(rank));
  ShardedState s;
  s.w = {{rows, cols}, {0, c0}, xt::zeros<float>({rows, nc})};
  return s;
}

}  // namespace

TEST_CASE("mpi np3: saved by 2 ranks split by rows, restored on 3 split by columns and on 1 by blocks") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  {
    SubComm two(world, world.rank() < 2 ? 0 : MPI_UNDEFINED);
    if (two) ckpt::mpi::save(*two, dir / "c", rows_of(9, 7, (*two).rank(), 2));
  }
  world.barrier();

  ShardedState s = cols_target(9, 7, world.rank(), 3);
  ckpt::mpi::restore_into(world, dir / "c", s);
  const auto [c0, nc] = split(7, 3, static_cast<std::size_t>(world.rank()));
  CHECK(s.step == 42);
  CHECK(s.bias == std::vector<double>{0.5, 1.5, 2.5});
  CHECK(s.w.local == box(9, 7, 0, 9, c0, nc).local);

  on_rank0(world, [&] {  // one process, no MPI: the whole array, or a 2x2 block
    CHECK(ckpt::restore<PlainState>(dir / "c").w == global_w(9, 7));
    ShardedState b;
    b.w = {{9, 7}, {3, 5}, xt::zeros<float>({2, 2})};
    ckpt::restore_into(dir / "c", b);
    CHECK(b.w.local == box(9, 7, 3, 2, 5, 2).local);
    CHECK(ckpt::open_index(dir / "c")->info().processes == 2);
  });
}

TEST_CASE("mpi np3: column strips of boxes saved by 2 ranks' rows read the tiles they need, verified") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  {
    SubComm two(world, world.rank() < 2 ? 0 : MPI_UNDEFINED);  // boxes of 384 rows of 4 KiB
    if (two) ckpt::mpi::save(*two, dir / "c", rows_of(768, 1024, (*two).rank(), 2));
  }
  world.barrier();
  ShardedState s = cols_target(768, 1024, world.rank(), 3);
  ::setenv("CKPT_IO_URING", "0", 1);  // rchar counts pread's bytes, not io_uring's
  const std::uint64_t before = test::bytes_read();
  ckpt::mpi::restore_into(world, dir / "c", s);
  const std::uint64_t read = test::bytes_read() - before;
  ::unsetenv("CKPT_IO_URING");
  const auto [c0, nc] = split(1024, 3, static_cast<std::size_t>(world.rank()));
  CHECK(s.w.local == box(768, 1024, 0, 768, c0, nc).local);
  const std::uint64_t wanted = 768 * nc * 4;
  CHECK(read >= wanted);
  CHECK(read < wanted + wanted / 4 + 128 * 1024);  // tiles of 32 columns, and the manifest; not whole rows
  on_rank0(world, [&] {  // each writing rank's tile checksums reached the manifest
    const auto index = ckpt::open_index(dir / "c");
    const auto& boxes = index->find(ckpt::Path({"w"}))->boxes;
    REQUIRE(boxes.size() == 2);
    for (const auto& b : boxes) {
      CHECK(b.tile_bytes == 128);
      CHECK(b.tile_rows == 384);
      CHECK(b.tiles.size() == 32);
    }
  });
}

TEST_CASE("mpi np3: 10 rows on 3 ranks; restore<T> gives each rank its saved box, or says to use restore_into") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  ckpt::mpi::save(world, dir / "c", rows_of(10, 3, world.rank(), 3));
  const auto back = ckpt::mpi::restore<ShardedState>(world, dir / "c");
  const auto want = rows_of(10, 3, world.rank(), 3);
  CHECK(back.w.global_shape == want.w.global_shape);
  CHECK(back.w.offset == want.w.offset);
  CHECK(back.w.local == want.w.local);
  CHECK(back.bias == want.bias);
  // every rank's row count as saved: 4, 3, 3
  CHECK(back.w.local.shape()[0] == (world.rank() == 0 ? 4u : 3u));

  SubComm two(world, world.rank() < 2 ? 0 : MPI_UNDEFINED);
  if (two)
    CHECK_THROWS_CKPT(ckpt::mpi::restore<ShardedState>(*two, dir / "c"), ckpt::Error,
                      "saved by 3 processes, restored on 2: ckpt::mpi::restore<T> restores the saved layout only; use "
                      "ckpt::mpi::restore_into");
}

TEST_CASE("mpi np4: replicas are written once; large replicated leaves are spread over the ranks") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  struct State {
    ckpt::Sharded<std::vector<float>> w;  // 2 shards, each held by 2 ranks (data-parallel replicas)
    xt::xtensor<double, 2> embed;         // replicated, 4 MiB: split by rows over the 4 ranks
    xt::xtensor<float, 2> one_row;        // replicated, one row of 1.14 MiB: written whole by one rank
  };
  const std::size_t n = (1 << 18) + 1024;  // floats per shard: 1 MiB + 4 KiB, two checksum pieces
  State s;
  s.one_row = xt::zeros<float>({std::size_t{1}, std::size_t{292 * 1024}});
  for (std::size_t i = 0; i < s.one_row.size(); ++i) s.one_row.data()[i] = static_cast<float>(i) * 0.25f;
  const std::size_t shard = static_cast<std::size_t>(world.rank() % 2);
  s.w = {{2 * n}, {shard * n}, std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) s.w.local[i] = static_cast<float>(shard * n + i);
  s.embed = xt::zeros<double>({std::size_t{512}, std::size_t{1024}});
  for (std::size_t i = 0; i < s.embed.size(); ++i) s.embed.data()[i] = static_cast<double>(i % 1000);
  // Each rank reports its own share of the writing to its progress callback.
  ckpt::Progress last{};
  int calls = 0;
  ckpt::mpi::save(world, dir / "c", s, {.progress = [&](const ckpt::Progress& p) {
                                          last = p;
                                          ++calls;
                                          return true;
                                        }});
  CHECK(calls >= 2);
  CHECK(last.bytes_done == last.bytes_total);
  CHECK(last.bytes_total > 0);  // every rank writes a part (below)
  CHECK(last.leaves_done == last.leaves_total);

  on_rank0(world, [&] {
    std::uintmax_t on_disk = 0;
    for (int r = 0; r < 4; ++r) {
      const fs::path f = dir / ("c/data-" + std::to_string(r));
      CHECK(fs::exists(f));  // every rank wrote a part
      on_disk += fs::exists(f) ? fs::file_size(f) : 0;
    }
    CHECK(on_disk == 2 * n * sizeof(float) + s.embed.size() * sizeof(double) + s.one_row.size() * sizeof(float));  // each byte once
    const auto whole = ckpt::restore_tree(dir / "c");
    CHECK(whole.leaf("one_row").as<xt::xtensor<float, 2>>() == s.one_row);
    const auto w = whole.leaf("w").as<std::vector<float>>();
    CHECK(w.size() == 2 * n);
    CHECK(w[n + 5] == static_cast<float>(n + 5));
    CHECK(whole.leaf("embed").as<xt::xtensor<double, 2>>() == s.embed);
  });
  // Each rank's own box back, and load_and_broadcast: rank 0 reads `embed` for everyone.
  State t;
  t.w = {{2 * n}, {(3 - shard) % 2 * n}, std::vector<float>(n)};
  ckpt::mpi::restore_into(world, dir / "c", t, {.load_and_broadcast = true});
  CHECK(t.embed == s.embed);
  CHECK(t.one_row == s.one_row);
  CHECK(t.w.local[7] == static_cast<float>((1 - shard) * n + 7));
}

namespace {
// A state of every kind of leaf a zarr-based collective save handles, on 4 ranks.
struct ZarrState {
  std::int64_t step = 0;
  ckpt::Sharded<xt::xtensor<float, 2>> rows;     // 16 x 6, 4 rows per rank
  ckpt::Sharded<xt::xtensor<double, 2>> blocks;  // 8 x 11 in 2 x 2 blocks (columns 6 + 5)
  ckpt::Sharded<std::vector<std::int32_t>> uneven;  // 10 over 4 ranks: 3, 3, 2, 2
  ckpt::Sharded<std::vector<float>> replicas;    // 2 halves, each held by 2 ranks
  xt::xtensor<float, 2> embed;                   // every rank's the same: 300 x 1000
  std::string name;
};

double block_value(std::size_t i, std::size_t j) { return static_cast<double>(1000 * i + j) + 0.5; }
float embed_value(std::size_t i, std::size_t j) { return static_cast<float>((1000 * i + j) % 997); }

ZarrState zarr_state(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  ZarrState s;
  s.step = 7;
  s.rows = box(16, 6, 4 * r, 4, 0, 6);
  const std::size_t br = r / 2 * 4, bc = r % 2 * 6, nc = r % 2 ? 5 : 6;
  s.blocks = {{8, 11}, {br, bc}, xt::zeros<double>({std::size_t{4}, nc})};
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < nc; ++j) s.blocks.local(i, j) = block_value(br + i, bc + j);
  const auto [u0, un] = split(10, 4, r);
  s.uneven = {{10}, {u0}, std::vector<std::int32_t>(un)};
  for (std::size_t i = 0; i < un; ++i) s.uneven.local[i] = static_cast<std::int32_t>(7 * (u0 + i));
  const std::size_t half = r % 2;
  s.replicas = {{64}, {32 * half}, std::vector<float>(32)};
  for (std::size_t i = 0; i < 32; ++i) s.replicas.local[i] = static_cast<float>(32 * half + i);
  s.embed = xt::zeros<float>({std::size_t{300}, std::size_t{1000}});
  for (std::size_t i = 0; i < 300; ++i)
    for (std::size_t j = 0; j < 1000; ++j) s.embed(i, j) = embed_value(i, j);
  s.name = "zarr by ranks";
  return s;
}

// The global arrays of zarr_state, checked in a tree restored by one process.
void check_zarr_tree(const ckpt::Tree& t, const std::string& name_path) {
  CHECK(t.leaf("step").as<std::int64_t>() == 7);
  CHECK(t.leaf("rows").as<xt::xtensor<float, 2>>() == global_w(16, 6));
  const auto b = t.leaf("blocks").as<xt::xtensor<double, 2>>();
  REQUIRE(b.shape(0) == 8);
  REQUIRE(b.shape(1) == 11);
  bool blocks_ok = true;
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 11; ++j) blocks_ok = blocks_ok && b(i, j) == block_value(i, j);
  CHECK(blocks_ok);
  std::vector<std::int32_t> u(10);
  for (std::size_t i = 0; i < 10; ++i) u[i] = static_cast<std::int32_t>(7 * i);
  CHECK(t.leaf("uneven").as<std::vector<std::int32_t>>() == u);
  std::vector<float> rep(64);
  std::iota(rep.begin(), rep.end(), 0.0f);
  CHECK(t.leaf("replicas").as<std::vector<float>>() == rep);
  CHECK(t.leaf("embed").as<xt::xtensor<float, 2>>() == zarr_state(0).embed);
  CHECK(t.leaf(name_path).as<std::string>() == "zarr by ranks");
}

// zarr-python (the oracle) reads the arrays in `dir` as the global arrays.
const char* zarr_oracle = R"(
import sys, numpy as np, zarr
d = sys.argv[1]
def arr(name): return zarr.open_array(d + "/" + name, mode="r")
i, j = np.indices((16, 6)); assert (arr("rows")[:] == (100 * i + j).astype(np.float32)).all()
i, j = np.indices((8, 11)); assert (arr("blocks")[:] == 1000.0 * i + j + 0.5).all()
assert arr("blocks").chunks == (4, 6), arr("blocks").chunks
assert (arr("uneven")[:] == 7 * np.arange(10)).all() and arr("uneven").chunks == (1,)
assert (arr("replicas")[:] == np.arange(64)).all() and arr("replicas").chunks == (32,)
i, j = np.indices((300, 1000)); e = arr("embed"); assert (e[:] == ((1000 * i + j) % 997).astype(np.float32)).all()
assert e.chunks[0] < 300, e.chunks
print("zarr-python agrees")
)";

// The same arrays, read from an Orbax OCDBT item by the independent OCDBT decoder.
std::string ocdbt_oracle() {
  return "import importlib.util, sys, numpy as np\n"
         "spec = importlib.util.spec_from_file_location('o', '" +
         (fs::path(CKPT_FIXTURES_DIR) / "orbax/ocdbt_compat_202603/oracle_ocdbt.py").string() +
         "')\n"
         "o = importlib.util.module_from_spec(spec); spec.loader.exec_module(o)\n"
         "items = list(o.OcdbtDb(sys.argv[1]).items())\n"
         "kv = {k: v for k, v, h in items}\n"
         "def arr(name): return o.decode_zarr(kv, name)[1]\n"
         "i, j = np.indices((16, 6)); assert (arr('rows') == (100 * i + j).astype(np.float32)).all()\n"
         "i, j = np.indices((8, 11)); assert (arr('blocks') == 1000.0 * i + j + 0.5).all()\n"
         "assert (arr('uneven') == 7 * np.arange(10)).all()\n"
         "assert (arr('replicas') == np.arange(64)).all()\n"
         "i, j = np.indices((300, 1000)); assert (arr('embed') == ((1000 * i + j) % 997).astype(np.float32)).all()\n"
         "# large chunks stay in the process databases' files, referred to from the root\n"
         "assert any('indirect:ocdbt.process_' in h for k, v, h in items), [h for k, v, h in items]\n"
         "print('OCDBT oracle agrees')\n";
}
}  // namespace

TEST_CASE("mpi np4: t5x and Orbax (OCDBT or not) written by 4 ranks, each its chunks; zarr-python and the OCDBT oracle read them") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  const ZarrState s = zarr_state(world.rank());
  // max_memory 1 MiB: chunks of at most 256 KiB, so `embed` (1.2 MB) is cut in five,
  // written by several ranks
  ckpt::Progress last{};
  ckpt::mpi::save<ckpt::t5x>(world, dir / "t5x", s, {.progress = [&](const ckpt::Progress& p) {
                                                        last = p;
                                                        return true;
                                                      },
                                                      .max_memory = 1 << 20});
  CHECK(last.bytes_done == last.bytes_total);
  CHECK(last.bytes_total > 0);  // every rank writes some chunks
  ckpt::mpi::save<ckpt::orbax_without_ocdbt>(world, dir / "orbax", s, {.max_memory = 1 << 20});
  ckpt::mpi::save<ckpt::orbax>(world, dir / "ocdbt", s, {.max_memory = 1 << 20});  // per-process databases, merged
  on_rank0(world, [&] {
    CHECK(ckpt::open_index(dir / "t5x")->info().format == "t5x");
    check_zarr_tree(ckpt::restore_tree(dir / "t5x"), "name");
    check_zarr_tree(ckpt::restore_tree(dir / "orbax"), "name");
    CHECK(test::python(zarr_oracle, dir / "t5x").find("zarr-python agrees") != std::string::npos);
    CHECK(test::python(zarr_oracle, dir / "orbax/default").find("zarr-python agrees") != std::string::npos);
    CHECK(fs::exists(dir / "orbax/default/_METADATA"));
    check_zarr_tree(ckpt::restore_tree(dir / "ocdbt"), "name");
    for (int r = 0; r < 4; ++r) CHECK(fs::exists(dir / ("ocdbt/default/ocdbt.process_" + std::to_string(r) + "/manifest.ocdbt")));
    CHECK(test::python(ocdbt_oracle(), dir / "ocdbt/default").find("OCDBT oracle agrees") != std::string::npos);
    for (const auto& e : fs::directory_iterator(dir / "")) CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
  });
  // Restored on 4 ranks onto another split: `rows` by columns.
  ZarrState t = zarr_state(world.rank());
  const auto [c0, nc] = split(6, 4, static_cast<std::size_t>(world.rank()));
  t.rows = {{16, 6}, {0, c0}, xt::zeros<float>({std::size_t{16}, nc})};
  t.embed.fill(0);
  ckpt::mpi::restore_into(world, dir / "t5x", t);
  CHECK(t.rows.local == box(16, 6, 0, 16, c0, nc).local);
  CHECK(t.embed == s.embed);
  // and from Orbax's layouts, `blocks` (saved as 2 x 2 blocks) in strips of two rows:
  // each rank decodes the chunks its strip meets
  for (const char* f : {"orbax", "ocdbt"}) {
    CAPTURE(f);
    ZarrState b = zarr_state(world.rank());
    const auto r = static_cast<std::size_t>(world.rank());
    b.blocks = {{8, 11}, {2 * r, 0}, xt::zeros<double>({std::size_t{2}, std::size_t{11}})};
    ckpt::mpi::restore_into(world, dir / f, b);
    bool strip_ok = true;
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 11; ++j) strip_ok = strip_ok && b.blocks.local(i, j) == block_value(2 * r + i, j);
    CHECK(strip_ok);
  }

  // Boxes that leave a gap: zarr stores every element, so no checkpoint, on any rank.
  ZarrState g = zarr_state(world.rank());
  if (world.rank() == 3) g.rows = box(16, 6, 12, 3, 0, 6);  // row 15 is nobody's
  CHECK_THROWS_CKPT(ckpt::mpi::save<ckpt::t5x>(world, dir / "gap", g), ckpt::Error,
                    "rows: the ranks' boxes hold 90 of the 96 elements of the global array");
  CHECK_FALSE(fs::exists(dir / "gap"));
}

TEST_CASE("mpi np2: a rank failing mid-save leaves no checkpoint, every rank hears which, the previous one stays") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  ShardedState s = rows_of(1024, 256, world.rank(), 2);  // 512 KiB per rank
  ckpt::mpi::save(world, dir / "1", s);

  s.step = 43;
  rlimit old{};
  if (world.rank() == 1) {  // rank 1 may write 64 KiB per file, then EFBIG
    std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    rlimit small = old;
    small.rlim_cur = 64 << 10;
    setrlimit(RLIMIT_FSIZE, &small);
  }
  CHECK_THROWS_CKPT(ckpt::mpi::save(world, dir / "2", s), ckpt::Error, "rank 1 of 2 failed: ");
  if (world.rank() == 1) setrlimit(RLIMIT_FSIZE, &old);
  world.barrier();
  on_rank0(world, [&] {
    CHECK_FALSE(fs::exists(dir / "2"));
    for (const auto& e : fs::directory_iterator(dir / "")) CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
  });
  const auto back = ckpt::mpi::restore<ShardedState>(world, dir / "1");
  CHECK(back.step == 42);
  // Every rank throws the kind of error the failing rank threw: a target whose global
  // shape is wrong on rank 1 only is a ShapeMismatchError on both.
  ShardedState wrong = rows_of(1024, 256, world.rank(), 2);
  if (world.rank() == 1) wrong.w = {{1024, 255}, {0, 0}, xt::zeros<float>({std::size_t{4}, std::size_t{255}})};
  CHECK_THROWS_CKPT(ckpt::mpi::restore_into(world, dir / "1", wrong), ckpt::ShapeMismatchError, "rank 1 of 2 failed: ");
  CHECK(back.w.local == rows_of(1024, 256, world.rank(), 2).w.local);

  // A leaf that is not Sharded must agree across ranks: the error names it on every rank.
  ShardedState d = rows_of(4, 4, world.rank(), 2);
  d.bias[1] = world.rank();
  CHECK_THROWS_CKPT(ckpt::mpi::save(world, dir / "3", d), ckpt::Error,
                    "bias: a leaf that is not Sharded must be equal on every rank; rank 1 holds another value");
  CHECK_FALSE(fs::exists(dir / "3"));
}

TEST_CASE("mpi np2: restores are strict on every rank: a target that leaves leaves unused is refused, or partial") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  ckpt::mpi::save(world, dir / "c", rows_of(8, 4, world.rank(), 2));
  struct NoBias {
    std::int64_t step = 0;
    ckpt::Sharded<xt::xtensor<float, 2>> w;
  };
  // The saved layout: every rank refuses a target without bias, naming it.
  try {
    (void)ckpt::mpi::restore<NoBias>(world, dir / "c");
    FAIL("restored without bias, not asked to");
  } catch (const ckpt::UnusedLeafError& e) {
    CHECK(e.unused_count() == 1);
    CHECK(e.unused_paths() == std::vector<std::string>{"bias"});
    CHECK(std::string(e.what()).find("the target does not use 1 leaf of the checkpoint: bias") != std::string::npos);
  }
  const NoBias part = ckpt::mpi::restore<NoBias>(world, dir / "c", {.partial = true});
  CHECK(part.step == 42);
  CHECK(part.w.local == rows_of(8, 4, world.rank(), 2).w.local);

  // Another layout, read by every rank or loaded by rank 0 and broadcast.
  NoBias into;
  into.w = cols_target(8, 4, world.rank(), 2).w;
  CHECK_THROWS_CKPT(ckpt::mpi::restore_into(world, dir / "c", into), ckpt::UnusedLeafError, "bias");
  CHECK_THROWS_CKPT(ckpt::mpi::restore_into(world, dir / "c", into, {.load_and_broadcast = true}),
                    ckpt::UnusedLeafError, "bias");
  ckpt::mpi::restore_into(world, dir / "c", into, {.partial = true, .load_and_broadcast = true});
  const auto [c0, nc] = split(4, 2, static_cast<std::size_t>(world.rank()));
  CHECK(into.step == 42);
  CHECK(into.w.local == box(8, 4, 0, 8, c0, nc).local);
  // The whole state uses every leaf, its Sharded one too.
  ShardedState whole = cols_target(8, 4, world.rank(), 2);
  ckpt::mpi::restore_into(world, dir / "c", whole);
  CHECK(whole.bias == std::vector<double>{0.5, 1.5, 2.5});

  // The manager across ranks: the same, .partial passed through.
  {
    ckpt::mpi::CheckpointManager<ShardedState> mgr(world, dir / "run");
    mgr.save(1, rows_of(8, 4, world.rank(), 2));
    mgr.wait_until_finished();
  }
  ckpt::mpi::CheckpointManager<NoBias> smaller(world, dir / "run", {.read_only = true});
  CHECK_THROWS_CKPT(smaller.restore(1), ckpt::UnusedLeafError, "bias");
  CHECK(smaller.restore(1, {.partial = true}).w.local == rows_of(8, 4, world.rank(), 2).w.local);
}

TEST_CASE("mpi np2: the manager across ranks: same steps everywhere, retention by rank 0, async saves") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save> mgr(world, dir / "run", {.max_to_keep = 2});
    for (std::int64_t step = 0; step < 5; ++step) {
      ShardedState s = rows_of(64, 16, world.rank(), 2);
      s.step = step;
      CHECK(mgr.save(step, s, {{"loss", 1.0 / static_cast<double>(step + 1)}}));
    }
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{3, 4});
    on_rank0(world, [&] {
      CHECK(fs::exists(dir / "run/4"));
      CHECK_FALSE(fs::exists(dir / "run/2"));
    });
    const auto back = mgr.restore();
    CHECK(back.step == 4);
    CHECK(back.w.local == rows_of(64, 16, world.rank(), 2).w.local);
    CHECK(mgr.metrics(3).at("loss") == doctest::Approx(0.25));
  }
  // A new manager (a restarted job) sees the same steps on every rank.
  ckpt::mpi::CheckpointManager<ShardedState> again(world, dir / "run", {.max_to_keep = 2});
  static_assert(std::is_same_v<decltype(again)::coordination_type, ckpt::mpi::ranks>);
  CHECK(again.comm().size() == world.size());
  CHECK(again.latest_step() == 4);
  ShardedState latest = cols_target(64, 16, world.rank(), 2);
  again.restore_latest_into(latest);
  CHECK(latest.step == 4);
  // The ranks write a place they all reach: a process's memory is refused on every rank.
  CHECK_THROWS_CKPT(ckpt::mpi::CheckpointManager<ShardedState>(world, "mem://run"), ckpt::Error,
                    "lives in one process");
  ShardedState s = cols_target(64, 16, world.rank(), 2);
  again.restore_into(3, s);
  CHECK(s.step == 3);
  const auto [c0, nc] = split(16, 2, static_cast<std::size_t>(world.rank()));
  CHECK(s.w.local == box(64, 16, 0, 64, c0, nc).local);
  // The next version of the struct restores the saved layout through a migration.
  const auto m = ckpt::migration<ShardedState, ShardedStateV2>(ckpt::rename<"w", "weight">);
  ckpt::mpi::CheckpointManager<ShardedStateV2> v2(world, dir / "run", {.read_only = true});
  const ShardedStateV2 migrated = v2.restore(std::nullopt, m);
  CHECK(migrated.step == 4);
  CHECK(migrated.weight.local == rows_of(64, 16, world.rank(), 2).w.local);
  CHECK(migrated.weight.offset == rows_of(64, 16, world.rank(), 2).w.offset);
  CHECK(ckpt::mpi::restore<ShardedStateV2>(world, dir / "run/3", ckpt::chain(m)).step == 3);
}

TEST_CASE("mpi np2: the manager across ranks writes Orbax (OCDBT) and t5x steps, restored onto another layout") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  const std::string own = "dataset-" + std::to_string(world.rank());
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save, ckpt::orbax> mgr(world, dir / "orbax", {.max_to_keep = 2});
    for (std::int64_t step = 0; step < 4; ++step) {
      ShardedState s = rows_of(64, 16, world.rank(), 2);
      s.step = step;
      ckpt::SaveArgs args;
      args.items.emplace(own, ckpt::tree_item(Position{world.rank(), {step}}));
      CHECK(mgr.save(step, s, {{"loss", 1.0 / static_cast<double>(step + 1)}}, std::move(args)));
    }
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2, 3});
    on_rank0(world, [&] {
      CHECK_FALSE(fs::exists(dir / "orbax/1"));
      CHECK(fs::exists(dir / "orbax/3/_CHECKPOINT_METADATA"));
      CHECK(fs::exists(dir / "orbax/3/default/manifest.ocdbt"));
      CHECK(fs::exists(dir / "orbax/3/default/ocdbt.process_1/manifest.ocdbt"));
      // one process reads the steps as Orbax's: the global array, the metrics
      ckpt::CheckpointManager<PlainState, ckpt::orbax> one(dir / "orbax", {.read_only = true});
      CHECK(one.all_steps() == std::vector<std::int64_t>{2, 3});
      CHECK(one.metrics(2).at("loss") == doctest::Approx(1.0 / 3));
      const auto plain = one.restore(3);
      CHECK(plain.step == 3);
      CHECK(plain.w == global_w(64, 16));
    });
    // Orbax keeps the global arrays, not which rank held which box: restore_into says where
    CHECK_THROWS_CKPT(mgr.restore(), ckpt::Error, "does not record the boxes each rank saved");
    ShardedState s = cols_target(64, 16, world.rank(), 2);
    mgr.restore_into(3, s);
    CHECK(s.step == 3);
    const auto [c0, nc] = split(16, 2, static_cast<std::size_t>(world.rank()));
    CHECK(s.w.local == box(64, 16, 0, 64, c0, nc).local);
    CHECK(mgr.restore_item<Position>(2, "dataset-" + std::to_string(1 - world.rank())).offsets ==
          std::vector<std::int64_t>{2});
  }
  // t5x, saved on the caller's thread; a restarted job's manager finds the step
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::t5x> mgr(world, dir / "t5x");
    CHECK(mgr.save(7, rows_of(64, 16, world.rank(), 2)));
  }
  ckpt::mpi::CheckpointManager<ShardedState, ckpt::t5x> again(world, dir / "t5x");
  CHECK(again.latest_step() == 7);
  ShardedState s = cols_target(64, 16, world.rank(), 2);
  again.restore_into(7, s);
  const auto [c0, nc] = split(16, 2, static_cast<std::size_t>(world.rank()));
  CHECK(s.w.local == box(64, 16, 0, 64, c0, nc).local);
  CHECK(s.bias == std::vector<double>{0.5, 1.5, 2.5});
  on_rank0(world, [&] { CHECK(ckpt::open_index(dir / "t5x/7")->info().format == "t5x"); });
}

TEST_CASE("mpi np2: the manager across ranks ranks steps by a TensorBoard metric and reports each rank's figures") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  on_rank0(world, [&] {  // run "train" beside the root, as t5x's model_dir/train
    ckpt::tensorboard::EventFileWriter w(dir / "train");
    const float acc[] = {0.5f, 0.9f, 0.7f, 0.6f};
    for (std::int64_t step = 1; step <= 4; ++step) w.add_scalar("accuracy", acc[step - 1], step);
    w.flush();
  });
  world.barrier();
  std::vector<ckpt::SaveStats> seen;
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save> mgr(
        world, dir / "checkpoints",
        {.max_to_keep = 2, .best_metric = "train/accuracy", .best_metric_from_tensorboard = true,
         .on_save = [&](const ckpt::SaveStats& st) { seen.push_back(st); }});
    for (std::int64_t step = 1; step <= 5; ++step) mgr.save(step, rows_of(64, 16, world.rank(), 2));
    mgr.wait_until_finished();
    // the best two by accuracy (2: 0.9, 3: 0.7) and the latest (5, no value), on every rank
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2, 3, 5});
    CHECK(mgr.best_step() == 2);
  }
  REQUIRE(seen.size() == 5);
  CHECK(seen.back().step == 5);
  CHECK(seen.back().bytes >= 32 * 16 * sizeof(float));  // this rank's rows at least
  CHECK(seen.back().write_seconds > 0);
  on_rank0(world, [&] {
    const auto bytes = test::read_bytes(dir / "checkpoints/5/_CHECKPOINT_METADATA");
    const auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
    CHECK(j.at("save_stats").at("bytes").get<std::uint64_t>() == seen.back().bytes);
  });
}

TEST_CASE("mpi np2: guard_non_finite across ranks: a NaN in one rank's shard marks the step on every rank") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<ckpt::SaveStats> seen;
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save> mgr(
        world, dir / "run",
        {.max_to_keep = 2, .guard_non_finite = true, .on_save = [&](const ckpt::SaveStats& st) { seen.push_back(st); }});
    for (std::int64_t step = 1; step <= 4; ++step) {
      ShardedState s = rows_of(64, 16, world.rank(), 2);
      s.step = step;
      if (step > 1 && world.rank() == 1) {  // rank 1's rows only: two NaN and an infinity
        s.w.local(0, 0) = nan;
        s.w.local(5, 3) = nan;
        s.w.local(31, 15) = std::numeric_limits<float>::infinity();
      }
      if (step == 4) s.bias[1] = nan;  // replicated, inline: counted once (rank 0 writes it), not per rank
      mgr.save(step, s);
    }
    mgr.wait_until_finished();
    // the two newest, and the newest finite step, on every rank
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{1, 3, 4});
    CHECK(mgr.latest_finite_step() == 1);
    CHECK(mgr.is_finite(1));
    CHECK(!mgr.is_finite(4));
  }
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].non_finite_values == 0);
  CHECK(seen[1].non_finite_values == 3);  // summed over the ranks, on each
  CHECK(seen[2].non_finite_values == 3);
  CHECK(seen[3].non_finite_values == 4);
  on_rank0(world, [&] {
    const auto bytes = test::read_bytes(dir / "run/4/_CHECKPOINT_METADATA");
    const auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
    CHECK(j.at("finite") == false);
    CHECK(j.at("save_stats").at("non_finite_values") == 4);
  });
  // a restarted job agrees
  ckpt::mpi::CheckpointManager<ShardedState> again(world, dir / "run", {.max_to_keep = 2, .guard_non_finite = true});
  CHECK(again.latest_finite_step() == 1);
  CHECK(!again.is_finite(3));
  CHECK(again.restore(again.latest_finite_step()).step == 1);
}

TEST_CASE("mpi np2: incremental saves across ranks: each rank links the pieces that did not change") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  struct Big {
    std::int64_t step = 0;
    ckpt::Sharded<std::vector<float>> w;  // one box per rank, 1 MiB + 4 KiB each
    xt::xtensor<float, 2> frozen;         // replicated 600 x 1024: split by rows, 1.17 MiB a rank
  };
  const std::size_t n = (1 << 18) + 1024;
  const auto r = static_cast<std::size_t>(world.rank());
  auto make = [&](std::int64_t step, float scale) {
    Big b;
    b.step = step;
    b.w = {{2 * n}, {r * n}, std::vector<float>(n)};
    for (std::size_t i = 0; i < n; ++i) b.w.local[i] = static_cast<float>(r * n + i) * scale;
    b.frozen = xt::zeros<float>({std::size_t{600}, std::size_t{1024}});
    for (std::size_t i = 0; i < b.frozen.size(); ++i) b.frozen.data()[i] = static_cast<float>(i % 1000);
    return b;
  };
  const std::uint64_t box_bytes = n * sizeof(float), half_frozen = 300 * 1024 * sizeof(float);
  std::vector<ckpt::SaveStats> seen;
  {
    ckpt::mpi::CheckpointManager<Big, ckpt::async_save> mgr(
        world, dir / "run",
        {.max_to_keep = 2, .incremental = true, .on_save = [&](const ckpt::SaveStats& st) { seen.push_back(st); }});
    mgr.save(0, make(0, 1.0f));
    mgr.save(1, make(1, 1.0f));                           // only the (inline) step changed
    mgr.save(2, make(2, world.rank() == 1 ? 2.0f : 1.0f));  // and now rank 1's box
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{1, 2});
  }
  REQUIRE(seen.size() == 3);
  // Each rank wrote its box and half of `frozen` (one piece each, in files of their own).
  CHECK(seen[0].incremental);
  CHECK(seen[0].bytes_linked == 0);
  CHECK(seen[0].bytes_written == box_bytes + half_frozen);
  CHECK(seen[1].bytes_linked == box_bytes + half_frozen);
  CHECK(seen[1].bytes_written == 0);
  CHECK(seen[1].leaves_linked == 2);
  CHECK(seen[2].bytes_linked == (world.rank() == 1 ? half_frozen : box_bytes + half_frozen));
  CHECK(seen[2].bytes_written == (world.rank() == 1 ? box_bytes : 0));

  // Step 0 is gone (retention): steps 1 and 2 still restore, on this layout and whole.
  ckpt::mpi::CheckpointManager<Big> ro(world, dir / "run", {.read_only = true});
  const Big one = ro.restore(1), two = ro.restore(2);
  CHECK(one.step == 1);
  CHECK(one.w.local == make(1, 1.0f).w.local);
  CHECK(two.w.local == make(2, world.rank() == 1 ? 2.0f : 1.0f).w.local);
  CHECK(two.frozen == make(2, 1.0f).frozen);
  on_rank0(world, [&] {
    const auto whole = ckpt::restore_tree(dir / "run/2");  // every checksum verified, no manager around
    const auto w = whole.leaf("w").as<std::vector<float>>();
    CHECK(w[5] == 5.0f);
    CHECK(w[n + 5] == static_cast<float>(n + 5) * 2.0f);
    // On disk, the two steps hold one state and the one box that changed: every other
    // data file of step 2 is a second name of step 1's.
    std::map<std::pair<std::uintmax_t, std::uintmax_t>, std::uintmax_t> inodes;  // (dev, ino) -> size
    std::size_t files = 0;
    for (const char* step : {"run/1", "run/2"})
      for (const auto& e : fs::directory_iterator(dir / step)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("data-", 0) != 0) continue;
        struct stat st {};
        REQUIRE(::stat(e.path().c_str(), &st) == 0);
        inodes[{st.st_dev, st.st_ino}] = static_cast<std::uintmax_t>(st.st_size);
        ++files;
      }
    CHECK(files == 8);  // 2 boxes + 2 halves of frozen, in each step
    std::uintmax_t distinct = 0;
    for (const auto& [id, size] : inodes) distinct += size;
    CHECK(distinct == 3 * box_bytes + 2 * half_frozen);
  });
}

TEST_CASE("mpi np2: items across ranks: each rank's own, a shared one written once, any rank reads any") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  const std::string own = "dataset-" + std::to_string(world.rank());
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save> mgr(world, dir / "run");
    ShardedState s = rows_of(8, 4, world.rank(), 2);
    ckpt::SaveArgs args;
    args.items.emplace(own, ckpt::tree_item(Position{world.rank(), {10 * world.rank(), 7}}));  // a temporary: copied
    args.items.emplace("config", ckpt::json_item({{"lr", 0.5}}));
    CHECK(mgr.save(1, s, {}, std::move(args)));
    mgr.wait_until_finished();
    CHECK(mgr.item_names(1) == std::vector<std::string>{"config", "dataset-0", "dataset-1"});
    const auto other = mgr.restore_item<Position>(1, "dataset-" + std::to_string(1 - world.rank()));
    CHECK(other.shard == 1 - world.rank());
    CHECK(other.offsets == std::vector<std::int64_t>{10 * (1 - world.rank()), 7});
    CHECK(mgr.item_json(1, "config").at("lr") == 0.5);
    CHECK_THROWS_WITH_AS(mgr.item_json(1, own), doctest::Contains("is a tree item, not a json item"), ckpt::Error);
    // one kind per name on every rank: the same error everywhere, nothing saved
    ckpt::SaveArgs clash;
    if (world.rank() == 0) clash.items.emplace("x", ckpt::json_item(1));
    else clash.items.emplace("x", ckpt::tree_item(Position{}));
    CHECK_THROWS_WITH_AS(mgr.save(2, s, {}, std::move(clash)),
                         doctest::Contains("\"x\" is a json item on rank 0 and a tree item on rank 1"), ckpt::Error);
    // an invalid name on one rank: every rank hears it (none waits forever in the gather)
    ckpt::SaveArgs hidden;
    if (world.rank() == 1) hidden.items.emplace(".hidden", ckpt::json_item(1));
    CHECK_THROWS_WITH_AS(mgr.save(2, s, {}, std::move(hidden)), doctest::Contains("invalid item name"), ckpt::Error);
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{1});
  }
  world.barrier();
  on_rank0(world, [&] {  // on disk: each item once, in the committed step
    CHECK(fs::is_directory(dir / "run/1/items/dataset-0"));
    CHECK(fs::is_directory(dir / "run/1/items/dataset-1"));
    CHECK(fs::is_regular_file(dir / "run/1/items/config.json"));
  });
  // a restarted job's manager lists them, and a one-process manager reads them too
  ckpt::mpi::CheckpointManager<ShardedState> again(world, dir / "run");
  CHECK(again.restore_item<Position>(1, own).shard == world.rank());
  CHECK(ckpt::CheckpointManager<ShardedState>(dir / "run", {.read_only = true}).item_json(1, "config").at("lr") == 0.5);
}

TEST_CASE("mpi np2: keep_dataset_checkpoints across ranks: older steps lose every rank's dataset item, the steps stay") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  const std::string own = "dataset-" + std::to_string(world.rank());
  const std::vector<std::string> all_items{"config", "dataset", "dataset-0", "dataset-1", "dataset-x"};
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save> mgr(world, dir / "run",
                                                                     {.keep_dataset_checkpoints = 2});
    for (std::int64_t step = 1; step <= 4; ++step) {
      ckpt::SaveArgs args;
      args.items.emplace(own, ckpt::tree_item(Position{world.rank(), {step}}));  // this rank's position
      args.items.emplace("dataset", ckpt::json_item({{"epoch", step}}));         // one every rank shares
      args.items.emplace("dataset-x", ckpt::json_item(1));  // not a rank number: not a dataset item
      args.items.emplace("config", ckpt::json_item({{"lr", 0.5}}));
      CHECK(mgr.save(step, rows_of(8, 4, world.rank(), 2), {}, std::move(args)));
    }
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{1, 2, 3, 4});
    CHECK(mgr.item_names(1) == std::vector<std::string>{"config", "dataset-x"});
    CHECK(mgr.item_names(2) == std::vector<std::string>{"config", "dataset-x"});
    CHECK(mgr.item_names(3) == all_items);
    CHECK(mgr.item_names(4) == all_items);
    CHECK(mgr.restore_item<Position>(3, "dataset-" + std::to_string(1 - world.rank())).offsets ==
          std::vector<std::int64_t>{3});
    CHECK_THROWS_AS(mgr.restore_item<Position>(2, own), ckpt::Error);
  }
  world.barrier();
  on_rank0(world, [&] {  // on disk: the items' files are gone, the metadata no longer lists them
    for (const char* step : {"1", "2"}) {
      CHECK_FALSE(fs::exists(dir / "run" / step / "items/dataset-0"));
      CHECK_FALSE(fs::exists(dir / "run" / step / "items/dataset-1"));
      CHECK_FALSE(fs::exists(dir / "run" / step / "items/dataset.json"));
      CHECK(fs::is_regular_file(dir / "run" / step / "items/config.json"));
      const auto bytes = test::read_bytes(dir / "run" / step / "_CHECKPOINT_METADATA");
      CHECK_FALSE(nlohmann::json::parse(bytes.begin(), bytes.end()).at("items").contains("dataset-0"));
    }
    CHECK(fs::is_directory(dir / "run/3/items/dataset-1"));
  });
  // a restarted job's manager sees the same, and the older steps still restore
  ckpt::mpi::CheckpointManager<ShardedState> again(world, dir / "run");
  CHECK(again.item_names(1) == std::vector<std::string>{"config", "dataset-x"});
  CHECK(again.item_names(4) == all_items);
  ShardedState back = rows_of(8, 4, world.rank(), 2);
  back.w.local.fill(-1.0f);
  again.restore_into(1, back);
  CHECK(back.w.local == rows_of(8, 4, world.rank(), 2).w.local);
}

TEST_CASE("mpi np2: a SIGTERM on one rank makes every rank save at the same step") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  struct sigaction dfl {}, old {};  // not doctest's crash handler: the default, which ckpt does not pass on
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGTERM, &dfl, &old);
  std::optional<ckpt::mpi::CheckpointManager<ShardedState>> m;
  m.emplace(world, dir / "run", ckpt::ManagerOptions{.save_interval_steps = 100, .save_on_preemption = true});
  auto& mgr = *m;
  std::vector<std::int64_t> saved;
  for (std::int64_t step = 0; step < 4 && saved.size() < 2; ++step) {
    if (step == 2 && world.rank() == 1) std::raise(SIGTERM);  // the notice reaches one rank only
    ShardedState s = rows_of(8, 4, world.rank(), 2);
    s.step = step;
    if (mgr.should_save(step)) {
      mgr.save(step, s);
      saved.push_back(step);
    }
  }
  CHECK(saved == std::vector<std::int64_t>{0, 2});
  CHECK(mgr.all_steps() == std::vector<std::int64_t>{0, 2});
  m.reset();
  ::sigaction(SIGTERM, &old, nullptr);
}

namespace {
// What the Python reader (python/tests/test_mpi.py) reads: boxes of two ranks, one
// larger than a checksum piece (piece and tile checksums), and a replicated array of
// more than 1 MiB, which the ranks write split by rows.
struct PyState {
  std::int64_t step = 0;
  ckpt::Sharded<xt::xtensor<float, 2>> w;
  ckpt::Sharded<xt::xtensor<float, 2>> big;
  xt::xtensor<float, 2> shared;
};

PyState py_state(std::int64_t step, int rank) {
  PyState s;
  s.step = step;
  s.w = rows_of(9, 7, rank, 2).w;
  const auto [r0, nr] = split(1024, 2, static_cast<std::size_t>(rank));
  s.big = {{1024, 600}, {r0, 0}, xt::xtensor<float, 2>::from_shape({nr, 600})};
  for (std::size_t i = 0; i < nr; ++i)
    for (std::size_t j = 0; j < 600; ++j) s.big.local(i, j) = static_cast<float>(r0 + i) * 0.5f + static_cast<float>(j);
  s.shared = xt::xtensor<float, 2>::from_shape({600, 600});
  for (std::size_t i = 0; i < 600; ++i)
    for (std::size_t j = 0; j < 600; ++j) s.shared(i, j) = static_cast<float>(i) - static_cast<float>(j) * 0.5f;
  return s;
}
}  // namespace

TEST_CASE("mpi np2: the Python reader assembles a checkpoint and reads the manager steps 2 ranks wrote") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedDir dir(world);
  ckpt::mpi::save(world, dir / "c", py_state(42, world.rank()));
  {
    ckpt::mpi::CheckpointManager<PyState> mgr(world, dir / "run", {.max_to_keep = 2});
    for (std::int64_t step = 1; step <= 3; ++step)
      CHECK(mgr.save(step, py_state(step, world.rank()), {{"loss", 1.0 / static_cast<double>(step)}}));
  }
  world.barrier();
  on_rank0(world, [&] { test::python_reader_tests((dir / "c").parent_path(), "mpi"); });
}

#if defined(CKPT_HAVE_GCS)
// tests/gcs_server.py, started by rank 0 on a free port of 127.0.0.1 (the ranks run on
// this machine); every rank's gs:// requests go there. Stopped after every rank is done.
class SharedGcsServer {
 public:
  explicit SharedGcsServer(const ckpt::mpi::Comm& comm) : comm_(comm) {
    std::string endpoint;
    if (comm.rank() == 0) {
      data_.emplace();
      const fs::path port_file = data_->path() / "port";
      const std::string script = (fs::path(CKPT_SOURCE_DIR) / "tests" / "gcs_server.py").string();
      const std::string objects = (data_->path() / "objects").string();
      pid_ = ::fork();
      if (pid_ == 0) {
        ::execl("/usr/bin/python3", "python3", script.c_str(), "--data", objects.c_str(), "--bucket", "bkt", "--port",
                "0", "--port-file", port_file.c_str(), static_cast<char*>(nullptr));
        std::_Exit(127);
      }
      for (int i = 0; i < 400 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      if (fs::exists(port_file)) {
        const auto text = test::read_bytes(port_file);
        endpoint = "http://127.0.0.1:" + std::string(text.begin(), text.end());
      }
    }
    endpoint = comm.broadcast(endpoint, 0);
    REQUIRE_MESSAGE(!endpoint.empty(), "tests/gcs_server.py did not start");
    ckpt::GcsOptions o;
    o.endpoint = endpoint;
    o.anonymous = true;
    o.connections = 4;
    o.part_size = std::size_t{1} << 20;
    o.max_retries = 2;
    ckpt::gcs::configure(o);
  }
  ~SharedGcsServer() {
    comm_.barrier();
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  const ckpt::mpi::Comm& comm_;
  std::optional<TempDir> data_;
  pid_t pid_ = -1;
};

TEST_CASE("mpi np2: ranks write one checkpoint and a manager's steps to gs://, restored onto another layout") {
  const ckpt::mpi::Comm world(MPI_COMM_WORLD);
  SharedGcsServer server(world);
  const auto [c0, nc] = split(16, 2, static_cast<std::size_t>(world.rank()));
  // One checkpoint: each rank uploads its data object, rank 0 the manifest and, last,
  // the marker; every rank reads the columns it wants, one process the whole array.
  ckpt::mpi::save(world, "gs://bkt/one", rows_of(64, 16, world.rank(), 2));
  on_rank0(world, [&] {
    const auto objects = ckpt::storage::gcs_bucket("bkt")->list("one/");
    CHECK(objects == std::vector<std::string>{"one/commit", "one/commit_success.txt", "one/data-0", "one/data-1", "one/manifest"});
    const auto plain = ckpt::restore<PlainState>("gs://bkt/one");
    CHECK(plain.w == global_w(64, 16));
    CHECK(plain.bias == std::vector<double>{0.5, 1.5, 2.5});
  });
  ShardedState cols = cols_target(64, 16, world.rank(), 2);
  ckpt::mpi::restore_into(world, "gs://bkt/one", cols);
  CHECK(cols.step == 42);
  CHECK(cols.w.local == box(64, 16, 0, 64, c0, nc).local);
  CHECK(ckpt::mpi::restore<ShardedState>(world, "gs://bkt/one").w.local == rows_of(64, 16, world.rank(), 2).w.local);
  CHECK_THROWS_CKPT(ckpt::mpi::save(world, "gs://bkt/one", rows_of(64, 16, world.rank(), 2)), ckpt::Error,
                    "already exists");
  ckpt::mpi::save(world, "gs://bkt/one", rows_of(64, 16, world.rank(), 2), {.force = true});
  // t5x: each rank uploads the chunks of its rows; Orbax's OCDBT merge needs a directory.
  ckpt::mpi::save<ckpt::t5x>(world, "gs://bkt/t5x/checkpoint_1", rows_of(64, 16, world.rank(), 2));
  ShardedState t = cols_target(64, 16, world.rank(), 2);
  ckpt::mpi::restore_into(world, "gs://bkt/t5x/checkpoint_1", t);
  CHECK(t.w.local == box(64, 16, 0, 64, c0, nc).local);
  CHECK_THROWS_CKPT(ckpt::mpi::save<ckpt::orbax>(world, "gs://bkt/orbax", rows_of(64, 16, world.rank(), 2)),
                    ckpt::Error, "merged in a directory");
  CHECK_THROWS_CKPT(ckpt::mpi::save(world, "mem://one", rows_of(64, 16, world.rank(), 2)), ckpt::Error,
                    "lives in one process");
  // A manager: async saves, retention by rank 0, items of each rank, a restarted job.
  const std::string own = "dataset-" + std::to_string(world.rank());
  {
    ckpt::mpi::CheckpointManager<ShardedState, ckpt::async_save> mgr(world, "gs://bkt/run", {.max_to_keep = 2});
    for (std::int64_t step = 0; step < 4; ++step) {
      ShardedState s = rows_of(64, 16, world.rank(), 2);
      s.step = step;
      ckpt::SaveArgs args;
      args.items.emplace(own, ckpt::tree_item(Position{world.rank(), {step}}));
      CHECK(mgr.save(step, s, {{"loss", 1.0 / static_cast<double>(step + 1)}}, std::move(args)));
    }
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2, 3});
    CHECK(mgr.restore().w.local == rows_of(64, 16, world.rank(), 2).w.local);
    CHECK(mgr.restore_item<Position>(3, "dataset-" + std::to_string(1 - world.rank())).offsets ==
          std::vector<std::int64_t>{3});
  }
  on_rank0(world, [&] {
    CHECK(ckpt::storage::gcs_bucket("bkt")->children("run") == std::vector<std::string>{"2", "3"});
    ckpt::CheckpointManager<PlainState> one("gs://bkt/run", {.read_only = true});
    CHECK(one.all_steps() == std::vector<std::int64_t>{2, 3});
    CHECK(one.metrics(2).at("loss") == doctest::Approx(1.0 / 3));
    CHECK(one.restore(3).w == global_w(64, 16));
  });
  ckpt::mpi::CheckpointManager<ShardedState> again(world, "gs://bkt/run", {.max_to_keep = 2});
  CHECK(again.latest_step() == 3);
  ShardedState latest = cols_target(64, 16, world.rank(), 2);
  again.restore_latest_into(latest);
  CHECK(latest.step == 3);
  CHECK(latest.w.local == box(64, 16, 0, 64, c0, nc).local);
  CHECK(again.save(4, rows_of(64, 16, world.rank(), 2)));
  CHECK(again.all_steps() == std::vector<std::int64_t>{3, 4});
}
#endif

}  // namespace sharded_test


int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  MPI_Finalize();
  return rc;
}
#endif
