// The native format on disk, checked from outside: Python's msgpack reads the
// manifest and numpy reads the leaves straight out of the data files.
#include "support.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include <ckpt/storage/memory.hpp>

#if __has_include(<ckpt/io/batch_read.hpp>)  // the multi-header tree; the single header holds it
#include <ckpt/exec/parallel_reads.hpp>
#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/io/batch_read.hpp>
#endif

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

namespace native_test {

struct State {
  std::int64_t step = 0;
  xt::xtensor<float, 2> big;      // 64 KiB: a data file
  std::vector<double> odd;        // 5000 * 8 bytes, not a multiple of 4096
  std::vector<std::int32_t> small;  // inline
  std::string name;
};

State make() {
  State s;
  s.step = 9;
  s.big = xt::arange<float>(128 * 128).reshape({128, 128});
  s.odd.resize(5000);
  for (std::size_t i = 0; i < s.odd.size(); ++i) s.odd[i] = 0.5 * static_cast<double>(i);
  s.small = {1, 2, 3};
  s.name = "tiny";
  return s;
}

using test::python;

}  // namespace native_test

namespace native_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("the manifest is msgpack that Python reads, with every field the design names") {
  test::TempDir tmp;
  ckpt::save(tmp / "c", make());
  const std::string out = python(R"PY(
import sys, msgpack, numpy as np, os, hashlib
d = sys.argv[1]
m = msgpack.unpackb(open(os.path.join(d, "manifest"), "rb").read(), raw=False)
assert m["format"] == "ckpt-native", m["format"]
assert m["format_version"] == 1
assert m["library_version"] == "0.1.0"
assert "State" in m["type"], m["type"]
assert isinstance(m["fingerprint"], int)
assert ["big", "float32", 2] in m["schema"], m["schema"]
leaves = {".".join(l["path"]): l for l in m["leaves"]}
assert sorted(leaves) == ["big", "name", "odd", "small", "step"], sorted(leaves)
big = leaves["big"]
assert big["dtype"] == "float32" and big["shape"] == [128, 128] and big["file"] == "data-0"
assert big["length"] == 128 * 128 * 4 and big["codec"] == "raw"
odd = leaves["odd"]
for l in (big, odd):
    assert l["offset"] % 4096 == 0, l["offset"]
raw = open(os.path.join(d, big["file"]), "rb").read()
a = np.frombuffer(raw[big["offset"]:big["offset"] + big["length"]], dtype=np.float32).reshape(big["shape"])
assert (a == np.arange(128 * 128, dtype=np.float32).reshape(128, 128)).all()
o = np.frombuffer(raw[odd["offset"]:odd["offset"] + odd["length"]], dtype=np.float64)
assert (o == 0.5 * np.arange(5000)).all()
small = leaves["small"]
assert small["file"] is None and np.frombuffer(small["inline"], dtype=np.int32).tolist() == [1, 2, 3]
assert leaves["step"]["dtype"] == "int64" and leaves["step"]["shape"] == []
assert leaves["name"]["dtype"] == "string" and leaves["name"]["inline"] == b"tiny"
commit = open(os.path.join(d, "commit")).read()
assert commit.startswith("ckpt-native commit\n"), commit
assert ("manifest-bytes %d" % os.path.getsize(os.path.join(d, "manifest"))) in commit
print("ok", len(leaves))
)PY",
                                  tmp / "c");
  CHECK(out.find("ok 5") != std::string::npos);
}

// Format version 3 (leaf_records.hpp): leaves stored whole and raw as fixed-size records.
namespace fs = std::filesystem;

struct ManyLeaves {
  std::int64_t step = 0;
  std::string name;
  std::vector<std::vector<float>> layers;  // every third inline (32 bytes), the rest in data files
  std::optional<std::vector<double>> unset;
  std::vector<float> big;  // 2 MiB: chunk checksums, so written as a map among the records
};

ManyLeaves make_many(std::size_t layers) {
  ManyLeaves m;
  m.step = 77;
  m.name = "run-3";
  m.layers.resize(layers);
  for (std::size_t k = 0; k < layers; ++k) {
    m.layers[k].resize(k % 3 == 0 ? 8 : 1100 + k % 7);
    for (std::size_t i = 0; i < m.layers[k].size(); ++i) m.layers[k][i] = static_cast<float>(k) + 0.25f * static_cast<float>(i % 9);
  }
  m.big.resize(512 * 1024);
  for (std::size_t i = 0; i < m.big.size(); ++i) m.big[i] = static_cast<float>(i % 1000);
  return m;
}

bool same(const ManyLeaves& a, const ManyLeaves& b) {
  return a.step == b.step && a.name == b.name && a.layers == b.layers && a.unset == b.unset && a.big == b.big;
}

// The manifest of dir, changed by edit, with a commit marker that matches it again: a
// manifest the writer could not have written, which only the decoder's checks refuse.
template <class Edit>
void rewrite_manifest(const fs::path& dir, Edit&& edit) {
  std::vector<char> m = test::read_bytes(dir / "manifest");
  edit(m);
  const auto mb = std::as_bytes(std::span(m));
  fs::remove(dir / "manifest");
  fs::remove(dir / "commit");
  ckpt::io::write_file_synced(dir / "manifest", mb);
  const std::string c = ckpt::detail::native::encode_commit({m.size(), ckpt::io::xxh3(mb)});
  ckpt::io::write_file_synced(dir / "commit", std::as_bytes(std::span(c)));
}

// Where the root's "records" binary starts in a manifest, and its size.
std::pair<std::size_t, std::size_t> records_binary(const std::vector<char>& m) {
  const std::string key = "\xa7records";
  const auto at = std::search(m.begin(), m.end(), key.begin(), key.end());
  REQUIRE(at != m.end());
  std::size_t p = static_cast<std::size_t>(at - m.begin()) + key.size();
  const auto byte = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(m[i])); };
  const std::size_t len_bytes = byte(p) == 0xc4 ? 1 : byte(p) == 0xc5 ? 2 : 4;
  REQUIRE((byte(p) >= 0xc4 && byte(p) <= 0xc6));
  std::size_t n = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) n = n << 8 | byte(p + 1 + i);
  return {p + 1 + len_bytes, n};
}

void store_le(std::vector<char>& m, std::size_t at, std::uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) m[at + static_cast<std::size_t>(k)] = static_cast<char>(v >> (8 * k));
}

// Each way of opening dir refuses it with `what`, naming `path`: an Index (open), the
// leaf table (restore_into) and a restore of a new value.
void check_refused(const fs::path& dir, const std::string& path, const std::string& what) {
  CAPTURE(what);
  ManyLeaves into = make_many(1500);
  const std::function<void()> opens[] = {[&] { (void)ckpt::native::open(dir); },
                                         [&] { ckpt::restore_into(dir, into); },
                                         [&] { (void)ckpt::restore<ManyLeaves>(dir); }};
  for (const auto& open : opens) {
    try {
      open();
      FAIL("not refused");
    } catch (const ckpt::CorruptCheckpointError& e) {
      CHECK(e.path() == path);
      CHECK(e.message().find(what) != std::string::npos);
      CHECK(e.checkpoint().find(dir.filename().string()) != std::string::npos);
    }
  }
}

TEST_CASE("format version 3: leaves as records, read by an Index, the leaf table and Python; bad records refused") {
  test::TempDir tmp;
  const ManyLeaves m = make_many(1500);
  ckpt::save(tmp / "v3", m);
  const auto index = ckpt::native::open(tmp / "v3");
  CHECK(index->info().format_version == 3);
  CHECK(same(ckpt::restore<ManyLeaves>(tmp / "v3"), m));
  ManyLeaves into = make_many(1500);
  for (auto& l : into.layers) std::fill(l.begin(), l.end(), -1.0f);
  into.step = 0;
  into.name = "x";
  ckpt::restore_into(tmp / "v3", into);
  CHECK(same(into, m));
  // Every leaf as the Index has it: inline or in a file, its dtype, shape and bytes.
  std::size_t inline_leaves = 0, chunked = 0;
  for (const auto& e : index->entries()) {
    CAPTURE(e.path.str());
    if (!e.chunk_xxh3.empty()) ++chunked;
    if (e.path.size() != 2 || e.path.segments()[0] != "layers") continue;
    const std::size_t k = std::stoul(e.path.segments()[1]);
    CHECK(e.type == ckpt::dtype::float32);
    CHECK(e.shape == ckpt::Shape{static_cast<std::int64_t>(m.layers[k].size())});
    CHECK(e.file.empty() == (k % 3 == 0));
    inline_leaves += e.file.empty();
    std::vector<float> got(m.layers[k].size());
    index->read(e, std::as_writable_bytes(std::span(got)));
    CHECK(got == m.layers[k]);
  }
  CHECK(inline_leaves == 500);
  CHECK(chunked == 1);

  // An independent reader: Python's msgpack and numpy, following the layout in
  // leaf_records.hpp.
  const std::string out = test::python(R"(
import sys, struct, msgpack, numpy as np
d = sys.argv[1]
m = msgpack.unpackb(open(d + "/manifest", "rb").read(), raw=False)
assert m["format_version"] == 3
recs, dims, inl = m["records"], m["dims"], m["inline"]
k = maps = 0
sums = {}
for leaf in m["leaves"]:
    if isinstance(leaf, dict):
        maps += 1
        continue
    off, length, xxh, f, dt, at, rank = struct.unpack_from("<QQQIIII", recs, 40 * k)
    k += 1
    shape = struct.unpack_from("<%dq" % rank, dims, 8 * at)
    if f == 0xffffffff:
        raw = inl[off:off + length]
    else:
        with open(d + "/" + m["files"][f], "rb") as fh:
            fh.seek(off)
            raw = fh.read(length)
    a = np.frombuffer(raw, dtype=m["dtypes"][dt]).reshape(shape) if m["dtypes"][dt] not in ("none", "string") else None
    if leaf[0] == "layers":
        sums[int(leaf[1])] = float(a.astype(np.float64).sum())
    if leaf == ["step"]:
        print("step", int(a))
assert k * 40 == len(recs), (k, len(recs))
print("maps", maps, "records", k)
for i in (0, 1, 2, 742, 1499):
    print("sum", i, repr(sums[i]))
)",
                                       tmp / "v3");
  CHECK(out.find("step 77\n") != std::string::npos);
  CHECK(out.find("maps 1 records ") != std::string::npos);
  for (const std::size_t i : {0u, 1u, 2u, 742u, 1499u}) {
    double sum = 0;
    for (float x : m.layers[i]) sum += x;
    CAPTURE(i);
    const std::string key = "sum " + std::to_string(i) + " ";
    const auto at = out.find(key);
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(out.substr(at + key.size())) == doctest::Approx(sum).epsilon(1e-12));
  }

  // The same through object storage, and an incremental manager's steps, each of which
  // reads the step before's records and restores alone once that step is deleted.
  ckpt::save("mem://native-v3/m", m, {.force = true});
  CHECK(ckpt::open_index("mem://native-v3/m")->info().format_version == 3);
  CHECK(same(ckpt::restore<ManyLeaves>("mem://native-v3/m"), m));
  {
    ckpt::CheckpointManager<ManyLeaves> mgr(tmp / "run", {.incremental = true});
    ManyLeaves m2 = m;
    for (std::size_t k = 1; k < 40; k += 3) m2.layers[k][0] += 1.0f;
    REQUIRE(mgr.save(1, m));
    REQUIRE(mgr.save(2, m2));
    CHECK(ckpt::native::open(mgr.step_directory(2))->info().format_version == 3);
    mgr.delete_step(1);
    CHECK(same(mgr.restore(2), m2));
    CHECK(same(ckpt::restore<ManyLeaves>(mgr.step_directory(2)), m2));
  }

  // Fewer leaves than records_from that fit a record: version 1, which older releases read.
  ckpt::save(tmp / "few", std::vector<std::vector<float>>(ckpt::detail::native::records_from - 1, std::vector<float>(8)));
  CHECK(ckpt::native::open(tmp / "few")->info().format_version == 1);
  ckpt::save(tmp / "enough", std::vector<std::vector<float>>(ckpt::detail::native::records_from, std::vector<float>(8)));
  CHECK(ckpt::native::open(tmp / "enough")->info().format_version == 3);

  // Records the writer could not have written: each refused, naming the leaf.
  std::size_t record_of_layer_3 = 0, record_of_layer_4 = 0, records = 0;
  for (const auto& e : index->entries()) {
    if (e.path.str() == "layers.3") record_of_layer_3 = records;
    if (e.path.str() == "layers.4") record_of_layer_4 = records;
    records += ckpt::detail::native::fits_record(e);
  }
  const auto bad = [&](const std::string& name, auto&& edit) {
    fs::copy(tmp / "v3", tmp / name, fs::copy_options::recursive);
    rewrite_manifest(tmp / name, [&](std::vector<char>& b) {
      const auto [at, size] = records_binary(b);
      REQUIRE(size == records * 40);
      edit(b, at);
    });
    return tmp / name;
  };
  const auto field = [](std::size_t record, std::size_t offset) { return record * 40 + offset; };
  check_refused(bad("dtype", [&](auto& b, std::size_t at) { store_le(b, at + field(record_of_layer_4, 28), 99, 4); }),
                "layers.4", "dtype number 99 is not one of the");
  check_refused(bad("file", [&](auto& b, std::size_t at) { store_le(b, at + field(record_of_layer_4, 24), 7, 4); }),
                "layers.4", "data file number 7 is not one of the 1 recorded");
  check_refused(bad("rank", [&](auto& b, std::size_t at) { store_le(b, at + field(record_of_layer_4, 36), 1u << 30, 4); }),
                "layers.4", "lies outside the");
  check_refused(bad("inline", [&](auto& b, std::size_t at) { store_le(b, at + field(record_of_layer_3, 0), std::uint64_t{1} << 40, 8); }),
                "layers.3", "inline bytes [1099511627776, +32) lie outside the");
  check_refused(bad("length", [&](auto& b, std::size_t at) { store_le(b, at + field(record_of_layer_3, 8), 36, 8); }),
                "layers.3", "needs 8 elements but 36 bytes are recorded");
  check_refused(bad("past_file", [&](auto& b, std::size_t at) { store_le(b, at + field(record_of_layer_4, 0), std::uint64_t{1} << 40, 8); }),
                "layers.4", "lie outside data-0");
  // One record fewer (the binary's size, in its header, made 40 smaller) and one more.
  const auto resize_records = [&](const std::string& name, int by) {
    fs::copy(tmp / "v3", tmp / name, fs::copy_options::recursive);
    rewrite_manifest(tmp / name, [&](std::vector<char>& b) {
      const auto [at, size] = records_binary(b);
      const std::size_t now = size + static_cast<std::size_t>(by * 40);
      REQUIRE(static_cast<unsigned char>(b[at - 3]) == 0xc5);  // a bin 16: under 64 KiB
      b[at - 2] = static_cast<char>(now >> 8);
      b[at - 1] = static_cast<char>(now);
      if (by < 0) b.erase(b.begin() + static_cast<std::ptrdiff_t>(at + now), b.begin() + static_cast<std::ptrdiff_t>(at + size));
      else b.insert(b.begin() + static_cast<std::ptrdiff_t>(at + size), 40, '\0');
    });
    return tmp / name;
  };
  const ckpt::Path last = index->entries()[index->entries().size() - 1].path.str() == "big"
                              ? index->entries()[index->entries().size() - 2].path
                              : index->entries().back().path;
  check_refused(resize_records("fewer", -1), last.str(), "more leaves are written as paths than there are records");
  check_refused(resize_records("more", 1), "", "1 of " + std::to_string(records + 1) + " leaf records belong to no leaf");
}

TEST_CASE("the inline threshold decides which leaves live in the manifest") {
  test::TempDir tmp;
  ckpt::save(tmp / "all_inline", make(), {.inline_threshold = std::size_t{1} << 20});
  CHECK_FALSE(std::filesystem::exists(tmp / "all_inline" / "data-0"));
  CHECK(ckpt::restore<State>(tmp / "all_inline").big == make().big);
  ckpt::save(tmp / "none_inline", make(), {.inline_threshold = 0});
  const auto out = python(R"PY(
import sys, msgpack, os
m = msgpack.unpackb(open(os.path.join(sys.argv[1], "manifest"), "rb").read(), raw=False)
print(sorted(l["file"] for l in m["leaves"]))
)PY",
                          tmp / "none_inline");
  CHECK(out.find("None") == std::string::npos);
  const State r = ckpt::restore<State>(tmp / "none_inline");
  CHECK(r.name == "tiny");
  CHECK(r.small == make().small);
}

TEST_CASE("several data files are written in parallel and read back") {
  test::TempDir tmp;
  struct Many {
    std::vector<xt::xtensor<float, 1>> ws;
  } many;
  for (int i = 0; i < 9; ++i) many.ws.push_back(xt::arange<float>(static_cast<float>(3000 + 500 * i)) * float(i));
  ckpt::save(tmp / "c", many, {.data_files = 3});
  for (const char* f : {"data-0", "data-1", "data-2"}) CHECK(std::filesystem::exists(tmp / "c" / f));
  CHECK_FALSE(std::filesystem::exists(tmp / "c" / "data-3"));
  const Many r = ckpt::restore<Many>(tmp / "c");
  REQUIRE(r.ws.size() == 9);
  for (int i = 0; i < 9; ++i) CHECK(r.ws[static_cast<std::size_t>(i)] == many.ws[static_cast<std::size_t>(i)]);
}

TEST_CASE("a large manifest lends the reader its first bounce buffers: past its bytes, and each reader's own") {
  // The memory past a manifest of huge-page size, page-aligned, given once; none for a
  // small one.
  {
    const ckpt::detail::native::ManifestBytes small(1000), large(std::size_t{600} << 10);
    CHECK(small.take_spare().empty());
    const std::span<std::byte> spare = large.take_spare();
    REQUIRE(spare.size() >= 2 * ckpt::detail::native::Reader::bounce_bytes);
    CHECK(spare.data() >= large.bytes().data() + large.bytes().size());
    CHECK(reinterpret_cast<std::uintptr_t>(spare.data()) % 4096 == 0);
    CHECK(large.take_spare().empty());
  }
  // 10,000 leaves of 4.4 KB read in runs through those buffers by two threads, every
  // tenth leaf inline in the manifest (whose last bytes lie just before the buffers):
  // each restore path gives back every byte, and a second checkpoint open at the same
  // time has buffers of its own.
  test::TempDir tmp;
  struct Many {
    std::vector<std::vector<std::int32_t>> ws;
  } many;
  for (std::size_t i = 0; i < 10000; ++i) {
    std::vector<std::int32_t> w(i % 10 == 9 ? 3 : 1100);
    for (std::size_t j = 0; j < w.size(); ++j) w[j] = static_cast<std::int32_t>(i * 7919 + j);
    many.ws.push_back(std::move(w));
  }
  ckpt::save(tmp / "a", many);
  ckpt::save(tmp / "b", many, {.data_files = 2});
  const auto index_a = ckpt::open_index(tmp / "a");
  const auto index_b = ckpt::open_index(tmp / "b");
  const auto* reader_a = dynamic_cast<const ckpt::detail::native::Reader*>(index_a->reader().get());
  const auto* reader_b = dynamic_cast<const ckpt::detail::native::Reader*>(index_b->reader().get());
  REQUIRE(reader_a);
  REQUIRE(reader_b);
  CHECK(reader_a->lent_buffers() >= 2);
  CHECK(reader_b->lent_buffers() >= 2);
  for (const char* name : {"a", "b"}) {
    CAPTURE(name);
    Many into;
    for (const auto& w : many.ws) into.ws.emplace_back(w.size(), -1);
    ckpt::restore_into(tmp / name, into);  // the leaf table
    CHECK(into.ws == many.ws);
    std::uint64_t reported = 0;
    const Many back = ckpt::restore<Many>(tmp / name, {.progress = [&](const ckpt::Progress& p) {
                                                         reported = p.bytes_done;
                                                         return true;
                                                       }});  // an Index and its read queue
    CHECK(back.ws == many.ws);
    CHECK(reported > 0);
  }
  // Both indexes' readers at once, each through its own buffers.
  std::vector<std::vector<std::byte>> bytes_a(many.ws.size()), bytes_b(many.ws.size());
  ckpt::exec::ReadQueue qa, qb;
  for (std::size_t i = 0; i < many.ws.size(); ++i) {
    const ckpt::Path p({"ws", std::to_string(i)});
    const ckpt::IndexEntry* ea = index_a->find(p);
    const ckpt::IndexEntry* eb = index_b->find(p);
    REQUIRE(ea);
    REQUIRE(eb);
    qa.push(*index_a, *ea, bytes_a[i] = std::vector<std::byte>(ea->length), true);
    qb.push(*index_b, *eb, bytes_b[i] = std::vector<std::byte>(eb->length), true);
  }
  std::thread other([&] { qb.run(); });
  qa.run();
  other.join();
  for (std::size_t i = 0; i < many.ws.size(); ++i) {
    REQUIRE(bytes_a[i].size() == many.ws[i].size() * sizeof(std::int32_t));
    CHECK(std::memcmp(bytes_a[i].data(), many.ws[i].data(), bytes_a[i].size()) == 0);
    CHECK(bytes_a[i] == bytes_b[i]);
  }
}

TEST_CASE("small leaves are read in groups: each in its place, the padding skipped, a bad byte named") {
  test::TempDir tmp;
  struct Small {
    std::vector<std::vector<std::int32_t>> ws;
  } small;
  // 600 leaves of 4.4 to 20 KB: above the inline threshold, in two data files, most of
  // them followed by padding up to the next 4 KiB boundary.
  for (std::size_t i = 0; i < 600; ++i) {
    std::vector<std::int32_t> w(1100 + (i * 37) % 4000);
    for (std::size_t j = 0; j < w.size(); ++j) w[j] = static_cast<std::int32_t>(i * 100000 + j);
    small.ws.push_back(std::move(w));
  }
  ckpt::save(tmp / "c", small, {.data_files = 2});
  const std::uint64_t calls_before = test::read_calls();
  const Small back = ckpt::restore<Small>(tmp / "c");
  const std::uint64_t calls = test::read_calls() - calls_before;
  CHECK(back.ws == small.ws);
  // One pread per run of neighbours that fits the reader's buffer, not one read a leaf:
  // about 7.5 MB of leaves and padding here, in runs of up to 256 KiB.
  std::uint64_t stored = 0;
  for (const auto& w : small.ws) stored += (w.size() * sizeof(std::int32_t) + 4095) / 4096 * 4096;
  const std::uint64_t buffers = stored / ckpt::detail::native::Reader::bounce_bytes;
  CHECK(calls > buffers / 2);
  CHECK(calls < buffers * 3 / 2 + 10);
  Small into;
  for (const auto& w : small.ws) into.ws.emplace_back(w.size(), -1);
  ckpt::restore_into(tmp / "c", into);
  CHECK(into.ws == small.ws);

  // A flipped byte in the last word of leaf 433: the error names that leaf.
  const auto index = ckpt::open_index(tmp / "c");
  const ckpt::IndexEntry* e = index->find(ckpt::Path({"ws", "433"}));
  REQUIRE(e);
  {
    std::fstream f(tmp / "c" / e->file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(e->offset + e->length - 1));
    f.put('\x5a');
  }
  try {
    ckpt::restore_into(tmp / "c", into);
    FAIL("a flipped byte went unnoticed");
  } catch (const ckpt::CorruptCheckpointError& err) {
    CHECK(err.path() == "ws.433");
    CHECK(std::string(err.what()).find("checksum mismatch") != std::string::npos);
  }
  // Pushed in any order (here backwards, the files interleaved), the small reads are put
  // in file order before they are grouped: as many read calls as in path order.
  {
    std::vector<std::vector<std::byte>> bytes(small.ws.size());
    ckpt::exec::ReadQueue q;
    for (std::size_t i = small.ws.size(); i-- > 0;) {
      const ckpt::IndexEntry* leaf = index->find(ckpt::Path({"ws", std::to_string(i)}));
      REQUIRE(leaf);
      bytes[i].resize(leaf->length);
      q.push(*index, *leaf, bytes[i], false);
    }
    const std::uint64_t before = test::read_calls();
    q.run();
    CHECK(test::read_calls() - before < buffers * 3 / 2 + 10);
    for (std::size_t i = 0; i < small.ws.size(); ++i)
      if (i != 433)
        CHECK(std::memcmp(bytes[i].data(), small.ws[i].data(), bytes[i].size()) == 0);
  }
  // Unverified, every other leaf is still right.
  ckpt::restore_into(tmp / "c", into, {.verify_checksums = false});
  for (std::size_t i = 0; i < small.ws.size(); ++i)
    if (i != 433) CHECK(into.ws[i] == small.ws[i]);
  CHECK(into.ws[433] != small.ws[433]);

  // A data file cut short after the checkpoint was opened (opening checks the sizes),
  // inside its last leaf: the grouped read of the run of leaves that ends with it fails,
  // and the error names that leaf, not the run's first.
  ckpt::save(tmp / "one", small, {.data_files = 1});
  const auto one = ckpt::open_index(tmp / "one");
  std::vector<const ckpt::IndexEntry*> by_offset;
  for (const auto& entry : one->entries())
    if (!entry.file.empty()) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  REQUIRE(by_offset.size() == 600);
  std::vector<std::vector<std::byte>> bufs;
  std::vector<ckpt::LeafRead> reads;
  for (std::size_t i = by_offset.size() - 10; i < by_offset.size(); ++i) bufs.emplace_back(by_offset[i]->length);
  for (std::size_t i = 0; i < 10; ++i) reads.push_back({by_offset[by_offset.size() - 10 + i], bufs[i], true});
  one->read_group(reads);  // whole: reads fine
  const ckpt::IndexEntry* last = by_offset.back();
  std::filesystem::resize_file(tmp / "one" / last->file, last->offset + last->length / 2);
  try {
    one->read_group(reads);
    FAIL("a truncated data file went unnoticed");
  } catch (const ckpt::CorruptCheckpointError& err) {
    CHECK(err.path() == last->path.str());
  }
}

// A model's layer: small leaves (a bias, a norm) between large ones in the file.
struct ColdLayer {
  std::vector<float> w;
  std::vector<float> b;
  std::vector<float> g;
  bool operator==(const ColdLayer&) const = default;
};

TEST_CASE("files not in the page cache are read as one stream and verified behind it: every leaf, and a bad byte named") {
  if (std::thread::hardware_concurrency() < 2) return;  // one thread reads and verifies as it goes: nothing to stream
  test::TempDir tmp;
  struct Cold {
    std::vector<ColdLayer> layers;                 // 1 MiB weights, 5.2 KB and 4.4 KB leaves between them
    std::vector<float> big;                        // 20 MiB: read in parts
    std::vector<std::vector<float>> mid;           // 1.5 MiB each: whole, chunk checksums
    std::vector<std::vector<float>> odd;           // 400,004 bytes each: padding between them, read by one preadv
    std::vector<std::vector<std::int32_t>> small;  // 4.4 KB each: read in groups
    std::int32_t step = 7;                         // inline
  } c;
  c.big.resize(std::size_t{5} << 20);
  for (std::size_t i = 0; i < c.big.size(); ++i) c.big[i] = static_cast<float>(i % 9973) * 0.25f;
  for (int k = 0; k < 3; ++k) c.mid.emplace_back(std::size_t{3} << 17, static_cast<float>(k) + 0.5f);
  for (int k = 0; k < 200; ++k) c.small.emplace_back(1100, k);
  for (int k = 0; k < 3; ++k) c.odd.emplace_back(100001, static_cast<float>(k) - 9.0f);
  for (int k = 0; k < 8; ++k)
    c.layers.push_back({std::vector<float>(std::size_t{1} << 18, static_cast<float>(k)),
                        std::vector<float>(1300, static_cast<float>(k) + 0.25f), std::vector<float>(1100, static_cast<float>(k) + 0.5f)});
  std::filesystem::path dir = tmp / "c";  // the checkpoint the helpers below read
  ckpt::save(dir, c);
  const auto drop_cache = [&] {
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
      const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      ::fsync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  };
  // Reads every leaf through a ReadQueue, as a restore does; returns the bytes.
  // Reads every leaf of an open index through a ReadQueue, as a restore does; returns the bytes.
  const auto read_index = [](const ckpt::Index& index, bool& streamed) {
    std::vector<std::vector<std::byte>> bytes;
    bytes.reserve(index.entries().size());
    ckpt::exec::ReadQueue q;
    for (const auto& e : index.entries()) q.push(index, e, bytes.emplace_back(e.length), true);
    try {
      q.run();
    } catch (...) {
      streamed = q.streamed();
      throw;
    }
    streamed = q.streamed();
    return bytes;
  };
  const auto read_all = [&](bool& streamed) { return read_index(*ckpt::open_index(dir), streamed); };
  bool streamed = false;
  const auto warm = read_all(streamed);
  CHECK_FALSE(streamed);  // just written: in the page cache
  drop_cache();
  const double cached = ckpt::open_index(dir)->reader()->cached_fraction();
  if (cached >= ckpt::exec::ReadQueue::stream_below_cached) {
    // posix_fadvise(DONTNEED) drops clean pages on ext4, xfs and btrfs; tmpfs keeps them
    MESSAGE("the test directory's file system keeps dropped pages (" << cached << " cached): no cold read to test");
    return;
  }
  CHECK(read_all(streamed) == warm);
  CHECK(streamed);
  drop_cache();
  Cold back;
  back.big.resize(c.big.size());
  back.mid.assign(3, std::vector<float>(std::size_t{3} << 17));
  back.small.assign(200, std::vector<std::int32_t>(1100));
  back.odd.assign(3, std::vector<float>(100001));
  back.layers.assign(8, {std::vector<float>(std::size_t{1} << 18), std::vector<float>(1300), std::vector<float>(1100)});
  ckpt::restore_into(dir, back);
  CHECK(back.layers == c.layers);
  CHECK(back.big == c.big);
  CHECK(back.mid == c.mid);
  CHECK(back.odd == c.odd);
  CHECK(back.small == c.small);
  CHECK(back.step == 7);

  // A flipped byte, read cold: the verifier behind the stream names the leaf.
  const auto flip = [&](const std::string& leaf, std::uint64_t at) {
    const auto index = ckpt::open_index(dir);
    const ckpt::IndexEntry* e = index->find(ckpt::Path::parse(leaf));
    REQUIRE(e);
    REQUIRE(!e->file.empty());
    std::fstream f(dir / e->file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(e->offset + at));
    const char old = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(e->offset + at));
    f.put(static_cast<char>(old ^ 0x10));
  };
  const auto fails_naming = [&](const std::string& leaf, const std::string& needle) {
    drop_cache();
    bool was_streamed = false;
    try {
      (void)read_all(was_streamed);
      FAIL("a flipped byte went unnoticed");
    } catch (const ckpt::CorruptCheckpointError& err) {
      CHECK(err.path() == leaf);
      CHECK(std::string(err.what()).find(needle) != std::string::npos);
    }
    CHECK(was_streamed);
  };
  flip("small.123", 17);
  fails_naming("small.123", "checksum mismatch");
  flip("small.123", 17);  // flipped back
  flip("odd.1", 400003);   // the last byte before the padding
  fails_naming("odd.1", "checksum mismatch");
  flip("odd.1", 400003);
  flip("layers.5.g", 4399);  // a small leaf between two large ones, read in the stream's order
  fails_naming("layers.5.g", "checksum mismatch");
  flip("layers.5.g", 4399);
  flip("big", (std::uint64_t{13} << 20) + 5);  // in the second part, chunk 13
  fails_naming("big", "checksum mismatch in bytes [13631488, +1048576)");

  // The verifier behind the stream checks a part from its first chunk on (LeafVerifier
  // with a start): chunk 12 alone passes, 12 and 13 fail at 13; a start inside a chunk
  // is refused.
  const auto index = ckpt::open_index(dir);
  const ckpt::IndexEntry& big = *index->find(ckpt::Path({"big"}));
  REQUIRE(big.chunk_bytes == (std::uint64_t{1} << 20));
  std::vector<std::byte> chunks(2 * big.chunk_bytes);
  index->reader()->read_range(*index, big, 12 * big.chunk_bytes, chunks);
  ckpt::LeafVerifier(index->checkpoint(), big, 12 * big.chunk_bytes).update(std::span(chunks).first(big.chunk_bytes));
  CHECK_THROWS_WITH_AS(ckpt::LeafVerifier(index->checkpoint(), big, 12 * big.chunk_bytes).update(chunks),
                       doctest::Contains("checksum mismatch in bytes [13631488, +1048576)"), ckpt::CorruptCheckpointError);
  CHECK_THROWS_WITH_AS(ckpt::LeafVerifier(index->checkpoint(), big, 12 * big.chunk_bytes + 5),
                       doctest::Contains("starts none of its checksummed chunks"), ckpt::Error);

  // More data files than threads: the stream goes through the five files one after the
  // other, each front to back.
  dir = tmp / "five";
  ckpt::save(dir, c, {.data_files = 5});
  std::set<std::string> files;
  const auto five = ckpt::open_index(dir);
  for (const auto& e : five->entries())
    if (!e.file.empty()) files.insert(e.file);
  REQUIRE(files.size() == 5);
  drop_cache();
  CHECK(read_all(streamed) == warm);
  CHECK(streamed);

  // A data file cut short after the checkpoint was opened: the stream fails naming the
  // leaf that lies past the cut, and the verifier stops (nothing left waiting for reads
  // that will not come).
  const ckpt::IndexEntry* last = nullptr;  // the last leaf of the file that holds odd.1
  const std::string cut_file = five->find(ckpt::Path::parse("odd.1"))->file;
  for (const auto& e : five->entries())
    if (e.file == cut_file && (!last || e.offset > last->offset)) last = &e;
  REQUIRE(last);
  std::filesystem::resize_file(dir / cut_file, last->offset + last->length / 2);
  drop_cache();
  streamed = false;
  try {
    (void)read_index(*five, streamed);
    FAIL("a data file cut short went unnoticed");
  } catch (const ckpt::CorruptCheckpointError& err) {
    CHECK(err.path() == last->path.str());
  }
  CHECK(streamed);
}

TEST_CASE("a checkpoint is a directory of exactly manifest, commit and data files") {
  test::TempDir tmp;
  ckpt::save(tmp / "c", make());
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(tmp / "c")) names.push_back(f.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"commit", "data-0", "manifest"});
  // Every leaf is padded to the 4 KiB alignment, the last one too.
  CHECK(std::filesystem::file_size(tmp / "c" / "data-0") % 4096 == 0);
}

TEST_CASE("data files reserve their blocks before they are written, and not one block past their end") {
  test::TempDir tmp;
  const auto allocated = [](const std::filesystem::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return static_cast<std::uint64_t>(st.st_blocks) * 512;
  };
  // The hint itself: the blocks are there, the size is not (appends still grow the file).
  {
    const auto p = tmp / "reserved";
    const ckpt::io::File f = ckpt::io::File::create(p);
    ckpt::io::preallocate(f, std::uint64_t{1} << 20);
    CHECK(std::filesystem::file_size(p) == 0);
    if (allocated(p) == 0) {
      MESSAGE("the test directory's file system has no fallocate: nothing reserved");
    } else {
      CHECK(allocated(p) >= (std::uint64_t{1} << 20));
    }
  }
  // A save reserves each data file's exact size: leaves of odd lengths, padded, over
  // two files written at once. A reservation too large would stay allocated past the end.
  struct Odd {
    std::vector<std::vector<float>> leaves;
  } odd;
  for (std::size_t k = 0; k < 6; ++k) odd.leaves.emplace_back((std::size_t{1} << 18) + 1001 * k + 3, 0.5f);
  ckpt::save(tmp / "c", odd, {.data_files = 2});
  for (const char* name : {"data-0", "data-1"}) {
    const auto p = tmp / "c" / name;
    const std::uint64_t size = std::filesystem::file_size(p);
    CAPTURE(name);
    CHECK(size % 4096 == 0);
    CHECK(allocated(p) == size);
  }
}

TEST_CASE("verified reads: cached bytes in L2-sized pieces, the rest from the disk in one read, the same bytes either way") {
  test::TempDir tmp;
  const auto drop = [](const std::filesystem::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    ::fsync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  // The probe itself: all of a cached range, nothing of a dropped one, a short count at the end.
  std::vector<std::byte> bytes(std::size_t{3} << 20);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + i / 4096);
  const auto p = tmp / "f";
  {
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const ckpt::io::File f = ckpt::io::File::open_read(p);
  std::vector<std::byte> got(std::size_t{256} << 10);
  CHECK(ckpt::io::pread_cached(f, got, 4096) == got.size());
  CHECK(std::memcmp(got.data(), bytes.data() + 4096, got.size()) == 0);
  CHECK(ckpt::io::pread_cached(f, got, bytes.size() - 1000) == 1000);
  drop(p);
  const std::size_t cold = ckpt::io::pread_cached(f, got, std::size_t{2} << 20);
  if (cold != 0) MESSAGE("this file system keeps dropped pages, or cannot answer without waiting: " << cold << " bytes");

  // A leaf of several checksum chunks and one under a chunk, read cached, dropped, and
  // half dropped, verified each time; a flipped byte is found in every case.
  struct State {
    std::vector<float> big;    // 5 MiB + 12 bytes: five chunks and a short one
    std::vector<float> small;  // 600 KB: no chunk checksums
  } s;
  s.big.resize((std::size_t{5} << 18) + 3);
  for (std::size_t i = 0; i < s.big.size(); ++i) s.big[i] = static_cast<float>(i % 10007) - 3.5f;
  s.small.assign(150000, 2.25f);
  const auto dir = tmp / "c";
  ckpt::save(dir, s, {.data_files = 1});
  const auto index = ckpt::open_index(dir);
  const auto read_leaf = [&](const char* name) {
    const ckpt::IndexEntry* e = index->find(ckpt::Path({name}));
    REQUIRE(e);
    std::vector<std::byte> out(e->length);
    index->read(*e, out);
    return out;
  };
  const auto as_bytes = [](const std::vector<float>& v) {
    const auto b = std::as_bytes(std::span(v));
    return std::vector<std::byte>(b.begin(), b.end());
  };
  CHECK(read_leaf("big") == as_bytes(s.big));
  CHECK(read_leaf("small") == as_bytes(s.small));
  drop(dir / "data-0");
  CHECK(read_leaf("big") == as_bytes(s.big));
  CHECK(read_leaf("small") == as_bytes(s.small));
  drop(dir / "data-0");
  {
    const ckpt::IndexEntry* e = index->find(ckpt::Path({"big"}));
    // The first 384 KiB of the second chunk back in the cache: a piece and a half cached,
    // then the disk.
    std::vector<std::byte> part(std::size_t{384} << 10);
    const ckpt::io::File data = ckpt::io::File::open_read(dir / "data-0");
    ckpt::io::pread_exact(data, part, e->offset + (std::size_t{1} << 20), dir / "data-0");
  }
  CHECK(read_leaf("big") == as_bytes(s.big));
  {
    const ckpt::IndexEntry* e = index->find(ckpt::Path({"big"}));
    std::fstream out(dir / "data-0", std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(e->offset + (std::size_t{3} << 20) + 777));
    out.put('\x01');
  }
  for (bool cold : {false, true}) {
    if (cold) drop(dir / "data-0");
    CAPTURE(cold);
    CHECK_THROWS_WITH_AS(read_leaf("big"), doctest::Contains("checksum mismatch in bytes [3145728, +1048576)"),
                         ckpt::CorruptCheckpointError);
  }
}

TEST_CASE("the manifest streamed through the writer's buffer is the manifest packed in memory, with its commit record") {
  test::TempDir tmp;
  // 12,000 inline leaves: a manifest of over a megabyte, several of write_manifest's
  // 256 KiB buffers.
  struct Many {
    std::vector<std::vector<float>> leaves;
  } many;
  many.leaves.resize(12000);
  for (std::size_t i = 0; i < many.leaves.size(); ++i) many.leaves[i] = {static_cast<float>(i), 0.5f, -1.0f};
  ckpt::save(tmp / "c", many);
  const auto index = ckpt::open_index(tmp / "c");
  const std::vector<char> packed = ckpt::detail::native::encode_manifest(index->info(), index->entries());
  REQUIRE(packed.size() > 3 * (std::size_t{256} << 10));
  // What the save wrote is what the index it reads back packs to.
  const std::vector<char> on_disk = test::read_bytes(tmp / "c" / "manifest");
  CHECK(on_disk.size() == packed.size());
  CHECK(std::memcmp(on_disk.data(), packed.data(), std::min(on_disk.size(), packed.size())) == 0);

  auto mem = ckpt::storage::MemoryStorage::named("native-test-manifest");
  auto out = mem->create("m");
  const ckpt::detail::native::CommitRecord record = ckpt::detail::native::write_manifest(*out, index->info(), index->entries());
  out->close();
  const auto streamed = mem->read_all("m", std::uint64_t{1} << 30);
  REQUIRE(streamed.has_value());
  CHECK(streamed->size() == packed.size());
  CHECK(std::memcmp(streamed->data(), packed.data(), std::min(streamed->size(), packed.size())) == 0);
  CHECK(record.manifest_bytes == packed.size());
  CHECK(record.manifest_xxh3 == ckpt::io::xxh3(std::as_bytes(std::span(packed))));
}

TEST_CASE("ckpt::IndexEntries: a large buffer on its own 2 MiB-aligned mapping keeps what is put in it, as it grows and shrinks") {
  const auto filled = [](std::size_t i) {
    ckpt::IndexEntry e;
    e.path = ckpt::Path({"leaves", std::to_string(i)});
    e.shape = {static_cast<std::int64_t>(i)};
    e.offset = i * 4096;
    e.checksum = (i + 1) * 0x9E3779B97F4A7C15ull;
    return e;
  };
  const auto wrong = [&](const ckpt::IndexEntries& es, std::size_t n) {
    std::size_t bad = es.size() != n;
    for (std::size_t i = 0; i < std::min(n, es.size()); ++i) {
      const ckpt::IndexEntry want = filled(i);
      bad += es[i].path != want.path || es[i].shape != want.shape || es[i].offset != want.offset ||
             es[i].checksum != want.checksum;
    }
    return bad;
  };
  ckpt::IndexEntries es;
  for (std::size_t i = 0; i < 100; ++i) es.push_back(filled(i));  // small: std::allocator's
  CHECK(wrong(es, 100) == 0);
  for (std::size_t i = 100; i < 12000; ++i) es.push_back(filled(i));  // grows past 512 KiB: mapped, moved
  CHECK(wrong(es, 12000) == 0);
  CHECK(es.capacity() * sizeof(ckpt::IndexEntry) >= (std::size_t{512} << 10));
#if CKPT_HUGE_PAGES  // Linux without AddressSanitizer
  CHECK(reinterpret_cast<std::uintptr_t>(es.data()) % (std::size_t{2} << 20) == 0);
#endif
  const ckpt::IndexEntries copy = es;
  CHECK(wrong(copy, 12000) == 0);
  es.resize(3000);
  es.shrink_to_fit();  // back under 512 KiB: from the mapping to std::allocator
  CHECK(wrong(es, 3000) == 0);
  CHECK(wrong(copy, 12000) == 0);
}

TEST_CASE("an IndexEntry's out-of-line fields copy deeply and read as the vectors they stand for") {
  ckpt::IndexEntry a;
  CHECK(a.chunk_xxh3.empty());
  CHECK(a.chunk_xxh3.vec().empty());
  CHECK(a.boxes.begin() == a.boxes.end());
  a.chunk_xxh3 = std::vector<std::uint64_t>{1, 2, 3};
  ckpt::IndexEntry b = a;
  b.chunk_xxh3[0] = 9;
  CHECK(a.chunk_xxh3 == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(b.chunk_xxh3 == std::vector<std::uint64_t>{9, 2, 3});
  CHECK(std::span<const std::uint64_t>(b.chunk_xxh3).size() == 3);
  b.boxes.emplace_back().origin = {4, 0};
  ckpt::IndexEntry c = b;
  c.boxes[0].origin[0] = 7;
  CHECK(b.boxes.at(0).origin == ckpt::Shape{4, 0});
  CHECK(c.boxes.front().origin == ckpt::Shape{7, 0});
  ckpt::IndexEntry d = std::move(c);
  CHECK(d.boxes.size() == 1);
  a.chunk_xxh3 = std::vector<std::uint64_t>{};
  CHECK(a.chunk_xxh3.empty());
  a.chunk_xxh3.assign(b.chunk_xxh3.begin() + 1, b.chunk_xxh3.end());
  CHECK(a.chunk_xxh3 == std::vector<std::uint64_t>{2, 3});
}

TEST_CASE("io::pread_ranges reads scattered ranges exactly, through io_uring or pread, and says where a file ends") {
  test::TempDir tmp;
  const std::filesystem::path file = tmp / "f";
  std::vector<char> bytes(1 << 20);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31 + i / 7);
  test::write_bytes(file, bytes);
  const ckpt::io::File f = ckpt::io::File::open_read(file);
  // 3000 ranges of 100 bytes, every 333 bytes: more than one ring's worth (256)
  auto read_all = [&](std::uint64_t extra_at) {
    std::vector<std::byte> out(3001 * 100);
    std::vector<ckpt::io::RangeRead> ops;
    for (std::size_t i = 0; i < 3000; ++i) ops.push_back({i * 333, std::span(out).subspan(i * 100, 100)});
    if (extra_at) ops.push_back({extra_at, std::span(out).subspan(3000 * 100, 100)});
    ckpt::io::pread_ranges(f, ops, file);
    for (std::size_t i = 0; i < 3000; ++i)
      CHECK(std::memcmp(out.data() + i * 100, bytes.data() + i * 333, 100) == 0);
  };
  read_all(0);
  read_all(bytes.size() - 100);  // the last 100 bytes: still whole
  CHECK_THROWS_CKPT(read_all(bytes.size() - 40), ckpt::CorruptCheckpointError, "file ends at byte 1048576, before the 1048636");
  // pread only (CKPT_IO_URING=0): the same
  ::setenv("CKPT_IO_URING", "0", 1);
  read_all(0);
  CHECK_THROWS_CKPT(read_all(bytes.size() - 40), ckpt::CorruptCheckpointError, "file ends at byte 1048576, before the 1048636");
  ::unsetenv("CKPT_IO_URING");
}

}  // namespace native_test

// exec/worker_threads.hpp: a restore's and a save's helper threads start on another CPU
// than their creator's (on VMs the kernel often queued them behind it), and are left
// free to run on any of the process's CPUs from their first instruction on.
TEST_CASE("worker threads start on another CPU than their creator's and are then free to run on any") {
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  const int cpus = CPU_COUNT(&mask);
  constexpr std::size_t n = 3;
  std::array<cpu_set_t, n> seen{};
  std::array<int, n> ran{};
  {
    ckpt::exec::WorkerThreads pool;
    for (std::size_t k = 0; k < n; ++k)
      pool.start([&seen, &ran, k] {
        sched_getaffinity(0, sizeof seen[k], &seen[k]);
        ran[k] = 1;
      });
    pool.join();
    for (std::size_t k = 0; k < n; ++k) {
      CAPTURE(k);
      CHECK(ran[k] == 1);
      CHECK(CPU_EQUAL(&seen[k], &mask));  // the placement was let go: nothing stays pinned
      if (cpus < 2) {
        CHECK(pool.planned_cpu(k) == -1);
        continue;
      }
      CHECK(CPU_ISSET(pool.planned_cpu(k), &mask));
      CHECK(pool.started_cpu(k) == pool.planned_cpu(k));  // it first ran where it was placed
    }
    // One thread a CPU before any shares one, the creator's CPU last.
    if (cpus >= 2) CHECK(pool.planned_cpu(0) != pool.planned_cpu(1));
  }
  // A creator allowed one CPU starts its threads as std::jthread does.
  if (cpus >= 2) {
    cpu_set_t one, worker{};
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) {
        CPU_SET(c, &one);
        break;
      }
    int planned = 0, pinned = -1;
    std::thread creator([&] {
      pinned = sched_setaffinity(0, sizeof one, &one);
      ckpt::exec::WorkerThreads pool;
      pool.start([&worker] { sched_getaffinity(0, sizeof worker, &worker); });
      pool.join();
      planned = pool.planned_cpu(0);
    });
    creator.join();
    REQUIRE(pinned == 0);
    CHECK(planned == -1);
    CHECK(CPU_EQUAL(&worker, &one));
  }
}

// exec::BackgroundTask, which replaced std::async for the tile checksums hashed beside a
// save: wait() returns once the work is done and rethrows what it threw, once; a task
// destroyed unwaited (its caller unwinding) joins the thread first.
TEST_CASE("a background task's wait joins its thread and rethrows its exception once") {
  {
    std::atomic<int> done{0};
    ckpt::exec::BackgroundTask task;
    task.wait();  // never started: returns at once
    task.start([&done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = 1;
    });
    task.wait();
    CHECK(done == 1);
    task.wait();  // waited for already
  }
  {
    ckpt::exec::BackgroundTask task;
    task.start([] { throw ckpt::Error("ckpt-dir", "a.b", "tile hashing failed"); });
    CHECK_THROWS_WITH_AS(task.wait(), doctest::Contains("tile hashing failed"), ckpt::Error);
    CHECK_NOTHROW(task.wait());  // the error is handed over once
  }
  std::atomic<int> finished{0};
  try {
    ckpt::exec::BackgroundTask task;
    task.start([&finished] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished = 1;
    });
    throw std::runtime_error("the caller fails first");
  } catch (const std::runtime_error&) {
    CHECK(finished == 1);  // the task's destructor joined the thread before the catch
  }
}
