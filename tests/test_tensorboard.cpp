// TensorBoard metrics for keeping the best checkpoints (t5x's SaveBestCheckpointer), the
// TFRecord framing checked both ways against an independent Python implementation, and
// t5x's checkpoint path helpers with keep_dataset_checkpoints.
#include "support.hpp"

#include <cstring>

namespace tensorboard_test {

namespace fs = std::filesystem;

// TFRecord framing and Event/Summary protos written from the specs in Python, with its
// own crc32c: `write DIR` writes an event file, `read FILE TAG` prints "step value" lines.
const char* py_events = R"(
import struct, sys, os
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc(b):
    c = 0xFFFFFFFF
    for x in b: c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def mask(c): return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
def varint(v):
    out = b""
    while v >= 0x80: out += bytes([(v & 0x7F) | 0x80]); v >>= 7
    return out + bytes([v])
def ld(field, b): return varint(field << 3 | 2) + varint(len(b)) + b
def frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", mask(crc(n))) + data + struct.pack("<I", mask(crc(data)))
def event(step, tag, value, as_tensor=False):
    if as_tensor:  # TF2 tf.summary.scalar: a float tensor with tensor_content
        tensor = varint(1 << 3) + varint(1) + ld(2, b"") + ld(4, struct.pack("<f", value))
        v = ld(1, tag.encode()) + ld(8, tensor)
    else:
        v = ld(1, tag.encode()) + varint(2 << 3 | 5) + struct.pack("<f", value)
    return varint(1 << 3 | 1) + struct.pack("<d", 1.0) + varint(2 << 3) + varint(step) + ld(5, ld(1, v))
def read(fn):
    b = open(fn, "rb").read(); p = 0; out = []
    while p + 12 <= len(b):
        n = struct.unpack("<Q", b[p:p+8])[0]
        assert struct.unpack("<I", b[p+8:p+12])[0] == mask(crc(b[p:p+8])), "length crc"
        d = b[p+12:p+12+n]
        assert struct.unpack("<I", b[p+12+n:p+16+n])[0] == mask(crc(d)), "data crc"
        out.append(d); p += 16 + n
    assert p == len(b), "trailing bytes"
    return out
def fields(b):
    p = 0; out = []
    while p < len(b):
        t = 0; s = 0
        while True:
            x = b[p]; p += 1; t |= (x & 0x7F) << s; s += 7
            if not x & 0x80: break
        f, w = t >> 3, t & 7
        if w == 0:
            v = 0; s = 0
            while True:
                x = b[p]; p += 1; v |= (x & 0x7F) << s; s += 7
                if not x & 0x80: break
        elif w == 1: v = b[p:p+8]; p += 8
        elif w == 5: v = b[p:p+4]; p += 4
        elif w == 2:
            n = 0; s = 0
            while True:
                x = b[p]; p += 1; n |= (x & 0x7F) << s; s += 7
                if not x & 0x80: break
            v = b[p:p+n]; p += n
        out.append((f, v))
    return out
if sys.argv[1] == "write":
    d = sys.argv[2]; os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "events.out.tfevents.1700000000.py"), "wb") as f:
        f.write(frame(varint(1 << 3 | 1) + struct.pack("<d", 1.0) + ld(3, b"brain.Event:2")))
        for step, acc in [(100, 0.5), (200, 0.9), (300, 0.7), (400, 0.6)]:
            f.write(frame(event(step, "accuracy", acc, as_tensor=(step == 200))))
            f.write(frame(event(step, "loss", 1.0 - acc)))
else:
    for rec in read(sys.argv[2]):
        step = 0; val = None
        for f, v in fields(rec):
            if f == 2: step = v
            if f == 5:
                for f2, v2 in fields(v):
                    tag = None; x = None
                    for f3, v3 in fields(v2):
                        if f3 == 1: tag = v3.decode()
                        if f3 == 2: x = struct.unpack("<f", v3)[0]
                    if tag == sys.argv[3]: val = x
        if val is not None: print(step, round(val, 4))
)";

std::string run_py(const std::vector<std::string>& args) {
  test::TempDir tmp;
  const auto script = tmp / "events.py";
  std::ofstream(script) << py_events;
  std::string cmd = std::string(CKPT_PYTHON) + " " + script.string();
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  INFO(out);
  REQUIRE(::pclose(p) == 0);
  return out;
}

struct State {
  std::vector<float> w;
  std::int64_t step = 0;
};

struct DataPosition {
  std::int64_t index = 0;
};

std::vector<std::int64_t> dirs(const fs::path& root) {
  std::vector<std::int64_t> v;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && !n.empty() && n[0] != '.') v.push_back(std::stoll(n.substr(n.find_first_of("0123456789"))));
  }
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace tensorboard_test

namespace tensorboard_test {  // the test cases too: files sharing a unit (CKPT_TEST_BATCH) keep their names apart

TEST_CASE("TFRecord event files: Python's framing reads ckpt's, ckpt reads Python's (simple_value and scalar tensors)") {
  test::TempDir tmp;
  {
    ckpt::tensorboard::EventFileWriter w(tmp / "train");
    w.add_scalar("accuracy", 0.25f, 10);
    w.add_scalar("loss", 2.0f, 10);
    w.add_scalar("accuracy", 0.75f, 20);
    w.flush();
    const std::string out = run_py({"read", w.path().string(), "accuracy"});
    CHECK(out == "10 0.25\n20 0.75\n");
  }
  run_py({"write", (tmp / "py").string()});
  const auto acc = ckpt::tensorboard::read_scalars(tmp / "py", "accuracy");
  CHECK(acc == std::map<std::int64_t, double>{{100, 0.5f}, {200, 0.9f}, {300, 0.7f}, {400, 0.6f}});
  CHECK(ckpt::tensorboard::read_scalars(tmp / "py", "loss").size() == 4);
  CHECK(ckpt::tensorboard::read_scalars(tmp / "py", "nothing").empty());

  // a file cut inside a record (still being written) gives the records before it;
  // a flipped byte is corruption: strict throws, the lenient default keeps what precedes it
  const fs::path f = fs::directory_iterator(tmp / "py")->path();
  auto bytes = test::read_bytes(f);
  test::write_bytes(f, std::vector<char>(bytes.begin(), bytes.end() - 5));
  CHECK(ckpt::tensorboard::read_scalars(tmp / "py", "loss").size() == 3);
  bytes[bytes.size() - 30] = static_cast<char>(bytes[bytes.size() - 30] ^ 1);
  test::write_bytes(f, bytes);
  CHECK_THROWS_AS(ckpt::tensorboard::read_scalars(tmp / "py", "accuracy", true), ckpt::CorruptCheckpointError);
  CHECK(ckpt::tensorboard::read_scalars(tmp / "py", "loss").size() == 3);
  // an absurd length is refused before any allocation
  std::vector<char> huge(16, '\xff');
  test::write_bytes(tmp / "py/events.out.tfevents.2", huge);
  CHECK_THROWS_AS(ckpt::tensorboard::read_scalars(tmp / "py", "accuracy", true), ckpt::CorruptCheckpointError);
}

TEST_CASE("the manager keeps the best steps by a TensorBoard metric, as t5x's SaveBestCheckpointer") {
  test::TempDir tmp;
  // model_dir/checkpoints holds the steps, model_dir/train the events of run "train"
  run_py({"write", (tmp / "train").string()});
  const auto root = tmp / "checkpoints";
  {
    ckpt::CheckpointManager<State> mgr(root, {.max_to_keep = 2, .best_metric = "train/accuracy",
                                              .best_metric_from_tensorboard = true});
    for (std::int64_t s : {100, 200, 300, 400, 500}) mgr.save(s, State{{1.f}, s});
    mgr.wait_until_finished();
    // best two by accuracy: 200 (0.9), 300 (0.7); 500 has no value: kept
    // (keep_checkpoints_without_metrics) and is the latest anyway
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{200, 300, 500});
    CHECK(mgr.best_step() == 200);
  }
  {
    ckpt::CheckpointManager<State> mgr(tmp / "checkpoints2", {.max_to_keep = 1, .best_metric = "train/loss",
                                                              .best_mode = ckpt::BestMode::min,
                                                              .keep_checkpoints_without_metrics = false,
                                                              .best_metric_from_tensorboard = true});
    for (std::int64_t s : {50, 100, 200, 300, 400}) mgr.save(s, State{{1.f}, s}, {{"train/loss", -1.0}});
    mgr.wait_until_finished();
    // loss 1 - accuracy: 200 best; 50 has no logged value (the value given to save() is
    // overridden) and goes; 400 is the latest and stays
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{200, 400});
  }
  CHECK_THROWS_WITH_AS((ckpt::CheckpointManager<State>(tmp / "c3", {.best_metric = "accuracy", .best_metric_from_tensorboard = true})),
                       doctest::Contains("{run_name}/{tag_name}"), ckpt::Error);
}

TEST_CASE("t5x helpers: get_checkpoint_dir, get_step_from_checkpoint_dir, find_checkpoint, dataset checkpoint steps") {
  namespace tc = ckpt::t5x_checkpoints;
  test::TempDir tmp;
  CHECK(tc::get_checkpoint_dir("/m", 42) == fs::path("/m/checkpoint_42"));
  CHECK(tc::get_checkpoint_dir("/m", 42, 6) == fs::path("/m/checkpoint_000042"));
  CHECK(tc::get_step_from_checkpoint_dir("/m/checkpoint_000042") == std::pair<fs::path, std::int64_t>{"/m", 42});
  CHECK(tc::get_step_from_checkpoint_dir("/m/checkpoint_7/") == std::pair<fs::path, std::int64_t>{"/m", 7});
  CHECK_THROWS_AS(tc::get_step_from_checkpoint_dir("/m/ckpt_7"), ckpt::Error);
  CHECK_THROWS_AS(tc::get_step_from_checkpoint_dir("/m/checkpoint_x7"), ckpt::Error);

  // t5x's layout: checkpoint_<step>/checkpoint
  for (std::int64_t s : {10, 20}) ckpt::save<ckpt::t5x>(tc::get_checkpoint_dir(tmp.path(), s, 4), State{{1.f}, s});
  fs::create_directories(tmp / "checkpoint_30");  // no checkpoint file: not a step
  CHECK(tc::all_steps(tmp.path()) == std::vector<std::int64_t>{10, 20});
  CHECK(tc::find_checkpoint(tmp.path(), 10) == tmp / "checkpoint_0010/checkpoint");
  CHECK(tc::find_checkpoint(tmp.path()) == tmp / "checkpoint_0020/checkpoint");
  CHECK(tc::find_checkpoint(tmp / "checkpoint_0010") == tmp / "checkpoint_0010/checkpoint");
  CHECK(tc::find_checkpoint(tmp / "checkpoint_0010/checkpoint") == tmp / "checkpoint_0010/checkpoint");
  CHECK_THROWS_WITH_AS(tc::find_checkpoint(tmp.path(), 30), doctest::Contains("step 30"), ckpt::Error);
  CHECK(ckpt::restore<State>(tc::find_checkpoint(tmp.path(), 10).parent_path()).step == 10);

  // t5x's dataset checkpoints are train_ds-* files
  std::ofstream(tmp / "checkpoint_0020/train_ds-20.index") << "x";
  CHECK(tc::all_dataset_checkpoint_steps(tmp.path()) == std::vector<std::int64_t>{20});
}

TEST_CASE("keep_dataset_checkpoints: older steps lose the data-iterator item, the steps stay") {
  namespace tc = ckpt::t5x_checkpoints;
  test::TempDir tmp;
  const auto root = tmp / "run";
  {
    ckpt::CheckpointManager<State> mgr(root, {.max_to_keep = 4, .step_prefix = "checkpoint_",
                                              .keep_dataset_checkpoints = 2});
    for (std::int64_t s = 1; s <= 5; ++s)
      mgr.save(s, State{{1.f}, s}, {},
               {.items = {{"dataset", ckpt::tree_item(DataPosition{s * 10})}, {"config", ckpt::json_item({{"s", s}})}}});
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{2, 3, 4, 5});
    CHECK(tc::all_dataset_checkpoint_steps(root, "dataset") == std::vector<std::int64_t>{4, 5});
    CHECK(mgr.item_names(3) == std::vector<std::string>{"config"});
    CHECK(mgr.restore_item<DataPosition>(5, "dataset").index == 50);
    CHECK_THROWS_AS(mgr.restore_item<DataPosition>(3, "dataset"), ckpt::Error);
    CHECK(mgr.restore(3).step == 3);
  }
  // a fresh manager on the root sees the same (the step metadata was rewritten)
  ckpt::CheckpointManager<State> again(root, {.step_prefix = "checkpoint_"});
  CHECK(again.item_names(2) == std::vector<std::string>{"config"});
  CHECK(again.item_names(4) == std::vector<std::string>{"config", "dataset"});
  CHECK(dirs(root) == std::vector<std::int64_t>{2, 3, 4, 5});
}

}  // namespace tensorboard_test
