// CheckpointManager: step directories, every option and method, retention rules as
// pure functions, items beside the state, the root lock (in-process and from a forked
// child), preemption (SIGTERM), async saves and failures in the background.
#include "support.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace doctest {
template <>
struct StringMaker<std::vector<std::int64_t>> {
  static String convert(const std::vector<std::int64_t>& v) {
    std::string s = "{";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return (s + "}").c_str();
  }
};
}  // namespace doctest

namespace manager_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Steps = std::vector<std::int64_t>;

struct DataPosition {
  std::int64_t epoch = 0;
  std::int64_t offset = 0;
};
using test::StepOnly;  // an older version of State: a partial target
struct State {
  std::int64_t step = 0;
  std::vector<float> w;
  std::mt19937_64 rng;
  std::string note;
};

State make_state(std::int64_t step, std::size_t n = 16) {
  State s;
  s.step = step;
  s.w.resize(n);
  for (std::size_t i = 0; i < n; ++i) s.w[i] = static_cast<float>(step) + static_cast<float>(i) * 0.5f;
  s.rng.seed(static_cast<std::uint64_t>(step));
  s.note = "step " + std::to_string(step);
  return s;
}

bool same(const State& a, const State& b) { return a.step == b.step && a.w == b.w && a.rng == b.rng && a.note == b.note; }

// Directory names in root (steps and everything else), sorted.
std::vector<std::string> names(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

template <class... P>
using Manager = ckpt::CheckpointManager<State, P...>;

ckpt::retain::StepRecord rec(std::int64_t step, double seconds = 0, ckpt::Metrics m = {}) {
  using namespace std::chrono;
  return {step, system_clock::time_point(duration_cast<system_clock::duration>(duration<double>(seconds))), m};
}

std::set<std::int64_t> keep(const std::vector<ckpt::retain::StepRecord>& r, const ckpt::ManagerOptions& o) {
  return ckpt::retain::steps_to_keep(r, o);
}

// ---------------------------------------------------------------- retain/ (pure functions)

TEST_CASE("retain: max_to_keep keeps the most recent steps, and no max keeps all") {
  const std::vector r = {rec(30), rec(10), rec(20), rec(40)};
  CHECK(keep(r, {}) == std::set<std::int64_t>{10, 20, 30, 40});
  CHECK(keep(r, {.max_to_keep = 2}) == std::set<std::int64_t>{30, 40});
  CHECK(keep(r, {.max_to_keep = 0}) == std::set<std::int64_t>{40});  // the latest is never pruned
  CHECK(ckpt::retain::steps_to_delete(r, ckpt::ManagerOptions{.max_to_keep = 1}) == Steps{10, 20, 30});
  CHECK(keep({}, {.max_to_keep = 1}).empty());
}

TEST_CASE("retain: best-N by metric keeps the best plus the latest") {
  const std::vector r = {rec(1, 0, {{"loss", 0.5}}), rec(2, 0, {{"loss", 0.2}}), rec(3, 0, {{"loss", 0.9}}),
                         rec(4, 0, {{"loss", 0.1}}), rec(5, 0, {{"loss", 0.7}})};
  using ckpt::BestMode;
  CHECK(keep(r, {.max_to_keep = 2, .best_metric = "loss", .best_mode = BestMode::min}) ==
        std::set<std::int64_t>{2, 4, 5});
  CHECK(keep(r, {.max_to_keep = 2, .best_metric = "loss", .best_mode = BestMode::max}) ==
        std::set<std::int64_t>{3, 5});
  CHECK(ckpt::retain::best(r, "loss", BestMode::min) == 4);
  CHECK(ckpt::retain::best(r, "loss", BestMode::max) == 3);
  CHECK(ckpt::retain::best(r, "accuracy", BestMode::max) == std::nullopt);
  // ties: the later step ranks better
  const std::vector tie = {rec(1, 0, {{"a", 1}}), rec(2, 0, {{"a", 1}}), rec(3, 0, {{"a", 0}})};
  CHECK(ckpt::retain::best(tie, "a", BestMode::max) == 2);
}

TEST_CASE("retain: steps without the metric are kept, or rank worst") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector r = {rec(1), rec(2, 0, {{"loss", 0.3}}), rec(3, 0, {{"loss", nan}}), rec(4, 0, {{"loss", 0.1}}),
                         rec(5, 0, {{"loss", 0.8}}), rec(6, 0, {{"other", 1}})};
  using ckpt::BestMode;
  CHECK(keep(r, {.max_to_keep = 1, .best_metric = "loss", .best_mode = BestMode::min}) ==
        std::set<std::int64_t>{1, 3, 4, 6});
  CHECK(keep(r, {.max_to_keep = 1, .best_metric = "loss", .best_mode = BestMode::min,
                 .keep_checkpoints_without_metrics = false}) == std::set<std::int64_t>{4, 6});
  // with room to spare, steps without the metric fill it (they rank below the others)
  CHECK(keep(r, {.max_to_keep = 5, .best_metric = "loss", .best_mode = BestMode::min,
                 .keep_checkpoints_without_metrics = false}) == std::set<std::int64_t>{2, 3, 4, 5, 6});
}

TEST_CASE("retain: keep_period and keep_time_interval protect steps from max_to_keep") {
  std::vector<ckpt::retain::StepRecord> r;
  for (std::int64_t s = 1; s <= 10; ++s) r.push_back(rec(s, static_cast<double>(s) * 10));  // a save every 10 s
  CHECK(keep(r, {.max_to_keep = 1, .keep_period = 4}) == std::set<std::int64_t>{4, 8, 10});
  // first step, then each step at least 25 s after the last one kept so: 10 s, 40 s, 70 s, 100 s
  CHECK(ckpt::retain::time_interval(r, 25s) == std::set<std::int64_t>{1, 4, 7, 10});
  CHECK(keep(r, {.max_to_keep = 2, .keep_time_interval = 25s}) == std::set<std::int64_t>{1, 4, 7, 9, 10});
  // recomputed on the survivors it keeps the same steps
  std::vector<ckpt::retain::StepRecord> survivors;
  for (const auto& x : r)
    if (std::set<std::int64_t>{1, 4, 7, 9, 10}.contains(x.step)) survivors.push_back(x);
  survivors.push_back(rec(11, 110));
  CHECK(keep(survivors, {.max_to_keep = 2, .keep_time_interval = 25s}) == std::set<std::int64_t>{1, 4, 7, 10, 11});
  CHECK(keep(r, {.max_to_keep = 1, .keep_time_interval = 0s}).size() == 10);
}

TEST_CASE("retain: should_save follows the interval, save_on_steps and preemption") {
  using ckpt::retain::should_save;
  const ckpt::ManagerOptions d{.save_interval_steps = 5, .save_on_steps = {7}};
  CHECK(should_save(3, std::nullopt, d));  // nothing saved yet: any step
  CHECK(should_save(10, 5, d));
  CHECK_FALSE(should_save(11, 5, d));
  CHECK(should_save(7, 5, d));
  CHECK_FALSE(should_save(5, 5, d));   // not after the latest
  CHECK_FALSE(should_save(0, 5, d));
  CHECK(should_save(11, 5, d, true));  // preempted: any new step
  CHECK_FALSE(should_save(4, 5, d, true));
}

// ---------------------------------------------------------------- names and listing

TEST_CASE("manager: step names with step_prefix and step_format_fixed_length") {
  const ckpt::StepNaming plain{}, prefixed{"checkpoint_", 0}, fixed{"", 6}, both{"ckpt_", 8};
  CHECK(plain.name(42) == "42");
  CHECK(prefixed.name(42) == "checkpoint_42");
  CHECK(fixed.name(42) == "000042");
  CHECK(fixed.name(1234567) == "1234567");
  CHECK(both.name(7) == "ckpt_00000007");
  CHECK(prefixed.parse("checkpoint_42") == 42);
  CHECK(fixed.parse("000042") == 42);
  CHECK(fixed.parse("42") == 42);
  CHECK(prefixed.parse("checkpoint_") == std::nullopt);
  CHECK(prefixed.parse("42") == std::nullopt);
  CHECK(plain.parse("4x2") == std::nullopt);
  CHECK(plain.parse("-3") == std::nullopt);
  CHECK(plain.parse(".tmp-4-abc") == std::nullopt);
  CHECK(plain.parse("99999999999999999999999") == std::nullopt);

  test::TempDir tmp;
  {
    Manager<> mgr(tmp.path(), {.step_prefix = "checkpoint_", .step_format_fixed_length = 6});
    CHECK(mgr.save(42, make_state(42)));
    CHECK(mgr.step_directory(42) == tmp.path() / "checkpoint_000042");
    CHECK(fs::exists(tmp.path() / "checkpoint_000042" / "commit"));
    // each step directory is a checkpoint ckpt::restore reads on its own
    CHECK(same(ckpt::restore<State>(tmp.path() / "checkpoint_000042"), make_state(42)));
  }
  // another manager of the same root reads the step whatever its fixed length
  Manager<> other(tmp.path(), {.step_prefix = "checkpoint_"});
  CHECK(other.all_steps() == Steps{42});
  CHECK(same(other.restore(), make_state(42)));
}

// ---------------------------------------------------------------- methods

TEST_CASE("manager: save, all_steps, latest_step, restore, restore_into") {
  test::TempDir tmp;
  Manager<> mgr(tmp / "run");  // create = true makes the root
  CHECK(fs::is_directory(tmp / "run"));
  CHECK(mgr.all_steps().empty());
  CHECK(mgr.latest_step() == std::nullopt);
  CHECK(mgr.best_step() == std::nullopt);
  CHECK_THROWS_CKPT(mgr.restore(), ckpt::NoSuchStepError, "no checkpoint to restore (no committed step)");

  for (std::int64_t s : {0, 1, 2, 5}) CHECK(mgr.save(s, make_state(s)));
  CHECK(mgr.all_steps() == Steps{0, 1, 2, 5});
  CHECK(mgr.latest_step() == 5);
  CHECK(same(mgr.restore(), make_state(5)));
  CHECK(same(mgr.restore(1), make_state(1)));
  State into = make_state(2);  // same shapes as the checkpoint's
  into.w.assign(into.w.size(), 0.0f);
  mgr.restore_into(2, into);
  CHECK(same(into, make_state(2)));
  // A manager of a smaller state (an older version): its restores are strict, and the
  // options pass through, .partial among them.
  ckpt::CheckpointManager<StepOnly> smaller(tmp / "run", {.read_only = true});
  CHECK_THROWS_CKPT(smaller.restore(2), ckpt::UnusedLeafError,
                    "/2: the target does not use 3 leaves of the checkpoint: w, rng, note; restore a part on purpose");
  CHECK(smaller.restore(2, {.partial = true}).step == 2);
  StepOnly only;
  CHECK_THROWS_CKPT(smaller.restore_into(5, only), ckpt::UnusedLeafError, "w, rng, note");
  smaller.restore_into(5, only, {.partial = true});
  CHECK(only.step == 5);

  try {
    mgr.restore(3);
    FAIL("restoring a missing step should throw");
  } catch (const ckpt::NoSuchStepError& e) {
    CHECK(std::string(e.what()).find("no step 3 (steps: 0 1 2 5)") != std::string::npos);
  }
  CHECK_THROWS_CKPT(mgr.save(-1, make_state(0)), ckpt::Error, "step must be >= 0, not -1");
  CHECK_THROWS_CKPT(mgr.metrics(7), ckpt::NoSuchStepError, "no step 7 (steps: 0 1 2 5)");
}

TEST_CASE("manager: save_interval_steps, save_on_steps and should_save") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path(), {.save_interval_steps = 10, .save_on_steps = {15, 17}});
  Steps saved;
  for (std::int64_t s = 1; s <= 35; ++s)
    if (mgr.save(s, make_state(s))) saved.push_back(s);
  CHECK(saved == Steps{1, 10, 15, 17, 20, 30});  // the first step is saved whatever the interval (Orbax)
  CHECK(mgr.all_steps() == saved);
  CHECK(mgr.should_save(40));
  CHECK_FALSE(mgr.should_save(41));
  CHECK_FALSE(mgr.should_save(20));  // not after the latest
  CHECK_FALSE(mgr.save(25, make_state(25)));
  // force saves regardless
  CHECK(mgr.save(33, make_state(33), {}, {.force = true}));
  CHECK(mgr.latest_step() == 33);
}

TEST_CASE("manager: saving an existing step throws unless forced, which replaces it") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path());
  CHECK(mgr.save(3, make_state(3), {{"loss", 1.0}}));
  try {
    mgr.save(3, make_state(4));
    FAIL("saving step 3 twice should throw");
  } catch (const ckpt::Error& e) {
    CHECK(std::string(e.what()).find("already exists") != std::string::npos);
  }
  CHECK(mgr.save(3, make_state(4), {{"loss", 2.0}}, {.force = true}));
  CHECK(same(mgr.restore(3), make_state(4)));
  CHECK(mgr.metrics(3) == ckpt::Metrics{{"loss", 2.0}});
  CHECK(names(tmp.path()) == std::vector<std::string>{".ckpt-manager.lock", "3"});
}

TEST_CASE("manager: max_to_keep prunes the oldest; the latest is never pruned") {
  test::TempDir tmp;
  {
    Manager<> mgr(tmp.path(), {.max_to_keep = 2});
    for (std::int64_t s = 1; s <= 5; ++s) mgr.save(s, make_state(s));
    CHECK(mgr.all_steps() == Steps{4, 5});
    CHECK(names(tmp.path()) == std::vector<std::string>{".ckpt-manager.lock", "4", "5"});
  }
  Manager<> zero(tmp.path(), {.max_to_keep = 0});
  zero.save(6, make_state(6));
  CHECK(zero.all_steps() == Steps{6});
  CHECK(same(zero.restore(), make_state(6)));
}

TEST_CASE("manager: best-N keeps the best by best_metric plus the latest; metrics persist") {
  test::TempDir tmp;
  const std::vector<double> losses = {0.9, 0.4, 0.6, 0.2, 0.8, 0.7};
  {
    Manager<> mgr(tmp.path(), {.max_to_keep = 2, .best_metric = "eval/loss", .best_mode = ckpt::BestMode::min});
    for (std::size_t i = 0; i < losses.size(); ++i) {
      const auto s = static_cast<std::int64_t>(i + 1);
      mgr.save(s, make_state(s), {{"eval/loss", losses[i]}, {"eval/acc", 1 - losses[i]}});
    }
    CHECK(mgr.all_steps() == Steps{2, 4, 6});
    CHECK(mgr.best_step() == 4);
    CHECK(mgr.metrics(4) == ckpt::Metrics{{"eval/acc", 0.8}, {"eval/loss", 0.2}});
  }
  // metrics are stored with the step: a new manager ranks the same way
  Manager<> again(tmp.path(), {.max_to_keep = 2, .best_metric = "eval/loss", .best_mode = ckpt::BestMode::min});
  CHECK(again.best_step() == 4);
  CHECK(again.metrics(2).at("eval/loss") == 0.4);
  again.save(7, make_state(7), {{"eval/loss", 0.1}});
  CHECK(again.all_steps() == Steps{4, 7});
  // best_mode max ranks the other way
  Manager<> by_acc(tmp.path() / "acc", {.max_to_keep = 1, .best_metric = "acc"});
  for (std::int64_t s = 1; s <= 4; ++s) by_acc.save(s, make_state(s), {{"acc", s == 2 ? 0.99 : 0.5}});
  CHECK(by_acc.all_steps() == Steps{2, 4});
  CHECK(by_acc.best_step() == 2);
}

TEST_CASE("manager: keep_checkpoints_without_metrics") {
  test::TempDir tmp;
  auto run = [&](const fs::path& root, bool keep_without) {
    Manager<> mgr(root, {.max_to_keep = 1, .best_metric = "loss", .best_mode = ckpt::BestMode::min,
                         .keep_checkpoints_without_metrics = keep_without});
    mgr.save(1, make_state(1));  // no metrics
    mgr.save(2, make_state(2), {{"loss", 0.5}});
    mgr.save(3, make_state(3), {{"loss", 0.3}});
    mgr.save(4, make_state(4), {{"loss", 0.9}});
    return mgr.all_steps();
  };
  CHECK(run(tmp / "keep", true) == Steps{1, 3, 4});
  CHECK(run(tmp / "drop", false) == Steps{3, 4});
}

TEST_CASE("manager: keep_period") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path(), {.max_to_keep = 1, .keep_period = 3});
  for (std::int64_t s = 1; s <= 10; ++s) mgr.save(s, make_state(s));
  CHECK(mgr.all_steps() == Steps{3, 6, 9, 10});
}

TEST_CASE("manager: keep_time_interval uses the save times stored with each step") {
  test::TempDir tmp;
  {
    Manager<> mgr(tmp.path(), {.max_to_keep = 1, .keep_time_interval = std::chrono::hours(1)});
    for (std::int64_t s = 1; s <= 3; ++s) mgr.save(s, make_state(s));
    CHECK(mgr.all_steps() == Steps{1, 3});  // the first is kept, nothing else is an hour later
  }
  {
    // a new manager reads the times back: step 1 is still the one kept by time
    Manager<> mgr(tmp.path(), {.max_to_keep = 1, .keep_time_interval = std::chrono::hours(1)});
    mgr.save(4, make_state(4));
    CHECK(mgr.all_steps() == Steps{1, 4});
  }
  Manager<> every(tmp.path(), {.max_to_keep = 1, .keep_time_interval = std::chrono::seconds(0)});
  every.save(5, make_state(5));
  CHECK(every.all_steps() == Steps{1, 4, 5});
}

TEST_CASE("manager: todelete_subdir receives pruned and deleted steps") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path(), {.max_to_keep = 1, .todelete_subdir = "trash"});
  for (std::int64_t s = 1; s <= 3; ++s) mgr.save(s, make_state(s));
  CHECK(mgr.all_steps() == Steps{3});
  CHECK(names(tmp / "trash") == std::vector<std::string>{"1", "2"});
  CHECK(same(ckpt::restore<State>(tmp / "trash" / "2"), make_state(2)));
  mgr.delete_step(3);
  CHECK(mgr.all_steps().empty());
  CHECK(names(tmp / "trash") == std::vector<std::string>{"1", "2", "3"});
  // the same name again does not clobber what is there
  mgr.save(1, make_state(1), {}, {.force = true});
  mgr.delete_step(1);
  CHECK(names(tmp / "trash").size() == 4);
  CHECK_THROWS_CKPT(Manager<>(tmp / "bad", {.todelete_subdir = "../out"}), ckpt::Error,
                    "todelete_subdir must be a relative path without '..'");
}

TEST_CASE("manager: delete_step and reload") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path());
  for (std::int64_t s = 1; s <= 3; ++s) mgr.save(s, make_state(s));
  mgr.delete_step(3);  // even the latest, when asked
  CHECK(mgr.all_steps() == Steps{1, 2});
  CHECK(names(tmp.path()) == std::vector<std::string>{".ckpt-manager.lock", "1", "2"});  // no .tmp- left
  CHECK_THROWS_CKPT(mgr.delete_step(3), ckpt::NoSuchStepError, "no step 3 to delete");
  // a step written beside the manager (plain ckpt::save: no metadata) appears on reload
  ckpt::save(tmp / "9", make_state(9));
  CHECK(mgr.all_steps() == Steps{1, 2});
  mgr.reload();
  CHECK(mgr.all_steps() == Steps{1, 2, 9});
  CHECK(mgr.metrics(9).empty());
  CHECK(same(mgr.restore(), make_state(9)));
  fs::remove_all(tmp / "1");
  mgr.reload();
  CHECK(mgr.all_steps() == Steps{2, 9});
}

TEST_CASE("manager: create = false") {
  test::TempDir tmp;
  CHECK_THROWS_CKPT(Manager<>(tmp / "missing", {.create = false}), ckpt::Error,
                    "missing: no such directory (and ManagerOptions::create is false)");
  CHECK_FALSE(fs::exists(tmp / "missing"));
  Manager<> ok(tmp.path(), {.create = false});  // exists: fine
  CHECK(ok.all_steps().empty());
}

TEST_CASE("manager: tmp directories and uncommitted steps are not steps, and are cleaned up at start") {
  test::TempDir tmp;
  { Manager<>(tmp.path()).save(1, make_state(1)); }
  fs::create_directories(tmp / ".tmp-5-1234abc");
  fs::create_directories(tmp / ".tmp-checkpoint_7-x" / "sub");
  fs::create_directories(tmp / "6");  // a step directory without its commit marker
  test::write_bytes(tmp / "6" / "manifest", {'x'});
  fs::create_directories(tmp / "logs");  // not ours: left alone
  {
    Manager<> keep(tmp.path(), {.cleanup_tmp_directories = false});
    CHECK(keep.all_steps() == Steps{1});
    CHECK(fs::exists(tmp / ".tmp-5-1234abc"));
    CHECK(fs::exists(tmp / "6"));
  }
  {
    Manager<> ro(tmp.path(), {.read_only = true});  // read-only never cleans
    CHECK(fs::exists(tmp / "6"));
  }
  Manager<> clean(tmp.path());
  CHECK(clean.all_steps() == Steps{1});
  CHECK(names(tmp.path()) == std::vector<std::string>{".ckpt-manager.lock", "1", "logs"});
  // the uncommitted step's number is free again
  CHECK(clean.save(6, make_state(6)));
}

TEST_CASE("manager: read_only") {
  test::TempDir tmp;
  Manager<> writer(tmp.path());
  writer.save(1, make_state(1), {{"loss", 0.5}});
  Manager<> ro(tmp.path(), {.read_only = true});  // opens while the writer holds the lock
  CHECK(ro.all_steps() == Steps{1});
  CHECK(same(ro.restore(), make_state(1)));
  CHECK(ro.metrics(1).at("loss") == 0.5);
  CHECK_FALSE(ro.should_save(2));
  CHECK_FALSE(ro.save(2, make_state(2)));
  CHECK_FALSE(ro.save(2, make_state(2), {}, {.force = true}));
  CHECK_THROWS_CKPT(ro.delete_step(1), ckpt::ReadOnlyError, "read-only manager: cannot delete step 1");
  CHECK_FALSE(ro.reached_preemption(1));
  writer.save(2, make_state(2));
  ro.reload();
  CHECK(ro.all_steps() == Steps{1, 2});
  // a read-only manager of a missing root sees no steps and creates nothing
  Manager<> none(tmp / "nothing", {.read_only = true});
  CHECK(none.all_steps().empty());
  CHECK_FALSE(fs::exists(tmp / "nothing"));
}

TEST_CASE("manager: a second writing manager on the same root is refused, in this process and in another") {
  test::TempDir tmp;
  {
    Manager<> first(tmp.path());
    try {
      Manager<ckpt::async_save> second(tmp.path());
      FAIL("a second manager should be refused");
    } catch (const ckpt::RootLockedError& e) {
      CHECK(std::string(e.what()).find("another CheckpointManager") != std::string::npos);
      CHECK(std::string(e.what()).find("process " + std::to_string(::getpid())) != std::string::npos);
    }
    // from another process
    std::fflush(nullptr);  // or the child's exit would print our buffered output again
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int code = 3;
      try {
        Manager<> other(tmp.path());
        code = 1;  // got the lock: wrong
      } catch (const ckpt::Error&) {
        code = 0;
      } catch (...) {
        code = 2;
      }
      ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    Manager<> ro(tmp.path(), {.read_only = true});  // readers always may
  }
  // released with its manager, and by a process that dies holding it
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    static std::optional<Manager<>> leaked;
    leaked.emplace(tmp.path());
    ::_exit(0);  // no destructor runs: the kernel drops the lock
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  Manager<> again(tmp.path());
  CHECK(again.all_steps().empty());
}

TEST_CASE("manager: metrics and custom metadata are stored with the step") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  mgr.save(1, make_state(1), {{"loss", 0.25}, {"bad", nan}},
           {.custom_metadata = {{"git", "abc123"}, {"hosts", {"a", "b"}}}});
  mgr.save(2, make_state(2));
  CHECK(mgr.metrics(1) == ckpt::Metrics{{"loss", 0.25}});  // non-finite metrics are not stored
  Manager<> ro(tmp.path(), {.read_only = true});
  CHECK(ro.metrics(1) == ckpt::Metrics{{"loss", 0.25}});
  CHECK(ro.custom_metadata(1) == nlohmann::json{{"git", "abc123"}, {"hosts", {"a", "b"}}});
  CHECK(ro.custom_metadata(2).is_null());
  CHECK(ro.metrics(2).empty());
  const auto md = nlohmann::json::parse(std::ifstream(tmp / "1" / "_CHECKPOINT_METADATA"));
  CHECK(md.at("step") == 1);
  CHECK(md.at("format") == "native");
  CHECK(md.at("init_timestamp_nsecs").get<std::int64_t>() <= md.at("commit_timestamp_nsecs").get<std::int64_t>());
}

TEST_CASE("manager: items beside the state, restorable on their own") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path());
  const DataPosition pos{3, 1234};
  const nlohmann::json config = {{"lr", 3e-4}, {"layers", 12}, {"name", "gpt"}};
  mgr.save(10, make_state(10), {}, {.items = {{"dataset", ckpt::tree_item(pos)}, {"config", ckpt::json_item(config)}}});
  mgr.save(11, make_state(11));

  CHECK(mgr.item_names(10) == std::vector<std::string>{"config", "dataset"});
  CHECK(mgr.item_names(11).empty());
  const auto back = mgr.restore_item<DataPosition>(10, "dataset");
  CHECK(back.epoch == 3);
  CHECK(back.offset == 1234);
  DataPosition into;
  mgr.restore_item_into(10, "dataset", into);
  CHECK(into.offset == 1234);
  CHECK(mgr.item_json(10, "config") == config);
  // An item restores strictly too: a part of it only on purpose.
  struct EpochOnly {
    std::int64_t epoch = 0;
  };
  CHECK_THROWS_CKPT(mgr.restore_item<EpochOnly>(10, "dataset"), ckpt::UnusedLeafError,
                    "the target does not use 1 leaf of the checkpoint: offset");
  CHECK(mgr.restore_item<EpochOnly>(10, "dataset", {.partial = true}).epoch == 3);
  EpochOnly epoch;
  CHECK_THROWS_CKPT(mgr.restore_item_into(10, "dataset", epoch), ckpt::UnusedLeafError, "offset");
  mgr.restore_item_into(10, "dataset", epoch, {.partial = true});
  CHECK(epoch.epoch == 3);
  // plain files: a checkpoint and a JSON file inside the step
  CHECK(ckpt::restore<DataPosition>(tmp / "10" / "items" / "dataset").epoch == 3);
  CHECK(fs::is_regular_file(tmp / "10" / "items" / "config.json"));

  CHECK_THROWS_CKPT(mgr.item_json(10, "dataset"), ckpt::Error, "item \"dataset\" is a tree item, not a json item");
  CHECK_THROWS_CKPT(mgr.restore_item<DataPosition>(10, "config"), ckpt::Error,
                    "item \"config\" is a json item, not a tree item");
  CHECK_THROWS_CKPT(mgr.item_json(11, "config"), ckpt::Error, "11: no item \"config\" saved with this step");
  CHECK_THROWS_CKPT(mgr.item_json(10, "../10/items/config"), ckpt::Error, "invalid item name \"../10/items/config\"");
  for (const char* bad : {"", ".hidden", "a/b", "..", "x y"})
    CHECK_THROWS_CKPT(mgr.save(12, make_state(12), {}, {.items = {{bad, ckpt::json_item(1)}}}), ckpt::Error,
                      ("invalid item name \"" + std::string(bad) + "\"").c_str());
  CHECK(mgr.all_steps() == Steps{10, 11});
}

TEST_CASE("manager: invalid options are errors") {
  test::TempDir tmp;
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.max_to_keep = -1}), ckpt::Error, "ManagerOptions: max_to_keep must be >= 0");
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.keep_period = 0}), ckpt::Error, "ManagerOptions: keep_period must be > 0");
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.save_interval_steps = 0}), ckpt::Error,
                    "ManagerOptions: save_interval_steps must be > 0");
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.step_prefix = "a/b"}), ckpt::Error,
                    "ManagerOptions: step_prefix must not contain '/'");
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.step_format_fixed_length = -2}), ckpt::Error,
                    "ManagerOptions: step_format_fixed_length must be in [0, 19]");
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.async_timeout = std::chrono::seconds(0)}), ckpt::Error,
                    "ManagerOptions: async_timeout must be > 0");
}

TEST_CASE("manager: policies are types, in any order") {
  using A = ckpt::CheckpointManager<State, ckpt::native, ckpt::async_save>;
  using B = ckpt::CheckpointManager<State, ckpt::async_save>;
  using C = ckpt::CheckpointManager<State>;
  static_assert(std::is_same_v<A::executor_policy_type, ckpt::async_save>);
  static_assert(std::is_same_v<A::format_type, ckpt::native>);
  static_assert(std::is_same_v<B::format_type, ckpt::native>);
  static_assert(std::is_same_v<C::executor_policy_type, ckpt::sync_save>);
  static_assert(ckpt::executor_policy<ckpt::sync_save> && ckpt::executor_policy<ckpt::async_save>);
  static_assert(!ckpt::executor_policy<ckpt::native> && !ckpt::format_policy<ckpt::async_save>);
  // the coordination: this process alone unless told otherwise (ckpt::mpi::ranks)
  using D = ckpt::CheckpointManager<State, ckpt::async_save, ckpt::one_process>;
  static_assert(std::is_same_v<C::coordination_type, ckpt::one_process>);
  static_assert(std::is_same_v<D::coordination_type, ckpt::one_process>);
  static_assert(ckpt::coordination_policy<ckpt::one_process> && !ckpt::coordination_policy<ckpt::async_save>);
  test::TempDir tmp;
  {
    A mgr(tmp.path());
    mgr.save(1, make_state(1));
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == Steps{1});
  }
  D mgr(ckpt::one_process{}, tmp.path());
  CHECK(mgr.save(2, make_state(2)));
  State latest = make_state(0);
  mgr.restore_latest_into(latest);
  CHECK(same(latest, make_state(2)));
}

// ---------------------------------------------------------------- preemption

namespace {
std::atomic<int> previous_calls{0};
void previous_handler(int) { previous_calls.fetch_add(1); }
}  // namespace

TEST_CASE("manager: SIGTERM is noticed, chained to the previous handler, and the next save saves") {
  struct sigaction mine {}, old {};
  mine.sa_handler = &previous_handler;
  sigemptyset(&mine.sa_mask);
  REQUIRE(::sigaction(SIGTERM, &mine, &old) == 0);
  previous_calls = 0;
  test::TempDir tmp;
  {
    Manager<> mgr(tmp.path(), {.save_interval_steps = 100});
    CHECK(mgr.save(100, make_state(100)));
    CHECK_FALSE(mgr.reached_preemption(101));
    CHECK_FALSE(mgr.should_save(137));
    CHECK_FALSE(mgr.save(137, make_state(137)));
    ::raise(SIGTERM);  // the process lives on
    CHECK(previous_calls == 1);
    CHECK(mgr.reached_preemption(137));
    CHECK(mgr.should_save(137));
    CHECK(mgr.save(137, make_state(137)));
    CHECK(mgr.all_steps() == Steps{100, 137});
    CHECK_FALSE(mgr.should_save(137));  // not twice
    // a manager without save_on_preemption does not see it
    Manager<> off(tmp / "off", {.save_on_preemption = false});
    CHECK_FALSE(off.reached_preemption(1));
  }
  // the last manager gone, the previous handler is back
  struct sigaction now {};
  REQUIRE(::sigaction(SIGTERM, nullptr, &now) == 0);
  CHECK((now.sa_handler == &previous_handler));
  CHECK((now.sa_flags & SA_SIGINFO) == 0);
  REQUIRE(::sigaction(SIGTERM, &old, nullptr) == 0);
}

TEST_CASE("manager: SIGTERM with the default disposition does not kill the process") {
  struct sigaction dfl {}, old {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  REQUIRE(::sigaction(SIGTERM, &dfl, &old) == 0);
  test::TempDir tmp;
  {
    Manager<ckpt::async_save> mgr(tmp.path(), {.save_interval_steps = 1000});
    CHECK_FALSE(mgr.reached_preemption(1));  // the flag starts clear
    ::raise(SIGTERM);
    CHECK(mgr.reached_preemption(1));
    CHECK(mgr.save(1, make_state(1)));
    CHECK(mgr.save(2, make_state(2)));
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == Steps{1, 2});
  }
  struct sigaction now {};
  REQUIRE(::sigaction(SIGTERM, nullptr, &now) == 0);
  CHECK((now.sa_handler == SIG_DFL));
  REQUIRE(::sigaction(SIGTERM, &old, nullptr) == 0);
}

// ---------------------------------------------------------------- async

TEST_CASE("async: save copies the state and returns; the background commits it") {
  test::TempDir tmp;
  {
    Manager<ckpt::async_save> mgr(tmp.path(), {.max_to_keep = 2, .best_metric = "loss",
                                               .best_mode = ckpt::BestMode::min});
    State s = make_state(1, 1 << 20);  // 4 MiB
    for (std::int64_t step = 1; step <= 6; ++step) {
      s = make_state(step, 1 << 20);
      CHECK(mgr.save(step, s, {{"loss", step == 3 ? 0.1 : step == 5 ? 0.15 : 1.0 / static_cast<double>(step)}},
                     {.items = {{"dataset", ckpt::tree_item(DataPosition{step, step * 10})}}}));
      s.w.assign(s.w.size(), -1.0f);  // changing the state right away does not change the save
      s.note = "changed";
    }
    mgr.wait_until_finished();
    CHECK(mgr.all_steps() == Steps{3, 5, 6});  // the best two by loss, plus the latest
    CHECK(same(mgr.restore(6), make_state(6, 1 << 20)));
    CHECK(same(mgr.restore(3), make_state(3, 1 << 20)));
    CHECK(mgr.restore_item<DataPosition>(5, "dataset").offset == 50);
    mgr.save(7, make_state(7, 16));
  }  // the destructor waits for step 7
  Manager<> reader(tmp.path());
  CHECK(reader.latest_step() == 7);
  CHECK(same(reader.restore(), make_state(7, 16)));
}

TEST_CASE("async: restore and delete_step wait for the save in flight; saving a step in flight throws") {
  test::TempDir tmp;
  Manager<ckpt::async_save> mgr(tmp.path());
  mgr.save(1, make_state(1, 1 << 20));
  CHECK_THROWS_CKPT(mgr.save(1, make_state(1)), ckpt::StepExistsError, "step 1 already exists");
  CHECK_FALSE(mgr.should_save(1));
  CHECK(same(mgr.restore(), make_state(1, 1 << 20)));
  mgr.save(2, make_state(2, 1 << 20));
  mgr.delete_step(2);
  CHECK(mgr.all_steps() == Steps{1});
  mgr.save(3, make_state(3, 1 << 20), {}, {.force = true});
  mgr.save(3, make_state(4, 1 << 20), {}, {.force = true});  // waits, then replaces
  CHECK(same(mgr.restore(3), make_state(4, 1 << 20)));
}

TEST_CASE("async: async_timeout") {
  test::TempDir tmp;
  {
    Manager<ckpt::async_save> mgr(tmp.path(), {.async_timeout = std::chrono::microseconds(1)});
    mgr.save(1, make_state(1, 8 << 20));  // 32 MiB, fsynced: far longer than a microsecond
    // The test must be able to fail: a save that beat the timeout fails it, it does
    // not pass with a warning. "async: the executor times out" below checks the same
    // without a race.
    CHECK_THROWS_CKPT(mgr.wait_until_finished(), ckpt::BackgroundSaveTimeoutError,
                      "did not finish within 0.000001 s (async_timeout); it is still running");
  }  // the destructor waits however long it takes
  Manager<> reader(tmp.path());
  CHECK(reader.all_steps() == Steps{1});
}

TEST_CASE("async: the executor times out, and a failed background save is a BackgroundSaveError") {
  // A job that runs until released: the timeout is certain, not a race against the disk.
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  ckpt::async_save::executor ex(std::chrono::milliseconds(20));
  ex.submit("root/5", [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
  });
  CHECK_THROWS_CKPT(ex.wait(), ckpt::BackgroundSaveTimeoutError, "root/5: asynchronous save did not finish within");
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  ex.wait_idle();
  CHECK_NOTHROW(ex.rethrow_if_failed());
  // a failure in the background comes back once, as a BackgroundSaveError naming the step
  ex.submit("root/6", [] { throw std::runtime_error("disk on fire"); });
  ex.wait_idle();
  CHECK_THROWS_CKPT(ex.rethrow_if_failed(), ckpt::BackgroundSaveError, "root/6: asynchronous save failed: disk on fire");
  CHECK_NOTHROW(ex.rethrow_if_failed());
}

TEST_CASE("manager: every manager failure is a kind of its own, and a ckpt::Error") {
  static_assert(std::is_base_of_v<ckpt::Error, ckpt::RootLockedError>);
  static_assert(std::is_base_of_v<ckpt::Error, ckpt::StepExistsError>);
  static_assert(std::is_base_of_v<ckpt::Error, ckpt::NoSuchStepError>);
  static_assert(std::is_base_of_v<ckpt::Error, ckpt::BackgroundSaveError>);
  static_assert(std::is_base_of_v<ckpt::BackgroundSaveError, ckpt::BackgroundSaveTimeoutError>);
  static_assert(std::is_base_of_v<ckpt::Error, ckpt::ReadOnlyError>);
  test::TempDir tmp;
  Manager<> mgr(tmp.path());
  mgr.save(1, make_state(1));
  CHECK_THROWS_CKPT(Manager<>(tmp.path()), ckpt::RootLockedError, "another CheckpointManager has this directory open");
  CHECK_THROWS_CKPT(mgr.save(1, make_state(1)), ckpt::StepExistsError, "step 1 already exists");
  CHECK_THROWS_CKPT(mgr.restore(2), ckpt::NoSuchStepError, "no step 2 (steps: 1)");
  CHECK_THROWS_CKPT(mgr.custom_metadata(2), ckpt::NoSuchStepError, "no step 2 (steps: 1)");
  CHECK_THROWS_CKPT(mgr.delete_step(2), ckpt::NoSuchStepError, "no step 2 to delete");
  CHECK_THROWS_CKPT(Manager<>(tmp.path(), {.read_only = true}).delete_step(1), ckpt::ReadOnlyError,
                    "read-only manager: cannot delete step 1");
  // caught as the kind, the error still names the root
  try {
    mgr.restore(2);
    FAIL("restore(2) should throw");
  } catch (const ckpt::NoSuchStepError& e) {
    CHECK(e.checkpoint() == tmp.path().string());
  }
}

// RLIMIT_FSIZE makes write() fail with EFBIG (SIGXFSZ ignored) past the limit: a disk
// that fills up in the middle of a background save.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit_) == 0);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    REQUIRE(::sigaction(SIGXFSZ, &ign, &old_action_) == 0);
    struct rlimit lim = old_limit_;
    lim.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_limit_);
    ::sigaction(SIGXFSZ, &old_action_, nullptr);
  }

 private:
  struct rlimit old_limit_ {};
  struct sigaction old_action_ {};
};

TEST_CASE("async: a write failure in the background surfaces as BackgroundSaveError and leaves no half-written step") {
  test::TempDir tmp;
  Manager<ckpt::async_save> mgr(tmp.path(), {.max_to_keep = 2});
  mgr.save(1, make_state(1, 1024));
  mgr.save(2, make_state(2, 1024));
  mgr.wait_until_finished();
  {
    FileSizeLimit limit(1 << 20);  // 1 MiB per file; the next state is 4 MiB
    CHECK(mgr.save(3, make_state(3, 1 << 20)));  // returns: the failure is in the background
    try {
      mgr.wait_until_finished();
      FAIL("the background save should have failed");
    } catch (const ckpt::BackgroundSaveError& e) {
      const std::string what = e.what();
      CHECK(what.find("asynchronous save failed") != std::string::npos);
      CHECK(what.find("File too large") != std::string::npos);
      CHECK(e.checkpoint() == (tmp.path() / "3").string());
    }
    CHECK(mgr.all_steps() == Steps{1, 2});
    CHECK(names(tmp.path()) == std::vector<std::string>{".ckpt-manager.lock", "1", "2"});  // no .tmp-, no 3
    mgr.wait_until_finished();  // reported once

    // the next save() reports it too (whether or not the failed save has ended yet)
    CHECK(mgr.save(3, make_state(3, 1 << 20)));
    try {
      mgr.save(4, make_state(4, 1024));
      FAIL("save() should report the background failure");
    } catch (const ckpt::BackgroundSaveError& e) {
      CHECK(std::string(e.what()).find("File too large") != std::string::npos);
    }
    mgr.wait_until_finished();
  }
  CHECK(mgr.all_steps() == Steps{1, 2});
  CHECK(same(mgr.restore(1), make_state(1, 1024)));
  CHECK(same(mgr.restore(2), make_state(2, 1024)));
  CHECK(mgr.save(3, make_state(3, 1 << 20)));
  mgr.wait_until_finished();
  CHECK(mgr.all_steps() == Steps{2, 3});
  CHECK(same(mgr.restore(), make_state(3, 1 << 20)));
}

TEST_CASE("sync: a write failure throws from save() and leaves no half-written step") {
  test::TempDir tmp;
  Manager<> mgr(tmp.path());
  mgr.save(1, make_state(1));
  {
    FileSizeLimit limit(1 << 20);
    CHECK_THROWS_CKPT(mgr.save(2, make_state(2, 1 << 20)), ckpt::Error, "File too large");
  }
  CHECK(mgr.all_steps() == Steps{1});
  CHECK(names(tmp.path()) == std::vector<std::string>{".ckpt-manager.lock", "1"});
  CHECK(mgr.save(2, make_state(2, 1 << 20)));
  CHECK(same(mgr.restore(), make_state(2, 1 << 20)));
}

TEST_CASE("snapshot: make_owned(SnapshotBuffer&) copies into one reused allocation") {
  State s = make_state(1, 1000);
  ckpt::SnapshotBuffer buf;
  ckpt::Snapshot snap = ckpt::take_snapshot(s);
  snap.make_owned(buf);
  const std::size_t cap = buf.capacity();
  CHECK(cap >= 4000);
  s.w.assign(s.w.size(), 0.0f);
  test::TempDir tmp;
  ckpt::save_snapshot(tmp / "a", snap);
  CHECK(same(ckpt::restore<State>(tmp / "a"), make_state(1, 1000)));
  const State smaller = make_state(2, 500);
  ckpt::Snapshot again = ckpt::take_snapshot(smaller);
  again.make_owned(buf);
  CHECK(buf.capacity() == cap);  // reused, not grown
}

}  // namespace manager_test

namespace manager_empty_test {
struct WithEmpty {
  std::int64_t step = 0;
  std::vector<float> none_yet;      // an empty leaf: its data() may be null
  xt::xtensor<float, 1> also_empty;
  std::vector<float> some = {1, 2, 3};
};
}  // namespace manager_empty_test

TEST_CASE("async saves copy states holding empty arrays") {
  using manager_empty_test::WithEmpty;
  test::TempDir tmp;
  ckpt::CheckpointManager<WithEmpty, ckpt::async_save> mgr(tmp / "run");
  WithEmpty s;
  s.step = 1;
  CHECK(mgr.save(1, s));
  s.some.push_back(4);
  s.step = 2;
  CHECK(mgr.save(2, s));
  mgr.wait_until_finished();
  const WithEmpty r = mgr.restore();
  CHECK(r.step == 2);
  CHECK(r.none_yet.empty());
  CHECK(r.also_empty.size() == 0);
  CHECK(r.some == std::vector<float>{1, 2, 3, 4});
}

// ---------------------------------------------------------------- guard_non_finite

namespace manager_guard_test {
namespace fs = std::filesystem;
using Steps = std::vector<std::int64_t>;

struct GuardState {
  std::int64_t step = 0;
  std::vector<float> w;                // 1.2 MB: a data file (a file of its own when incremental)
  std::vector<double> bias;            // small: inline in the manifest
  std::vector<ckpt::bfloat16> h;       // 16 KiB: a data file
  std::vector<std::complex<float>> z;  // small: inline
  std::vector<std::int32_t> counts;    // integers hold no NaN
};

// A state whose leaves hold NaN and infinities when `bad`: w a NaN every 1000th value
// and one -Inf, h one Inf, z a NaN real part, bias one NaN.
GuardState guard_state(std::int64_t step, bool bad) {
  GuardState s;
  s.step = step;
  s.w.resize(300'000);
  for (std::size_t i = 0; i < s.w.size(); ++i) s.w[i] = static_cast<float>(step) + static_cast<float>(i % 97) * 0.25f;
  s.bias = {0.5, -1.5, 2.0};
  s.h.assign(8192, ckpt::bfloat16(1.0f));
  s.z = {{1.f, 2.f}, {3.f, -4.f}};
  s.counts = {1, 2, 3};
  if (bad) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < s.w.size(); i += 1000) s.w[i] = nan;
    s.w[12345] = -inf;
    s.h[100] = ckpt::bfloat16(inf);
    s.z[1] = {nan, 1.f};
    s.bias[2] = std::numeric_limits<double>::quiet_NaN();
  }
  return s;
}

// The NaN and infinite elements of s, counted here value by value.
std::uint64_t expected_non_finite(const GuardState& s) {
  std::uint64_t n = 0;
  for (float v : s.w) n += std::isfinite(v) ? 0 : 1;
  for (double v : s.bias) n += std::isfinite(v) ? 0 : 1;
  for (auto v : s.h) n += std::isfinite(static_cast<float>(v)) ? 0 : 1;
  for (auto v : s.z) n += std::isfinite(v.real()) && std::isfinite(v.imag()) ? 0 : 1;
  return n;
}

nlohmann::json step_metadata(const fs::path& step_dir) {
  return nlohmann::json::parse(std::ifstream(step_dir / "_CHECKPOINT_METADATA"));
}

ckpt::retain::StepRecord rec(std::int64_t step, ckpt::Metrics m, bool finite = true) {
  return {step, {}, std::move(m), finite};
}

TEST_CASE("guard: count_non_finite counts what ValueStats counts apart, for every dtype") {
  std::mt19937_64 rng(7);
  std::vector<std::byte> bytes(1 << 16);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() >> 56);  // random bits: many NaN and Inf patterns
  // and the exact specials of float32 at the front
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max()};
  std::memcpy(bytes.data(), specials, sizeof specials);
  using ckpt::dtype;
  for (dtype d : {dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64, dtype::complex64, dtype::complex128,
                  dtype::int32, dtype::uint8, dtype::bool_}) {
    CAPTURE(ckpt::dtype_name(d));
    ckpt::ValueStats v;
    v.add(d, bytes);
    CHECK(ckpt::count_non_finite(d, bytes) == v.nan() + v.inf());
  }
  CHECK(ckpt::count_non_finite(dtype::float32, std::span(bytes).first(sizeof specials)) == 3);
  CHECK(ckpt::count_non_finite(dtype::float16, bytes) > 0);  // the random bits do hold some
}

TEST_CASE("retain: a step that is not finite is never best, ranks worst, and never pushes out the newest finite step") {
  using ckpt::BestMode;
  // step 1 finite; 2 and 3 hold NaN weights (with a better loss); 4 a NaN loss (dropped: no metric)
  const std::vector r = {rec(1, {{"loss", 0.5}}), rec(2, {{"loss", 0.1}}, false), rec(3, {{"loss", 0.05}}, false),
                         rec(4, {}, false)};
  CHECK(ckpt::retain::best(r, "loss", BestMode::min) == 1);
  CHECK(ckpt::retain::newest_finite(r) == std::set<std::int64_t>{1});
  // by step: the three newest, plus the newest finite one
  CHECK(ckpt::retain::steps_to_keep(r, ckpt::ManagerOptions{.max_to_keep = 3}) == std::set<std::int64_t>{1, 2, 3, 4});
  CHECK(ckpt::retain::steps_to_keep(r, ckpt::ManagerOptions{.max_to_keep = 1}) == std::set<std::int64_t>{1, 4});
  // by metric: non-finite steps rank below every finite one and are not "without the metric"
  CHECK(ckpt::retain::steps_to_keep(r, ckpt::ManagerOptions{.max_to_keep = 2, .best_metric = "loss",
                                                            .best_mode = BestMode::min}) ==
        std::set<std::int64_t>{1, 4});
  CHECK(ckpt::retain::rank_by_metric(r, "loss", BestMode::min) == Steps{2, 3, 4, 1});
  // no finite step: no best; every step finite: the rules are the old ones
  CHECK(ckpt::retain::best({rec(2, {{"loss", 0.1}}, false)}, "loss", BestMode::min) == std::nullopt);
  const std::vector fine = {rec(1, {{"loss", 0.5}}), rec(2, {{"loss", 0.1}}), rec(3, {{"loss", 0.05}})};
  CHECK(ckpt::retain::steps_to_keep(fine, ckpt::ManagerOptions{.max_to_keep = 1}) == std::set<std::int64_t>{3});
}

TEST_CASE("manager: guard_non_finite saves NaN steps marked, never best; the last finite step survives them") {
  test::TempDir tmp;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const ckpt::ManagerOptions guarded{.max_to_keep = 3, .best_metric = "loss", .best_mode = ckpt::BestMode::min,
                                     .guard_non_finite = true};
  std::vector<ckpt::SaveStats> stats;
  auto with_stats = guarded;
  with_stats.on_save = [&](const ckpt::SaveStats& s) { stats.push_back(s); };
  const std::uint64_t bad_count = expected_non_finite(guard_state(2, true));
  REQUIRE(bad_count == 300 + 1 + 1 + 1 + 1);  // what guard_state puts in
  {
    ckpt::CheckpointManager<GuardState> mgr(tmp / "run", with_stats);
    // an item beside the state is not judged: only the state's leaves and the metrics
    mgr.save(1, guard_state(1, false), {{"loss", 0.5}}, {.items = {{"ema", ckpt::tree_item(guard_state(1, true))}}});
    // NaN weights with a better loss, then NaN (and infinite) losses over finite weights
    mgr.save(2, guard_state(2, true), {{"loss", 0.1}});
    mgr.save(3, guard_state(3, true), {{"loss", 0.05}});
    mgr.save(4, guard_state(4, false), {{"loss", nan}});
    mgr.save(5, guard_state(5, false), {{"loss", std::numeric_limits<double>::infinity()}, {"acc", 0.3}});
    // by loss, non-finite steps rank below step 1: the newest of them go first
    CHECK(mgr.all_steps() == Steps{1, 4, 5});
    CHECK(mgr.best_step() == 1);
    CHECK(mgr.latest_finite_step() == 1);
    CHECK(mgr.is_finite(1));
    CHECK(!mgr.is_finite(4));
    CHECK(!mgr.is_finite(5));
    CHECK(mgr.restore(mgr.latest_finite_step()).w == guard_state(1, false).w);
    REQUIRE(stats.size() == 5);
    CHECK(stats[0].guarded);
    CHECK(stats[0].finite());
    CHECK(stats[0].non_finite_values == 0);
    CHECK(stats[1].non_finite_values == bad_count);
    CHECK(stats[1].non_finite_metrics == 0);
    CHECK(!stats[1].finite());
    CHECK(stats[3].non_finite_values == 0);
    CHECK(stats[3].non_finite_metrics == 1);
    CHECK(stats[4].non_finite_metrics == 1);
    // more NaN steps never push step 1 out
    mgr.save(6, guard_state(6, true), {{"loss", 0.01}});
    CHECK(mgr.all_steps() == Steps{1, 5, 6});
    CHECK(mgr.best_step() == 1);
    // _CHECKPOINT_METADATA says it, with the counts
    const auto ok = step_metadata(tmp / "run/1"), bad = step_metadata(tmp / "run/6"), metric = step_metadata(tmp / "run/5");
    CHECK(ok.at("finite") == true);
    CHECK(ok.at("save_stats").at("non_finite_values") == 0);
    CHECK(bad.at("finite") == false);
    CHECK(bad.at("save_stats").at("non_finite_values") == bad_count);
    CHECK(bad.at("save_stats").at("non_finite_metrics") == 0);
    CHECK(metric.at("finite") == false);
    CHECK(metric.at("save_stats").at("non_finite_metrics") == 1);
    CHECK(!metric.at("metrics").contains("loss"));
    CHECK(metric.at("metrics").at("acc") == 0.3);
  }
  // a manager reopened on the root knows which steps are not finite
  {
    ckpt::CheckpointManager<GuardState> again(tmp / "run", guarded);
    CHECK(again.best_step() == 1);
    CHECK(again.latest_finite_step() == 1);
    CHECK(!again.is_finite(6));
    // a finite step with a better loss: the new best, the new step to restore
    again.save(7, guard_state(7, false), {{"loss", 0.3}});
    CHECK(again.best_step() == 7);
    CHECK(again.latest_finite_step() == 7);
    CHECK(again.all_steps() == Steps{1, 6, 7});  // by loss 7 and 1, then the newest non-finite step
  }
  // without the guard (the default): the old behaviour, NaN steps rank by their loss
  ckpt::ManagerOptions off = guarded;
  off.guard_non_finite = false;
  ckpt::SaveStats last;
  off.on_save = [&](const ckpt::SaveStats& s) { last = s; };
  ckpt::CheckpointManager<GuardState> plain(tmp / "plain", off);
  plain.save(1, guard_state(1, false), {{"loss", 0.5}});
  for (std::int64_t s = 2; s <= 4; ++s) plain.save(s, guard_state(s, true), {{"loss", 0.1 / static_cast<double>(s)}});
  CHECK(plain.all_steps() == Steps{2, 3, 4});  // the healthy step is gone
  CHECK(plain.best_step() == 4);
  CHECK(plain.latest_finite_step() == 4);  // nothing is marked
  CHECK(!last.guarded);
  CHECK(last.non_finite_values == 0);
  const auto md = step_metadata(tmp / "plain/4");
  CHECK(!md.contains("finite"));
  CHECK(!md.at("save_stats").contains("non_finite_values"));
}

TEST_CASE("manager: guard_non_finite with async and incremental saves counts linked leaves as this step's") {
  test::TempDir tmp;
  std::vector<ckpt::SaveStats> stats;
  std::mutex mu;
  ckpt::CheckpointManager<GuardState, ckpt::async_save> mgr(
      tmp / "run", {.max_to_keep = 2, .incremental = true, .guard_non_finite = true, .on_save = [&](const ckpt::SaveStats& s) {
                      std::lock_guard lock(mu);
                      stats.push_back(s);
                    }});
  GuardState s = guard_state(1, false);
  mgr.save(1, s);
  GuardState bad = guard_state(1, true);  // step 1's values with NaN in them
  bad.step = 2;
  mgr.save(2, bad);
  bad.step = 3;  // w unchanged: its file is linked from step 2, and its NaN still count
  mgr.save(3, bad);
  bad.step = 4;
  mgr.save(4, bad);
  mgr.wait_until_finished();
  CHECK(mgr.all_steps() == Steps{1, 3, 4});
  CHECK(mgr.latest_finite_step() == 1);
  std::lock_guard lock(mu);
  REQUIRE(stats.size() == 4);
  CHECK(stats[0].finite());
  CHECK(stats[1].non_finite_values == expected_non_finite(bad));
  CHECK(stats[2].leaves_linked >= 1);  // w
  CHECK(stats[2].non_finite_values == expected_non_finite(bad));
  CHECK(stats[3].non_finite_values == expected_non_finite(bad));
  CHECK(step_metadata(tmp / "run/3").at("save_stats").at("non_finite_values") == expected_non_finite(bad));
}

}  // namespace manager_guard_test
