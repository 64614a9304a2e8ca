// Storage backends: the object interface on a local directory, in memory and on S3;
// save, restore and the manager on mem:// and s3:// URLs; the commit marker; a
// two-tier manager (memory every N steps, disk every M). The S3 cases run against a
// real S3 server, s3rver from npm, started here on 127.0.0.1 on a free port (installed
// into <source>/.s3rver when missing) and stopped at exit.
#include "support.hpp"

#if __has_include(<ckpt/format/ocdbt/database.hpp>)  // the multi-header tree
#include <ckpt/format/ocdbt/database.hpp>
#include <ckpt/storage/kvstore.hpp>
#else  // the single header: its every part
#include <ckpt/all.hpp>
#endif
#include <ckpt/storage/memory.hpp>
#include <ckpt/storage/posix.hpp>
#if defined(CKPT_HAVE_S3)
#include <ckpt/storage/s3.hpp>
#endif
#if defined(CKPT_HAVE_GCS)
#include <ckpt/storage/gcs.hpp>
#endif

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace storage_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Steps = std::vector<std::int64_t>;

struct State {
  std::int64_t step = 0;
  xt::xtensor<float, 1> weights;
  std::vector<std::int32_t> ids;
};

inline State make_state(std::int64_t step, std::size_t n) {
  State s;
  s.step = step;
  s.weights = xt::xtensor<float, 1>::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) s.weights(i) = static_cast<float>(i % 1000) * 0.5f + static_cast<float>(step);
  s.ids = {1, 2, 3, static_cast<std::int32_t>(step)};
  return s;
}

struct Layers {
  std::vector<std::vector<float>> w;
};

inline void check_same(const State& a, const State& b) {
  CHECK(a.step == b.step);
  REQUIRE(a.weights.size() == b.weights.size());
  CHECK(std::equal(a.weights.begin(), a.weights.end(), b.weights.begin()));
  CHECK(a.ids == b.ids);
}

inline std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// The object interface, the same checks on every backend.
inline void exercise_storage(ckpt::storage::Storage& st, const std::string& base) {
  using ckpt::storage::ConstBytes;
  const std::string a = base + "/x/a", b = base + "/x/b", c = base + "/y";
  const auto hello = bytes_of("hello, "), world = bytes_of("world");
  const ConstBytes pieces[] = {hello, world};
  st.put(a, pieces);
  st.put(b, ConstBytes(world));
  st.put(c, ConstBytes(hello));
  CHECK(st.size(a) == std::optional<std::uint64_t>(12));
  CHECK_FALSE(st.size(base + "/nope").has_value());
  std::vector<std::byte> part(5);
  st.get(a, 7, part);
  CHECK(part == world);
  std::vector<std::byte> too_long(8);
  CHECK_THROWS_AS(st.get(b, 0, too_long), ckpt::CorruptCheckpointError);
  CHECK(st.list(base + "/x/") == std::vector<std::string>{a, b});
  CHECK(st.list(base + "/").size() == 3);
  CHECK(st.read_all(c, 100) == std::optional<std::vector<std::byte>>(hello));
  CHECK_FALSE(st.read_all(base + "/nope", 100).has_value());
  CHECK_THROWS_AS(st.read_all(a, 4), ckpt::CorruptCheckpointError);
  st.put(b, ConstBytes(hello));  // replaced whole
  CHECK(st.read_all(b, 100) == std::optional<std::vector<std::byte>>(hello));
  st.remove({a, b, base + "/never-existed"});
  CHECK(st.list(base + "/") == std::vector<std::string>{c});
  st.remove({c});
  CHECK(st.list(base + "/").empty());

  // create(): appended pieces, stable ones and a buffer reused between appends (copied
  // where the backend sends the object at close), visible only once closed.
  {
    std::vector<std::byte> buffer = bytes_of("ABCD");
    auto w = st.create(base + "/s/1/data");
    w->append(ConstBytes(hello), true);
    w->append(ConstBytes(buffer), false);
    buffer = bytes_of("wxyz");  // reused, as the streamed-leaf buffer of a save is
    w->append(ConstBytes(buffer), false);
    CHECK_FALSE(st.size(base + "/s/1/data").has_value());
    w->close();
    CHECK(st.read_all(base + "/s/1/data", 100) == std::optional<std::vector<std::byte>>(bytes_of("hello, ABCDwxyz")));
  }
  {  // dropped unclosed: nothing appears
    auto w = st.create(base + "/s/1/unclosed");
    w->append(ConstBytes(world), true);
  }
  CHECK_FALSE(st.size(base + "/s/1/unclosed").has_value());
  // children(): the names one level down that hold objects (not an object at that level).
  st.put(base + "/s/3/" + std::string(ckpt::storage::commit_marker), ConstBytes(hello));
  st.put(base + "/s/3/x/deep", ConstBytes(hello));
  st.put(base + "/s/file", ConstBytes(hello));
  CHECK(st.children(base + "/s") == std::vector<std::string>{"1", "3"});
  // remove_prefix(): everything under it; the neighbours stay.
  st.remove_prefix(base + "/s/3");
  CHECK(st.children(base + "/s") == std::vector<std::string>{"1"});
  CHECK(st.list(base + "/s/") == std::vector<std::string>{base + "/s/1/data", base + "/s/file"});
  st.remove_prefix(base + "/s/1");
  st.remove({base + "/s/file"});
  CHECK(st.list(base + "/").empty());
}

TEST_CASE("storage: a local directory and process memory meet the object interface") {
  test::TempDir dir;
  ckpt::storage::PosixStorage posix(dir.path());
  exercise_storage(posix, "p");
  auto mem = ckpt::storage::MemoryStorage::named("storage-test-iface");
  exercise_storage(*mem, "m");
  ckpt::memory_storage_clear("storage-test-iface");
}

TEST_CASE("storage: URLs parse, and an unknown scheme names the header that adds it") {
  const auto u = ckpt::storage::parse_url("s3://bucket//runs/a/");
  CHECK(u.scheme == "s3");
  CHECK(u.bucket == "bucket");
  CHECK(u.prefix == "runs/a");
  CHECK_THROWS_CKPT(ckpt::storage::parse_url("s3:///x"), ckpt::Error, "no bucket");
  CHECK_THROWS_CKPT(ckpt::storage::parse_url("mem://b/a/../c"), ckpt::Error, "\"..\"");
  CHECK(ckpt::storage::is_url("mem://a/b"));
  CHECK_FALSE(ckpt::storage::is_url("/tmp/a"));
  CHECK_FALSE(ckpt::storage::is_url("relative/dir"));
  CHECK_THROWS_CKPT(ckpt::restore<State>("az://bucket/x"), ckpt::Error, "knows no storage for az://");
#if !defined(CKPT_HAVE_GCS)
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bucket/x"), ckpt::Error, "<ckpt/storage/gcs.hpp>");
#endif
#if !defined(CKPT_HAVE_S3)
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://bucket/x"), ckpt::Error, "<ckpt/storage/s3.hpp>");
#endif
}

TEST_CASE("storage: memory save and restore, metadata and restore_tree, the commit marker") {
  const std::string url = "mem://storage-test/run/a";
  const State s = make_state(7, 5000);
  ckpt::save(url, s);
  check_same(ckpt::restore<State>(url), s);
  CHECK(ckpt::metadata(url).contains("weights"));
  const ckpt::Tree tree = ckpt::restore_tree(url);
  CHECK(tree.leaf("step").as<std::int64_t>() == 7);
  CHECK_THROWS_CKPT(ckpt::save(url, s), ckpt::Error, "already exists");
  const State t = make_state(8, 100);
  ckpt::save(url, t, {.force = true});
  check_same(ckpt::restore<State>(url), t);

  // Without its marker the checkpoint is not there, whatever else is.
  auto mem = ckpt::storage::MemoryStorage::named("storage-test");
  mem->remove({"run/a/commit_success.txt"});
  CHECK_THROWS_CKPT(ckpt::restore<State>(url), ckpt::Error, "no commit marker");
  CHECK_THROWS_CKPT(ckpt::restore<State>("mem://storage-test/none"), ckpt::Error, "no checkpoint here");
  // A torn data object is caught by the checksums.
  ckpt::save(url, s, {.force = true});
  auto data = *mem->read_all("run/a/data-0", 1 << 30);
  data[100] ^= std::byte{1};
  mem->put("run/a/data-0", ckpt::storage::ConstBytes(data));
  CHECK_THROWS_CKPT(ckpt::restore<State>(url), ckpt::CorruptCheckpointError, "checksum");
  ckpt::memory_storage_clear("storage-test");
}

// A Sharded leaf keeps its global shape and its box on an object store, as on disk
// (until this test, the object-store writer stored a process's box as the whole array).
struct ShardedOnObjects {
  std::int64_t step = 0;
  ckpt::Sharded<std::vector<float>> w;
};

TEST_CASE("storage: a Sharded leaf on an object store keeps its global shape and box (mem://)") {
  const std::string url = "mem://sharded-test/run/a";
  ShardedOnObjects s;
  s.step = 3;
  s.w.global_shape = {4096};
  s.w.offset = {1024};
  for (int i = 0; i < 2048; ++i) s.w.local.push_back(static_cast<float>(i) * 0.5f);
  ckpt::save(url, s);
  const auto index = ckpt::open_index(url);
  const ckpt::IndexEntry* w = index->find(ckpt::Path::parse("w"));
  REQUIRE(w != nullptr);
  CHECK(w->shape == ckpt::Shape{4096});
  REQUIRE(w->boxes.size() == 1);
  CHECK(w->boxes[0].origin == ckpt::Shape{1024});
  CHECK(w->boxes[0].bytes.shape == ckpt::Shape{2048});

  // Read back into another box inside the saved one: only those elements, in place.
  ShardedOnObjects part;
  part.w.global_shape = {4096};
  part.w.offset = {1536};
  part.w.local.assign(100, -1.0f);
  ckpt::restore_into(url, part);
  CHECK(part.step == 3);
  for (std::size_t i = 0; i < part.w.local.size(); ++i) CHECK(part.w.local[i] == s.w.local[512 + i]);

  // A box whose bytes lie outside its data object is refused when the checkpoint opens,
  // naming the leaf, as the directory reader does.
  auto mem = ckpt::storage::MemoryStorage::named("sharded-test");
  const std::string data = "run/a/" + w->boxes[0].bytes.file;
  auto bytes = *mem->read_all(data, 1 << 30);
  bytes.resize(bytes.size() / 2);
  mem->put(data, ckpt::storage::ConstBytes(bytes));
  CHECK_THROWS_CKPT(ckpt::open_index(url), ckpt::CorruptCheckpointError, "lie outside");
  try {
    (void)ckpt::open_index(url);
  } catch (const ckpt::Error& e) {
    CHECK(e.path() == "w");
  }
  ckpt::memory_storage_clear("sharded-test");
}

// A column strip of a box on an object store: verified, by its 1 MiB pieces (a request
// per row of tiles would cost more than the bytes it saves); unverified, the rows'
// runs fetched together. Either way the strip's values, and a flipped byte is caught.
struct StripOnObjects {
  ckpt::Sharded<xt::xtensor<float, 2>> w;
};

TEST_CASE("storage: a column strip of a box on an object store reads whole pieces or grouped runs (mem://)") {
  const std::string url = "mem://strip-test/run/a";
  StripOnObjects s;
  s.w = {{512, 1024}, {0, 0}, xt::zeros<float>({512, 1024})};
  for (std::size_t i = 0; i < 512; ++i)
    for (std::size_t j = 0; j < 1024; ++j) s.w.local(i, j) = static_cast<float>(i * 1024 + j);
  ckpt::save(url, s);
  CHECK(ckpt::open_index(url)->find(ckpt::Path::parse("w"))->boxes.at(0).tiles.size() == 32);
  for (bool verify : {true, false}) {
    StripOnObjects t;
    t.w = {{512, 1024}, {0, 100}, xt::zeros<float>({512, 200})};
    ckpt::restore_into(url, t, {.verify_checksums = verify});
    for (std::size_t i = 0; i < 512; i += 37)
      for (std::size_t j = 0; j < 200; j += 13) CHECK(t.w.local(i, j) == static_cast<float>(i * 1024 + 100 + j));
  }
  auto mem = ckpt::storage::MemoryStorage::named("strip-test");
  const ckpt::IndexEntry stored = ckpt::open_index(url)->find(ckpt::Path::parse("w"))->boxes.at(0).bytes;
  const std::string data = "run/a/" + stored.file;
  auto bytes = *mem->read_all(data, 1 << 30);
  bytes[stored.offset + (300 * 1024 + 150) * 4] ^= std::byte{1};
  mem->put(data, ckpt::storage::ConstBytes(bytes));
  StripOnObjects t;
  t.w = {{512, 1024}, {0, 100}, xt::zeros<float>({512, 200})};
  CHECK_THROWS_CKPT(ckpt::restore_into(url, t), ckpt::CorruptCheckpointError, "w: checksum mismatch");
  ckpt::memory_storage_clear("strip-test");
}

TEST_CASE("storage: t5x, Orbax, zarr, safetensors and Flax checkpoints on an object store (mem://)") {
  const State s = make_state(9, 3000);
  auto mem = ckpt::storage::MemoryStorage::named("interop-test");
  for (const std::string name : {"t5x", "orbax", "zarr", "safetensors", "flax"}) {
    CAPTURE(name);
    const std::string url = "mem://interop-test/" + name;
    ckpt::save_snapshot(*ckpt::find_format(name), url, ckpt::take_snapshot(s));
    // The format's files as objects, the object store's commit marker last.
    const auto keys = mem->list(name + "/");
    CHECK(keys.size() >= 2);
    CHECK(std::count(keys.begin(), keys.end(), name + "/commit_success.txt") == 1);
    const auto index = ckpt::open_index(url);
    CHECK(index->checkpoint() == url);
    CHECK_FALSE(index->entries().empty());
    check_same(ckpt::restore<State>(url), s);
    CHECK(ckpt::restore_tree(url).leaf("step").as<std::int64_t>() == 9);
    // Converted back to a local native checkpoint, through the same streams as a local one.
    test::TempDir tmp;
    ckpt::convert(url, tmp / "native", "native");
    check_same(ckpt::restore<State>(tmp / "native"), s);
    // And up again as native: its object writer takes the streamed leaves read into memory.
    ckpt::convert(tmp / "native", url + "-native", "native");
    check_same(ckpt::restore<State>(url + "-native"), s);
    // Without the marker, nothing is there, whatever else the prefix holds.
    mem->remove({name + "/commit_success.txt"});
    CHECK_THROWS_CKPT(ckpt::restore<State>(url), ckpt::Error, "no commit marker");
  }
  // Object names from the bucket are keys, never files: an odd one beside the checkpoint
  // is not read, and an array path that climbs out of the checkpoint is refused.
  ckpt::save_snapshot(*ckpt::find_format("t5x"), "mem://interop-test/evil", ckpt::take_snapshot(s));
  mem->put("evil/../../outside", ckpt::storage::ConstBytes(bytes_of("x")));
  check_same(ckpt::restore<State>("mem://interop-test/evil"), s);
  ckpt::memory_storage_clear("interop-test");
}

TEST_CASE("storage: a manager on memory keeps, prunes, saves asynchronously and restores items") {
  {
    ckpt::CheckpointManager<State, ckpt::async_save, ckpt::memory> mgr("storage-test-mgr/run", {.max_to_keep = 2});
    CHECK(mgr.directory() == fs::path("mem://storage-test-mgr/run"));
    for (std::int64_t step = 1; step <= 4; ++step)
      mgr.save(step, make_state(step, 300), {{"loss", 1.0 / static_cast<double>(step)}},
               {.items = {{"cursor", ckpt::json_item({{"pos", step}})}, {"extra", ckpt::tree_item(make_state(-step, 10))}}});
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == Steps{3, 4});
    check_same(mgr.restore(), make_state(4, 300));
    CHECK(mgr.metrics(3).at("loss") == doctest::Approx(1.0 / 3));
    CHECK(mgr.item_json(3, "cursor")["pos"] == 3);
    check_same(mgr.restore_item<State>(4, "extra"), make_state(-4, 10));
    mgr.delete_step(3);
    CHECK(mgr.all_steps() == Steps{4});
  }
  // A new manager sees the same store; an uncommitted leftover is cleaned up.
  auto mem = ckpt::storage::MemoryStorage::named("storage-test-mgr");
  CHECK(mem->list("run/1/").empty());
  mem->put("run/9/manifest", ckpt::storage::ConstBytes(bytes_of("torn")));
  {
    ckpt::CheckpointManager<State, ckpt::memory> again("mem://storage-test-mgr/run", {.read_only = true});
    CHECK(again.all_steps() == Steps{4});
    CHECK(mem->size("run/9/manifest").has_value());  // read-only: nothing deleted
  }
  ckpt::CheckpointManager<State> plain("mem://storage-test-mgr/run");  // the URL alone selects the storage
  CHECK(plain.all_steps() == Steps{4});
  CHECK_FALSE(mem->size("run/9/manifest").has_value());
  CHECK_THROWS_CKPT((ckpt::CheckpointManager<State, ckpt::memory>("/tmp/x")), ckpt::Error, "mem://");
  CHECK_THROWS_CKPT((ckpt::CheckpointManager<State>("mem://storage-test-mgr/r2", {.todelete_subdir = "trash"})),
                    ckpt::Error, "todelete_subdir");
  // Incremental saves hard-link data files: refused on an object store when the manager
  // opens (a save used to stage a local directory named "mem:" in the working directory).
  CHECK_THROWS_CKPT((ckpt::CheckpointManager<State>("mem://storage-test-mgr/r3", {.incremental = true})), ckpt::Error,
                    "incremental");
  ckpt::memory_storage_clear("storage-test-mgr");
}

// The fast tier of Orbax's emergency checkpointing: every 2 steps to memory (only the
// latest kept), every 5 to disk; a restart restores the newest step either holds.
TEST_CASE("storage: a two-tier manager restores the newest step of memory and disk") {
  test::TempDir dir;
  ckpt::CheckpointManager<State, ckpt::memory> fast("storage-test-tier/run",
                                                   {.max_to_keep = 1, .save_interval_steps = 2});
  ckpt::CheckpointManager<State> slow(dir / "run", {.max_to_keep = 2, .save_interval_steps = 5});
  auto newest = [&]() -> std::optional<std::pair<std::int64_t, State>> {
    const auto f = fast.latest_step(), s = slow.latest_step();
    if (!f && !s) return std::nullopt;
    if (f && (!s || *f >= *s)) return std::pair{*f, fast.restore(*f)};
    return std::pair{*s, slow.restore(*s)};
  };
  for (std::int64_t step = 0; step <= 11; ++step) {
    fast.save(step, make_state(step, 64));
    slow.save(step, make_state(step, 64));
  }
  CHECK(fast.all_steps() == Steps{10});
  CHECK(slow.all_steps() == Steps{5, 10});
  auto got = newest();
  REQUIRE(got);
  CHECK(got->first == 10);
  check_same(got->second, make_state(10, 64));
  // The process dies: memory is gone, the disk tier remains.
  ckpt::memory_storage_clear("storage-test-tier");
  fast.reload();
  got = newest();
  REQUIRE(got);
  CHECK(got->first == 10);
  CHECK(slow.latest_step() == 10);
}

// --- what a restore fetches --------------------------------------------------------
// A Storage that forwards to another (S3 or memory) and counts the reads it is asked
// for: calls that reach the backend (a get, a size, a listing) and the bytes read. The
// S3 server behind it is real; only the counting is added. Reached by "count+s3://" and
// "count+mem://" URLs.
struct ReadCounts {
  std::atomic<std::uint64_t> requests{0}, bytes{0}, writes{0};
  std::mutex mu;
  std::vector<std::string> written;  // the keys put or created, in order
  void reset() {
    requests = 0;
    bytes = 0;
    writes = 0;
    std::lock_guard lock(mu);
    written.clear();
  }
  void wrote(const std::string& key) {
    ++writes;
    std::lock_guard lock(mu);
    written.push_back(key);
  }
};
inline ReadCounts& read_counts() {
  static ReadCounts c;
  return c;
}

class CountingStorage final : public ckpt::storage::Storage {
 public:
  explicit CountingStorage(std::shared_ptr<ckpt::storage::Storage> inner) : inner_(std::move(inner)) {}
  std::string root_url() const override { return "count+" + inner_->root_url(); }
  using Storage::put;
  void put(const std::string& key, std::span<const ckpt::storage::ConstBytes> pieces) override {
    read_counts().wrote(key);
    inner_->put(key, pieces);
  }
  std::unique_ptr<ckpt::storage::ObjectWriter> create(const std::string& key) override {
    read_counts().wrote(key);
    return inner_->create(key);
  }
  void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    ++read_counts().requests;
    read_counts().bytes += dst.size();
    inner_->get(key, offset, dst);
  }
  void get_many(std::span<const ckpt::storage::ReadSegment> segments) const override {
    for (const auto& s : segments) {
      ++read_counts().requests;
      read_counts().bytes += s.dst.size();
    }
    inner_->get_many(segments);
  }
  std::optional<std::uint64_t> size(const std::string& key) const override {
    ++read_counts().requests;
    return inner_->size(key);
  }
  std::optional<std::vector<std::byte>> read_all(const std::string& key, std::uint64_t max_bytes) const override {
    ++read_counts().requests;
    auto out = inner_->read_all(key, max_bytes);
    if (out) read_counts().bytes += out->size();
    return out;
  }
  std::vector<std::string> list(const std::string& prefix) const override {
    ++read_counts().requests;
    return inner_->list(prefix);
  }
  std::vector<Listed> list_sizes(const std::string& prefix) const override {
    ++read_counts().requests;
    return inner_->list_sizes(prefix);
  }
  void remove(const std::vector<std::string>& keys) override { inner_->remove(keys); }
  std::vector<std::string> children(const std::string& prefix) const override {
    ++read_counts().requests;
    return inner_->children(prefix);
  }
  void remove_prefix(const std::string& prefix) override { inner_->remove_prefix(prefix); }
  unsigned parallelism() const override { return inner_->parallelism(); }

 private:
  std::shared_ptr<ckpt::storage::Storage> inner_;
};

inline ckpt::storage::Location open_counted(const std::string& url) {
  ckpt::storage::Location inner = ckpt::storage::open_location(url.substr(std::string_view("count+").size()));
  return {std::make_shared<CountingStorage>(inner.storage), inner.prefix, url};
}
inline const bool counted_registered = ckpt::storage::register_url_scheme({"count+s3", &open_counted}) &&
                                       ckpt::storage::register_url_scheme({"count+gs", &open_counted}) &&
                                       ckpt::storage::register_url_scheme({"count+mem", &open_counted});

struct BigLayer {
  std::vector<float> w;
};
struct BigState {
  std::int64_t step = 0;
  std::vector<BigLayer> layers;
};

// layers x floats of incompressible values (zstd stores them as they are).
inline BigState big_state(std::size_t layers, std::size_t floats) {
  BigState s;
  s.step = 7;
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::size_t l = 0; l < layers; ++l) {
    auto& w = s.layers.emplace_back().w;
    w.resize(floats);
    for (auto& f : w) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      f = static_cast<float>(x >> 40) * 0x1p-24f - 0.5f;
    }
  }
  return s;
}

// Every file under dir, with its size: what a restore must leave as it found it.
inline std::vector<std::pair<std::string, std::uintmax_t>> files_under(const fs::path& dir) {
  std::vector<std::pair<std::string, std::uintmax_t>> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec))
    out.emplace_back(it->path().string(), it->is_regular_file(ec) ? it->file_size(ec) : 0);
  std::sort(out.begin(), out.end());
  return out;
}

// What restoring the subtree "layers.<layer>" of the checkpoint at url (a count+ URL)
// fetches, checked against that subtree's stored bytes: within 1.1x, nothing written
// to local disk (TMPDIR points at an empty directory meanwhile; the test's own
// directory is compared before and after), and the values right.
struct Fetched {
  std::uint64_t requests = 0, bytes = 0;
};
inline Fetched restore_subtree_counted(const std::string& url, const BigState& s, std::size_t layer, std::uint64_t stored,
                                       const test::TempDir& tmp) {
  const fs::path fresh_tmp = tmp / "TMPDIR";
  fs::create_directories(fresh_tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", fresh_tmp.c_str(), 1);
  REQUIRE(fs::temp_directory_path() == fresh_tmp);
  const auto before = files_under(tmp.path());
  read_counts().reset();
  BigLayer back;
  try {
    back = ckpt::restore<BigLayer>(url, {.subtree = "layers." + std::to_string(layer)});
  } catch (...) {
    old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
    throw;
  }
  const Fetched f{read_counts().requests, read_counts().bytes};
  old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  CHECK(files_under(tmp.path()) == before);
  CHECK(fs::is_empty(fresh_tmp));
  CHECK(read_counts().writes == 0);
  REQUIRE(back.w.size() == s.layers[layer].w.size());
  CHECK(std::memcmp(back.w.data(), s.layers[layer].w.data(), back.w.size() * sizeof(float)) == 0);
  CHECK(f.bytes >= stored);
  CHECK(static_cast<double>(f.bytes) <= 1.1 * static_cast<double>(stored));
  MESSAGE(url << ": " << f.requests << " requests, " << f.bytes << " bytes fetched for " << stored << " stored");
  return f;
}

// The sum of the sizes of the values under prefix of a store.
inline std::uint64_t value_bytes(const ckpt::io::KvStore& kv, const std::string& prefix) {
  std::uint64_t n = 0;
  for (const auto& k : kv.list(prefix, 1u << 20)) n += *kv.size(k);
  return n;
}

TEST_CASE("storage: a subtree of an Orbax (OCDBT and not), zarr, t5x or safetensors checkpoint in memory reads its ranges only") {
  const BigState s = big_state(8, std::size_t{1} << 18);  // 8 MiB
  test::TempDir tmp;
  for (const std::string name : {"orbax", "orbax_without_ocdbt", "zarr", "t5x", "safetensors"}) {
    CAPTURE(name);
    const std::string url = "mem://subtree/" + name;
    const ckpt::Snapshot snap = ckpt::take_snapshot(s);
    if (name == "orbax_without_ocdbt") ckpt::save_snapshot<ckpt::orbax_without_ocdbt>(url, snap);
    else ckpt::save_snapshot(*ckpt::find_format(name), url, snap);
    const ckpt::storage::LocationKv kv(ckpt::storage::open_location(url));
    std::uint64_t stored = 0;
    if (name == "orbax") stored = value_bytes(*ckpt::detail::ocdbt::Database::open(std::make_shared<ckpt::storage::LocationKv>(ckpt::storage::open_location(url)), "default/", url), "layers.3.w/");
    else if (name == "orbax_without_ocdbt") stored = value_bytes(kv, "default/layers.3.w/");
    else if (name == "zarr") stored = value_bytes(kv, "layers/3/w/");
    else if (name == "t5x") stored = value_bytes(kv, "layers.3.w/");
    else stored = s.layers[3].w.size() * sizeof(float);
    REQUIRE(stored >= s.layers[3].w.size() * sizeof(float) * 8 / 10);
    restore_subtree_counted("count+" + url, s, 3, stored, tmp);
  }
  ckpt::memory_storage_clear("subtree");
}


// --- what a save writes ---------------------------------------------------------------
// Every format writes its objects through the storage: a save to an object store
// writes nothing to local disk (TMPDIR points at an empty directory meanwhile, and the
// test's own directory is compared before and after), the format's objects go first
// and the commit marker last, once; the values come back.
inline const std::vector<std::string>& writing_formats() {
  static const std::vector<std::string> names{"orbax", "orbax_without_ocdbt", "t5x", "zarr", "safetensors", "flax"};
  return names;
}
inline void save_format(const std::string& name, const std::string& url, const ckpt::Snapshot& snap) {
  if (name == "orbax_without_ocdbt") ckpt::save_snapshot<ckpt::orbax_without_ocdbt>(url, snap);
  else ckpt::save_snapshot(*ckpt::find_format(name), url, snap);
}
inline void save_without_local_disk(const std::string& name, const std::string& url, const BigState& s,
                                    const test::TempDir& tmp) {
  CAPTURE(name);
  const fs::path fresh_tmp = tmp / ("TMPDIR-" + name);
  fs::create_directories(fresh_tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  const auto before = files_under(tmp.path());
  ::setenv("TMPDIR", fresh_tmp.c_str(), 1);
  REQUIRE(fs::temp_directory_path() == fresh_tmp);
  read_counts().reset();
  try {
    save_format(name, "count+" + url, ckpt::take_snapshot(s));
  } catch (...) {
    old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
    throw;
  }
  old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  MESSAGE(url << ": " << read_counts().writes.load() << " objects written, " << read_counts().requests.load()
               << " storage reads (listings, sizes, gets)");
  CHECK(fs::is_empty(fresh_tmp));
  CHECK(files_under(tmp.path()) == before);
  const auto& written = read_counts().written;
  REQUIRE(written.size() >= 2);
  const std::string marker = ckpt::storage::open_location(url).key("commit_success.txt");
  CHECK(written.back() == marker);
  CHECK(std::count(written.begin(), written.end(), marker) == 1);
  const BigState back = ckpt::restore<BigState>(url);
  CHECK(back.step == s.step);
  REQUIRE(back.layers.size() == s.layers.size());
  for (std::size_t l = 0; l < s.layers.size(); ++l) CHECK(back.layers[l].w == s.layers[l].w);
}

TEST_CASE("storage: every format saves to mem:// through the storage, nothing on local disk, the marker last") {
  const BigState s = big_state(4, std::size_t{1} << 16);  // 1 MiB
  test::TempDir tmp;
  for (const auto& name : writing_formats()) save_without_local_disk(name, "mem://saved/" + name, s, tmp);
  // A manager's step too: its items and _CHECKPOINT_METADATA (merged with Orbax's own,
  // metrics in Orbax's metrics item) go through the storage, the marker last.
  const fs::path fresh_tmp = tmp / "TMPDIR-manager";
  fs::create_directories(fresh_tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", fresh_tmp.c_str(), 1);
  read_counts().reset();
  try {
    ckpt::CheckpointManager<BigState, ckpt::orbax> mgr("count+mem://saved/mgr");
    mgr.save(3, s, {{"loss", 0.25}},
             {.items = {{"cursor", ckpt::json_item({{"pos", 3}})}, {"extra", ckpt::tree_item(big_state(1, 10))}}});
    mgr.wait_until_finished();
  } catch (...) {
    old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
    throw;
  }
  old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  MESSAGE("a manager's Orbax step with two items: " << read_counts().writes.load() << " objects written, "
                                                    << read_counts().requests.load() << " storage reads");
  CHECK(fs::is_empty(fresh_tmp));
  REQUIRE_FALSE(read_counts().written.empty());
  CHECK(read_counts().written.back() == "mgr/3/commit_success.txt");
  ckpt::CheckpointManager<BigState, ckpt::orbax> mgr("mem://saved/mgr", {.read_only = true});
  CHECK(mgr.all_steps() == Steps{3});
  CHECK(mgr.metrics(3).at("loss") == doctest::Approx(0.25));
  CHECK(mgr.item_json(3, "cursor")["pos"] == 3);
  CHECK(mgr.restore_item<BigState>(3, "extra").layers.at(0).w == big_state(1, 10).layers[0].w);
  CHECK(mgr.restore(3).layers.at(2).w == s.layers[2].w);
  ckpt::memory_storage_clear("saved");
}

TEST_CASE("storage: a save to a local directory still stages and renames, for every format") {
  const BigState s = big_state(2, 1000);
  test::TempDir tmp;
  for (const auto& name : writing_formats()) {
    CAPTURE(name);
    save_format(name, (tmp / name).string(), ckpt::take_snapshot(s));
    CHECK(fs::exists(tmp / name));  // (Flax: the file itself)
    // nothing left beside it: the staging directory was renamed into place
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path())) ++entries;
    CHECK(entries == static_cast<std::size_t>(&name - writing_formats().data()) + 1);
    const BigState back = ckpt::restore<BigState>(tmp / name);
    REQUIRE(back.layers.size() == 2);
    CHECK(back.layers[1].w == s.layers[1].w);
  }
}

struct Run {
  int rc;
  std::string out, err;
};
inline Run shell(const std::string& cmd) {
  test::TempDir tmp;
  const int st = std::system((cmd + " >" + (tmp / "out").string() + " 2>" + (tmp / "err").string()).c_str());
  auto slurp = [](const fs::path& p) {
    auto v = test::read_bytes(p);
    return std::string(v.begin(), v.end());
  };
  return {WEXITSTATUS(st), slurp(tmp / "out"), slurp(tmp / "err")};
}

// Sets environment variables for a scope, and puts the old values back.
class EnvScope {
 public:
  EnvScope(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      value ? ::setenv(name, value, 1) : ::unsetenv(name);
    }
  }
  ~EnvScope() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      it->second ? ::setenv(it->first, it->second->c_str(), 1) : ::unsetenv(it->first);
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

inline void put_file(const fs::path& p, std::span<const std::byte> bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}
// A test server of tests/ (Python standard library) started on a free port of
// 127.0.0.1, which it writes to port_file when it listens.
struct Spawned {
  pid_t pid = -1;
  int port = 0;
};
inline Spawned start_python_server(const std::string& script, const std::vector<std::string>& args,
                                   const fs::path& port_file) {
  fs::remove(port_file);
  std::vector<std::string> argv = {"python3", (fs::path(CKPT_SOURCE_DIR) / "tests" / script).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--port-file", port_file.string()});
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  Spawned out;
  out.pid = ::fork();
  if (out.pid == 0) {
    ::execv("/usr/bin/python3", cargv.data());
    std::_Exit(127);
  }
  for (int i = 0; i < 400 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(25ms);
  REQUIRE_MESSAGE(fs::exists(port_file), "tests/" << script << " did not start");
  const auto text = test::read_bytes(port_file);
  out.port = std::stoi(std::string(text.begin(), text.end()));
  return out;
}

#if defined(CKPT_HAVE_S3)

// --- a real S3 server ------------------------------------------------------------------

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline bool port_open(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// s3rver on 127.0.0.1:<free port>, data in a temporary directory, bucket "bkt".
class S3Server {
 public:
  static S3Server& get() {
    static S3Server server;
    return server;
  }
  bool available() const { return !script_.empty(); }
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  ckpt::S3Options options() const {
    ckpt::S3Options o;
    o.endpoint = endpoint();
    o.region = "us-east-1";
    o.access_key_id = "S3RVER";  // s3rver's built-in account
    o.secret_access_key = "S3RVER";
    o.connections = 4;
    o.part_size = std::size_t{5} << 20;
    o.multipart_threshold = std::size_t{5} << 20;
    o.max_retries = 2;
    o.retry_delay = 50ms;
    o.connect_timeout = 2000ms;
    o.stall_timeout = 5000ms;
    return o;
  }

  void start() {
    port_ = port_ ? port_ : free_port();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      const int null = ::open("/dev/null", O_WRONLY);  // its "listening" line would clutter the test log
      if (null >= 0) ::dup2(null, STDOUT_FILENO);
      // s3rver's paginated listings use DES, which Node >= 17 enables only on request
      ::execlp("node", "node", "--openssl-legacy-provider", script_.c_str(), "-d", data_.path().c_str(), "-a", "127.0.0.1", "-p", port.c_str(),
               "--configure-bucket", "bkt", "--silent", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 200 && !port_open(port_); ++i) std::this_thread::sleep_for(50ms);
    REQUIRE_MESSAGE(port_open(port_), "s3rver did not start listening on port " << port_);
  }
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  ~S3Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  S3Server() {
    const fs::path dir = fs::path(CKPT_SOURCE_DIR) / ".s3rver";
    const fs::path script = dir / "node_modules" / "s3rver" / "bin" / "s3rver.js";
    if (!fs::exists(script)) {
      const std::string cmd = "npm install --no-audit --no-fund --loglevel=error --prefix '" + dir.string() +
                              "' s3rver@3.7.1 > '" + (data_.path() / "npm.log").string() + "' 2>&1";
      if (std::system("node --version > /dev/null 2>&1") != 0) {
        why_not_ = "Node.js is not installed";
        return;
      }
      if (std::system(cmd.c_str()) != 0 || !fs::exists(script)) {
        why_not_ = "npm could not install s3rver (offline?); see " + (data_.path() / "npm.log").string();
        return;
      }
    }
    script_ = script.string();
    start();
    ckpt::s3::configure(options());
  }

  test::TempDir data_;
  std::string script_, why_not_;
  int port_ = 0;
  pid_t pid_ = -1;
};

#define REQUIRE_S3()                                                                 \
  auto& server = S3Server::get();                                                    \
  if (!server.available()) {                                                         \
    MESSAGE("S3 cases skipped: " << server.why_not());                               \
    return;                                                                          \
  }                                                                                  \
  ckpt::s3::configure(server.options())

TEST_CASE("storage: S3 objects: put, multipart, ranged and parallel get, paginated list, delete") {
  REQUIRE_S3();
  auto st = ckpt::storage::s3_bucket("bkt");
  exercise_storage(*st, "iface");
  // 12 MiB + 3 bytes: a multipart upload of three parts, read back in parallel ranges.
  std::vector<std::byte> big((std::size_t{12} << 20) + 3);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 131) >> 3);
  const ckpt::storage::ConstBytes pieces[] = {std::span(big).first(1000), std::span(big).subspan(1000)};
  st->put("iface/big", pieces);
  CHECK(st->size("iface/big") == std::optional<std::uint64_t>(big.size()));
  std::vector<std::byte> back(big.size() - 10);
  st->get("iface/big", 10, back);
  CHECK(std::equal(back.begin(), back.end(), big.begin() + 10));
  // Pages of two keys.
  auto opts = server.options();
  opts.list_page_size = 2;
  ckpt::storage::S3Storage paged("bkt", opts);
  for (int i = 0; i < 5; ++i) paged.put("pages/k" + std::to_string(i), ckpt::storage::ConstBytes(bytes_of("v")));
  CHECK(paged.list("pages/").size() == 5);
  paged.remove(paged.list("pages/"));
  st->remove({"iface/big"});
  CHECK(st->list("iface/").empty());
  CHECK(st->list("pages/").empty());
}

TEST_CASE("storage: S3 save and restore through s3:// URLs; the commit marker comes last") {
  REQUIRE_S3();
  const State s = make_state(3, std::size_t{3} << 20);  // 12 MiB of weights: multipart
  ckpt::save("s3://bkt/save/a", s);
  check_same(ckpt::restore<State>("s3://bkt/save/a"), s);
  CHECK(ckpt::metadata("s3://bkt/save/a").leaf("weights").shape() == ckpt::Shape{std::int64_t{3} << 20});
  CHECK_THROWS_CKPT(ckpt::save("s3://bkt/save/a", s), ckpt::Error, "already exists");
  auto st = ckpt::storage::s3_bucket("bkt");
  const auto keys = st->list("save/a/");
  CHECK(std::find(keys.begin(), keys.end(), "save/a/commit_success.txt") != keys.end());
  st->remove({"save/a/commit_success.txt"});
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://bkt/save/a"), ckpt::Error, "no commit marker");
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://bkt/save/none"), ckpt::Error, "no checkpoint here");
  // An uncommitted prefix is overwritten without .force; a committed one with it.
  const State t = make_state(4, 1000);
  ckpt::save("s3://bkt/save/a", t);
  check_same(ckpt::restore<State>("s3://bkt/save/a"), t);
  ckpt::save("s3://bkt/save/a", s, {.force = true});
  check_same(ckpt::restore<State>("s3://bkt/save/a"), s);
  // Large leaves spread over one data object per connection (4 here), each a single
  // PUT, though SaveOptions::data_files stays 1 (what a disk is written fastest with).
  Layers layers, back;
  for (int i = 0; i < 6; ++i) layers.w.emplace_back(std::size_t{64} << 10, static_cast<float>(i));
  ckpt::save("s3://bkt/save/layers", layers);
  std::vector<std::string> data;
  for (const auto& k : st->list("save/layers/"))
    if (k.starts_with("save/layers/data-")) data.push_back(k);
  CHECK(data == std::vector<std::string>{"save/layers/data-0", "save/layers/data-1", "save/layers/data-2",
                                         "save/layers/data-3"});
  back = ckpt::restore<Layers>("s3://bkt/save/layers");
  CHECK(back.w == layers.w);
  st->remove(st->list("save/"));
}

TEST_CASE("storage: a manager on S3 keeps max_to_keep, saves asynchronously, cleans up leftovers") {
  REQUIRE_S3();
  auto st = ckpt::storage::s3_bucket("bkt");
  {
    ckpt::CheckpointManager<State, ckpt::async_save, ckpt::s3> mgr("bkt/mgr", {.max_to_keep = 2});
    for (std::int64_t step = 1; step <= 3; ++step)
      mgr.save(step, make_state(step, 200'000), {{"loss", static_cast<double>(step)}},
               {.items = {{"cursor", ckpt::json_item({{"pos", step}})}}});
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == Steps{2, 3});
    CHECK(st->list("mgr/1/").empty());
    check_same(mgr.restore(), make_state(3, 200'000));
    CHECK(mgr.item_json(2, "cursor")["pos"] == 2);
  }
  st->put("mgr/7/data-0", ckpt::storage::ConstBytes(bytes_of("torn")));
  ckpt::CheckpointManager<State, ckpt::s3> again("s3://bkt/mgr");
  CHECK(again.all_steps() == Steps{2, 3});
  CHECK(again.metrics(3).at("loss") == 3.0);
  CHECK(st->list("mgr/7/").empty());
  st->remove(st->list("mgr/"));
}

TEST_CASE("storage: wrong S3 credentials are a clear ckpt::Error") {
  REQUIRE_S3();
  auto opts = server.options();
  opts.access_key_id = "NOT-A-KEY";
  ckpt::s3::configure(opts);
  CHECK_THROWS_CKPT(ckpt::save("s3://bkt/creds/a", make_state(1, 10)), ckpt::Error, "403 InvalidAccessKeyId");
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://bkt/creds/a"), ckpt::Error, "check AWS_ACCESS_KEY_ID");
  ckpt::s3::configure(server.options());
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://no-such-bucket/a"), ckpt::Error, "NoSuchBucket");
}

TEST_CASE("storage: a stalled S3 server times out within the configured time") {
  REQUIRE_S3();
  auto opts = server.options();
  opts.stall_timeout = 1000ms;
  opts.max_retries = 1;
  ckpt::s3::configure(opts);
  ::kill(server.pid(), SIGSTOP);  // accepts connections (the kernel does), answers nothing
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_CKPT(ckpt::save("s3://bkt/slow/a", make_state(1, 10)), ckpt::Error, "after 2 attempts");
  const auto took = std::chrono::steady_clock::now() - t0;
  ::kill(server.pid(), SIGCONT);
  CHECK(took < 10s);
  ckpt::s3::configure(server.options());
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://bkt/slow/a"), ckpt::Error, "no checkpoint here");
}

TEST_CASE("storage: an S3 server killed mid-save leaves no checkpoint and the previous step intact") {
  REQUIRE_S3();
  auto opts = server.options();
  opts.connections = 2;
  opts.max_send_speed = std::uint64_t{3} << 20;  // 24 MiB at 2 x 3 MiB/s: about 4 s
  ckpt::s3::configure(opts);
  const State first = make_state(1, 1000);
  {
    ckpt::CheckpointManager<State, ckpt::async_save, ckpt::s3> mgr("bkt/killed");
    mgr.save(1, first);
    mgr.wait_until_finished();
    mgr.save(2, make_state(2, std::size_t{6} << 20));
    std::this_thread::sleep_for(700ms);
    server.kill_now();
    CHECK_THROWS_AS(mgr.wait_until_finished(), ckpt::Error);
    CHECK(mgr.all_steps() == Steps{1});
  }
  server.start();  // same port, same data directory
  ckpt::s3::configure(server.options());
  ckpt::CheckpointManager<State, ckpt::s3> after("bkt/killed");
  CHECK(after.all_steps() == Steps{1});
  check_same(after.restore(), first);
  CHECK(ckpt::storage::s3_bucket("bkt")->list("killed/2/").empty());
  CHECK_THROWS_CKPT(ckpt::restore<State>("s3://bkt/killed/2"), ckpt::Error, "no checkpoint here");
}

TEST_CASE("storage: the ckpt tool lists, reads, verifies and converts s3:// checkpoints, credentials from AWS_*") {
  REQUIRE_S3();
  INFO("CKPT_CLI = " << CKPT_CLI << " (build it: the ckpt_cli target)");
  REQUIRE(fs::exists(CKPT_CLI));
  const State s = make_state(5, 2000);
  {
    ckpt::CheckpointManager<State, ckpt::s3> mgr("bkt/cli");
    mgr.save(5, s, {{"loss", 0.5}});
  }
  const std::string env = "env AWS_ENDPOINT_URL=" + server.endpoint() +
                          " AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 " + CKPT_CLI;
  auto r = shell(env + " ls --json s3://bkt/cli");
  CHECK(r.rc == 0);
  CHECK(r.out.find("\"step\":5") != std::string::npos);
  CHECK(r.out.find("\"loss\":0.5") != std::string::npos);
  r = shell(env + " tree s3://bkt/cli/5");
  CHECK(r.rc == 0);
  CHECK(r.out.find("weights") != std::string::npos);
  CHECK(shell(env + " verify s3://bkt/cli/5").rc == 0);
  // du per step of the root and per subtree; stats read by ranges from the objects.
  r = shell(env + " du --json s3://bkt/cli");
  CHECK(r.rc == 0);
  CHECK(r.out.find("\"step\":5") != std::string::npos);
  CHECK(r.out.find("\"name\":\"weights\"") != std::string::npos);
  r = shell(env + " stats --json s3://bkt/cli/5 --max-memory 1M");
  CHECK(r.rc == 0);
  CHECK(r.out.find("\"path\":\"weights\"") != std::string::npos);
  CHECK(r.out.find("\"elements\":2000") != std::string::npos);
  CHECK(shell(env + " diff --rel s3://bkt/cli/5 s3://bkt/cli/5").rc == 0);
  test::TempDir tmp;
  r = shell(env + " convert s3://bkt/cli/5 " + (tmp / "local").string() + " --to native");
  CHECK(r.rc == 0);
  check_same(ckpt::restore<State>(tmp / "local"), s);
  CHECK(shell(env + " convert " + (tmp / "local").string() + " s3://bkt/cli/copy --to native").rc == 0);
  check_same(ckpt::restore<State>("s3://bkt/cli/copy"), s);
  CHECK(shell(env + " diff s3://bkt/cli/5 s3://bkt/cli/copy").rc == 0);
  // Another format on S3: uploaded file by file, downloaded whole to be read.
  r = shell(env + " convert s3://bkt/cli/5 s3://bkt/cli/z --to zarr");
  CHECK(r.rc == 0);
  check_same(ckpt::restore<State>("s3://bkt/cli/z"), s);
  r = shell(env + " tree s3://bkt/cli/z");
  CHECK(r.rc == 0);
  CHECK(r.out.find("weights") != std::string::npos);
  r = shell("env AWS_ENDPOINT_URL=" + server.endpoint() + " AWS_ACCESS_KEY_ID=nobody AWS_SECRET_ACCESS_KEY=x " +
            CKPT_CLI + " tree s3://bkt/cli/5");
  CHECK(r.rc == 2);
  INFO(r.err);
  CHECK(r.err.find("HTTP 403") != std::string::npos);  // a HEAD first: no error document, just the status
  CHECK(r.err.find("check AWS_ACCESS_KEY_ID") != std::string::npos);
  auto st = ckpt::storage::s3_bucket("bkt");
  st->remove(st->list("cli/"));
}

// The done-when case of object-store reads: a checkpoint of 256 MiB on the S3 server (8
// layers of 32 MiB) in Orbax's OCDBT layout, t5x's and safetensors', each written once;
// one layer restored from each fetches that layer's stored bytes and little more, and
// writes nothing to local disk.
TEST_CASE("storage: one subtree of a 256 MiB Orbax, t5x or safetensors checkpoint on S3 fetches its bytes only") {
  REQUIRE_S3();
  const BigState s = big_state(8, std::size_t{8} << 20);
  test::TempDir tmp;
  auto st = ckpt::storage::s3_bucket("bkt");
  const ckpt::Snapshot snap = ckpt::take_snapshot(s);
  REQUIRE(snap.total_bytes() >= std::uint64_t{256} << 20);
  for (const std::string name : {"orbax", "t5x", "safetensors"}) {
    CAPTURE(name);
    const std::string url = "s3://bkt/big/" + name;
    ckpt::save_snapshot(*ckpt::find_format(name), url, snap);
    const auto kv = std::make_shared<ckpt::storage::LocationKv>(ckpt::storage::open_location(url));
    CHECK(value_bytes(*kv, "") >= std::uint64_t{200} << 20);  // t5x's gzip saves a tenth
    std::uint64_t stored = 0;
    if (name == "orbax") stored = value_bytes(*ckpt::detail::ocdbt::Database::open(kv, "default/", url), "layers.5.w/");
    else if (name == "t5x") stored = value_bytes(*kv, "layers.5.w/");
    else stored = s.layers[5].w.size() * sizeof(float);
    REQUIRE(stored >= std::uint64_t{25} << 20);
    const Fetched f = restore_subtree_counted("count+" + url, s, 5, stored, tmp);
    CHECK(f.requests < 64);
    st->remove(st->list("big/" + name + "/"));
  }
}

// Parts of 5 MiB and a threshold of 6 MiB: every format's larger objects go up as
// multipart uploads from the writer's appends (ObjectWriter), nothing through a file.
TEST_CASE("storage: every format saves to S3 through the storage, nothing on local disk, the marker last") {
  REQUIRE_S3();
  auto opts = server.options();
  opts.part_size = std::size_t{5} << 20;
  opts.multipart_threshold = std::size_t{6} << 20;
  ckpt::s3::configure(opts);
  const BigState s = big_state(4, std::size_t{1} << 21);  // 32 MiB
  test::TempDir tmp;
  auto st = ckpt::storage::s3_bucket("bkt");
  try {
    for (const auto& name : writing_formats()) {
      save_without_local_disk(name, "s3://bkt/saved/" + name, s, tmp);
      st->remove(st->list("saved/" + name + "/"));
    }
  } catch (...) {
    ckpt::s3::configure(server.options());
    throw;
  }
  ckpt::s3::configure(server.options());
}

TEST_CASE("storage: an S3 object writer uploads parts as the appends come; one not closed leaves nothing") {
  REQUIRE_S3();
  auto opts = server.options();
  opts.part_size = std::size_t{5} << 20;
  opts.multipart_threshold = std::size_t{6} << 20;
  opts.connections = 2;  // copies are sent once 10 MiB of them are held
  ckpt::storage::S3Storage st("bkt", opts);
  // 23 MiB + 5 bytes from one reused 1 MiB buffer (not stable: the writer copies it)
  std::vector<std::byte> expect, buffer(std::size_t{1} << 20);
  {
    auto w = st.create("writer/big");
    for (std::size_t i = 0; i < 24; ++i) {
      const std::size_t n = i == 23 ? 5 : buffer.size();
      for (std::size_t k = 0; k < n; ++k) buffer[k] = static_cast<std::byte>((i * 7 + k * 13) & 0xff);
      w->append(std::span(buffer).first(n), false);
      expect.insert(expect.end(), buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n));
    }
    CHECK_FALSE(st.size("writer/big"));  // not visible before close
    w->close();
  }
  REQUIRE(st.size("writer/big") == std::optional<std::uint64_t>(expect.size()));
  std::vector<std::byte> back(expect.size());
  st.get("writer/big", 0, back);
  CHECK(back == expect);
  // small and stable: one PUT at close
  const std::string text = "small object";
  {
    auto w = st.create("writer/small");
    w->append(std::as_bytes(std::span(text)), true);
    w->close();
  }
  CHECK(st.read_all("writer/small", 100) == std::optional(std::vector<std::byte>(
                                                  std::as_bytes(std::span(text)).begin(), std::as_bytes(std::span(text)).end())));
  // abandoned after parts went up: the upload is aborted, no object appears
  {
    auto w = st.create("writer/abandoned");
    for (std::size_t i = 0; i < 12; ++i) w->append(buffer, false);
  }
  CHECK_FALSE(st.size("writer/abandoned"));
  st.remove({"writer/big", "writer/small"});
  CHECK(st.list("writer/").empty());
}

// The AWS credential sources (tests/aws_credentials_server.py): STS, a container's
// endpoint and the instance metadata service, on 127.0.0.1, started once.
class AwsCredentialServer {
 public:
  static AwsCredentialServer& get() {
    static AwsCredentialServer server;
    return server;
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(spawned_.port); }
  nlohmann::json call(const std::string& path, const nlohmann::json& body = nullptr) const {
    ckpt::io::HttpOptions o;
    o.connections = 1;
    o.max_retries = 2;
    ckpt::io::HttpClient http(o, {});
    ckpt::io::HttpRequest r;
    r.url = endpoint() + path;
    r.subject = "aws_credentials_server.py";
    const std::string text = body.is_null() ? std::string() : body.dump();
    const ckpt::storage::ConstBytes bytes = std::as_bytes(std::span(text));
    if (!body.is_null()) {
      r.method = "POST";
      r.content_type = "application/json";
      r.body = std::span<const ckpt::storage::ConstBytes>(&bytes, 1);
      r.body_size = text.size();
    }
    return nlohmann::json::parse(http.perform(r).body);
  }
  int count(const std::string& kind) const { return call("/_stats")[kind].get<int>(); }
  ~AwsCredentialServer() {
    if (spawned_.pid > 0) {
      ::kill(spawned_.pid, SIGTERM);
      ::waitpid(spawned_.pid, nullptr, 0);
    }
  }

 private:
  AwsCredentialServer() : spawned_(start_python_server("aws_credentials_server.py", {}, dir_ / "port")) {}
  test::TempDir dir_;
  Spawned spawned_;
};

TEST_CASE("storage: S3 credentials as the AWS SDKs find them: profiles, web identity, container, IMDSv2, refresh") {
  REQUIRE_S3();
  auto& aws = AwsCredentialServer::get();
  const std::string web_token = "eyJ.web-identity.jwt", role = "arn:aws:iam::123456789012:role/ckpt";
  aws.call("/_control", {{"lifetime", 3600}, {"key_id", "S3RVER"}, {"secret", "S3RVER"}, {"role_arn", role},
                         {"web_identity_token", web_token}, {"container_token", "container-auth-secret"}});
  const State s = make_state(6, 20'000);
  const std::string url = "s3://bkt/awscreds/a";
  ckpt::save(url, s);  // with the server's own keys
  test::TempDir tmp;
  fs::create_directories(tmp / "home");
  const std::string home = (tmp / "home").string();
  // Nothing of the chain set, unless a case sets it; the metadata service off.
  EnvScope clean{{"AWS_ACCESS_KEY_ID", nullptr}, {"AWS_SECRET_ACCESS_KEY", nullptr}, {"AWS_SESSION_TOKEN", nullptr},
                 {"AWS_PROFILE", nullptr}, {"AWS_SHARED_CREDENTIALS_FILE", nullptr}, {"AWS_CONFIG_FILE", nullptr},
                 {"AWS_WEB_IDENTITY_TOKEN_FILE", nullptr}, {"AWS_ROLE_ARN", nullptr}, {"AWS_ROLE_SESSION_NAME", nullptr},
                 {"AWS_ENDPOINT_URL_STS", nullptr}, {"AWS_ENDPOINT_URL", nullptr},
                 {"AWS_CONTAINER_CREDENTIALS_FULL_URI", nullptr}, {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", nullptr},
                 {"AWS_CONTAINER_AUTHORIZATION_TOKEN", nullptr}, {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", nullptr},
                 {"AWS_EC2_METADATA_SERVICE_ENDPOINT", nullptr}, {"AWS_EC2_METADATA_DISABLED", "true"},
                 {"HOME", home.c_str()}};
  auto opts = server.options();
  opts.access_key_id.clear();
  opts.secret_access_key.clear();
  // Restores through a fresh storage (the chain resolved now); says where its keys came from.
  auto restore_with_chain = [&] {
    ckpt::s3::configure(opts);
    check_same(ckpt::restore<State>(url), s);
    return ckpt::storage::s3_bucket("bkt")->credentials();
  };
  // A refusal: the message names the checkpoint and the source, never a secret.
  auto refused = [&](const std::string& fragment, const std::string& secret) {
    ckpt::s3::configure(opts);
    try {
      (void)ckpt::restore<State>(url);
      FAIL("restored with the wrong credentials");
    } catch (const ckpt::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(url) != std::string::npos);
      CHECK(what.find(fragment) != std::string::npos);
      CHECK(what.find(secret) == std::string::npos);
    }
  };
  ckpt::s3::configure(opts);
  CHECK(ckpt::storage::s3_bucket("bkt")->credentials() == "none");

  {  // the shared files: ~/.aws/credentials's default profile; AWS_PROFILE in other files
    put_file(tmp / "home/.aws/credentials",
             bytes_of("[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n"));
    CHECK(restore_with_chain().find("profile default of " + home + "/.aws/credentials") != std::string::npos);
    put_file(tmp / "credentials", bytes_of("# a comment\n[default]\naws_access_key_id = AKIAWRONGWRONGWRONG\n"
                                           "aws_secret_access_key = wrong-secret-value-1\n\n[ckpt]\n"
                                           "aws_access_key_id=S3RVER\naws_secret_access_key=S3RVER\n"));
    put_file(tmp / "config", bytes_of("[profile cfg]\nregion = us-east-1\naws_access_key_id = S3RVER\n"
                                      "aws_secret_access_key = S3RVER\n"));
    const std::string creds_file = (tmp / "credentials").string(), config_file = (tmp / "config").string();
    EnvScope files{{"AWS_SHARED_CREDENTIALS_FILE", creds_file.c_str()}, {"AWS_CONFIG_FILE", config_file.c_str()}};
    refused("HTTP 403 (credentials: profile default of " + creds_file, "wrong-secret-value-1");
    {
      EnvScope profile{{"AWS_PROFILE", "ckpt"}};
      CHECK(restore_with_chain().find("profile ckpt of " + creds_file) != std::string::npos);
    }
    {
      EnvScope profile{{"AWS_PROFILE", "cfg"}};
      CHECK(restore_with_chain().find("profile cfg of " + config_file) != std::string::npos);
    }
    {
      EnvScope profile{{"AWS_PROFILE", "absent"}};
      refused("AWS_PROFILE=absent is in neither", "S3RVER\n");
    }
  }
  fs::remove(tmp / "home/.aws/credentials");
  put_file(tmp / "web-token", bytes_of(web_token + "\n"));
  const std::string token_file = (tmp / "web-token").string(), sts = aws.endpoint();
  {  // web identity: the token file exchanged at STS; a profile with keys comes first
    EnvScope web{{"AWS_WEB_IDENTITY_TOKEN_FILE", token_file.c_str()}, {"AWS_ROLE_ARN", role.c_str()},
                 {"AWS_ENDPOINT_URL_STS", sts.c_str()}};
    const int before = aws.count("sts");
    const std::string source = restore_with_chain();
    CHECK(source.find("web identity") != std::string::npos);
    CHECK(source.find(role) != std::string::npos);
    CHECK(aws.count("sts") == before + 1);
    CHECK(ckpt::storage::s3_bucket("bkt")->credential_fetches() == 1);
    put_file(tmp / "home/.aws/credentials", bytes_of("[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n"));
    CHECK(restore_with_chain().find("profile default") != std::string::npos);
    CHECK(aws.count("sts") == before + 1);
    fs::remove(tmp / "home/.aws/credentials");
    put_file(tmp / "web-token", bytes_of("eyJ.stolen.jwt"));
    refused("InvalidIdentityToken", "eyJ.stolen.jwt");
    put_file(tmp / "web-token", bytes_of(web_token));
  }
  {  // a container's endpoint, with its authorization token (or its file)
    const std::string full = aws.endpoint() + "/container/v2/credentials";
    EnvScope container{{"AWS_CONTAINER_CREDENTIALS_FULL_URI", full.c_str()},
                       {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-auth-secret"}};
    const int before = aws.count("container");
    CHECK(restore_with_chain().find("container credentials from " + full) != std::string::npos);
    CHECK(aws.count("container") == before + 1);
    put_file(tmp / "container-token", bytes_of("wrong-container-auth"));
    const std::string token_path = (tmp / "container-token").string();
    EnvScope wrong{{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_path.c_str()}};
    refused("AccessDenied", "wrong-container-auth");
  }
  {  // IMDSv2: a session token, the role's name, its keys; the keys are what signs
    const std::string imds = aws.endpoint();
    EnvScope instance{{"AWS_EC2_METADATA_DISABLED", nullptr}, {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.c_str()}};
    const int tokens = aws.count("imds_token"), keys = aws.count("imds_keys");
    CHECK(restore_with_chain().find("instance metadata service at " + imds) != std::string::npos);
    CHECK(aws.count("imds_token") >= tokens + 1);
    CHECK(aws.count("imds_keys") == keys + 1);
    aws.call("/_control", {{"key_id", "AKIAWRONGWRONGWRONG"}, {"secret", "wrong-secret-value-2"}});
    refused("HTTP 403 (credentials: the instance metadata service", "wrong-secret-value-2");
    aws.call("/_control", {{"key_id", "S3RVER"}, {"secret", "S3RVER"}});
  }
  {  // keys that live 4 s, in the middle of a manager's run: fetched again before they
     // expire (after 2 s), while the async saves go on
    aws.call("/_control", {{"lifetime", 4}});
    EnvScope web{{"AWS_WEB_IDENTITY_TOKEN_FILE", token_file.c_str()}, {"AWS_ROLE_ARN", role.c_str()},
                 {"AWS_ENDPOINT_URL_STS", sts.c_str()}};
    ckpt::s3::configure(opts);
    const int before = aws.count("sts");
    {
      ckpt::CheckpointManager<State, ckpt::async_save> mgr("s3://bkt/awscreds/run", {.max_to_keep = 2});
      for (std::int64_t step = 0; step < 6; ++step) {
        CHECK(mgr.save(step, make_state(step, 20'000)));
        std::this_thread::sleep_for(1100ms);
      }
      mgr.wait_until_finished();
      CHECK(mgr.all_steps() == Steps{4, 5});
      check_same(mgr.restore(5), make_state(5, 20'000));
    }
    const int fetched = aws.count("sts") - before;
    MESSAGE("keys of 4 s over a 6.6 s run: " << fetched << " fetched");
    CHECK(fetched >= 3);
    CHECK(ckpt::storage::s3_bucket("bkt")->credential_fetches() == fetched);
    aws.call("/_control", {{"lifetime", 3600}});
  }
  ckpt::s3::configure(server.options());
  ckpt::storage::s3_bucket("bkt")->remove_prefix("awscreds");
}

#endif  // CKPT_HAVE_S3

#if defined(CKPT_HAVE_GCS)

// --- Google Cloud Storage --------------------------------------------------------------
// tests/gcs_server.py, a GCS JSON-API server (no GCS emulator is packaged here), on
// 127.0.0.1 on a free port, data in a temporary directory, buckets "bkt" and "other";
// its /_control endpoint injects failures and turns on authentication (a token endpoint
// that checks a service account's JWT, a metadata server), /_stats counts the requests.
// That it speaks GCS's protocol is shown by Google's own gcloud against it, below.
class GcsServer {
 public:
  static GcsServer& get() {
    static GcsServer server;
    return server;
  }
  bool available() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  ckpt::GcsOptions options() const {
    ckpt::GcsOptions o;
    o.endpoint = endpoint();
    o.anonymous = true;
    o.connections = 4;
    o.part_size = std::size_t{1} << 20;
    o.resumable_threshold = std::size_t{2} << 20;
    o.chunk_size = std::size_t{1} << 20;
    o.max_retries = 4;
    o.retry_delay = 20ms;
    o.retry_budget = 20'000ms;
    o.connect_timeout = 2000ms;
    o.stall_timeout = 5000ms;
    return o;
  }

  void start() {
    const auto s = start_python_server("gcs_server.py",
                                       {"--data", (data_ / "objects").string(), "--bucket", "bkt", "--bucket", "other",
                                        "--port", std::to_string(port_)},
                                       data_ / "port");
    pid_ = s.pid;
    port_ = s.port;
  }
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  ~GcsServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // The test controls: faults, authentication; the request counts.
  nlohmann::json call(const std::string& path, const nlohmann::json& body = nullptr) const {
    ckpt::io::HttpOptions o;
    o.connections = 1;
    o.max_retries = 2;
    ckpt::io::HttpClient http(o, {});
    ckpt::io::HttpRequest r;
    r.url = endpoint() + path;
    r.subject = "gcs_server.py";
    const std::string text = body.is_null() ? std::string() : body.dump();
    const ckpt::storage::ConstBytes bytes = std::as_bytes(std::span(text));
    if (!body.is_null()) {
      r.method = "POST";
      r.content_type = "application/json";
      r.body = std::span<const ckpt::storage::ConstBytes>(&bytes, 1);
      r.body_size = text.size();
    }
    return nlohmann::json::parse(http.perform(r).body);
  }
  void faults(const nlohmann::json& list) const { call("/_control", {{"faults", list}}); }
  nlohmann::json stats() const { return call("/_stats"); }
  void reset_stats() const { call("/_reset_stats", nlohmann::json::object()); }
  int requests(const std::string& kind) const {
    const auto s = stats()["requests"];
    return s.contains(kind) ? s[kind].get<int>() : 0;
  }

 private:
  GcsServer() {
    if (!fs::exists("/usr/bin/python3")) {
      why_not_ = "/usr/bin/python3 is not installed";
      return;
    }
    start();
  }

  test::TempDir data_;
  std::string why_not_;
  int port_ = 0;
  pid_t pid_ = -1;
};

#define REQUIRE_GCS()                                                           \
  auto& gcs_server = GcsServer::get();                                         \
  if (!gcs_server.available()) {                                               \
    MESSAGE("GCS cases skipped: " << gcs_server.why_not());                    \
    return;                                                                    \
  }                                                                            \
  gcs_server.call("/_control", {{"faults", nlohmann::json::array()}, {"auth", nullptr}}); \
  ckpt::gcs::configure(gcs_server.options())

inline std::vector<std::byte> file_bytes(const fs::path& p) {
  const auto v = test::read_bytes(p);
  const auto* b = reinterpret_cast<const std::byte*>(v.data());
  return {b, b + v.size()};
}

inline std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

TEST_CASE("storage: GCS objects: the object interface, resumable uploads, parallel ranged reads, pages, crc32c") {
  REQUIRE_GCS();
  auto st = ckpt::storage::gcs_bucket("bkt");
  exercise_storage(*st, "iface");
  // 3 MiB + 5 bytes, over the 2 MiB threshold: a resumable upload in 1 MiB chunks, the
  // crc32c with the last; read back in parallel ranges, and whole (crc32c checked).
  const auto big = pattern((std::size_t{3} << 20) + 5, 1);
  const ckpt::storage::ConstBytes pieces[] = {std::span(big).first(1000), std::span(big).subspan(1000)};
  gcs_server.reset_stats();
  st->put("iface/big", pieces);
  CHECK(gcs_server.requests("upload resumable") == 5);  // the start, then 4 chunks
  CHECK(st->size("iface/big") == std::optional<std::uint64_t>(big.size()));
  std::vector<std::byte> back(big.size() - 10);
  gcs_server.reset_stats();
  st->get("iface/big", 10, back);
  CHECK(std::equal(back.begin(), back.end(), big.begin() + 10));
  CHECK(gcs_server.requests("GET media") == 3);  // ranges of at least part_size (1 MiB) in parallel
  CHECK(st->read_all("iface/big", std::uint64_t{1} << 30) == std::optional(big));
  // The object writer: a reused buffer of 700 KiB, six times: chunks go up as they fill.
  {
    std::vector<std::byte> expect, buffer(700 << 10);
    auto w = st->create("iface/streamed");
    for (unsigned i = 0; i < 6; ++i) {
      buffer = pattern(buffer.size(), i);
      w->append(buffer, false);
      expect.insert(expect.end(), buffer.begin(), buffer.end());
    }
    CHECK_FALSE(st->size("iface/streamed"));
    w->close();
    CHECK(st->read_all("iface/streamed", std::uint64_t{1} << 30) == std::optional(expect));
    auto dropped = st->create("iface/dropped");
    for (unsigned i = 0; i < 6; ++i) dropped->append(buffer, false);
  }
  CHECK_FALSE(st->size("iface/dropped"));
  // A commit marker never replaces one (ifGenerationMatch=0).
  const auto one = bytes_of("one"), two = bytes_of("two");
  CHECK(st->put_if_absent("iface/marker", std::span<const ckpt::storage::ConstBytes>(std::array{ckpt::storage::ConstBytes(one)})));
  CHECK_FALSE(st->put_if_absent("iface/marker", std::span<const ckpt::storage::ConstBytes>(std::array{ckpt::storage::ConstBytes(two)})));
  CHECK(st->read_all("iface/marker", 10) == std::optional(one));
  // A download whose bytes do not match GCS's crc32c is a CorruptCheckpointError.
  gcs_server.faults({{{"kind", "corrupt"}, {"count", 1}, {"match", "alt=media"}}});
  CHECK_THROWS_CKPT(st->read_all("iface/big", std::uint64_t{1} << 30), ckpt::CorruptCheckpointError, "crc32c");
  // Pages of two names: five objects, three list requests.
  auto opts = gcs_server.options();
  opts.list_page_size = 2;
  ckpt::storage::GcsStorage paged("bkt", opts);
  for (int i = 0; i < 5; ++i) paged.put("pages/k" + std::to_string(i), ckpt::storage::ConstBytes(bytes_of("v")));
  gcs_server.reset_stats();
  CHECK(paged.list("pages/").size() == 5);
  CHECK(gcs_server.requests("list") == 3);
  paged.remove(paged.list("pages/"));
  // A requester-pays bucket: userProject on every request.
  opts.user_project = "billing-project";
  ckpt::storage::GcsStorage billed("bkt", opts);
  gcs_server.reset_stats();
  billed.put("pages/billed", ckpt::storage::ConstBytes(bytes_of("v")));
  CHECK(billed.size("pages/billed") == std::optional<std::uint64_t>(1));
  billed.remove({"pages/billed"});
  const auto queries = gcs_server.stats()["queries"];
  REQUIRE(queries.size() == 3);
  for (const auto& q : queries) CHECK(q.get<std::string>().find("userProject=billing-project") != std::string::npos);
  st->remove(st->list("iface/"));
  CHECK(st->list("iface/").empty());
  CHECK(st->list("pages/").empty());
}

TEST_CASE("storage: GCS save, restore, restore_into, metadata and restore_tree through gs:// URLs; other formats") {
  REQUIRE_GCS();
  const State s = make_state(3, std::size_t{1} << 20);  // 4 MiB of weights: a data object per connection
  gcs_server.reset_stats();
  ckpt::save("gs://bkt/save/a", s);
  const auto saved = gcs_server.stats()["requests"];
  MESSAGE("a native save of 4 MiB to gs://: " << saved.dump());
  check_same(ckpt::restore<State>("gs://bkt/save/a"), s);
  State into;
  ckpt::restore_into("gs://bkt/save/a", into);
  check_same(into, s);
  CHECK(ckpt::metadata("gs://bkt/save/a").leaf("weights").shape() == ckpt::Shape{std::int64_t{1} << 20});
  CHECK(ckpt::restore_tree("gs://bkt/save/a").leaf("step").as<std::int64_t>() == 3);
  CHECK_THROWS_CKPT(ckpt::save("gs://bkt/save/a", s), ckpt::Error, "already exists");
  auto st = ckpt::storage::gcs_bucket("bkt");
  st->remove({"save/a/commit_success.txt"});
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/save/a"), ckpt::Error, "no commit marker");
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/save/none"), ckpt::Error, "no checkpoint here");
  const State t = make_state(4, 1000);
  ckpt::save("gs://bkt/save/a", t);
  check_same(ckpt::restore<State>("gs://bkt/save/a"), t);
  ckpt::save("gs://bkt/save/a", s, {.force = true});
  check_same(ckpt::restore<State>("gs://bkt/save/a"), s);
  // Orbax (OCDBT) and safetensors through gs://, nothing on local disk, the marker last.
  const BigState b = big_state(3, std::size_t{1} << 16);
  test::TempDir tmp;
  for (const std::string name : {"orbax", "safetensors"}) save_without_local_disk(name, "gs://bkt/formats/" + name, b, tmp);
  st->remove(st->list("save/"));
  st->remove(st->list("formats/"));
}

// Copies every object under a checkpoint's place to another place, as `gcloud storage
// cp -r` or `aws s3 sync` would (a local directory through a PosixStorage on it).
inline void copy_objects(const ckpt::storage::Location& from, const ckpt::storage::Location& to) {
  const std::string under = from.prefix.empty() ? "" : from.prefix + "/";
  for (const auto& key : from.storage->list(under)) {
    const auto bytes = from.storage->read_all(key, std::uint64_t{1} << 30);
    REQUIRE(bytes);
    to.storage->put(to.key(key.substr(under.size())), ckpt::storage::ConstBytes(*bytes));
  }
}
inline ckpt::storage::Location directory_place(const fs::path& dir) {
  fs::create_directories(dir);
  return {std::make_shared<ckpt::storage::PosixStorage>(dir, ckpt::storage::Publish::in_place), "", dir.string()};
}

// The kvstore of the spec t5x keeps for the array `name` in a checkpoint's msgpack file.
inline nlohmann::json t5x_kvstore(const ckpt::storage::Location& at, const std::string& name) {
  const auto bytes = at.storage->read_all(at.key("checkpoint"), std::uint64_t{1} << 26);
  REQUIRE(bytes);
  const auto handle = msgpack::unpack(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  const auto tree = ckpt::detail::t5x::to_json(handle.get());
  REQUIRE(tree["optimizer"].contains(name));
  return tree["optimizer"][name]["kvstore"];
}

TEST_CASE("storage: t5x's portable specs on GCS: the dummy bucket, relative paths, read wherever the copy is") {
  REQUIRE_GCS();
  const State s = make_state(5, 3000);
  const std::string url = "gs://bkt/t5x/run/checkpoint_5";
  ckpt::save_snapshot(*ckpt::find_format("t5x"), url, ckpt::take_snapshot(s));
  const auto at = ckpt::storage::open_location(url);
  // As t5x writes on GCS: the gcs driver, the placeholder bucket, the path relative.
  CHECK(t5x_kvstore(at, "weights") ==
        nlohmann::json({{"bucket", "t5x-dummy-bucket"}, {"driver", "gcs"}, {"path", "weights/"}}));
  CHECK(t5x_kvstore(at, "ids")["path"] == "ids/");
  check_same(ckpt::restore<State>(url), s);
  // Copied to another bucket and prefix, to memory and to a local disk: each restores
  // from where it is, whatever bucket the specs name.
  copy_objects(at, ckpt::storage::open_location("gs://other/moved/checkpoint_5"));
  check_same(ckpt::restore<State>("gs://other/moved/checkpoint_5"), s);
  copy_objects(at, ckpt::storage::open_location("mem://t5x-portable/checkpoint_5"));
  check_same(ckpt::restore<State>("mem://t5x-portable/checkpoint_5"), s);
  test::TempDir tmp;
  copy_objects(at, directory_place(tmp / "checkpoint_5"));
  CHECK(ckpt::detect_format(tmp / "checkpoint_5") == "t5x");
  check_same(ckpt::restore<State>(tmp / "checkpoint_5"), s);
  CHECK(ckpt::metadata(tmp / "checkpoint_5").leaf("weights").shape() == ckpt::Shape{3000});
#if defined(CKPT_HAVE_S3)
  if (S3Server::get().available()) {
    ckpt::s3::configure(S3Server::get().options());
    copy_objects(at, ckpt::storage::open_location("s3://bkt/t5x-portable/checkpoint_5"));
    check_same(ckpt::restore<State>("s3://bkt/t5x-portable/checkpoint_5"), s);
    auto s3 = ckpt::storage::s3_bucket("bkt");
    s3->remove(s3->list("t5x-portable/"));
  }
#endif
  // The other way: saved on disk (the file driver), uploaded to GCS, read there; the
  // same for t5x's own test checkpoint.
  ckpt::save<ckpt::t5x>(tmp / "local/checkpoint_6", make_state(6, 100));
  const auto local = directory_place(tmp / "local/checkpoint_6");
  CHECK(t5x_kvstore(local, "weights") == nlohmann::json({{"driver", "file"}, {"path", "weights/"}}));
  copy_objects(local, ckpt::storage::open_location("gs://bkt/t5x/run/checkpoint_6"));
  ckpt::storage::gcs_bucket("bkt")->put("t5x/run/checkpoint_6/commit_success.txt", ckpt::storage::ConstBytes(bytes_of("ok")));
  check_same(ckpt::restore<State>("gs://bkt/t5x/run/checkpoint_6"), make_state(6, 100));
  const auto fixture = directory_place(fs::path(CKPT_FIXTURES_DIR) / "t5x/tiny_t5/checkpoint_1");
  copy_objects(fixture, ckpt::storage::open_location("gs://other/tiny_t5/checkpoint_1"));
  ckpt::storage::gcs_bucket("other")->put("tiny_t5/checkpoint_1/commit_success.txt", ckpt::storage::ConstBytes(bytes_of("ok")));
  const auto tree = ckpt::restore_tree("gs://other/tiny_t5/checkpoint_1");
  CHECK(tree.leaf("state.step").as<std::int32_t>() == 1);
  CHECK(ckpt::metadata("gs://other/tiny_t5/checkpoint_1").leaf("state.param_states.kernel").shape() == ckpt::Shape{10, 5});
  for (const auto& [bucket, prefix] : {std::pair{"bkt", "t5x/"}, {"other", "moved/"}, {"other", "tiny_t5/"}}) {
    auto st = ckpt::storage::gcs_bucket(bucket);
    st->remove(st->list(prefix));
  }
  ckpt::memory_storage_clear("t5x-portable");
}

TEST_CASE("storage: a manager on GCS keeps max_to_keep, saves asynchronously, cleans up leftovers") {
  REQUIRE_GCS();
  auto st = ckpt::storage::gcs_bucket("bkt");
  {
    ckpt::CheckpointManager<State, ckpt::async_save, ckpt::gcs> mgr("bkt/mgr", {.max_to_keep = 2});
    for (std::int64_t step = 1; step <= 3; ++step)
      mgr.save(step, make_state(step, 100'000), {{"loss", static_cast<double>(step)}},
               {.items = {{"cursor", ckpt::json_item({{"pos", step}})}}});
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == Steps{2, 3});
    CHECK(st->list("mgr/1/").empty());
    check_same(mgr.restore(), make_state(3, 100'000));
    CHECK(mgr.item_json(2, "cursor")["pos"] == 2);
  }
  st->put("mgr/7/data-0", ckpt::storage::ConstBytes(bytes_of("torn")));
  ckpt::CheckpointManager<State, ckpt::gcs> again("gs://bkt/mgr");
  CHECK(again.all_steps() == Steps{2, 3});
  CHECK(again.metrics(3).at("loss") == 3.0);
  CHECK(st->list("mgr/7/").empty());
  st->remove(st->list("mgr/"));
}

TEST_CASE("storage: GCS failures: 503 and 429 bursts, a dropped connection and a slow answer are retried; a 403 is not") {
  REQUIRE_GCS();
  const State s = make_state(5, 200'000);
  // A burst of 503s on the uploads and of 429s on the reads, a download cut off halfway
  // and an answer later than the stall timeout: each retried, the checkpoint whole.
  auto opts = gcs_server.options();
  opts.stall_timeout = 1000ms;
  ckpt::gcs::configure(opts);
  gcs_server.faults({{{"kind", "status"}, {"status", 503}, {"count", 3}, {"match", "/upload/"}},
                     {{"kind", "status"}, {"status", 429}, {"count", 2}, {"match", "GET "}},
                     {{"kind", "drop"}, {"count", 1}, {"match", "alt=media"}},
                     {{"kind", "delay"}, {"seconds", 2.5}, {"count", 1}, {"match", "fields=size"}}});
  gcs_server.reset_stats();
  ckpt::save("gs://bkt/faults/a", s);
  check_same(ckpt::restore<State>("gs://bkt/faults/a"), s);
  check_same(ckpt::restore<State>("gs://bkt/faults/a"), s);
  CHECK(gcs_server.stats()["faults_left"] == 0);  // every injected failure happened, and was retried
  MESSAGE("requests with the faults: " << gcs_server.stats()["requests"].dump());
  // A permanent failure: a clear Error naming the checkpoint's object, at once.
  gcs_server.faults({{{"kind", "status"}, {"status", 403}, {"count", 1}, {"match", "GET "}}});
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/faults/a"), ckpt::Error, "gs://bkt/faults/a");
  gcs_server.faults({{{"kind", "status"}, {"status", 403}, {"count", 1}, {"match", "GET "}}});
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/faults/a"), ckpt::Error, "HTTP 403 forbidden");
  // A server that keeps failing: max_retries, then an Error saying how often it tried.
  gcs_server.faults({{{"kind", "status"}, {"status", 503}, {"count", 1000}, {"match", "GET "}}});
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/faults/a"), ckpt::Error, "after 5 attempts");
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  gcs_server.faults(nlohmann::json::array());
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://nobucket/a"), ckpt::Error, "bucket does not exist");
  ckpt::gcs::configure(gcs_server.options());
  auto st = ckpt::storage::gcs_bucket("bkt");
  st->remove(st->list("faults/"));
}

TEST_CASE("storage: a GCS server killed mid-save leaves no checkpoint and the previous step intact") {
  REQUIRE_GCS();
  auto opts = gcs_server.options();
  opts.connections = 2;
  opts.max_retries = 1;
  opts.max_send_speed = std::uint64_t{1} << 20;  // 6 MiB at 2 x 1 MiB/s: about 3 s
  ckpt::gcs::configure(opts);
  const State first = make_state(1, 1000);
  {
    ckpt::CheckpointManager<State, ckpt::async_save, ckpt::gcs> mgr("bkt/killed");
    mgr.save(1, first);
    mgr.wait_until_finished();
    mgr.save(2, make_state(2, std::size_t{3} << 19));
    std::this_thread::sleep_for(700ms);
    gcs_server.kill_now();
    CHECK_THROWS_AS(mgr.wait_until_finished(), ckpt::Error);
  }
  gcs_server.start();  // same port, same data directory
  ckpt::gcs::configure(gcs_server.options());
  ckpt::CheckpointManager<State, ckpt::gcs> after("bkt/killed");
  CHECK(after.all_steps() == Steps{1});
  check_same(after.restore(), first);
  CHECK(ckpt::storage::gcs_bucket("bkt")->list("killed/2/").empty());
  CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/killed/2"), ckpt::Error, "no checkpoint here");
  auto st = ckpt::storage::gcs_bucket("bkt");
  st->remove(st->list("killed/"));
}

// Google's own client against the test server: what gcloud uploads ckpt reads, and what
// ckpt writes gcloud lists and downloads byte for byte. Three gcloud runs (each starts
// slowly).
TEST_CASE("storage: gcloud storage uploads what ckpt restores, and lists and downloads what ckpt saved") {
  REQUIRE_GCS();
  if (shell("gcloud --version").rc != 0) {
    MESSAGE("gcloud interop skipped: gcloud is not installed");
    return;
  }
  test::TempDir tmp;
  const std::string env = "env CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE=" + gcs_server.endpoint() +
                          "/ CLOUDSDK_AUTH_DISABLE_CREDENTIALS=True CLOUDSDK_CORE_DISABLE_PROMPTS=1 CLOUDSDK_CONFIG=" +
                          (tmp / "gcloud").string() + " gcloud storage ";
  // Up: a checkpoint saved on local disk, with the commit marker an object store's
  // checkpoint carries, and a 3 MB file (a resumable upload: gcloud's threshold is lower).
  const State s = make_state(6, 300'000);
  ckpt::save(tmp / "up" / "ckpt", s);
  put_file(tmp / "up" / "ckpt" / "commit_success.txt", bytes_of("committed by gcloud\n"));
  const auto blob = pattern(3'000'000, 9);
  put_file(tmp / "up" / "blob.bin", blob);
  auto r = shell("cd " + (tmp / "up").string() + " && " + env + "cp -r ckpt blob.bin gs://bkt/gcloud/up/");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  check_same(ckpt::restore<State>("gs://bkt/gcloud/up/ckpt"), s);
  auto st = ckpt::storage::gcs_bucket("bkt");
  CHECK(st->read_all("gcloud/up/blob.bin", std::uint64_t{1} << 30) == std::optional(blob));
  // Down: ckpt's checkpoint, listed and copied by gcloud.
  const State t = make_state(7, 1'000'000);  // a data object over the resumable threshold
  {
    auto opts = gcs_server.options();
    opts.connections = 1;  // one data object of 4 MB: a resumable upload
    ckpt::gcs::configure(opts);
    ckpt::save("gs://bkt/gcloud/down/ckpt", t);
    ckpt::gcs::configure(gcs_server.options());
  }
  r = shell(env + "ls -r gs://bkt/gcloud/down/ckpt");
  REQUIRE(r.rc == 0);
  std::vector<std::string> listed;
  for (std::size_t at = 0; at < r.out.size();) {
    const auto nl = std::min(r.out.find('\n', at), r.out.size());
    const std::string line = r.out.substr(at, nl - at);
    if (line.starts_with("gs://") && !line.ends_with(":") && !line.ends_with("/")) listed.push_back(line.substr(9));
    at = nl + 1;
  }
  std::sort(listed.begin(), listed.end());
  const auto keys = st->list("gcloud/down/ckpt/");
  CHECK(listed == keys);
  fs::create_directories(tmp / "down");
  r = shell("cd " + tmp.path().string() + " && " + env + "cp -r gs://bkt/gcloud/down/ckpt down");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  for (const auto& k : keys) {
    CAPTURE(k);
    const auto mine = st->read_all(k, std::uint64_t{1} << 30);
    REQUIRE(mine);
    CHECK(file_bytes(tmp / "down" / "ckpt" / k.substr(std::string("gcloud/down/ckpt/").size())) == *mine);
  }
  check_same(ckpt::restore<State>(tmp / "down" / "ckpt"), t);
  st->remove(st->list("gcloud/"));
}

// Google's credential chain against the test server's token endpoint (which checks the
// JWT's RS256 signature with the public key and its claims) and metadata server: the
// storage requests then need the bearer token it issued.
TEST_CASE("storage: GCS credentials: a service-account key, an authorized user, the metadata server, refresh") {
  REQUIRE_GCS();
  test::TempDir tmp;
  const std::string key = (tmp / "key.pem").string(), pub = (tmp / "pub.pem").string(),
                    other = (tmp / "other.pem").string();
  REQUIRE(shell("(openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out " + key + " && openssl pkey -in " +
                key + " -pubout -out " + pub + " && openssl genpkey -algorithm RSA -out " + other + ")")
              .rc == 0);
  auto text = [](const std::string& p) {
    const auto v = test::read_bytes(p);
    return std::string(v.begin(), v.end());
  };
  const std::string email = "ckpt-test@test-project.iam.gserviceaccount.com";
  auto service_account = [&](const std::string& pem_file, const fs::path& out) {
    const nlohmann::json j = {{"type", "service_account"},     {"project_id", "test-project"},
                              {"private_key_id", "k1"},        {"private_key", text(pem_file)},
                              {"client_email", email},         {"token_uri", gcs_server.endpoint() + "/token"}};
    const std::string d = j.dump();
    put_file(out, bytes_of(d));
  };
  service_account(key, tmp / "sa.json");
  service_account(other, tmp / "wrong.json");
  fs::create_directories(tmp / "gcloud");
  fs::create_directories(tmp / "empty");
  auto auth = [&](int lifetime) {
    gcs_server.call("/_control", {{"auth",
                                   {{"public_key", text(pub)},
                                    {"client_email", email},
                                    {"refresh_token", "1//refresh-secret"},
                                    {"client_id", "cid.apps.googleusercontent.com"},
                                    {"client_secret", "client-secret-value"},
                                    {"token_lifetime", lifetime}}}});
  };
  auth(3600);
  auto opts = gcs_server.options();
  opts.anonymous = false;
  const State s = make_state(8, 50'000);
  const std::string home = (tmp / "empty").string(), sa = (tmp / "sa.json").string();
  {  // 1. GOOGLE_APPLICATION_CREDENTIALS: a service account; one token for the whole save and restore
    EnvScope env{{"STORAGE_EMULATOR_HOST", nullptr}, {"GOOGLE_APPLICATION_CREDENTIALS", sa.c_str()},
                 {"HOME", home.c_str()}, {"CLOUDSDK_CONFIG", nullptr}};
    ckpt::gcs::configure(opts);
    gcs_server.reset_stats();
    ckpt::save("gs://bkt/creds/sa", s);
    check_same(ckpt::restore<State>("gs://bkt/creds/sa"), s);
    CHECK(gcs_server.stats()["tokens"] == 1);
    CHECK(gcs_server.stats()["auth_failures"] == 0);
    CHECK(ckpt::storage::gcs_bucket("bkt")->credentials().find(email) != std::string::npos);
    // Every token revoked (the server's auth set again): the next request's 401 makes the
    // chain fetch a new one, and the request goes again once. (A token fetched in the
    // last second is taken as already renewed: wait that second out.)
    std::this_thread::sleep_for(1100ms);
    auth(3600);
    gcs_server.reset_stats();
    check_same(ckpt::restore<State>("gs://bkt/creds/sa"), s);
    CHECK(gcs_server.stats()["tokens"] == 1);
    CHECK(gcs_server.stats()["auth_failures"].get<int>() >= 1);
    CHECK(ckpt::storage::gcs_bucket("bkt")->tokens_fetched() == 2);
  }
  {  // anonymous where a token is needed: a clear Error naming the checkpoint and the credentials
    EnvScope env{{"STORAGE_EMULATOR_HOST", nullptr}, {"GOOGLE_APPLICATION_CREDENTIALS", nullptr},
                 {"HOME", home.c_str()}, {"CLOUDSDK_CONFIG", home.c_str()}, {"GCE_METADATA_ROOT", "127.0.0.1:1"}};
    ckpt::gcs::configure(opts);
    CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/creds/sa"), ckpt::Error, "HTTP 401");
    CHECK(ckpt::storage::gcs_bucket("bkt")->credentials() == "anonymous");
  }
  {  // a key the token endpoint does not know: an Error naming the checkpoint, no secret in it
    const std::string wrong = (tmp / "wrong.json").string();
    EnvScope env{{"STORAGE_EMULATOR_HOST", nullptr}, {"GOOGLE_APPLICATION_CREDENTIALS", wrong.c_str()},
                 {"HOME", home.c_str()}};
    ckpt::gcs::configure(opts);
    try {
      (void)ckpt::restore<State>("gs://bkt/creds/sa");
      FAIL("restored with a wrong key");
    } catch (const ckpt::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("gs://bkt/creds/sa") != std::string::npos);
      CHECK(what.find("Invalid JWT Signature") != std::string::npos);
      CHECK(what.find("PRIVATE KEY") == std::string::npos);
      CHECK(what.find("MII") == std::string::npos);
    }
    const std::string missing = (tmp / "missing.json").string();
    EnvScope env2{{"GOOGLE_APPLICATION_CREDENTIALS", missing.c_str()}};
    ckpt::gcs::configure(opts);
    CHECK_THROWS_CKPT(ckpt::restore<State>("gs://bkt/creds/sa"), ckpt::Error, "cannot read GOOGLE_APPLICATION_CREDENTIALS");
  }
  {  // 2. gcloud's application_default_credentials.json: an authorized user's refresh token
    const nlohmann::json adc = {{"type", "authorized_user"},
                                {"client_id", "cid.apps.googleusercontent.com"},
                                {"client_secret", "client-secret-value"},
                                {"refresh_token", "1//refresh-secret"},
                                {"token_uri", gcs_server.endpoint() + "/token"}};
    put_file(tmp / "gcloud" / "application_default_credentials.json", bytes_of(adc.dump()));
    const std::string cfg = (tmp / "gcloud").string();
    EnvScope env{{"STORAGE_EMULATOR_HOST", nullptr}, {"GOOGLE_APPLICATION_CREDENTIALS", nullptr},
                 {"HOME", home.c_str()}, {"CLOUDSDK_CONFIG", cfg.c_str()}};
    ckpt::gcs::configure(opts);
    check_same(ckpt::restore<State>("gs://bkt/creds/sa"), s);
    CHECK(ckpt::storage::gcs_bucket("bkt")->credentials().find("authorized user") != std::string::npos);
  }
  {  // 3. the metadata server; a token that lives 2 s is fetched again after 1 s
    auth(2);
    const std::string root = "127.0.0.1:" + std::to_string(gcs_server.port());
    EnvScope env{{"STORAGE_EMULATOR_HOST", nullptr}, {"GOOGLE_APPLICATION_CREDENTIALS", nullptr},
                 {"HOME", home.c_str()}, {"CLOUDSDK_CONFIG", home.c_str()}, {"GCE_METADATA_ROOT", root.c_str()}};
    ckpt::gcs::configure(opts);
    auto st = ckpt::storage::gcs_bucket("bkt");
    check_same(ckpt::restore<State>("gs://bkt/creds/sa"), s);
    CHECK(st->credentials().find("metadata server") != std::string::npos);
    CHECK(st->tokens_fetched() == 1);
    std::this_thread::sleep_for(1200ms);
    check_same(ckpt::restore<State>("gs://bkt/creds/sa"), s);
    CHECK(st->tokens_fetched() == 2);
  }
  {  // STORAGE_EMULATOR_HOST: the endpoint, and no credentials, whatever else is set
    gcs_server.call("/_control", {{"auth", nullptr}});
    const std::string host = "127.0.0.1:" + std::to_string(gcs_server.port());
    EnvScope env{{"STORAGE_EMULATOR_HOST", host.c_str()}, {"GOOGLE_APPLICATION_CREDENTIALS", sa.c_str()}};
    ckpt::GcsOptions plain;
    plain.connections = 2;
    ckpt::gcs::configure(plain);
    CHECK(ckpt::gcs::options().endpoint == "http://" + host);
    check_same(ckpt::restore<State>("gs://bkt/creds/sa"), s);
    CHECK(ckpt::storage::gcs_bucket("bkt")->credentials() == "anonymous");
    ckpt::storage::gcs_bucket("bkt")->remove_prefix("creds");
  }
  ckpt::gcs::configure(gcs_server.options());
}

TEST_CASE("storage: the ckpt tool reads gs:// checkpoints, the endpoint from STORAGE_EMULATOR_HOST") {
  REQUIRE_GCS();
  INFO("CKPT_CLI = " << CKPT_CLI << " (build it: the ckpt_cli target)");
  REQUIRE(fs::exists(CKPT_CLI));
  const State s = make_state(5, 2000);
  {
    ckpt::CheckpointManager<State, ckpt::gcs> mgr("bkt/cli");
    mgr.save(5, s, {{"loss", 0.5}});
  }
  const std::string env = "env STORAGE_EMULATOR_HOST=127.0.0.1:" + std::to_string(gcs_server.port()) + " " + CKPT_CLI;
  auto r = shell(env + " ls --json gs://bkt/cli");
  CHECK(r.rc == 0);
  CHECK(r.out.find("\"step\":5") != std::string::npos);
  r = shell(env + " tree gs://bkt/cli/5");
  CHECK(r.rc == 0);
  CHECK(r.out.find("weights") != std::string::npos);
  CHECK(shell(env + " verify gs://bkt/cli/5").rc == 0);
  CHECK(shell(env + " convert gs://bkt/cli/5 gs://bkt/cli/copy --to native").rc == 0);
  check_same(ckpt::restore<State>("gs://bkt/cli/copy"), s);
  auto st = ckpt::storage::gcs_bucket("bkt");
  st->remove(st->list("cli/"));
}

#endif  // CKPT_HAVE_GCS

}  // namespace storage_test
