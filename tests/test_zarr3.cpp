// zarr chunk compressors beyond gzip/zlib/zstd (blosc with every inner codec and
// shuffle, lz4, bz2) against Python's zarr and numcodecs both ways, and zarr v3 arrays
// (zarr.json, codec chains, sharding) on a directory or an OCDBT key-value store.
#include "support.hpp"

#include <sstream>

namespace zarr3_test {

namespace fs = std::filesystem;
using test::describe;
using test::hex;
using test::python;

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
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.find(what) != std::string::npos);
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

namespace zarr3_test {

// Builds zarr v3 arrays by hand (numpy + numcodecs + a CRC-32C of its own, written from
// the zarr v3 specification) and prints what they hold as describe() does.
const char* py_make_v3 = R"PY(
import sys, os, json, struct, numpy as np, numcodecs
root = sys.argv[1] + "/g"
T = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b: c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(data)
def meta(path, m):
    write(path + "/zarr.json", json.dumps(m).encode())
def group(path):
    meta(path, {"zarr_format": 3, "node_type": "group", "attributes": {}})
def encode_chain(a, codecs):
    for c in codecs:
        n, cfg = c["name"], c.get("configuration", {})
        if n == "transpose":
            a = np.ascontiguousarray(a.transpose(cfg["order"]))
        elif n == "bytes":
            e = cfg.get("endian", "little")
            a = a.astype(a.dtype.newbyteorder("<" if e == "little" else ">")).tobytes()
        elif n == "gzip": a = numcodecs.GZip(cfg["level"]).encode(a)
        elif n == "zstd": a = numcodecs.Zstd(cfg["level"]).encode(a)
        elif n == "blosc":
            sh = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[cfg["shuffle"]]
            a = numcodecs.Blosc(cfg["cname"], cfg["clevel"], sh).encode(a)
        elif n == "crc32c": a = bytes(a) + struct.pack("<I", crc32c(bytes(a)))
        else: raise ValueError(n)
    return bytes(a)
def key(idx, enc):
    if enc[0] == "default": return "/".join(["c"] + [str(i) for i in idx]) if enc[1] == "/" else ".".join(["c"] + [str(i) for i in idx])
    return enc[1].join(str(i) for i in idx) if idx else "0"
def array(path, a, chunks, codecs, fill=0, enc=("default", "/"), skip=(), dtname=None, shard=None):
    m = {"zarr_format": 3, "node_type": "array", "shape": list(a.shape), "data_type": dtname or a.dtype.name,
         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
         "chunk_key_encoding": {"name": enc[0], "configuration": {"separator": enc[1]}},
         "fill_value": fill, "codecs": codecs, "attributes": {}}
    meta(path, m)
    grid = [-(-s // c) for s, c in zip(a.shape, chunks)]
    for idx in (np.ndindex(*grid) if grid else [()]):
        if idx in skip: continue
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))
        part = a[sl]
        full = np.zeros(chunks, a.dtype)
        full[tuple(slice(0, s) for s in part.shape)] = part
        if shard is None:
            data = encode_chain(full, codecs)
        else:
            data = shard(full)
        write(path + "/" + key(idx, enc), data)
rng = np.random.default_rng(3)
group(root)
a = (rng.standard_normal((10, 7)) * 100).astype("<i4")
array(root + "/plain", a, (4, 3), [{"name": "bytes", "configuration": {"endian": "little"}}])
t = rng.standard_normal((5, 6, 4))
array(root + "/transposed", t, (2, 6, 3), [{"name": "transpose", "configuration": {"order": [2, 0, 1]}},
      {"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 5}}])
u = np.arange(100, dtype="<u2") * 3
array(root + "/blosc", u, (33,), [{"name": "bytes", "configuration": {"endian": "little"}},
      {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "typesize": 2, "blocksize": 0}},
      {"name": "crc32c"}])
# sharding: shards of 8x10 with inner chunks 4x5; index (bytes + crc32c) at the start;
# inner chunk 1 of every shard is empty (fill value), and the second shard row is missing
s = (rng.standard_normal((12, 10))).astype("<f4")
inner = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1, "checksum": False}}]
def make_shard(full):
    blobs, index = [], []
    n = 0
    for idx in np.ndindex(2, 2):
        if idx == (0, 1):
            index.append((2**64 - 1, 2**64 - 1)); continue
        b = encode_chain(full[idx[0]*4:(idx[0]+1)*4, idx[1]*5:(idx[1]+1)*5], inner)
        blobs.append(b); index.append((n, len(b))); n += len(b)
    raw = b"".join(struct.pack("<QQ", *e) for e in index)
    raw += struct.pack("<I", crc32c(raw))
    index = [(o + len(raw), l) if o != 2**64 - 1 else (o, l) for o, l in index]
    raw = b"".join(struct.pack("<QQ", *e) for e in index)
    raw += struct.pack("<I", crc32c(raw))
    return raw + b"".join(blobs)
array(root + "/sub/sharded", s, (8, 10), [{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 5],
      "codecs": inner, "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
      "index_location": "start"}}], fill=-1.5, skip=[(1, 0)], shard=make_shard)
s[8:, :] = -1.5
s[0:4, 5:10] = -1.5
group(root + "/sub")
v = np.arange(9, dtype="<f4")
array(root + "/v2keys", v, (4,), [{"name": "bytes", "configuration": {"endian": "little"}}], fill="NaN", enc=("v2", "."), skip=[(1,)])
v[4:8] = np.nan
h = np.array([True, False, True, True, False])
array(root + "/flags", h, (2,), [{"name": "bytes"}], fill=True, skip=[(2,)], dtname="bool")
h[4] = True
x = np.array([1.5], dtype="<f8").reshape(())
array(root + "/scalar", x, (), [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}])
hx = np.zeros(3, dtype="<f4")
array(root + "/hexfill", hx, (3,), [{"name": "bytes", "configuration": {"endian": "little"}}], fill="0x3fc00000", skip=[(0,)])
hx[:] = 1.5
out = []
for name, arr in [("plain", a), ("transposed", t), ("blosc", u), ("sub.sharded", s), ("v2keys", v), ("flags", h), ("scalar", x), ("hexfill", hx)]:
    arr = np.asarray(arr)
    out.append("%s %s %s %s" % (name, arr.dtype.name, "[" + ",".join(map(str, arr.shape)) + "]", arr.astype(arr.dtype.newbyteorder("<")).tobytes().hex()))
print("".join(l + "\n" for l in sorted(out)), end="")
)PY";

TEST_CASE("zarr v3: bytes (both endians), transpose, gzip, zstd, blosc, crc32c, sharding with empty and missing chunks, v2 keys, fill values") {
  test::TempDir tmp;
  const std::string expect = python(py_make_v3, tmp.path());
  const auto t = ckpt::restore_tree(tmp / "g");
  CHECK(t.info().format == "zarr");
  CHECK(t.info().format_version == 3);
  CHECK(describe(t) == expect);
  // a box (a rank's shard) reads only the chunks it meets: every box of a chunked, a
  // transposed and a sharded array (a shard missing, inner chunks empty) is its part of the whole
  const auto index = ckpt::open_index(tmp / "g");
  std::size_t boxes = 0;
  for (const char* a : {"plain", "transposed", "sub.sharded", "v2keys", "flags"})
    CHECK(test::boxes_agree(*index, ckpt::Path::parse(a), boxes) == "");
  CHECK(boxes == 1540 + 3150 + 4290 + 45 + 15);
  // one array on its own is the root leaf
  CHECK(ckpt::restore<std::vector<std::uint16_t>>(tmp / "g/blosc")[99] == 297);
  // a checksum that does not match, and a shard index that points outside the shard
  auto chunk = test::read_bytes(tmp / "g/blosc/c/0");
  chunk[chunk.size() - 1] ^= 1;
  fs::remove(tmp / "g/blosc/c/0");
  test::write_bytes(tmp / "g/blosc/c/0", chunk);
  expect_error(tmp / "g", "crc32c checksum mismatch");
  fs::remove_all(tmp / "g/blosc");
  auto shard = test::read_bytes(tmp / "g/sub/sharded/c/0/0");
  shard[0] = static_cast<char>(0xF0);  // first index entry's offset, then re-checksum nothing: crc fails first
  fs::remove(tmp / "g/sub/sharded/c/0/0");
  test::write_bytes(tmp / "g/sub/sharded/c/0/0", shard);
  expect_error(tmp / "g", "shard index");
}

TEST_CASE("hostile zarr.json: unknown codecs, bad orders, shapes too large for the stored bytes, two compressors") {
  test::TempDir tmp;
  fs::create_directories(tmp / "a");
  auto put = [&](const std::string& j) {
    fs::remove(tmp / "a/zarr.json");
    test::write_bytes(tmp / "a/zarr.json", {j.begin(), j.end()});
  };
  const std::string head = R"({"zarr_format": 3, "node_type": "array", "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}}, )";
  put(head + R"("shape": [8], "codecs": [{"name": "bytes"}, {"name": "lzma"}]})");
  expect_error(tmp / "a", "codec \"lzma\" is not supported");
  put(head + R"("shape": [8], "codecs": [{"name": "transpose", "configuration": {"order": [1]}}, {"name": "bytes"}]})");
  expect_error(tmp / "a", "transpose");
  put(head + R"("shape": [8], "codecs": [{"name": "bytes"}, {"name": "zstd"}, {"name": "gzip"}]})");
  expect_error(tmp / "a", "more than one compressing codec");
  put(head + R"("shape": [4000000000000], "codecs": [{"name": "bytes"}]})");
  expect_error(tmp / "a", "more than 4194304 chunks");
  put(R"({"zarr_format": 3, "node_type": "array", "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1000000000]}}, "shape": [4000000000], "codecs": [{"name": "bytes"}]})");
  expect_error(tmp / "a", "stored bytes");
  put(head + R"("shape": [8], "codecs": [{"name": "gzip"}, {"name": "bytes"}]})");
  expect_error(tmp / "a", "before the array -> bytes codec");
  put(R"({"zarr_format": 3, "node_type": "array", "data_type": "r16", "shape": [8], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}}, "codecs": [{"name": "bytes"}]})");
  expect_error(tmp / "a", "data_type");
}

}  // namespace zarr3_test
