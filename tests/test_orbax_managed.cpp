// tests/test_orbax_managed.cpp — a CheckpointManager root written by Orbax 0.11
// (tests/data/orbax/managed_0.11.39): its steps' metrics read as Orbax reads them, best-N
// retention on it deciding as Orbax's best_fn does, and the Orbax steps ckpt's manager
// writes, checked field by field against Orbax's own step.
#include "support.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace orbax_managed_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The shape of the fixture's pytree (`a` int32[8], `b.c` int32[3]): what ckpt saves beside it.
struct B {
  std::vector<std::int32_t> c;
};
struct State {
  std::vector<std::int32_t> a;
  B b;
};
State make_state(std::int32_t k) { return {{k, k + 1, k + 2}, {{k * 10}}}; }

using Manager = ckpt::CheckpointManager<State, ckpt::orbax>;

const fs::path fixture_root = fs::path(CKPT_FIXTURES_DIR) / "orbax/managed_0.11.39/v0_has_metrics";

// A writable copy of the Orbax root.
fs::path copy_root(const test::TempDir& tmp) {
  const fs::path root = tmp / "orbax_root";
  fs::copy(fixture_root, root, fs::copy_options::recursive);
  return root;
}

json read_json(const fs::path& p) {
  const auto bytes = test::read_bytes(p);
  return json::parse(bytes.begin(), bytes.end());
}
void write_text(const fs::path& p, const std::string& text) { test::write_bytes(p, {text.begin(), text.end()}); }

// The step's metrics as Orbax's CheckpointManager (0.11) takes them, written here from
// Orbax's code and not from ckpt's: _CHECKPOINT_METADATA's "metrics" when present and
// not empty, else the JSON file metrics/metrics; none without either.
std::optional<json> orbax_metrics(const fs::path& step) {
  if (fs::exists(step / "_CHECKPOINT_METADATA")) {
    const json md = read_json(step / "_CHECKPOINT_METADATA");
    if (md.contains("metrics") && !md["metrics"].empty()) return md["metrics"];
  }
  if (fs::is_regular_file(step / "metrics/metrics")) return read_json(step / "metrics/metrics");
  return std::nullopt;
}

// Orbax's CheckpointManager._get_old_steps_to_remove with best_fn = metrics["loss"],
// best_mode "min", no keep_period nor keep_time_interval: the steps it keeps of
// `steps` (each with the metrics Orbax read for it, or none).
std::set<std::int64_t> orbax_keeps(const std::map<std::int64_t, std::optional<json>>& steps, std::size_t max_to_keep,
                                   bool keep_checkpoints_without_metrics) {
  std::set<std::int64_t> all;
  for (const auto& [s, m] : steps) all.insert(s);
  if (steps.size() <= max_to_keep) return all;
  std::vector<std::int64_t> without, with;
  for (const auto& [s, m] : steps) (m ? with : without).push_back(s);
  // sorted(key=best_fn, reverse=(mode == 'min')): worst first, best last (a stable sort)
  std::stable_sort(with.begin(), with.end(), [&](std::int64_t x, std::int64_t y) {
    return (*steps.at(x))["loss"].get<double>() > (*steps.at(y))["loss"].get<double>();
  });
  std::set<std::int64_t> keep;
  if (keep_checkpoints_without_metrics) {
    keep.insert(without.begin(), without.end());
    for (std::size_t i = with.size() > max_to_keep ? with.size() - max_to_keep : 0; i < with.size(); ++i)
      keep.insert(with[i]);
  } else {
    std::vector<std::int64_t> ranked = without;
    ranked.insert(ranked.end(), with.begin(), with.end());
    for (std::size_t i = ranked.size() > max_to_keep ? ranked.size() - max_to_keep : 0; i < ranked.size(); ++i)
      keep.insert(ranked[i]);
  }
  return keep;
}

std::vector<std::int64_t> step_dirs(const fs::path& root) {
  std::vector<std::int64_t> out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && !n.empty() && n.find_first_not_of("0123456789") == std::string::npos)
      out.push_back(std::stoll(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_CASE("an Orbax manager root: ckpt's manager reads each step's metrics where Orbax does") {
  test::TempDir tmp;
  const fs::path root = copy_root(tmp);
  const fs::path step = root / "0";
  const ckpt::ManagerOptions ro{.best_metric = "loss", .best_mode = ckpt::BestMode::min, .read_only = true};
  {
    // _CHECKPOINT_METADATA has "metrics": {}; the item metrics/metrics has {"loss": 0.5}
    REQUIRE(read_json(step / "_CHECKPOINT_METADATA")["metrics"] == json::object());
    Manager mgr(root, ro);
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{0});
    CHECK(mgr.metrics(0) == ckpt::Metrics{{"loss", 0.5}});
    CHECK(mgr.best_step() == 0);
  }
  // Orbax's v1 layout: the v1 handlers in item_handlers (as Orbax's v1_managed root has
  // them); its MetricsHandler reads metrics/data.json when metrics/metrics is absent.
  json md = read_json(step / "_CHECKPOINT_METADATA");
  const json v0_metadata = md;
  md["item_handlers"] = {{"descriptor", "orbax.checkpoint.experimental.v1._src.handlers.descriptor_handler.DescriptorHandler"},
                         {"metadata", "orbax.checkpoint.experimental.v1._src.handlers.json_handler.JsonHandler"},
                         {"metrics", "orbax.checkpoint.experimental.v1._src.handlers.json_handler.MetricsHandler"},
                         {"state", "orbax.checkpoint.experimental.v1._src.handlers.pytree_handler.PyTreeHandler"}};
  write_text(step / "_CHECKPOINT_METADATA", md.dump());
  CHECK(Manager(root, ro).metrics(0) == ckpt::Metrics{{"loss", 0.5}});
  fs::rename(step / "metrics/metrics", step / "metrics/data.json");
  write_text(step / "metrics/data.json", R"({"loss": 0.375})");
  CHECK(Manager(root, ro).metrics(0) == ckpt::Metrics{{"loss", 0.375}});
  // v0's JsonCheckpointHandler(filename="metrics") reads metrics/metrics only: a step
  // whose item_handlers name no metrics item is not looked into further
  md["item_handlers"].erase("metrics");
  write_text(step / "_CHECKPOINT_METADATA", md.dump());
  CHECK(Manager(root, ro).metrics(0).empty());
  fs::rename(step / "metrics/data.json", step / "metrics/metrics");
  write_text(step / "_CHECKPOINT_METADATA", v0_metadata.dump());

  // Non-empty metrics in _CHECKPOINT_METADATA win over the item, as in Orbax; even
  // without a number among them (Orbax then never reads the item).
  md = v0_metadata;
  md["metrics"] = {{"loss", 0.125}};
  write_text(step / "_CHECKPOINT_METADATA", md.dump());
  CHECK(Manager(root, ro).metrics(0) == ckpt::Metrics{{"loss", 0.125}});
  md["metrics"] = {{"note", "no number"}};
  write_text(step / "_CHECKPOINT_METADATA", md.dump());
  CHECK(Manager(root, ro).metrics(0).empty());
  // Without _CHECKPOINT_METADATA, Orbax still reads the item.
  fs::remove(step / "_CHECKPOINT_METADATA");
  CHECK(Manager(root, ro).metrics(0) == ckpt::Metrics{{"loss", 0.375}});
  write_text(step / "_CHECKPOINT_METADATA", v0_metadata.dump());

  // Nested metrics (a pytree of them) are named by their path joined with '/'; what is
  // not a number is no metric.
  write_text(step / "metrics/metrics", R"({"eval": {"loss": 0.25, "acc": [0.5, 0.75]}, "tag": "x", "ok": true})");
  CHECK(Manager(root, ro).metrics(0) == ckpt::Metrics{{"eval/loss", 0.25}, {"eval/acc/0", 0.5}, {"eval/acc/1", 0.75}});
  // And no item at all: a step without metrics.
  fs::remove_all(step / "metrics");
  CHECK(Manager(root, ro).metrics(0).empty());
}

TEST_CASE("an Orbax metrics item that is malformed, too large or a link is an Error naming the step") {
  test::TempDir tmp;
  const fs::path root = copy_root(tmp);
  const fs::path item = root / "0/metrics/metrics";
  const std::string step = (root / "0").string();
  const ckpt::ManagerOptions ro{.read_only = true};
  struct Case {
    const char* what;
    std::string text;
    const char* says;
  };
  const std::string big = R"({"loss": 0.5, "pad": ")" + std::string((std::size_t{1} << 20) + 1, 'x') + "\"}";
  for (const Case& c : {Case{"truncated", R"({"loss": 0.)", "malformed JSON"},
                        Case{"not JSON", "loss = 0.5", "malformed JSON"},
                        Case{"a list", "[0.5, 0.25]", "not a JSON object of metrics"},
                        Case{"a number", "0.5", "not a JSON object of metrics"},
                        Case{"nested without end", std::string(100000, '['), "nests deeper"},
                        Case{"larger than 1 MiB", big, "more than the 1048576 allowed"}}) {
    CAPTURE(c.what);
    write_text(item, c.text);
    CHECK_THROWS_CKPT(Manager(root, ro), ckpt::CorruptCheckpointError, step.c_str());
    CHECK_THROWS_CKPT(Manager(root, ro), ckpt::CorruptCheckpointError, "metrics/metrics");
    CHECK_THROWS_CKPT(Manager(root, ro), ckpt::CorruptCheckpointError, c.says);
  }
  // A symbolic link, to a file or as the item's directory: refused, not followed.
  write_text(tmp / "elsewhere.json", R"({"loss": 0.5})");
  fs::remove(item);
  fs::create_symlink(tmp / "elsewhere.json", item);
  CHECK_THROWS_CKPT(Manager(root, ro), ckpt::CorruptCheckpointError, step.c_str());
  fs::remove_all(root / "0/metrics");
  fs::create_directories(tmp / "elsewhere");
  write_text(tmp / "elsewhere/metrics", R"({"loss": 0.5})");
  fs::create_directory_symlink(tmp / "elsewhere", root / "0/metrics");
  CHECK_THROWS_CKPT(Manager(root, ro), ckpt::CorruptCheckpointError, "is a symbolic link");
}

// The scenario both ways: ckpt's manager, with best-N retention on "loss" (min), saves
// steps into Orbax's root; after each save the steps left are those Orbax's manager
// (best_fn = metrics["loss"]) keeps of the same steps, the metrics of each read off the
// disk as Orbax reads them.
void run_best_n(bool keep_without, const std::vector<std::pair<std::int64_t, std::optional<double>>>& saves,
                const std::vector<std::vector<std::int64_t>>& left_after_each) {
  test::TempDir tmp;
  const fs::path root = copy_root(tmp);
  Manager mgr(root, {.max_to_keep = 2,
                     .best_metric = "loss",
                     .best_mode = ckpt::BestMode::min,
                     .keep_checkpoints_without_metrics = keep_without});
  REQUIRE(mgr.all_steps() == std::vector<std::int64_t>{0});
  std::map<std::int64_t, std::optional<json>> orbax_view{{0, orbax_metrics(root / "0")}};
  REQUIRE(orbax_view[0] == json{{"loss", 0.5}});
  for (std::size_t i = 0; i < saves.size(); ++i) {
    const std::int64_t step = saves[i].first;
    const std::optional<double> loss = saves[i].second;
    CAPTURE(step);
    ckpt::Metrics m;
    if (loss) m["loss"] = *loss;
    REQUIRE(mgr.save(step, make_state(static_cast<std::int32_t>(step)), m));
    orbax_view[step] = orbax_metrics(root / std::to_string(step));  // what ckpt wrote, as Orbax reads it
    CHECK(orbax_view[step] == (loss ? std::optional<json>(json{{"loss", *loss}}) : std::nullopt));
    const auto keep = orbax_keeps(orbax_view, 2, keep_without);
    std::erase_if(orbax_view, [&](const auto& kv) { return !keep.contains(kv.first); });
    const std::vector<std::int64_t> expected(keep.begin(), keep.end());
    CHECK(expected == left_after_each[i]);
    CHECK(mgr.all_steps() == expected);
    CHECK(step_dirs(root) == expected);
  }
  CHECK(mgr.best_step() == 0);
  // The Orbax step ckpt kept is whole: its items are all there.
  for (const char* f : {"_CHECKPOINT_METADATA", "metrics/metrics", "state/manifest.ocdbt", "metadata/metadata"})
    CHECK(fs::exists(root / "0" / f));
}

TEST_CASE("best-N retention on an Orbax root keeps the steps Orbax's best_fn keeps") {
  // keep_checkpoints_without_metrics = false. Orbax's step 0 (loss 0.5) is the best: were
  // its metrics not read, it would rank worst and go at the second save.
  SUBCASE("without keeping steps that have no metrics") {
    run_best_n(false, {{1, 0.9}, {2, 0.7}, {3, 0.6}}, {{0, 1}, {0, 2}, {0, 3}});
  }
  // keep_checkpoints_without_metrics = true: step 1, saved without metrics, stays; step 2
  // goes at the save of step 3 only because step 0 ranks by its 0.5.
  SUBCASE("keeping steps that have no metrics") {
    run_best_n(true, {{1, std::nullopt}, {2, 0.9}, {3, 0.7}, {4, 0.6}}, {{0, 1}, {0, 1, 2}, {0, 1, 3}, {0, 1, 4}});
  }
}

TEST_CASE("an Orbax step ckpt's manager saves is laid out as Orbax 0.11 lays out its own, field by field") {
  test::TempDir tmp;
  const fs::path root = copy_root(tmp);
  {
    Manager mgr(root);
    REQUIRE(mgr.save(1, make_state(1), {{"loss", 0.25}, {"eval/acc", 0.75}}));
    REQUIRE(mgr.save(2, make_state(2), {}, {.custom_metadata = {{"run", "r7"}}}));
  }
  const json theirs = read_json(root / "0/_CHECKPOINT_METADATA");
  const json ours = read_json(root / "1/_CHECKPOINT_METADATA");
  // Every key Orbax wrote, of the same JSON type.
  for (auto it = theirs.begin(); it != theirs.end(); ++it) {
    const std::string key = it.key();
    CAPTURE(key);
    REQUIRE(ours.contains(key));
    CHECK(ours[key].type() == it.value().type());
  }
  // The metrics are not here: "metrics": {}, as Orbax writes it ...
  CHECK(theirs["metrics"] == json::object());
  CHECK(ours["metrics"] == json::object());
  CHECK(ours["performance_metrics"] == json::object());
  CHECK(ours["custom_metadata"] == json::object());
  CHECK(read_json(root / "2/_CHECKPOINT_METADATA")["custom_metadata"] == json{{"run", "r7"}});
  CHECK(ours["init_timestamp_nsecs"].get<std::uint64_t>() <= ours["commit_timestamp_nsecs"].get<std::uint64_t>());
  // ... but the item "metrics", handled by the class Orbax names, beside the pytree item
  // with the handler of Orbax's own pytree item.
  CHECK(ours["item_handlers"]["metrics"] == theirs["item_handlers"]["metrics"]);
  CHECK(ours["item_handlers"]["default"] == theirs["item_handlers"]["state"]);
  // metrics/metrics: a file holding a JSON object of named numbers, as Orbax's.
  for (const char* s : {"0", "1"}) {
    CAPTURE(s);
    CHECK(fs::is_directory(fs::symlink_status(root / s / "metrics")));
    CHECK(fs::is_regular_file(fs::symlink_status(root / s / "metrics/metrics")));
    const json m = read_json(root / s / "metrics/metrics");
    REQUIRE(m.is_object());
    for (const auto& [k, v] : m.items()) CHECK(v.is_number_float());
  }
  CHECK(read_json(root / "1/metrics/metrics") == json{{"loss", 0.25}, {"eval/acc", 0.75}});
  // A step saved without metrics has no metrics item, and its handlers name none.
  CHECK(!fs::exists(root / "2/metrics"));
  CHECK(!read_json(root / "2/_CHECKPOINT_METADATA")["item_handlers"].contains("metrics"));
  // Read back by ckpt (fresh), and restorable as ever.
  Manager again(root, {.read_only = true});
  CHECK(again.metrics(1) == ckpt::Metrics{{"loss", 0.25}, {"eval/acc", 0.75}});
  CHECK(again.metrics(2).empty());
  CHECK(again.custom_metadata(2) == json{{"run", "r7"}});
  const State back = again.restore(1);
  CHECK(back.a == make_state(1).a);
  CHECK(back.b.c == make_state(1).b.c);
}

}  // namespace orbax_managed_test
