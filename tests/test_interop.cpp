// Checkpoints of the JAX world: Flax msgpack, t5x, Orbax and zarr v2, read and written,
// checked against Python's zarr, numpy and msgpack both ways, the real t5x fixture,
// and hostile inputs for each format.
#include "support.hpp"

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>

namespace interop_test {

namespace fs = std::filesystem;

using test::describe;
using test::hex;
using test::python;

struct Inner {
  xt::xtensor<float, 2> kernel;
  std::vector<float> bias;
};

struct AllTypes {
  std::int64_t step = 0;
  Inner dense;
  std::vector<bool> b;
  std::vector<std::int8_t> i8;
  std::vector<std::int16_t> i16;
  xt::xtensor<std::int32_t, 2> i32;
  std::vector<std::int64_t> i64;
  std::vector<std::uint8_t> u8;
  std::vector<std::uint16_t> u16;
  std::vector<std::uint32_t> u32;
  std::vector<std::uint64_t> u64;
  std::vector<ckpt::float16> f16;
  std::vector<ckpt::bfloat16> bf16;
  std::vector<double> f64;
  std::vector<std::complex<float>> c64;
  std::vector<std::complex<double>> c128;
  double lr = 0;
};

AllTypes make_all() {
  AllTypes s;
  s.step = 42;
  s.dense.kernel = xt::arange<float>(15).reshape({5, 3}) * 0.5f;
  s.dense.bias = {1.5f, -2.f, 3.25f};
  s.b = {true, false, true};
  s.i8 = {-128, 0, 127};
  s.i16 = {-32768, 7, 32767};
  s.i32 = xt::arange<std::int32_t>(6).reshape({2, 3}) - 3;
  s.i64 = {-(std::int64_t{1} << 40), 5};
  s.u8 = {0, 200, 255};
  s.u16 = {65535, 1};
  s.u32 = {4000000000u, 2};
  s.u64 = {std::uint64_t{1} << 63, 3};
  s.f16 = {ckpt::float16(1.5f), ckpt::float16(-0.25f)};
  s.bf16 = {ckpt::bfloat16(2.0f), ckpt::bfloat16(-3.0f)};
  s.f64 = {3.141592653589793, -1e300};
  s.c64 = {{1.f, -2.f}, {0.5f, 0.25f}};
  s.c128 = {{1e-5, 7.0}};
  s.lr = 0.001;
  return s;
}

bool same(const AllTypes& a, const AllTypes& b) {
  return a.step == b.step && a.dense.kernel == b.dense.kernel && a.dense.bias == b.dense.bias && a.b == b.b &&
         a.i8 == b.i8 && a.i16 == b.i16 && a.i32 == b.i32 && a.i64 == b.i64 && a.u8 == b.u8 && a.u16 == b.u16 &&
         a.u32 == b.u32 && a.u64 == b.u64 && a.f64 == b.f64 && a.c64 == b.c64 && a.c128 == b.c128 && a.lr == b.lr &&
         a.f16.size() == b.f16.size() && a.bf16.size() == b.bf16.size() &&
         std::memcmp(a.f16.data(), b.f16.data(), a.f16.size() * 2) == 0 &&
         std::memcmp(a.bf16.data(), b.bf16.data(), a.bf16.size() * 2) == 0;
}

struct WithString {
  std::string name;
  std::vector<float> w;
  std::optional<int> none;
  std::mt19937 rng;
};

// Python side of "describe": walks a zarr group, printing the same lines.
const char* py_describe_zarr = R"(
import sys, zarr, numpy as np
def walk(g, prefix, out, skip):
    for k in g.array_keys():
        if prefix + k in skip: continue
        a = g[k][...]
        a = a.astype(a.dtype.newbyteorder("<"))  # ckpt reads into native (little-endian) order
        out.append("%s %s %s %s" % (prefix + k, a.dtype.name, "[" + ",".join(map(str, a.shape)) + "]", np.ascontiguousarray(a).tobytes().hex()))
    for k, v in g.groups():
        walk(v, prefix + k + ".", out, skip)
def main(root, skip):
    g = zarr.open_group(root, mode="r")
    out = []
    walk(g, "", out, skip)
    sys.stdout.write("".join(l + "\n" for l in sorted(out)))
)";

}  // namespace interop_test

namespace interop_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("the real t5x checkpoint reads: kernel float64 [10,5], bias float32 [5], step int32 scalar") {
  const fs::path fixture = fs::path(CKPT_FIXTURES_DIR) / "t5x/tiny_t5/checkpoint_1";
  REQUIRE(ckpt::t5x::detect(fixture));
  CHECK(ckpt::detect_format(fixture) == "t5x");
  auto md = ckpt::metadata(fixture);
  CHECK(md.info().format == "t5x");
  CHECK(md.info().format_version == 3);
  const auto& k = md.leaf("state.param_states.kernel");
  CHECK(k.dtype() == ckpt::dtype::float64);
  CHECK(k.shape() == ckpt::Shape{10, 5});
  CHECK(md.leaf("state.param_states.bias").dtype() == ckpt::dtype::float32);
  CHECK(md.leaf("state.param_states.bias").shape() == ckpt::Shape{5});
  CHECK(md.leaf("state.param_states.step").dtype() == ckpt::dtype::int32);
  CHECK(md.leaf("state.param_states.step").shape().empty());
  CHECK(md.leaf("state.step").as<std::int32_t>() == 1);

  // the values, against Python reading the gzip chunks itself
  const std::string expect = python(R"(
import sys, gzip, numpy as np, os
d = sys.argv[1]
for name, dt, shape in [("kernel", "<f8", (10, 5)), ("bias", "<f4", (5,)), ("step", "<i4", ())]:
    key = ".".join(["0"] * len(shape)) or "0"
    a = np.frombuffer(gzip.decompress(open(os.path.join(d, "state.param_states." + name, key), "rb").read()), dtype=dt).reshape(shape)
    print(name, a.tobytes().hex())
)", fixture);
  auto t = ckpt::restore_tree(fixture);
  std::string got;
  for (const char* n : {"kernel", "bias", "step"})
    got += std::string(n) + " " + hex(t.leaf(std::string("state.param_states.") + n).bytes()) + "\n";
  CHECK(got == expect);

  struct ParamStates {
    xt::xtensor<double, 2> kernel;
    xt::xtensor<float, 1> bias;
    std::int32_t step = 0;
  };
  struct State {
    ParamStates param_states;
    std::int32_t step = 0;
  };
  struct Opt {
    State state;
    std::map<std::string, float> target{{"stale", 1.0f}};  // an empty node in this checkpoint
  };
  const auto s = ckpt::restore<Opt>(fixture);
  CHECK(s.target.empty());
  CHECK(s.state.step == 1);
  CHECK(s.state.param_states.kernel.shape()[0] == 10);
  CHECK(s.state.param_states.bias.size() == 5);
}

TEST_CASE("every format round-trips every dtype through restore<T>") {
  test::TempDir tmp;
  const AllTypes s = make_all();
  ckpt::save<ckpt::t5x>(tmp / "t5x", s);
  ckpt::save<ckpt::orbax>(tmp / "orbax", s);
  ckpt::save<ckpt::zarr_v2>(tmp / "zarr", s);
  ckpt::save<ckpt::flax>(tmp / "flax.msgpack", s);
  ckpt::save<ckpt::basic_orbax<ckpt::io::codec::gzip>>(tmp / "orbax_gz", s);
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::none>>(tmp / "zarr_raw", s);
  CHECK(ckpt::detect_format(tmp / "t5x") == "t5x");
  CHECK(ckpt::detect_format(tmp / "orbax") == "orbax");
  CHECK(ckpt::detect_format(tmp / "zarr") == "zarr");
  CHECK(ckpt::detect_format(tmp / "flax.msgpack") == "flax");
  const std::string native_view = [&] {
    ckpt::save(tmp / "native", s);
    return describe(ckpt::restore_tree(tmp / "native"));
  }();
  for (const char* f : {"t5x", "orbax", "zarr", "flax.msgpack", "orbax_gz", "zarr_raw"}) {
    CAPTURE(f);
    CHECK(same(ckpt::restore<AllTypes>(tmp / f), s));
    CHECK(describe(ckpt::restore_tree(tmp / f)) == native_view);
  }
  CHECK_THROWS_CKPT(ckpt::save<ckpt::t5x>(tmp / "t5x", s), ckpt::Error, "t5x: a checkpoint already exists here");
  ckpt::save<ckpt::flax>(tmp / "flax.msgpack", s, {.force = true});
}

TEST_CASE("strings, empty optionals and random engines: flax, t5x and orbax store them; zarr refuses, naming the leaf") {
  test::TempDir tmp;
  WithString w;
  w.name = "hello \"json\"";
  w.w = {1, 2};
  w.rng.seed(7);
  w.rng();
  for (const char* f : {"t5x", "orbax", "flax"}) {
    CAPTURE(f);
    const fs::path p = tmp / f;
    if (std::string(f) == "t5x") ckpt::save<ckpt::t5x>(p, w);
    else if (std::string(f) == "orbax") ckpt::save<ckpt::orbax>(p, w);
    else ckpt::save<ckpt::flax>(p, w);
    auto r = ckpt::restore<WithString>(p);
    CHECK(r.name == w.name);
    CHECK(r.w == w.w);
    CHECK(!r.none);
    CHECK(r.rng == w.rng);
  }
  try {
    ckpt::save<ckpt::zarr_v2>(tmp / "z", w);
    FAIL("zarr accepted a string");
  } catch (const ckpt::Error& e) {
    CHECK(std::string(e.what()).find("name") != std::string::npos);
  }
  CHECK(!fs::exists(tmp / "z"));
}

TEST_CASE("Python's zarr reads what ckpt writes (zarr group, Orbax items, t5x arrays), every dtype both support") {
  test::TempDir tmp;
  const AllTypes s = make_all();
  ckpt::save<ckpt::zarr_v2>(tmp / "zarr", s);
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::gzip>>(tmp / "zarr_gz", s);
  ckpt::save<ckpt::orbax_without_ocdbt>(tmp / "orbax", s);  // OCDBT: tests/test_ocdbt.cpp
  // zarr-python has no bfloat16: those leaves are compared on the C++ side only
  std::string mine;
  for (auto& line : [&] {
         std::vector<std::string> v;
         std::istringstream in(describe(ckpt::restore_tree(tmp / "zarr")));
         for (std::string l; std::getline(in, l);)
           if (l.rfind("bf16", 0) != 0) v.push_back(l);
         return v;
       }())
    mine += line + "\n";
  for (const char* d : {"zarr", "zarr_gz"}) {
    CAPTURE(d);
    CHECK(python(std::string(py_describe_zarr) + "main(sys.argv[1], ['bf16'])\n", tmp / d) == mine);
  }
  // Orbax: each leaf is an array named by its dotted path inside default/
  const std::string orbax_py = python(R"(
import sys, zarr, json, os, numpy as np
item = os.path.join(sys.argv[1], "default")
meta = json.load(open(os.path.join(item, "_METADATA")))
assert meta["use_zarr3"] is False
out = []
for k, v in meta["tree_metadata"].items():
    name = ".".join(x["key"] for x in v["key_metadata"])
    assert k == repr(tuple(x["key"] for x in v["key_metadata"])), k
    if name == "bf16": continue
    a = zarr.open_array(os.path.join(item, name), mode="r")[...]
    out.append("%s %s %s %s" % (name, a.dtype.name, "[" + ",".join(map(str, a.shape)) + "]", a.tobytes().hex()))
assert json.load(open(os.path.join(sys.argv[1], "_CHECKPOINT_METADATA")))["commit_timestamp_nsecs"] > 0
assert os.path.exists(os.path.join(sys.argv[1], "commit_success.txt"))
print("".join(l + "\n" for l in sorted(out)), end="")
)", tmp / "orbax");
  CHECK(orbax_py == mine);
  // bfloat16 is written as TensorStore writes it
  CHECK(python("import json,sys; print(json.load(open(sys.argv[1] + '/bf16/.zarray'))['dtype'])", tmp / "zarr") ==
        "bfloat16\n");
}

TEST_CASE("ckpt reads what Python's zarr writes: every dtype, gzip/zstd/zlib/none, C and F order, edge and missing chunks") {
  test::TempDir tmp;
  const std::string expect = python(std::string(R"(
import sys, zarr, numpy as np
from numcodecs import GZip, Zstd, Zlib
root = zarr.open_group(sys.argv[1] + "/g", mode="w")
rng = np.random.default_rng(0)
dts = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]
comps = [GZip(1), Zstd(3), Zlib(5), None]
for i, dt in enumerate(dts):
    for order in "CF":
        for endian in "<>":
            if endian == ">" and dt in ("?", "i1", "u1"): continue
            shape = (7, 5)
            a = (rng.standard_normal(shape) * 100).astype(np.dtype(dt))
            if np.dtype(dt).kind == "c": a = a + 1j * rng.standard_normal(shape).astype(a.dtype)
            z = root.create_dataset("%s_%s_%s" % (dt, order, "be" if endian == ">" else "le"), shape=shape, chunks=(3, 2),
                                    dtype=np.dtype(endian + dt) if dt != "?" else "?", order=order,
                                    compressor=comps[(i + (order == "F")) % 4], fill_value=0)
            z[...] = a
sub = root.create_group("nested").create_group("deeper")
s = sub.create_dataset("scalar", shape=(), dtype="<f4", compressor=None); s[...] = 2.5
m = sub.create_dataset("missing", shape=(6,), chunks=(2,), dtype="<i4", fill_value=-7, compressor=GZip(1))
m[2:4] = [1, 2]
sl = sub.create_dataset("slash", shape=(4, 4), chunks=(3, 3), dtype="<f8", dimension_separator="/", compressor=Zstd(1))
sl[...] = np.arange(16).reshape(4, 4)
e = sub.create_dataset("empty", shape=(0, 3), chunks=(1, 3), dtype="<f4", compressor=None)
)") + py_describe_zarr + "main(sys.argv[1] + '/g', [])\n", tmp.path());
  auto t = ckpt::restore_tree(tmp / "g");
  CHECK(t.info().format == "zarr");
  CHECK(describe(t) == expect);
  CHECK(t.leaf("nested.deeper.missing").as<std::vector<std::int32_t>>() == std::vector<std::int32_t>{-7, -7, 1, 2, -7, -7});
  // one array on its own reads as the root leaf
  CHECK(ckpt::restore<std::vector<std::int32_t>>(tmp / "g/nested/deeper/missing") ==
        std::vector<std::int32_t>{-7, -7, 1, 2, -7, -7});
}

TEST_CASE("t5x: what ckpt writes is what t5x writes, and Python reads the arrays through the specs") {
  test::TempDir tmp;
  const AllTypes s = make_all();
  ckpt::save<ckpt::t5x>(tmp / "checkpoint_3", s);
  const std::string out = python(R"(
import sys, os, msgpack, zarr, numpy as np
d = sys.argv[1]
c = msgpack.unpackb(open(os.path.join(d, "checkpoint"), "rb").read(), raw=False, strict_map_key=False)
assert c["version"] == 3
opt = c["optimizer"]
spec = opt["dense"]["kernel"]
assert spec["driver"] == "zarr" and spec["dtype"] == "float32", spec
assert spec["metadata"]["compressor"] == {"id": "gzip", "level": 1}
assert spec["metadata"]["shape"] == [5, 3]
z = zarr.open_array(os.path.join(d, spec["kvstore"]["path"]), mode="r")
print(z[...].tolist())
step = opt["step"]
assert isinstance(step, msgpack.ExtType) and step.code == 3
shape, dt, data = msgpack.unpackb(step.data)
print(shape, dt, np.frombuffer(data, dtype=dt)[0])
)", tmp / "checkpoint_3");
  CHECK(out == "[[0.0, 0.5, 1.0], [1.5, 2.0, 2.5], [3.0, 3.5, 4.0], [4.5, 5.0, 5.5], [6.0, 6.5, 7.0]]\n[] int64 42\n");
}

TEST_CASE("Flax msgpack: Python decodes ckpt's file as flax.serialization does, and ckpt reads Python's") {
  test::TempDir tmp;
  const AllTypes s = make_all();
  ckpt::save<ckpt::flax>(tmp / "state.msgpack", s);
  const char* flax_restore = R"(
import sys, msgpack, numpy as np
def ndarray(data):
    shape, dt, buf = msgpack.unpackb(data, raw=False)
    if dt == "bfloat16": return ("bfloat16", shape, buf)  # numpy alone has no bfloat16 (ml_dtypes does)
    return np.frombuffer(buf, dtype=dt).reshape(shape)
def hook(code, data):
    if code == 1: return ndarray(data)
    if code == 2: return complex(*msgpack.unpackb(data))
    if code == 3: return ndarray(data)[()]
    return msgpack.ExtType(code, data)
def load(p):
    return msgpack.unpackb(open(p, "rb").read(), ext_hook=hook, raw=False)
)";
  const std::string out = python(std::string(flax_restore) + R"(
t = load(sys.argv[1])
print(t["dense"]["kernel"].dtype, t["dense"]["kernel"].shape, t["dense"]["kernel"][4, 2])
print(type(t["step"]).__name__, t["step"], t["lr"], t["c128"].dtype, t["c128"][0])
print(t["b"].tolist(), t["u64"].tolist())
print(t["bf16"][0], t["bf16"][1], t["bf16"][2].hex())
)", tmp / "state.msgpack");
  CHECK(out == "float32 (5, 3) 7.0\nint64 42 0.001 complex128 (1e-05+7j)\n[True, False, True] [9223372036854775808, 3]\n"
              "bfloat16 [2] 004040c0\n");

  // Python writes as Flax does: ndarrays, numpy scalars, Python scalars, a complex,
  // a list as {"0":..}, a str, None, {} and a chunked array.
  const std::string written = python(R"(
import sys, msgpack, numpy as np
def nd(a, code=1): return msgpack.ExtType(code, msgpack.packb((a.shape, a.dtype.name, a.tobytes("C")), use_bin_type=True))
big = np.arange(10, dtype=np.int16)
tree = {
  "params": {"w": nd(np.arange(6, dtype=np.float32).reshape(2, 3)), "b": nd(np.array([1, 2], dtype=np.uint8))},
  "layers": {"0": {"x": nd(np.array([True]))}, "1": {"x": nd(np.array([False]))}},
  "count": nd(np.array(5, dtype=np.int32)[()], 3),
  "pyint": 7, "pyfloat": 0.5, "flag": True, "name": "flax", "nothing": None, "empty": {},
  "z": msgpack.ExtType(2, msgpack.packb((1.0, -1.0))),
  "chunked": {"__msgpack_chunked_array__": True, "shape": {"0": 2, "1": 5},
              "chunks": {"0": nd(big[:4]), "1": nd(big[4:8]), "2": nd(big[8:])}},
}
open(sys.argv[1] + "/py.msgpack", "wb").write(msgpack.packb(tree, use_bin_type=True))
)", tmp.path());
  (void)written;
  auto t = ckpt::restore_tree(tmp / "py.msgpack");
  CHECK(t.info().format == "flax");
  CHECK(t.leaf("params.w").shape() == ckpt::Shape{2, 3});
  CHECK(t.leaf("params.w").as<xt::xtensor<float, 2>>() == xt::xtensor<float, 2>{{0, 1, 2}, {3, 4, 5}});
  CHECK(t.leaf("layers.1.x").as<std::vector<bool>>() == std::vector<bool>{false});
  CHECK(t.leaf("count").as<std::int32_t>() == 5);
  CHECK(t.leaf("pyint").as<std::int64_t>() == 7);
  CHECK(t.leaf("pyfloat").as<double>() == 0.5);
  CHECK(t.leaf("flag").as<bool>());
  CHECK(t.leaf("name").as<std::string>() == "flax");
  CHECK(t.leaf("nothing").dtype() == ckpt::dtype::none);
  CHECK(t.leaf("empty").dtype() == ckpt::dtype::none);
  CHECK(t.leaf("z").as<std::complex<double>>() == std::complex<double>(1, -1));
  CHECK(t.leaf("chunked").shape() == ckpt::Shape{2, 5});
  CHECK(t.leaf("chunked").as<xt::xtensor<std::int16_t, 2>>() == xt::xtensor<std::int16_t, 2>{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}});
}

TEST_CASE("ckpt::flax::save_checkpoint names, keeps and refuses as Flax does") {
  test::TempDir tmp;
  AllTypes s = make_all();
  for (std::int64_t step : {1, 2, 3, 4}) {
    s.step = step;
    const auto p = ckpt::flax::save_checkpoint(tmp.path(), s, step, {.keep = 2, .keep_every_n_steps = 2});
    CHECK(p == tmp / ("checkpoint_" + std::to_string(step)));
  }
  CHECK(!fs::exists(tmp / "checkpoint_1"));
  CHECK(fs::exists(tmp / "checkpoint_2"));  // a multiple of keep_every_n_steps
  CHECK(fs::exists(tmp / "checkpoint_3"));
  CHECK(fs::is_regular_file(tmp / "checkpoint_4"));
  CHECK(!fs::exists(tmp / "checkpoint_tmp"));
  CHECK(ckpt::flax::latest_checkpoint(tmp.path()) == tmp / "checkpoint_4");
  CHECK(ckpt::flax::restore_checkpoint<AllTypes>(tmp.path()).step == 4);
  CHECK(ckpt::flax::restore_checkpoint<AllTypes>(tmp.path(), 3).step == 3);
  // (step 3 still exists, so it would say "already exists": step 1 is gone and older)
  CHECK_THROWS_CKPT(ckpt::flax::save_checkpoint(tmp.path(), s, 1), ckpt::Error,
                    "trying to save an outdated checkpoint at step 1, the latest is step 4");
  CHECK_THROWS_CKPT(ckpt::flax::save_checkpoint(tmp.path(), s, 4), ckpt::Error,
                    "checkpoint_4: checkpoint already exists (pass .overwrite = true)");
  s.step = 3;
  ckpt::flax::save_checkpoint(tmp.path(), s, 3, {.keep = 5, .overwrite = true});
  CHECK(!fs::exists(tmp / "checkpoint_4"));  // newer ones go when overwriting
  CHECK(ckpt::flax::restore_checkpoint<AllTypes>(tmp.path()).step == 3);
  // Python reads Flax's file names the same way
  CHECK(python("import msgpack,sys; print(sorted(msgpack.unpackb(open(sys.argv[1] + '/checkpoint_3','rb').read(), raw=False).keys())[:3])",
               tmp.path()) == "['b', 'bf16', 'c128']\n");
}

// ---------------------------------------------------------------------------------
// Hostile input: always a ckpt::Error, never a crash, a hang or a huge allocation.

void copy_fixture(const fs::path& to) {
  fs::copy(fs::path(CKPT_FIXTURES_DIR) / "t5x/tiny_t5/checkpoint_1", to, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(to))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  fs::permissions(to, fs::perms::owner_write, fs::perm_options::add);
}

void rewrite_t5x(const fs::path& dir, const std::string& python_edit) {
  python(R"(
import sys, msgpack
p = sys.argv[1] + "/checkpoint"
c = msgpack.unpackb(open(p, "rb").read(), raw=False)
spec = c["optimizer"]["state"]["param_states"]["kernel"]
)" + python_edit + R"(
open(p, "wb").write(msgpack.packb(c, use_bin_type=True))
)", dir);
}

void expect_error(const fs::path& p, const std::string& fragment) {
  CAPTURE(p);
  try {
    auto t = ckpt::restore_tree(p);
    FAIL("no error");
  } catch (const ckpt::Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

TEST_CASE("hostile t5x specs: absolute paths, '..', other drivers, huge shapes") {
  test::TempDir tmp;
  int n = 0;
  for (const auto& edit_and_fragment : std::vector<std::pair<std::string, std::string>>{
           {"spec['kvstore']['path'] = '/etc/'", "not relative"},
           {"spec['kvstore']['path'] = '../../etc'", "leaves the checkpoint"},
           {"spec['kvstore']['path'] = 'state.param_states.bias/../../x'", "leaves the checkpoint"},
           {"spec['kvstore']['driver'] = 's3'", "not supported"},
           {"spec['driver'] = 'n5'", "not supported"},
           {"spec['metadata']['shape'] = [1 << 40, 5]; spec['metadata']['chunks'] = [1 << 40, 5]", "far more"},
           {"spec['metadata']['shape'] = [100000, 100000]; spec['metadata']['chunks'] = [1, 1]", "chunks"},
           {"spec['metadata']['chunks'] = [1 << 30, 1 << 20]", "chunk"},
           {"spec['metadata']['compressor'] = {'id': 'lzma'}", "not supported"},
           {"spec['dtype'] = 'object'", "not supported"},
           {"spec['metadata']['shape'] = [-1, 5]", "shape"},
       }) {
    const std::string& edit = edit_and_fragment.first;  // no structured binding: clang 14 cannot CAPTURE one
    const std::string& fragment = edit_and_fragment.second;
    CAPTURE(edit);
    const fs::path d = tmp / std::string("c").append(std::to_string(n++));  // not "c" + ...: GCC 12 -O3's false -Wrestrict
    copy_fixture(d);
    rewrite_t5x(d, edit);
    expect_error(d, fragment);
  }
}

TEST_CASE("hostile zarr chunks: decompression bombs, oversized and truncated chunks, symlinks out") {
  test::TempDir tmp;
  struct S { std::vector<float> a; };
  S s;
  s.a.assign(1000, 1.f);
  ckpt::save<ckpt::zarr_v2>(tmp / "z", s);
  // a zstd chunk that decompresses to 100 MB where 4000 bytes are expected
  python(R"(
import sys, numcodecs
open(sys.argv[1] + "/a/0", "wb").write(numcodecs.Zstd(1).encode(bytes(100 << 20)))
)", tmp / "z");
  expect_error(tmp / "z", "more than");
  fs::remove_all(tmp / "g");
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::gzip>>(tmp / "g", s);
  python(R"(
import sys, gzip
open(sys.argv[1] + "/a/0", "wb").write(gzip.compress(bytes(100 << 20)))
)", tmp / "g");
  expect_error(tmp / "g", "more than");
  python(R"(
import sys
open(sys.argv[1] + "/a/0", "wb").write(b"\x1f\x8b\x08\x00garbage")
)", tmp / "g");
  expect_error(tmp / "g", "chunk 0");
  ckpt::save<ckpt::basic_zarr_v2<ckpt::io::codec::none>>(tmp / "r", s);
  test::write_bytes(tmp / "r/a/0", std::vector<char>(100, 'x'));
  expect_error(tmp / "r", "expected");
  fs::remove(tmp / "r/a/0");
  test::write_bytes(tmp / "outside", std::vector<char>(4000, 'x'));
  fs::create_symlink(tmp / "outside", tmp / "r/a/0");
  expect_error(tmp / "r", "chunk 0");
}

TEST_CASE("hostile JSON and msgpack: malformed, truncated, wrong types, deep nesting") {
  test::TempDir tmp;
  struct S { std::vector<float> a; std::string name = "x"; };
  ckpt::save<ckpt::orbax_without_ocdbt>(tmp / "o", S{{1, 2, 3}});
  test::write_bytes(tmp / "o/default/_METADATA", {'{', '"', 't'});
  expect_error(tmp / "o", "malformed JSON");
  test::write_bytes(tmp / "o/default/_METADATA", std::vector<char>(100000, '['));
  expect_error(tmp / "o", "_METADATA");
  const std::string escape = R"({"tree_metadata": {"x": {"key_metadata": [{"key": "..", "key_type": 2}], "value_metadata": {"value_type": "np.ndarray"}}}})";
  test::write_bytes(tmp / "o/default/_METADATA", {escape.begin(), escape.end()});
  expect_error(tmp / "o", "leaves the item directory");
  const std::string unknown = R"({"tree_metadata": {"x": {"key_metadata": [{"key": "a", "key_type": 2}], "value_metadata": {"value_type": "pickle"}}}})";
  test::write_bytes(tmp / "o/default/_METADATA", {unknown.begin(), unknown.end()});
  expect_error(tmp / "o", "not supported");

  struct A { std::vector<float> a; };
  ckpt::save<ckpt::zarr_v2>(tmp / "z", A{{1, 2, 3}});
  for (const std::string bad : {"{", "[]", R"({"zarr_format": 3})", R"({"zarr_format": 2, "shape": [3], "chunks": [0], "dtype": "<f4", "compressor": null})",
                                R"({"zarr_format": 2, "shape": [3], "chunks": [3], "dtype": [["x", "<f4"]], "compressor": null})",
                                R"({"zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "<f4", "compressor": null, "order": "K"})",
                                R"({"zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "<f4", "compressor": null, "filters": [{"id": "delta"}]})"}) {
    CAPTURE(bad);
    fs::remove(tmp / "z/a/.zarray");
    test::write_bytes(tmp / "z/a/.zarray", {bad.begin(), bad.end()});
    expect_error(tmp / "z", ".zarray");
  }
}

TEST_CASE("hostile Flax msgpack files") {
  test::TempDir tmp;
  const auto p = tmp / "f.msgpack";
  auto write = [&](std::vector<unsigned char> b) { test::write_bytes(p, {b.begin(), b.end()}); };
  write({0x81, 0xa1, 'a'});  // truncated map
  expect_error(p, "malformed msgpack");
  write({0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff});  // a list claiming 4 billion items
  expect_error(p, "malformed msgpack");
  write({0x81, 0xa1, 'a', 0xd4, 0x09, 0x00});  // unknown ext
  expect_error(p, "ext type 9");
  python(R"(
import sys, msgpack
def nd(shape, dt, data): return msgpack.ExtType(1, msgpack.packb((shape, dt, data), use_bin_type=True))
cases = {
  "shape": {"a": nd([1 << 40, 1 << 20], "float32", b"\0" * 16)},
  "dtype": {"a": nd([2], "<U3", b"\0" * 24)},
  "short": {"a": nd([4], "float32", b"\0" * 8)},
  "chunk": {"a": {"__msgpack_chunked_array__": True, "shape": {"0": 1 << 50}, "chunks": {"0": nd([2], "int8", b"\0\0")}}},
  "chunkkeys": {"a": {"__msgpack_chunked_array__": True, "shape": {"0": 2}, "chunks": {"7": nd([2], "int8", b"\0\0")}}},
  "payload": {"a": msgpack.ExtType(1, b"\x93\x91")},
}
for k, v in cases.items():
    open(sys.argv[1] + "/" + k, "wb").write(msgpack.packb(v, use_bin_type=True))
)", tmp.path());
  expect_error(tmp / "shape", "needs");
  expect_error(tmp / "dtype", "not supported");
  expect_error(tmp / "short", "needs");
  expect_error(tmp / "chunk", "needs");
  expect_error(tmp / "chunkkeys", "keys");
  expect_error(tmp / "payload", "malformed msgpack");
  // not a checkpoint at all
  test::write_bytes(tmp / "text", {'h', 'i'});
  expect_error(tmp / "text", "not a checkpoint");
  // the t5x fixture's msgpack, truncated
  copy_fixture(tmp / "t");
  auto bytes = test::read_bytes(tmp / "t/checkpoint");
  bytes.resize(bytes.size() / 2);
  test::write_bytes(tmp / "t/checkpoint", bytes);
  expect_error(tmp / "t", "malformed msgpack");
}

namespace manager_interop_test {
struct Small {
  std::int64_t step = 0;
  xt::xtensor<float, 2> w;
};
}  // namespace manager_interop_test

TEST_CASE("the manager writes Orbax step directories through the format policy") {
  using manager_interop_test::Small;
  test::TempDir tmp;
  {
    ckpt::CheckpointManager<Small, ckpt::orbax> mgr(tmp / "run", {.max_to_keep = 1});
    Small s{1, xt::ones<float>({2, 3})};
    CHECK(mgr.save(1, s, {{"loss", 0.5}}));
    s.step = 2;
    s.w *= 2.0f;
    CHECK(mgr.save(2, s, {{"loss", 0.25}}));
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2});
    CHECK(mgr.metrics(2).at("loss") == 0.25);
    const Small r = mgr.restore();
    CHECK(r.step == 2);
    CHECK(r.w == xt::ones<float>({2, 3}) * 2.0f);
  }
  // The step directory is Orbax's layout, and its metadata file carries both the
  // format's keys and the manager's; the metrics are Orbax's metrics item
  // (tests/test_orbax_managed.cpp checks that layout against Orbax's own).
  const auto meta = test::read_bytes(tmp / "run" / "2" / "_CHECKPOINT_METADATA");
  const auto j = nlohmann::json::parse(meta.begin(), meta.end());
  CHECK(j.contains("item_handlers"));
  CHECK(j.at("metrics") == nlohmann::json::object());
  const auto item = test::read_bytes(tmp / "run" / "2" / "metrics" / "metrics");
  CHECK(nlohmann::json::parse(item.begin(), item.end()) == nlohmann::json{{"loss", 0.25}});
  CHECK(std::filesystem::exists(tmp / "run" / "2" / "commit_success.txt"));
  CHECK(ckpt::restore<Small>(tmp / "run" / "2").step == 2);
}

TEST_CASE("the manager writes t5x steps, read back as t5x despite the manager's _CHECKPOINT_METADATA") {
  using manager_interop_test::Small;
  test::TempDir tmp;
  {
    ckpt::CheckpointManager<Small, ckpt::t5x> mgr(tmp / "run", {.max_to_keep = 2});
    for (std::int64_t step = 1; step <= 3; ++step)
      CHECK(mgr.save(step, Small{step, xt::ones<float>({2, 3}) * static_cast<float>(step)}, {{"loss", 1.0 / step}}));
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2, 3});
    CHECK(mgr.restore().w == xt::ones<float>({2, 3}) * 3.0f);
  }
  CHECK(std::filesystem::exists(tmp / "run/3/_CHECKPOINT_METADATA"));
  CHECK(ckpt::detect_format(tmp / "run/3") == "t5x");
  CHECK(ckpt::restore<Small>(tmp / "run/2").step == 2);
  ckpt::CheckpointManager<Small, ckpt::t5x> again(tmp / "run", {.read_only = true});
  CHECK(again.metrics(2).at("loss") == doctest::Approx(0.5));
}

TEST_CASE("saves of t5x, zarr and Orbax cut zarr chunks to a quarter of SaveOptions::max_memory") {
  test::TempDir tmp;
  struct S {
    xt::xtensor<float, 2> w;  // 4096 rows of 1 KiB: 4 MiB
    std::int64_t step = 0;
  };
  S s;
  s.w = xt::xtensor<float, 2>::from_shape({4096, 256});
  for (std::size_t i = 0; i < s.w.size(); ++i) s.w.data()[i] = static_cast<float>(i % 977);
  s.step = 5;
  const ckpt::SaveOptions budget{.max_memory = 1 << 20};  // chunks of at most 256 KiB: 256 rows
  ckpt::save<ckpt::t5x>(tmp / "t5x", s, budget);
  ckpt::save<ckpt::zarr_v2>(tmp / "zarr", s, budget);
  ckpt::save<ckpt::orbax_without_ocdbt>(tmp / "orbax", s, budget);
  for (const fs::path& zarray : {tmp / "t5x/w/.zarray", tmp / "zarr/w/.zarray", tmp / "orbax/default/w/.zarray"}) {
    CAPTURE(zarray);
    const auto text = test::read_bytes(zarray);
    const auto j = nlohmann::json::parse(text.begin(), text.end());
    CHECK(j["chunks"] == nlohmann::json::array({256, 256}));
  }
  for (const char* d : {"t5x", "zarr", "orbax"}) {
    CAPTURE(d);
    const S back = ckpt::restore<S>(tmp / d);
    CHECK(back.w == s.w);
    CHECK(back.step == 5);
  }
  // Without a budget, one 64 MiB chunk holds the whole array, as before.
  ckpt::save<ckpt::t5x>(tmp / "whole", s);
  const auto text = test::read_bytes(tmp / "whole/w/.zarray");
  CHECK(nlohmann::json::parse(text.begin(), text.end())["chunks"] == nlohmann::json::array({4096, 256}));
  // A row larger than the budget's quarter cannot be cut smaller: an Error naming the leaf.
  CHECK_THROWS_CKPT(ckpt::save<ckpt::t5x>(tmp / "tight", s, {.max_memory = 2048}), ckpt::Error, "w: a zarr chunk");
  CHECK(!fs::exists(tmp / "tight"));
}

}  // namespace interop_test
