// tests/test_pytorch.cpp — ckpt::pytorch: torch.save files read and written, with PyTorch
// (Debian's python3-torch) as the oracle: its fixtures (tests/data/pytorch, made by
// make_fixtures.py, which the live cases run again), torch.load of what ckpt writes,
// and hostile pickles refused.
#include "support.hpp"

#include <nlohmann/json.hpp>

#include <ckpt/storage/memory.hpp>

#include <cstring>

namespace pytorch_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path fixtures = fs::path(CKPT_FIXTURES_DIR) / "pytorch";

std::vector<std::byte> unhex(const std::string& h) {
  std::vector<std::byte> b(h.size() / 2);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return b;
}

// Every leaf of the tree at `file` against the .json torch.load's values gave: the same
// paths, dtypes, shapes and bytes. Returns how many leaves were compared.
std::size_t compare_with_torch(const fs::path& file, const fs::path& expected_json) {
  const json want = json::parse(std::ifstream(expected_json));
  const ckpt::Tree tree = ckpt::restore_tree(file);
  CHECK(tree.info().format.starts_with("pytorch"));
  std::set<std::string> seen;
  for (const auto& l : tree.leaves()) {
    const std::string name = l.path().str();
    INFO(file.filename().string() << ": " << name);
    seen.insert(name);
    REQUIRE(want.contains(name));
    const json& w = want[name];
    CHECK(std::string(ckpt::dtype_name(l.dtype())) == w["dtype"].get<std::string>());
    if (w.contains("shape")) CHECK(l.shape() == w["shape"].get<ckpt::Shape>());
    if (w.contains("hex")) CHECK(test::hex(l.bytes()) == w["hex"].get<std::string>());
    if (w["dtype"] == "int64" && w.contains("value")) CHECK(l.as<std::int64_t>() == w["value"].get<std::int64_t>());
    if (w["dtype"] == "bool" && w.contains("value")) CHECK(l.as<bool>() == w["value"].get<bool>());
    if (w["dtype"] == "string") CHECK(l.as<std::string>() == w["value"].get<std::string>());
  }
  CHECK(seen.size() == want.size());
  return seen.size();
}

std::vector<float> floats(const ckpt::Tree::Leaf& l) {
  const auto b = l.bytes();
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

bool have_torch() { return std::system((std::string(CKPT_PYTHON) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0; }

TEST_CASE("pytorch: torch.save files (state_dicts, an optimizer, dtypes, views, tied weights, shards) read bit-exact") {
  for (const char* f : {"net_state_dict.pt", "checkpoint.pt", "dtypes.pt", "views.pt"})
    CHECK(compare_with_torch(fixtures / f, fixtures / (std::string(f) + ".json")) > 8);
  // Hugging Face's sharded layout: the directory and its index, the same tensors as the one file
  CHECK(compare_with_torch(fixtures / "sharded", fixtures / "net_state_dict.pt.json") == 12);
  CHECK(compare_with_torch(fixtures / "sharded/pytorch_model.bin.index.json", fixtures / "net_state_dict.pt.json") == 12);
  CHECK(ckpt::restore_tree(fixtures / "sharded").info().format == "pytorch-sharded");

  const auto ck = ckpt::metadata(fixtures / "checkpoint.pt");
  CHECK(ck.leaf("model.bn.running_var").shape() == ckpt::Shape{3});
  CHECK(ck.leaf("model.bn.num_batches_tracked").dtype() == ckpt::dtype::int64);
  CHECK(ck.leaf("optimizer.state.0.exp_avg").shape() == ckpt::Shape{3, 2, 3, 3});
  CHECK(ck.leaf("optimizer.param_groups.0.lr").dtype() == ckpt::dtype::float64);
  CHECK(ck.leaf("optimizer.param_groups.0.betas.1").dtype() == ckpt::dtype::float64);
  CHECK(ck.leaf("optimizer.param_groups.0.params.8").dtype() == ckpt::dtype::int64);
  CHECK(ck.leaf("epoch").dtype() == ckpt::dtype::int64);
  // views: the values they show, whatever their storage offset and stride
  const auto v = ckpt::restore_tree(fixtures / "views.pt");
  CHECK(v.leaf("col").as<std::vector<float>>() == std::vector<float>{1, 7, 13, 19});
  CHECK(floats(v.leaf("block")) == std::vector<float>{8, 9, 10, 14, 15, 16});
  CHECK(v.leaf("t").shape() == ckpt::Shape{6, 4});
  CHECK(floats(v.leaf("expand")) == std::vector<float>{1, 2, 1, 2, 1, 2});
  CHECK(v.leaf("emb.weight").bytes() == v.leaf("head.weight").bytes());
}

struct Linear {
  xt::xarray<float> weight, bias;
};
struct BatchNorm {
  xt::xarray<float> weight, bias, running_mean, running_var;
  std::int64_t num_batches_tracked = 0;
};
struct Embedding {
  xt::xarray<float> weight;
};
struct Net {
  Linear conv;
  BatchNorm bn;
  Linear norm;
  Embedding emb;
  Linear fc;
};

struct Checkpoint {
  Net model;
  std::int64_t epoch = 0;
};

TEST_CASE("pytorch: restore<T> of a state_dict into a struct of the same names, and with renamed paths") {
  const Net n = ckpt::restore<Net>(fixtures / "net_state_dict.pt");
  const auto t = ckpt::restore_tree(fixtures / "net_state_dict.pt");
  CHECK(n.conv.weight.shape() == std::vector<std::size_t>{3, 2, 3, 3});
  CHECK(std::memcmp(n.fc.weight.data(), t.leaf("fc.weight").bytes().data(), 8 * sizeof(float)) == 0);
  CHECK(n.bn.num_batches_tracked == 2);
  // the nested checkpoint's model and epoch (its optimizer is not in the struct)
  const auto c = ckpt::restore<Checkpoint>(fixtures / "checkpoint.pt", {.partial = true});
  CHECK(c.epoch == 7);
  CHECK(c.model.emb.weight == n.emb.weight);
  CHECK_THROWS_CKPT(ckpt::restore<Checkpoint>(fixtures / "checkpoint.pt"), ckpt::Error, "optimizer.state.0.exp_avg");
  // renamed paths: the checkpoint's model.* at the root of a Net
  const Net renamed = ckpt::restore<Net>(fixtures / "checkpoint.pt", {.partial = true, .transform = [](ckpt::Tree& t) {
                                           CHECK(t.rename("model", "") == 12);
                                         }});
  CHECK(renamed.fc.bias == n.fc.bias);
  CHECK(renamed.bn.running_var == n.bn.running_var);
}

TEST_CASE("pytorch: hostile pickles are refused naming what they hold, and nothing runs") {
  fs::remove("/tmp/ckpt_pytorch_pwned");
  CHECK_THROWS_CKPT(ckpt::restore_tree(fixtures / "hostile_system.pt"), ckpt::Error, "refused the global posix.system");
  CHECK_THROWS_CKPT(ckpt::restore_tree(fixtures / "hostile_eval.pt"), ckpt::Error, "refused the global __builtin__.eval");
  CHECK_FALSE(fs::exists("/tmp/ckpt_pytorch_pwned"));
  CHECK_THROWS_CKPT(ckpt::restore_tree(fixtures / "hostile_loop.pt"), ckpt::CorruptCheckpointError, "refers to its shared objects more often");
  CHECK_THROWS_CKPT(ckpt::restore_tree(fixtures / "hostile_deep.pt"), ckpt::CorruptCheckpointError, "nested deeper than 100");
  CHECK_THROWS_CKPT(ckpt::restore_tree(fixtures / "hostile_huge.pt"), ckpt::CorruptCheckpointError, "of a storage of 1");
  CHECK_THROWS_CKPT(ckpt::restore_tree(fixtures / "legacy.pt"), ckpt::Error, "legacy format of PyTorch before 1.6");

  // hand-made pickles in a real archive: REDUCE of an allowed global that is no function,
  // a non-storage persistent id, a key reaching outside data/, and every truncation
  test::TempDir tmp;
  auto archive = [&](const std::string& pickle, bool with_storage = false) {
    ckpt::Snapshot s;
    const auto path = tmp / "x.pt";
    fs::remove(path);
    {
      auto w = ckpt::storage::file_writer(path);
      ckpt::detail::pytorch::zip::Writer z(*w);
      z.add("archive/data.pkl", std::as_bytes(std::span(pickle.data(), pickle.size())));
      if (with_storage) z.add("archive/data/0", std::as_bytes(std::span("\0\0\0\0", 4)));
      z.finish();
    }
    return path;
  };
  using namespace std::string_literals;
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "ctorch\nFloatStorage\n)R."s)), ckpt::Error,
                    "refused a call of the global torch.FloatStorage");
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "(X\x04\x00\x00\x00" "evilK\x01K\x02K\x03K\x04tQ."s)), ckpt::Error,
                    "refused a persistent id other than a storage");
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "(X\x07\x00\x00\x00" "storagectorch\nFloatStorage\nX\x05\x00\x00\x00" "../..X\x03\x00\x00\x00" "cpuK\x01tQ."s)),
                    ckpt::CorruptCheckpointError, "is not a plain name");
  // stride 0: 2^40 elements repeating one
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00" "storagectorch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x01tQK\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x85K\x00\x85\x89tR."s, true)),
                    ckpt::CorruptCheckpointError, "repeats a storage of 1 beyond the limit");
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "\x8a\x09\x01\x01\x01\x01\x01\x01\x01\x01\x01."s)),
                    ckpt::CorruptCheckpointError, "wider than 64 bits");
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "X\xff\xff\xff\xff"s)), ckpt::CorruptCheckpointError, "ends inside an opcode");
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "h\x05."s)), ckpt::CorruptCheckpointError, "read before it was written");
  CHECK_THROWS_CKPT(ckpt::restore_tree(archive("\x80\x02" "cposix\nsystem\n."s)), ckpt::Error, "posix.system");

  const auto good = test::read_bytes(fixtures / "net_state_dict.pt");
  std::size_t refused = 0;
  for (std::size_t n = 0; n < good.size(); n += 7) {
    test::write_bytes(tmp / "cut.pt", std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    try {
      (void)ckpt::restore_tree(tmp / "cut.pt");
    } catch (const ckpt::Error&) {
      ++refused;
    }
  }
  CHECK(refused == (good.size() + 6) / 7);
  // flipped bytes: read or refused, never a crash
  for (std::size_t i = 0; i < good.size(); i += 3) {
    auto bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    test::write_bytes(tmp / "flip.pt", bad);
    try {
      (void)ckpt::restore_tree(tmp / "flip.pt");
    } catch (const ckpt::Error&) {
    }
  }
}

// Loads what ckpt wrote with torch and checks it against the fixture torch wrote.
const char* py_check_written = R"PY(
import sys, torch, collections
d = sys.argv[1]
def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert a.contiguous().view(-1).view(torch.uint8).equal(b.contiguous().view(-1).view(torch.uint8)) if a.numel() and a.dim() else torch.equal(a, b)

# a state_dict: weights_only=True, into a fresh module with load_state_dict(strict=True)
sd = torch.load(d + "/net.pt", weights_only=True)
ref = torch.load(d + "/ref_net.pt")
assert isinstance(sd, collections.OrderedDict) and list(sd) == list(ref), (list(sd), list(ref))
for k in ref: same(sd[k], ref[k])
sys.path.insert(0, d)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3); self.bn = torch.nn.BatchNorm2d(3); self.norm = torch.nn.LayerNorm(4)
        self.emb = torch.nn.Embedding(5, 4); self.fc = torch.nn.Linear(4, 2)
net = Net()
print("load_state_dict", net.load_state_dict(sd, strict=True))

# the nested checkpoint: model, optimizer (floats: torch 1.13's weights_only refuses BINFLOAT, even its own), epoch
ck = torch.load(d + "/checkpoint.pt")
ref = torch.load(d + "/ref_checkpoint.pt")
assert sorted(ck) == sorted(ref), (list(ck), list(ref))
assert ck["epoch"] == 7 and ck["note"] == "two steps"
for k in ref["model"]: same(ck["model"][k], ref["model"][k])
opt = torch.optim.Adam(net.parameters(), lr=1.0)
opt.load_state_dict(ck["optimizer"])
o, r = ck["optimizer"], ref["optimizer"]
assert sorted(o["state"]) == sorted(r["state"]) and all(isinstance(k, int) for k in o["state"])
for i in r["state"]:
    for k in r["state"][i]: same(o["state"][i][k], r["state"][i][k])
for g, h in zip(o["param_groups"], r["param_groups"]):
    for k in h: assert list(g[k]) == list(h[k]) if isinstance(h[k], (list, tuple)) else g[k] == h[k], (k, g[k], h[k])
print("optimizer lr", opt.param_groups[0]["lr"])

# tied weights: one storage
t = torch.load(d + "/tied.pt", weights_only=True)
assert t["a"].data_ptr() == t["b"].data_ptr() and t["c"].data_ptr() != t["a"].data_ptr()
print("tied", t["a"].tolist(), t["c"].tolist())
)PY";

TEST_CASE("pytorch: torch.load(weights_only=True) and load_state_dict take what ckpt writes, bit-exact; tied leaves share a storage") {
  if (!have_torch()) {
    MESSAGE("python3-torch is not installed: PyTorch's side is not checked");
    return;
  }
  test::TempDir tmp;
  // ckpt reads torch's files and writes them again
  const ckpt::FormatEntry& pt = *ckpt::find_format("pytorch");
  ckpt::convert(fixtures / "net_state_dict.pt", tmp / "net.pt", pt);
  ckpt::convert(fixtures / "checkpoint.pt", tmp / "checkpoint.pt", pt);
  fs::copy(fixtures / "net_state_dict.pt", tmp / "ref_net.pt");
  fs::copy(fixtures / "checkpoint.pt", tmp / "ref_checkpoint.pt");
  // leaves of the same memory: one storage
  std::vector<float> w{1, 2, 3}, other{1, 2, 3};
  ckpt::Snapshot s;
  for (auto [name, p] : {std::pair<const char*, float*>{"a", w.data()}, {"b", w.data()}, {"c", other.data()}}) {
    ckpt::SnapshotLeaf l;
    l.path = ckpt::Path({name});
    l.data = ckpt::LeafBytes::borrow(ckpt::dtype::float32, {3}, p, 3 * sizeof(float));
    s.leaves.push_back(std::move(l));
  }
  ckpt::save_snapshot<ckpt::pytorch>(tmp / "tied.pt", s);
  const std::string out = test::python(py_check_written, tmp.path());
  CHECK(out.find("load_state_dict <All keys matched successfully>") != std::string::npos);
  CHECK(out.find("optimizer lr 0.001") != std::string::npos);
  CHECK(out.find("tied [1.0, 2.0, 3.0] [1.0, 2.0, 3.0]") != std::string::npos);
  // and ckpt reads its own file back as it read torch's
  CHECK(compare_with_torch(tmp / "checkpoint.pt", fixtures / "checkpoint.pt.json") > 30);
  // torch.save(tensor): a tree whose root is the leaf, both ways
  const auto bare = ckpt::restore<xt::xarray<float>>(fixtures / "bare.pt");
  CHECK(bare == xt::xarray<float>{0.f, 1.f, 2.f});
  ckpt::save<ckpt::pytorch>(tmp / "bare.pt", bare);
  CHECK(test::python("import sys, torch\nprint(torch.load(sys.argv[1] + '/bare.pt', weights_only=True).tolist())\n",
                     tmp.path()) == "[0.0, 1.0, 2.0]\n");
  const auto tied = ckpt::restore_tree(tmp / "tied.pt");
  CHECK(tied.leaf("b").as<std::vector<float>>() == w);
}

TEST_CASE("pytorch: zip64 records (what a file past 4 GiB holds) are written and read, by ckpt and by torch") {
  test::TempDir tmp;
  std::vector<float> w{0.5f, -1.0f, 3.25f};
  std::vector<std::int64_t> n{1, 2, 3, 4};
  ckpt::Snapshot s;
  auto add = [&](const char* name, ckpt::dtype t, ckpt::Shape shape, const void* p, std::size_t bytes) {
    ckpt::SnapshotLeaf l;
    l.path = ckpt::Path::parse(name);
    l.data = ckpt::LeafBytes::borrow(t, std::move(shape), p, bytes);
    s.leaves.push_back(std::move(l));
  };
  add("fc.weight", ckpt::dtype::float32, {3}, w.data(), 12);
  add("fc.count", ckpt::dtype::int64, {2, 2}, n.data(), 32);
  {
    auto out = ckpt::storage::file_writer(tmp / "z64.pt");
    ckpt::detail::pytorch::write_file(*out, s, "z64.pt", nullptr, /*force_zip64=*/true);
  }
  const auto t = ckpt::restore_tree(tmp / "z64.pt");
  CHECK(floats(t.leaf("fc.weight")) == w);
  CHECK(t.leaf("fc.count").shape() == ckpt::Shape{2, 2});
  if (!have_torch()) return;
  const std::string out = test::python(R"PY(
import sys, torch, zipfile
z = zipfile.ZipFile(sys.argv[1] + "/z64.pt")
print("zip64", all(len(i.extra) for i in z.infolist()), z.testzip())
sd = torch.load(sys.argv[1] + "/z64.pt", weights_only=True)
print(sd["fc.weight"].tolist(), sd["fc.count"].tolist())
)PY", tmp.path());
  CHECK(out.find("zip64 True None") != std::string::npos);
  CHECK(out.find("[0.5, -1.0, 3.25] [[1, 2], [3, 4]]") != std::string::npos);
}

TEST_CASE("pytorch: the CLI: ckpt tree model.pt, convert --to safetensors, orbax and back --to pytorch, which torch loads") {
  INFO("CKPT_CLI = " << CKPT_CLI << " (build it: `make`, or the ckpt_cli target)");
  REQUIRE(fs::exists(CKPT_CLI));
  test::TempDir tmp;
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string(CKPT_CLI) + " " + args + " >" + (tmp / "out").string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream f(tmp / "out");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    INFO(args << ": " << text);
    CHECK(rc == 0);
    return text;
  };
  const std::string ck = (fixtures / "checkpoint.pt").string();
  const std::string tree = run("tree " + ck);
  CHECK(tree.find("model.bn.running_mean") != std::string::npos);
  CHECK(tree.find("optimizer.state.0.exp_avg_sq") != std::string::npos);
  run("convert " + (fixtures / "net_state_dict.pt").string() + " " + (tmp / "st").string() + " --to safetensors");
  run("convert " + (tmp / "st").string() + " " + (tmp / "net.pt").string() + " --to pytorch");
  run("convert " + ck + " " + (tmp / "orbax").string() + " --to orbax");
  run("convert " + (tmp / "orbax").string() + " " + (tmp / "checkpoint.pt").string() + " --to pytorch");
  CHECK(run("diff " + ck + " " + (tmp / "checkpoint.pt").string()).find("0 added, 0 removed, 0 changed") != std::string::npos);
  const std::string refused = [&] {
    const std::string cmd = std::string(CKPT_CLI) + " tree " + (fixtures / "hostile_system.pt").string() + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    std::size_t k;
    while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
    CHECK(::pclose(p) != 0);
    return out;
  }();
  CHECK(refused.find("refused the global posix.system") != std::string::npos);
  if (!have_torch()) return;
  const std::string out = test::python(R"PY(
import sys, torch
d = sys.argv[1]
sd = torch.load(d + "/net.pt", weights_only=True)
ck = torch.load(d + "/checkpoint.pt")
print(len(sd), sorted(ck), ck["epoch"], ck["optimizer"]["param_groups"][0]["lr"], ck["model"]["bn.num_batches_tracked"].item())
)PY", tmp.path());
  CHECK(out.find("12 ['epoch', 'model', 'note', 'optimizer'] 7 0.001 2") != std::string::npos);
}

TEST_CASE("pytorch: live: files torch 1.13 writes now read bit-exact (make_fixtures.py run again, fresh seeds)") {
  if (!have_torch()) {
    MESSAGE("python3-torch is not installed: the live case is not run");
    return;
  }
  test::TempDir tmp;
  const std::string cmd = std::string(CKPT_PYTHON) + " " + (fixtures / "make_fixtures.py").string() + " " +
                          tmp.path().string() + " >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  for (const char* f : {"net_state_dict.pt", "checkpoint.pt", "dtypes.pt", "views.pt"})
    CHECK(compare_with_torch(tmp / f, tmp / (std::string(f) + ".json")) > 8);
  CHECK(compare_with_torch(tmp / "sharded", tmp / "net_state_dict.pt.json") == 12);
}

TEST_CASE("pytorch: through the storage concept (mem://) and converted to and from safetensors and native") {
  test::TempDir tmp;
  const auto src = ckpt::restore_tree(fixtures / "checkpoint.pt");
  const ckpt::FormatEntry& pt = *ckpt::find_format("pytorch");
  ckpt::convert(fixtures / "checkpoint.pt", "mem://pytorch-test/step1", pt);
  const auto mem = ckpt::restore_tree("mem://pytorch-test/step1");
  CHECK(mem.info().format == "pytorch");
  CHECK(mem.size() == src.size());
  CHECK(mem.leaf("model.fc.weight").bytes() == src.leaf("model.fc.weight").bytes());
  // a directory holds pytorch_model.bin, as Hugging Face names it
  ckpt::save<ckpt::pytorch>(tmp / "dir", ckpt::restore<Net>(fixtures / "net_state_dict.pt"));
  CHECK(fs::is_regular_file(tmp / "dir/pytorch_model.bin"));
  CHECK(ckpt::detect_format(tmp / "dir") == "pytorch");
  // convert: to native and back, to safetensors and back, bit-exact
  const auto r1 = ckpt::convert(fixtures / "net_state_dict.pt", tmp / "native", *ckpt::find_format("native"));
  CHECK(r1.from == "pytorch");
  std::uint64_t stored = 0;  // every leaf's bytes, the streamed ones (all arrays) too
  const auto native = ckpt::restore_tree(tmp / "native");
  for (const auto& leaf : native.leaves()) stored += leaf.byte_length();
  CHECK(r1.bytes == stored);
  const auto r2 = ckpt::convert(tmp / "native", tmp / "back.pt", pt);
  CHECK(r2.leaves == 12);
  ckpt::convert(tmp / "back.pt", tmp / "m.safetensors", *ckpt::find_format("safetensors"));
  ckpt::convert(tmp / "m.safetensors", tmp / "again.pt", pt);
  CHECK(compare_with_torch(tmp / "again.pt", fixtures / "net_state_dict.pt.json") == 12);
}

}  // namespace pytorch_test
