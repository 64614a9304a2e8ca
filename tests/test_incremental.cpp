// Issue 11: incremental manager saves (unchanged leaves hard-linked from the previous
// step), progress callbacks on save / restore / manager (cancellable), and the
// manager's save figures (hook and _CHECKPOINT_METADATA).
#include "support.hpp"

#include <sys/stat.h>
#include <sys/wait.h>

#include <tuple>

#include <xtensor/xview.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace incremental_test {

namespace fs = std::filesystem;

struct Model {
  std::int64_t step = 0;
  std::vector<float> embed;   // frozen: 2 MiB
  std::vector<float> trunk;   // frozen: 1.5 MiB
  std::vector<float> head;    // trained: 1 MiB
  std::vector<float> bias;    // small: 64 bytes, shared data file or inline
};

Model make_model(std::int64_t step) {
  Model m;
  m.step = step;
  m.embed.resize(512 * 1024);
  m.trunk.resize(384 * 1024);
  m.head.resize(256 * 1024);
  m.bias.resize(16);
  for (std::size_t i = 0; i < m.embed.size(); ++i) m.embed[i] = static_cast<float>(i % 1000) * 0.25f;
  for (std::size_t i = 0; i < m.trunk.size(); ++i) m.trunk[i] = static_cast<float>(i % 777) * 0.5f;
  for (std::size_t i = 0; i < m.head.size(); ++i) m.head[i] = static_cast<float>(step) + static_cast<float>(i % 99);
  for (std::size_t i = 0; i < m.bias.size(); ++i) m.bias[i] = static_cast<float>(step * 100 + static_cast<std::int64_t>(i));
  return m;
}

bool same(const Model& a, const Model& b) {
  return a.step == b.step && a.embed == b.embed && a.trunk == b.trunk && a.head == b.head && a.bias == b.bias;
}

// The data file holding a leaf of a committed native checkpoint.
fs::path file_of(const fs::path& dir, const std::string& leaf) {
  const auto index = ckpt::native::open(dir);
  for (const auto& e : index->entries())
    if (e.path.str() == leaf) return dir / e.file;
  FAIL("no leaf " << leaf << " in " << dir);
  return {};
}

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st;
}

bool same_inode(const fs::path& a, const fs::path& b) {
  const auto sa = stat_of(a), sb = stat_of(b);
  return sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
}

// Sum of st_blocks of every file under dir counted once per inode (what du reports).
std::uint64_t disk_bytes(const fs::path& dir) {
  std::set<std::pair<dev_t, ino_t>> seen;
  std::uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const auto st = stat_of(e.path());
    if (seen.insert({st.st_dev, st.st_ino}).second) n += static_cast<std::uint64_t>(st.st_size);
  }
  return n;
}

nlohmann::json step_metadata_json(const fs::path& step_dir) {
  const auto bytes = test::read_bytes(step_dir / "_CHECKPOINT_METADATA");
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

TEST_CASE("incremental: unchanged leaves are hard-linked, changed ones written, every step restores alone") {
  test::TempDir tmp;
  std::vector<ckpt::SaveStats> stats;
  std::mutex mu;
  ckpt::CheckpointManager<Model> mgr(tmp / "run", {.incremental = true, .on_save = [&](const ckpt::SaveStats& s) {
                                                     std::lock_guard lock(mu);
                                                     stats.push_back(s);
                                                   }});
  const Model m1 = make_model(1), m2 = make_model(2);
  REQUIRE(mgr.save(1, m1));
  REQUIRE(mgr.save(2, m2));
  const fs::path s1 = mgr.step_directory(1), s2 = mgr.step_directory(2);

  CHECK(same_inode(file_of(s1, "embed"), file_of(s2, "embed")));
  CHECK(same_inode(file_of(s1, "trunk"), file_of(s2, "trunk")));
  CHECK_FALSE(same_inode(file_of(s1, "head"), file_of(s2, "head")));
  CHECK(stat_of(file_of(s2, "embed")).st_nlink == 2);

  REQUIRE(stats.size() == 2);
  CHECK(stats[0].incremental);
  CHECK(stats[0].leaves_linked == 0);
  CHECK(stats[0].bytes_linked == 0);
  CHECK(stats[0].bytes == ckpt::take_snapshot(m1).total_bytes());
  CHECK(stats[1].leaves_linked == 2);
  CHECK(stats[1].bytes_linked == (m2.embed.size() + m2.trunk.size()) * sizeof(float));
  CHECK(stats[1].bytes_written == stats[1].bytes - stats[1].bytes_linked);
  CHECK(stats[1].write_seconds > 0);
  CHECK(stats[1].blocking_seconds >= 0);
  CHECK(stats[1].gb_per_second() > 0);

  // The figures are in the step's metadata too.
  const auto j = step_metadata_json(s2);
  REQUIRE(j.contains("save_stats"));
  CHECK(j["save_stats"]["bytes_linked"].get<std::uint64_t>() == stats[1].bytes_linked);
  CHECK(j["save_stats"]["incremental"].get<bool>());

  // Disk use grows by the changed bytes (plus the small ones and the manifest).
  const std::uint64_t one = disk_bytes(s1);
  const std::uint64_t both = disk_bytes(tmp / "run");
  CHECK(both - one < m2.head.size() * sizeof(float) + 64 * 1024);

  // Plain restore and a full read with checksums, no manager involved.
  CHECK(same(ckpt::restore<Model>(s1), m1));
  CHECK(same(ckpt::restore<Model>(s2), m2));
  CHECK_NOTHROW(ckpt::restore_tree(s2));
}

TEST_CASE("incremental: a Sharded leaf keeps its box (global shape and offset) and is linked like any leaf") {
  test::TempDir tmp;
  struct Part {
    std::int64_t step = 0;
    ckpt::Sharded<xt::xtensor<float, 2>> w;  // rows 100..399 of a 1000 x 1024 array: 1.17 MiB
  };
  auto make = [](std::int64_t step) {
    Part p;
    p.step = step;
    p.w = {{1000, 1024}, {100, 0}, xt::zeros<float>({std::size_t{300}, std::size_t{1024}})};
    for (std::size_t i = 0; i < p.w.local.size(); ++i) p.w.local.data()[i] = static_cast<float>(i % 4099);
    return p;
  };
  ckpt::CheckpointManager<Part> mgr(tmp / "run", {.incremental = true});
  REQUIRE(mgr.save(1, make(1)));
  REQUIRE(mgr.save(2, make(2)));
  for (std::int64_t step : {1, 2}) {
    const fs::path dir = mgr.step_directory(step);
    CHECK(ckpt::metadata(dir).leaf("w").shape() == ckpt::Shape{1000, 1024});  // the global shape, not the box's
    Part back;
    back.w = {{1000, 1024}, {150, 512}, xt::zeros<float>({std::size_t{10}, std::size_t{256}})};  // inside the box
    ckpt::restore_into(dir, back);
    CHECK(back.step == step);
    CHECK(back.w.local == xt::view(make(step).w.local, xt::range(50, 60), xt::range(512, 768)));
  }
  // The box is linked from step 1 into step 2.
  const auto box_file = [&](std::int64_t step) {
    const fs::path dir = mgr.step_directory(step);
    const auto index = ckpt::native::open(dir);
    const ckpt::IndexEntry* e = index->find(ckpt::Path({"w"}));
    REQUIRE(e);
    REQUIRE(e->boxes.size() == 1);
    CHECK(e->boxes[0].origin == ckpt::Shape{100, 0});
    return dir / e->boxes[0].bytes.file;
  };
  CHECK(same_inode(box_file(1), box_file(2)));
}

TEST_CASE("incremental: deleting older steps never breaks a newer one; a step copies as a whole checkpoint") {
  test::TempDir tmp;
  Model m = make_model(1);
  {
    ckpt::CheckpointManager<Model> mgr(tmp / "run", {.max_to_keep = 1, .incremental = true});
    for (std::int64_t s = 1; s <= 3; ++s) {
      m = make_model(s);
      REQUIRE(mgr.save(s, m));
    }
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{3});
    CHECK(same(mgr.restore(), m));
    mgr.delete_step(3);
    CHECK(mgr.all_steps().empty());
    REQUIRE(mgr.save(4, make_model(4)));  // no previous step: everything written
    CHECK(same(ckpt::restore<Model>(mgr.step_directory(4)), make_model(4)));
  }
  {
    ckpt::CheckpointManager<Model> mgr(tmp / "run2", {.incremental = true});
    REQUIRE(mgr.save(1, make_model(1)));
    REQUIRE(mgr.save(2, make_model(2)));
    // A plain recursive copy (cp -r) carries the bytes, not the links.
    fs::copy(mgr.step_directory(2), tmp / "copy", fs::copy_options::recursive);
    mgr.delete_step(1);
    fs::remove_all(mgr.step_directory(2));  // behind the manager's back
  }
  CHECK(same(ckpt::restore<Model>(tmp / "copy"), make_model(2)));
  CHECK(stat_of(file_of(tmp / "copy", "embed")).st_nlink == 1);
  CHECK_NOTHROW(ckpt::restore_tree(tmp / "copy"));
}

TEST_CASE("incremental: a change anywhere in a leaf is seen; a missing or damaged base is written over") {
  test::TempDir tmp;
  std::vector<ckpt::SaveStats> stats;
  ckpt::CheckpointManager<Model, ckpt::async_save> mgr(
      tmp / "run", {.incremental = true, .on_save = [&](const ckpt::SaveStats& s) { stats.push_back(s); }});
  Model m = make_model(1);
  REQUIRE(mgr.save(1, m));
  m.step = 2;
  m.embed.back() += 1.0f;  // the last byte of a 2 MiB leaf
  REQUIRE(mgr.save(2, m));
  mgr.wait_until_finished();
  REQUIRE(stats.size() == 2);
  CHECK(stats[1].leaves_linked == 2);  // trunk and head, not embed
  CHECK_FALSE(same_inode(file_of(mgr.step_directory(1), "embed"), file_of(mgr.step_directory(2), "embed")));
  CHECK(same(mgr.restore(2), m));

  // The base's manifest is unreadable: step 3 writes every leaf, and still restores.
  test::write_bytes(mgr.step_directory(2) / "manifest", {'x'});
  m.step = 3;
  REQUIRE(mgr.save(3, m));
  mgr.wait_until_finished();
  CHECK(stats.back().leaves_linked == 0);
  CHECK(same(mgr.restore(3), m));
  CHECK_NOTHROW(ckpt::restore_tree(mgr.step_directory(3)));

  // A leaf that changes shape is written, whatever its hash.
  m.step = 4;
  m.trunk.resize(m.trunk.size() / 2);
  REQUIRE(mgr.save(4, m));
  mgr.wait_until_finished();
  CHECK(same(mgr.restore(4), m));
}

TEST_CASE("progress: save and restore report bytes and leaves, bounded, ending at the totals") {
  test::TempDir tmp;
  const Model m = make_model(7);
  const auto total = ckpt::take_snapshot(m).total_bytes();
  std::vector<ckpt::Progress> seen;
  std::mutex mu;
  auto record = [&](const ckpt::Progress& p) {
    std::lock_guard lock(mu);
    seen.push_back(p);
    return true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  ckpt::save(tmp / "a", m, {.data_files = 3, .progress = record});
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  REQUIRE(seen.size() >= 2);
  CHECK(seen.front().bytes_done == 0);
  CHECK(seen.back().bytes_done == total);
  CHECK(seen.back().bytes_total == total);
  CHECK(seen.back().leaves_done == seen.back().leaves_total);
  CHECK(seen.back().leaves_total == 5);
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].bytes_done >= seen[i - 1].bytes_done);
  // Bounded rate: one call per 50 ms at most, plus the first and the last; not one per 1 MiB piece.
  CHECK(seen.size() <= 2 + static_cast<std::size_t>(elapsed / std::chrono::milliseconds(50)) + 1);

  seen.clear();
  Model r;
  r = ckpt::restore<Model>(tmp / "a", {.progress = record});
  CHECK(same(r, m));
  REQUIRE(seen.size() >= 2);
  CHECK(seen.back().bytes_done == seen.back().bytes_total);
  CHECK(seen.back().leaves_done == seen.back().leaves_total);
  CHECK(seen.back().bytes_total >= (m.embed.size() + m.trunk.size() + m.head.size()) * sizeof(float));
}

TEST_CASE("progress: the interop writers report and cancel too (safetensors, t5x, Orbax, zarr, Flax)") {
  test::TempDir tmp;
  const Model m = make_model(7);
  // Chunks of 1 MiB (a quarter of max_memory), so that the zarr writers report several times.
  auto check = [&](const std::string& name, auto save) {
    CAPTURE(name);
    std::vector<ckpt::Progress> seen;
    save(tmp / name, ckpt::SaveOptions{.progress = [&](const ckpt::Progress& p) {
                                         seen.push_back(p);
                                         return true;
                                       },
                                       .max_memory = 4 << 20});
    REQUIRE(seen.size() >= 2);
    CHECK(seen.front().bytes_done == 0);
    CHECK(seen.back().bytes_done == seen.back().bytes_total);
    CHECK(seen.back().bytes_total >= (m.embed.size() + m.trunk.size() + m.head.size()) * sizeof(float));
    CHECK(seen.back().leaves_done == 5);
    CHECK(seen.back().leaves_total == 5);
    for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].bytes_done >= seen[i - 1].bytes_done);
    CHECK(fs::exists(tmp / name));
    // Cancelled at the first report of bytes written: no checkpoint, no staging left.
    const fs::path cancelled = tmp / ("cancelled-" + name);
    CHECK_THROWS_CKPT(save(cancelled, ckpt::SaveOptions{.progress = [](const ckpt::Progress& p) { return p.bytes_done == 0; }}),
                      ckpt::CancelledError, "cancelled by the progress callback");
    CHECK_FALSE(fs::exists(cancelled));
  };
  check("safetensors", [&](const fs::path& d, const ckpt::SaveOptions& o) { ckpt::save<ckpt::safetensors>(d, m, o); });
  check("t5x", [&](const fs::path& d, const ckpt::SaveOptions& o) { ckpt::save<ckpt::t5x>(d, m, o); });
  check("orbax", [&](const fs::path& d, const ckpt::SaveOptions& o) { ckpt::save<ckpt::orbax>(d, m, o); });
  check("zarr", [&](const fs::path& d, const ckpt::SaveOptions& o) { ckpt::save<ckpt::zarr_v2>(d, m, o); });
  check("flax.msgpack", [&](const fs::path& d, const ckpt::SaveOptions& o) { ckpt::save<ckpt::flax>(d, m, o); });
  for (const auto& e : fs::directory_iterator(tmp.path()))  // nor a staging directory (.tmp-cancelled-...) left
    CHECK(e.path().filename().string().find("cancelled") == std::string::npos);
}

TEST_CASE("progress: returning false cancels cleanly, leaving no checkpoint") {
  test::TempDir tmp;
  const Model m = make_model(7);
  auto stop_after_first = [](const ckpt::Progress& p) { return p.bytes_done == 0; };
  CHECK_THROWS_CKPT(ckpt::save(tmp / "a", m, {.progress = stop_after_first}), ckpt::CancelledError,
                    "cancelled by the progress callback");
  CHECK_FALSE(fs::exists(tmp / "a"));
  CHECK(fs::is_empty(tmp.path()));  // no .tmp- staging directory left either

  ckpt::save(tmp / "b", m);
  Model r;
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "b", r, {.progress = [](const ckpt::Progress&) { return false; }}),
                    ckpt::CancelledError, (tmp / "b").string().c_str());

  // In a manager, sync and async, plain and incremental: the step does not appear.
  for (bool incremental : {false, true}) {
    CAPTURE(incremental);
    test::TempDir run;
    ckpt::ManagerOptions o{.incremental = incremental};
    std::atomic<bool> cancel{false};
    o.save_options.progress = [&](const ckpt::Progress& p) { return !(cancel && p.bytes_done > 0); };
    ckpt::CheckpointManager<Model, ckpt::async_save> mgr(run.path(), o);
    REQUIRE(mgr.save(1, m));
    mgr.wait_until_finished();
    cancel = true;
    REQUIRE(mgr.save(2, make_model(2)));
    CHECK_THROWS_CKPT(mgr.wait_until_finished(), ckpt::BackgroundSaveError, "cancelled by the progress callback");
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{1});
    CHECK_FALSE(fs::exists(mgr.step_directory(2)));
    cancel = false;
    REQUIRE(mgr.save(3, make_model(3)));
    mgr.wait_until_finished();
    CHECK(same(mgr.restore(3), make_model(3)));
  }
}

TEST_CASE("save figures: a plain manager reports them too") {
  test::TempDir tmp;
  std::optional<ckpt::SaveStats> last;
  ckpt::CheckpointManager<Model> mgr(tmp.path(), {.on_save = [&](const ckpt::SaveStats& s) { last = s; }});
  REQUIRE(mgr.save(5, make_model(5)));
  REQUIRE(last);
  CHECK(last->step == 5);
  CHECK_FALSE(last->incremental);
  CHECK(last->bytes_written == last->bytes);
  CHECK(last->bytes_linked == 0);
  const auto j = step_metadata_json(mgr.step_directory(5));
  CHECK(j["save_stats"]["bytes"].get<std::uint64_t>() == last->bytes);
  CHECK(j["save_stats"]["write_seconds"].get<double>() > 0);
}

// ---- format version 2: per-chunk checksums, parts of one leaf read by several threads ----

struct Big {
  std::vector<float> big;    // 40 MiB: read as five 8 MiB parts
  std::vector<float> mid;    // 3 MiB: chunked, read whole
  std::vector<float> small;  // 256 KiB: one checksum, as in version 1
};

Big make_big() {
  Big b;
  b.big.resize(10 * 1024 * 1024);
  b.mid.resize(768 * 1024);
  b.small.resize(64 * 1024);
  for (std::size_t i = 0; i < b.big.size(); ++i) b.big[i] = static_cast<float>(i % 65521);
  for (std::size_t i = 0; i < b.mid.size(); ++i) b.mid[i] = static_cast<float>(i % 4099) * 0.5f;
  for (std::size_t i = 0; i < b.small.size(); ++i) b.small[i] = static_cast<float>(i);
  return b;
}

// Flips one byte of a data file at the leaf's offset + at.
void flip(const fs::path& dir, const std::string& leaf, std::uint64_t at) {
  const auto index = ckpt::native::open(dir);
  for (const auto& e : index->entries())
    if (e.path.str() == leaf) {
      std::fstream f(dir / e.file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(e.offset + at));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(static_cast<std::streamoff>(e.offset + at));
      f.write(&c, 1);
      return;
    }
  FAIL("no leaf " << leaf);
}

TEST_CASE("format version 2: chunk checksums, verified part by part; version 1 still reads") {
  test::TempDir tmp;
  const Big b = make_big();
  ckpt::save(tmp / "v2", b, {.data_files = 2});
  const auto index = ckpt::native::open(tmp / "v2");
  CHECK(index->info().format_version == 2);
  for (const auto& e : index->entries()) {
    CAPTURE(e.path.str());
    if (e.length > (1u << 20)) {
      CHECK(e.chunk_bytes == (1u << 20));
      CHECK(e.chunk_xxh3.size() == (e.length + (1u << 20) - 1) / (1u << 20));
      CHECK(index->reads_parts(e));
    } else {
      CHECK(e.chunk_xxh3.empty());
    }
  }
  std::atomic<int> calls{0};
  const Big r = ckpt::restore<Big>(tmp / "v2", {.progress = [&](const ckpt::Progress&) {
    ++calls;
    return true;
  }});
  CHECK(calls >= 2);
  CHECK((r.big == b.big && r.mid == b.mid && r.small == b.small));
  Big into = make_big();
  std::fill(into.big.begin(), into.big.end(), 0.0f);
  ckpt::restore_into(tmp / "v2", into);
  CHECK(into.big == b.big);

  // A checkpoint without large leaves is written as version 1, which older readers read.
  ckpt::save(tmp / "small", test::StepOnly{3});
  CHECK(ckpt::native::open(tmp / "small")->info().format_version == 1);

  // A flipped byte is found in its chunk, in a part read by any thread, and by a whole read.
  fs::copy(tmp / "v2", tmp / "bad", fs::copy_options::recursive);
  flip(tmp / "bad", "big", 17 * (1u << 20) + 5);
  CHECK_THROWS_CKPT(ckpt::restore<Big>(tmp / "bad"), ckpt::CorruptCheckpointError,
                    "big: checksum mismatch in bytes [17825792, +1048576)");
  CHECK_THROWS_CKPT(ckpt::restore_tree(tmp / "bad"), ckpt::CorruptCheckpointError, "checksum mismatch in bytes");
  CHECK_NOTHROW(ckpt::restore<Big>(tmp / "bad", {.verify_checksums = false}));

  // A version 1 checkpoint (whole-leaf checksums, as every earlier release wrote) reads,
  // and its checksums are still checked.
  fs::copy(tmp / "v2", tmp / "v1", fs::copy_options::recursive);
  {
    ckpt::IndexEntries entries = index->entries();
    for (auto& e : entries) {
      if (e.chunk_xxh3.empty()) continue;
      std::vector<std::byte> bytes(e.length);
      index->read(e, bytes);
      e.checksum = ckpt::io::xxh3(bytes);
      e.chunk_xxh3.clear();
      e.chunk_bytes = 0;
    }
    const auto m = ckpt::detail::native::encode_manifest(index->info(), entries);
    const auto mb = std::as_bytes(std::span(m));
    fs::remove(tmp / "v1" / "manifest");
    fs::remove(tmp / "v1" / "commit");
    ckpt::io::write_file_synced(tmp / "v1" / "manifest", mb);
    const std::string c = ckpt::detail::native::encode_commit({m.size(), ckpt::io::xxh3(mb)});
    ckpt::io::write_file_synced(tmp / "v1" / "commit", std::as_bytes(std::span(c)));
  }
  CHECK(ckpt::native::open(tmp / "v1")->info().format_version == 1);
  const Big r1 = ckpt::restore<Big>(tmp / "v1");
  CHECK((r1.big == b.big && r1.mid == b.mid && r1.small == b.small));
  flip(tmp / "v1", "mid", 3);
  CHECK_THROWS_CKPT(ckpt::restore<Big>(tmp / "v1"), ckpt::CorruptCheckpointError, "mid: checksum mismatch");
}

TEST_CASE("format version 2: chunk checksums that disagree with the leaf's are refused") {
  test::TempDir tmp;
  ckpt::save(tmp / "c", make_big());
  const auto index = ckpt::native::open(tmp / "c");
  ckpt::IndexEntries entries = index->entries();
  for (auto& e : entries)
    if (!e.chunk_xxh3.empty()) e.chunk_xxh3[1] ^= 1;
  const auto m = ckpt::detail::native::encode_manifest(index->info(), entries);
  const auto mb = std::as_bytes(std::span(m));
  fs::remove(tmp / "c" / "manifest");
  fs::remove(tmp / "c" / "commit");
  ckpt::io::write_file_synced(tmp / "c" / "manifest", mb);
  const std::string c = ckpt::detail::native::encode_commit({m.size(), ckpt::io::xxh3(mb)});
  ckpt::io::write_file_synced(tmp / "c" / "commit", std::as_bytes(std::span(c)));
  CHECK_THROWS_CKPT(ckpt::restore<Big>(tmp / "c"), ckpt::CorruptCheckpointError,
                    "chunk checksums do not match the leaf's xxh3");
}

TEST_CASE("CLI: ls --json has each step's save figures; no progress bar off a terminal or with --quiet") {
  INFO("CKPT_CLI = " << CKPT_CLI << " (build it: the ckpt_cli target)");
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  {
    ckpt::CheckpointManager<Model> mgr(tmp / "run", {.incremental = true});
    REQUIRE(mgr.save(1, make_model(1)));
    REQUIRE(mgr.save(2, make_model(2)));
  }
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string(CKPT_CLI) + " " + args + " >" + (tmp / "out").string() + " 2>" +
                            (tmp / "err").string();
    const int st = std::system(cmd.c_str());
    const auto out = test::read_bytes(tmp / "out"), err = test::read_bytes(tmp / "err");
    return std::tuple<int, std::string, std::string>{WEXITSTATUS(st), {out.begin(), out.end()}, {err.begin(), err.end()}};
  };
  {
    const auto r = run("ls --json " + (tmp / "run").string());
    REQUIRE(std::get<0>(r) == 0);
    const auto j = nlohmann::json::parse(std::get<1>(r));
    REQUIRE(j["steps"].size() == 2);
    CHECK(j["steps"][1]["save_seconds"].get<double>() > 0);
    CHECK(j["steps"][1]["save_stats"]["leaves_linked"].get<int>() == 2);
    CHECK(j["steps"][1]["bytes"].get<std::uint64_t>() > 0);
  }
  for (const std::string flag : {"", " --quiet", " -q"}) {
    CAPTURE(flag);
    const auto r = run("verify " + (tmp / "run" / "2").string() + flag);
    CHECK(std::get<0>(r) == 0);
    CHECK(std::get<1>(r).find("all intact") != std::string::npos);
    CHECK(std::get<2>(r).empty());  // stderr is a file here: no bar
  }
  // An incremental step converts into a whole checkpoint elsewhere.
  const auto c = run("convert " + (tmp / "run" / "2").string() + " " + (tmp / "copy").string() + " --to native -q");
  CHECK(std::get<0>(c) == 0);
  CHECK(same(ckpt::restore<Model>(tmp / "copy"), make_model(2)));
}

}  // namespace incremental_test
