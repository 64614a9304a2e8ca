// zarr chunk compressors beyond gzip/zlib/zstd (blosc with every inner codec and
// shuffle, lz4, bz2) against Python's zarr and numcodecs both ways, and zarr v3 arrays
// (zarr.json, codec chains, sharding) on a directory or an OCDBT key-value store.
#include "support.hpp"

#include <sstream>

namespace zarr3_test {

namespace fs = std::filesystem;
using test::python;

std::string hex(const std::vector<std::byte>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto x : b) {
    s += d[static_cast<unsigned>(x) >> 4];
    s += d[static_cast<unsigned>(x) & 15];
  }
  return s;
}

// "path dtype shape hex" per line, sorted.
std::string describe(const ckpt::Tree& t) {
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

// The same description from Python, for every array under a zarr group (v2 or v3).
const char* py_describe = R"(
import sys, zarr, numpy as np
def main(path):
    g = zarr.open_group(path, mode="r")
    out = []
    def walk(grp, prefix):
        for name, a in grp.arrays():
            v = a[...]
            v = np.asarray(v).astype(v.dtype.newbyteorder("<"), order="C") if v.dtype.byteorder == ">" else np.asarray(v).copy(order="C")
            out.append("%s %s %s %s" % (prefix + name, {"bool": "bool"}.get(v.dtype.name, v.dtype.name),
                       "[" + ",".join(map(str, v.shape)) + "]", v.tobytes().hex()))
        for name, sub in grp.groups():
            walk(sub, prefix + name + ".")
    walk(g, "")
    print("".join(l + "\n" for l in sorted(out)), end="")
)";

void expect_error(const fs::path& p, const std::string& what) {
  CAPTURE(p);
  CAPTURE(what);
  try {
    auto t = ckpt::restore_tree(p);
    for (const auto& l : t.leaves()) (void)l.bytes();
    FAIL("no error");
  } catch (const ckpt::Error& e) {
    CAPTURE(e.what());
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

TEST_CASE("ckpt reads what zarr-python writes with blosc (every inner codec, byte/bit/no shuffle), lz4 and bz2") {
  test::TempDir tmp;
  const std::string expect = python(std::string(R"(
import sys, zarr, numpy as np
from numcodecs import Blosc, LZ4, BZ2
root = zarr.open_group(sys.argv[1] + "/g", mode="w")
rng = np.random.default_rng(1)
# zarr-python's default compressor (Blosc lz4, byte shuffle) first
d = root.create_dataset("default", shape=(40, 9), chunks=(16, 4), dtype="<f4")
d[...] = rng.standard_normal((40, 9)).astype("f4")
assert d.compressor.codec_id == "blosc", d.compressor
i = 0
for cname in ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]:
    for shuffle in [Blosc.NOSHUFFLE, Blosc.SHUFFLE, Blosc.BITSHUFFLE]:
        for dt in ["u1", "i2", "f8"]:
            a = (rng.standard_normal((33, 7)) * 50).astype(dt)
            z = root.create_dataset("b_%s_%d_%s" % (cname, shuffle, dt), shape=a.shape, chunks=(10, 7), dtype=dt,
                                    compressor=Blosc(cname=cname, clevel=(i % 9) + 1, shuffle=shuffle))
            z[...] = a
            i += 1
# clevel 0: blosc stores the chunk memcpyed
m = root.create_dataset("memcpyed", shape=(100,), chunks=(64,), dtype="<i8", compressor=Blosc(clevel=0))
m[...] = np.arange(100)
# a tiny chunk below blosc's minimum compressible size is stored memcpyed too
t = root.create_dataset("tiny", shape=(3,), chunks=(3,), dtype="<u2", compressor=Blosc())
t[...] = [1, 2, 3]
for name, comp in [("lz4", LZ4(1)), ("lz4_fast", LZ4(9)), ("bz2", BZ2(1)), ("bz2_9", BZ2(9))]:
    a = (rng.standard_normal((25, 6)) * 1000).astype("<i4")
    z = root.create_dataset(name, shape=a.shape, chunks=(8, 6), dtype="<i4", compressor=comp, fill_value=0)
    z[...] = a
be = root.create_dataset("big_endian", shape=(10,), chunks=(4,), dtype=">f8", compressor=Blosc("zstd", 3, Blosc.BITSHUFFLE))
be[...] = np.arange(10) / 3
)") + py_describe + "main(sys.argv[1] + '/g')\n", tmp.path());
  auto t = ckpt::restore_tree(tmp / "g");
  CHECK(describe(t) == expect);
  CHECK(t.leaf("memcpyed").as<std::vector<std::int64_t>>()[99] == 99);
}

struct Model {
  std::vector<float> w;
  std::vector<std::int16_t> idx;
  std::vector<std::uint8_t> mask;
  double lr = 0.5;
};

Model make_model() {
  Model m;
  for (int i = 0; i < 5000; ++i) m.w.push_back(static_cast<float>(i % 97) * 0.25f);
  for (int i = 0; i < 3001; ++i) m.idx.push_back(static_cast<std::int16_t>(i * 7 - 9000));
  for (int i = 0; i < 777; ++i) m.mask.push_back(static_cast<std::uint8_t>(i % 3 == 0));
  return m;
}

TEST_CASE("zarr-python and numcodecs read what ckpt writes with blosc, lz4 and bz2; ckpt reads it back bit-exact") {
  test::TempDir tmp;
  const Model m = make_model();
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::blosc, 5>>(tmp / "blosc", m);
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::lz4, 1>>(tmp / "lz4", m);
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::bz2, 9>>(tmp / "bz2", m);
  const std::string mine = describe(ckpt::restore_tree(tmp / "blosc"));
  for (const char* d : {"blosc", "lz4", "bz2"}) {
    CAPTURE(d);
    CHECK(python(std::string(py_describe) + "main(sys.argv[1])\n", tmp / d) == mine);
    const auto back = ckpt::restore<Model>(tmp / d);
    CHECK(back.w == m.w);
    CHECK(back.idx == m.idx);
    CHECK(back.mask == m.mask);
    CHECK(back.lr == m.lr);
  }
  // the .zarray names the compressor as numcodecs does, so numcodecs decodes chunks itself
  CHECK(python(R"(
import sys, json, numcodecs, numpy as np
z = json.load(open(sys.argv[1] + "/w/.zarray"))
c = numcodecs.get_codec(z["compressor"])
print(z["compressor"]["id"], z["compressor"]["cname"], z["compressor"]["shuffle"],
      np.frombuffer(c.decode(open(sys.argv[1] + "/w/0", "rb").read()), "<f4")[:3].tolist())
)", tmp / "blosc") == "blosc lz4 1 [0.0, 0.25, 0.5]\n");
}

TEST_CASE("hostile blosc, lz4 and bz2 chunks: lying headers, bombs and truncation are errors naming the chunk") {
  test::TempDir tmp;
  struct S { std::vector<float> a; };
  S s;
  s.a.assign(1000, 1.f);
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::blosc>>(tmp / "b", s);
  python(R"(
import sys, numcodecs
open(sys.argv[1] + "/a/0", "wb").write(numcodecs.Blosc().encode(bytes(100 << 20)))
)", tmp / "b");
  expect_error(tmp / "b", "chunk 0");
  python(R"(
import sys, numcodecs
good = numcodecs.Blosc("lz4", 5, 1).encode(bytes(4000))
open(sys.argv[1] + "/a/0", "wb").write(good[:-5])
)", tmp / "b");
  expect_error(tmp / "b", "blosc");
  python(R"(
import sys
open(sys.argv[1] + "/a/0", "wb").write(b"\x02\x01\x21\x04" + bytes(8))
)", tmp / "b");
  expect_error(tmp / "b", "chunk 0");
  // blosc header correct in sizes but garbage payload
  python(R"(
import sys, numcodecs
good = bytearray(numcodecs.Blosc("lz4", 5, 1).encode(bytes(range(256)) * 15 + bytes(160)))
for i in range(32, len(good)): good[i] = (good[i] * 7 + 3) & 255
open(sys.argv[1] + "/a/0", "wb").write(bytes(good))
)", tmp / "b");
  expect_error(tmp / "b", "chunk 0");

  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::lz4>>(tmp / "l", s);
  python(R"(
import sys, numcodecs
open(sys.argv[1] + "/a/0", "wb").write(numcodecs.LZ4().encode(bytes(100 << 20)))
)", tmp / "l");
  expect_error(tmp / "l", "lz4 header says");
  python(R"(
import sys, numcodecs
good = numcodecs.LZ4().encode(bytes(range(200)) * 20)
open(sys.argv[1] + "/a/0", "wb").write(good[:-9])
)", tmp / "l");
  expect_error(tmp / "l", "lz4");
  python(R"(
import sys, struct
open(sys.argv[1] + "/a/0", "wb").write(struct.pack("<I", 4000) + b"\xff" * 40)
)", tmp / "l");
  expect_error(tmp / "l", "corrupt");

  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::bz2>>(tmp / "z", s);
  python(R"(
import sys, bz2
open(sys.argv[1] + "/a/0", "wb").write(bz2.compress(bytes(50 << 20)))
)", tmp / "z");
  expect_error(tmp / "z", "more than");
  python(R"(
import sys, bz2
open(sys.argv[1] + "/a/0", "wb").write(bz2.compress(bytes(range(200)) * 20)[:-20])
)", tmp / "z");
  expect_error(tmp / "z", "chunk 0");
}

}  // namespace zarr3_test
