// Every ```cpp block of README.md and docs/*.md, as written there, so that the docs
// cannot show code that does not compile. check_snippets.py fails when a block is not
// found here line for line, and compiles this file (-fsyntax-only: the snippets are
// checked, not run). Each block sits in a namespace of its own; a block that is a
// fragment sits inside a function that declares what it uses. Blocks that need MPI or
// S3 are compiled where CMake found them (CKPT_README_MPI, CKPT_README_S3).
//
// Editing a block in the docs: change it here the same way.

#include <ckpt/all.hpp>
#include <ckpt/convert.hpp>
#if CKPT_README_S3
#include <ckpt/storage/s3.hpp>
#endif
#if CKPT_README_GCS
#include <ckpt/storage/gcs.hpp>
#endif
#if CKPT_README_EIGEN
#include <ckpt/eigen.hpp>
#endif
#if CKPT_README_MPI
#include <ckpt/mpi.hpp>
#endif

#include <boost/hana/define_struct.hpp>
#include <nlohmann/json.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

// README.md: the first example, a whole program (at global scope: its main is main).
#include <ckpt/ckpt.hpp>
#include <xtensor/xtensor.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <string>

struct Dense    { xt::xtensor<float, 2> kernel; xt::xtensor<float, 1> bias; };
struct Params   { Dense encoder, decoder; };
struct Adam     { Params mu, nu; std::int64_t count = 0; };
struct TrainState {
  std::int64_t step = 0;
  Params params;
  Adam opt;
  std::mt19937_64 rng;
  std::map<std::string, float> config;
};

int main() {
  TrainState state;
  state.params.encoder.kernel = xt::xtensor<float, 2>({512, 128}, 0.02f);

  ckpt::save("/tmp/run/single", state);                       // atomic: whole or absent
  auto s   = ckpt::restore<TrainState>("/tmp/run/single");
  auto p   = ckpt::restore<Params>("/tmp/run/single", {.subtree = "params"});
  auto raw = ckpt::restore_tree("/tmp/run/single");           // no target type
  auto md  = ckpt::metadata("/tmp/run/single");               // dtypes and shapes, no data read
}

// README.md: a partial restore (RestoreOptions::partial).
#if CKPT_README_PARTIAL
namespace readme_partial {
using ::Params;
void snippet() {
struct Inference { Params params; };            // the params of a TrainState checkpoint
auto inf = ckpt::restore<Inference>("/tmp/run/single", {.partial = true});
}
}  // namespace readme_partial
#endif

// README.md: structs, three ways to have fields.
namespace readme_structs {
// 1. plain aggregates: nothing to write (Boost.PFR, field names read at compile time)
struct Dense { xt::xtensor<float, 2> kernel; xt::xtensor<float, 1> bias; };

// 2. Boost.Hana
struct Config { BOOST_HANA_DEFINE_STRUCT(Config, (float, lr), (int, warmup)); };

// 3. classes with private members: a customization point found by ADL
class Model {
  xt::xtensor<float, 2> w_;
  std::int64_t step_ = 0;
  friend constexpr auto ckpt_fields(ckpt::type_tag<Model>) {
    return ckpt::fields(ckpt::field("w", &Model::w_), ckpt::field("step", &Model::step_));
  }
};
void use() {
  ckpt::save("dense", Dense{});
  ckpt::save("config", Config{});
  ckpt::save("model", Model{});
  (void)ckpt::restore<Model>("model");
}
}  // namespace readme_structs

// README.md: the manager's loop.
namespace readme_manager {
using ::TrainState;
void train(TrainState&);
double evaluate(const TrainState&);
int snippet(std::int64_t total, const nlohmann::json& config) {
TrainState state;
ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(      // policies are types
    "/tmp/run", {.max_to_keep = 2, .best_metric = "eval/loss",   // numbers are options
                 .best_mode = ckpt::BestMode::min, .save_interval_steps = 100});
if (auto step = mgr.latest_step()) state = mgr.restore(*step);  // resume
for (; state.step < total; ++state.step) {
  train(state);
  if (mgr.should_save(state.step))      // on the interval, or anything after SIGTERM
    mgr.save(state.step, state, {{"eval/loss", evaluate(state)}},
             {.items = {{"config", ckpt::json_item(config)}}});   // blocks only to copy the state
  if (mgr.reached_preemption(state.step)) break;
}
mgr.wait_until_finished();              // a background failure is thrown here or by the next save()
return 0;
}
}  // namespace readme_manager

// README.md: incremental saves and progress.
namespace readme_incremental {
using ::TrainState;
void log(double seconds, double gb_per_second);
void bar(std::uint64_t done, std::uint64_t total);
bool stop = false;
void snippet() {
ckpt::ManagerOptions o{.max_to_keep = 3, .incremental = true,   // unchanged leaves are not rewritten
                       .on_save = [](const ckpt::SaveStats& s) { log(s.write_seconds, s.gb_per_second()); }};
o.save_options.progress = [](const ckpt::Progress& p) { bar(p.bytes_done, p.bytes_total); return !stop; };
ckpt::CheckpointManager<TrainState> mgr("/tmp/run", o);
}
}  // namespace readme_incremental

// README.md: a memory budget.
namespace readme_budget {
void snippet(const std::string& dir, ::TrainState& state) {
ckpt::restore_into(dir, state, {.restore_dtype = ckpt::dtype::float32, .max_memory = 256 << 20});
ckpt::convert("run/step_100", "export", "safetensors", {.max_memory = 128 << 20});
}
}  // namespace readme_budget

// README.md: storage on S3.
#if CKPT_README_S3
namespace readme_s3 {
using ::TrainState;
void snippet(const TrainState& state) {
#include <ckpt/storage/s3.hpp>            // CMake: target_link_libraries(app ckpt::ckpt ckpt::s3)
ckpt::save("s3://bucket/runs/a/final", state);   // endpoint, keys: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...
ckpt::s3::configure({.endpoint = "http://10.0.0.5:9000", .connections = 16});  // or set them in code
ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr("s3://bucket/runs/a", {.max_to_keep = 3});
}
}  // namespace readme_s3
#endif

// README.md: a migration.
namespace readme_migrate {
const std::string dir = "run/1";
struct StateV1 { std::int64_t step; xt::xtensor<float, 2> kernel; std::vector<float> mu; float lr; };
struct Schedule { float peak; std::int64_t warmup; };
struct StateV2 { std::int64_t step; xt::xtensor<double, 2> kernel; std::vector<float> first_moment; Schedule schedule; };

const auto m12 = ckpt::migration<StateV1, StateV2>(
    ckpt::rename<"mu", "first_moment">,                 // a leaf or a whole subtree moved
    ckpt::rename<"lr", "schedule.peak">,
    ckpt::fill<"schedule.warmup">([](const StateV1& old) { return old.step / 10; }));  // computed

StateV2 s2 = ckpt::restore<StateV2>(dir, m12);           // dir was written by StateV1 (or StateV2)
}  // namespace readme_migrate

// README.md: many processes.
#if CKPT_README_MPI
namespace readme_mpi {
struct State { std::int64_t step = 0; };
std::size_t my_first_row = 0;
xt::xtensor<float, 2> my_rows;
struct Model { ckpt::Sharded<xt::xtensor<float, 2>> embed; xt::xtensor<float, 1> bias; };

void run(Model& model, Model& other_layout) {
  ckpt::mpi::Comm comm(MPI_COMM_WORLD);               // you keep MPI_Init / MPI_Finalize
  model.embed = {.global_shape = {1000, 64}, .offset = {my_first_row, 0}, .local = my_rows};
  ckpt::mpi::save(comm, "/shared/run/7", model);      // collective; replicas written once
  ckpt::mpi::restore_into(comm, "/shared/run/7", other_layout);   // e.g. column strips on 3 ranks
  ckpt::mpi::CheckpointManager<State, ckpt::async_save> mgr(comm, "/shared/run", {.max_to_keep = 3});
}
}  // namespace readme_mpi
#endif

// README.md: other formats.
namespace readme_formats {
using ::TrainState;
void snippet(const TrainState& state) {
ckpt::save<ckpt::flax>("/tmp/state.msgpack", state);  // one file
ckpt::save<ckpt::t5x>("/tmp/run/checkpoint_100", state);       // msgpack + zarr arrays (gzip)
ckpt::save<ckpt::orbax>("/tmp/run/100", state);                // Orbax step dir: OCDBT + zarr v2
ckpt::save<ckpt::zarr_v2>("/tmp/arrays.zarr", state);          // a zarr v2 group
ckpt::save<ckpt::safetensors>("/tmp/model.safetensors", state.params);  // Hugging Face's format

auto s = ckpt::restore<TrainState>("/gcs-copy/t5x/checkpoint_100");  // any of them
auto tf = ckpt::tensorflow::restore_tree("/tf/run");                        // TensorFlow: read only
}
}  // namespace readme_formats

// docs/design.md: what users write.
namespace design_users {
#include <ckpt/ckpt.hpp>
#include <ckpt/manager.hpp>
#include <xtensor/xtensor.hpp>

struct Dense    { xt::xtensor<float, 2> kernel; xt::xtensor<float, 1> bias; };
struct Params   { Dense encoder, decoder; };
struct Adam     { Params mu, nu; std::int64_t count = 0; };
struct TrainState {
  std::int64_t step = 0;
  Params params;
  Adam opt;
  std::mt19937_64 rng;
  std::map<std::string, float> config;
};

void train(TrainState& state, double& loss);

void run(TrainState& state) {
  // one-shot, like PyTreeCheckpointer
  ckpt::save("/tmp/run/single", state);
  auto s   = ckpt::restore<TrainState>("/tmp/run/single");
  auto p   = ckpt::restore<Params>("/tmp/run/single", {.subtree = "params"});
  auto raw = ckpt::restore_tree("/tmp/run/single");   // no target: a dynamic tree
  auto md  = ckpt::metadata("/tmp/run/single");       // dtypes and shapes, no data read

  // managed, like CheckpointManager; policies are types, their numbers are values
  ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(
      "/tmp/run/managed", {.max_to_keep = 2, .save_interval_steps = 100});
  for (double loss = 0; state.step < 1000; ++state.step) {
    train(state, loss);
    mgr.save(state.step, state, {{"eval/loss", loss}});
  }
  mgr.wait_until_finished();
  auto latest = mgr.restore();          // latest step
}
}  // namespace design_users

// docs/distributed.md: saving and restoring on every rank; the manager across ranks.
#if CKPT_README_MPI
namespace distributed_save {
#include <ckpt/mpi.hpp>   // opt-in: needs <mpi.h>; CMake ckpt::mpi, meson dependency('ckpt-mpi')

struct Model {
  ckpt::Sharded<xt::xtensor<float, 2>> embed;  // rows split over the ranks
  xt::xtensor<float, 1> bias;                  // the same on every rank
};
struct TrainState { std::int64_t step = 0; Model model; std::mt19937_64 rng; };

void checkpoint(TrainState& state) {
  ckpt::mpi::Comm comm(MPI_COMM_WORLD);          // you keep MPI_Init / MPI_Finalize
  ckpt::mpi::save(comm, "/shared/run/7", state); // every rank, with its own state
  ckpt::mpi::restore_into(comm, "/shared/run/7", state);    // onto this job's layout
  auto same = ckpt::mpi::restore<TrainState>(comm, "/shared/run/7");  // the saved layout
}
}  // namespace distributed_save

namespace distributed_manager {
using distributed_save::TrainState;
void train(TrainState&);
void snippet(ckpt::mpi::Comm& comm, TrainState& state, std::int64_t total, double loss) {
ckpt::mpi::CheckpointManager<TrainState, ckpt::async_save> mgr(
    comm, "/shared/run", {.max_to_keep = 3, .save_interval_steps = 100});
if (auto last = mgr.latest_step()) mgr.restore_into(*last, state);   // this job's layout
for (; state.step < total; ++state.step) {
  train(state);
  if (mgr.should_save(state.step)) mgr.save(state.step, state, {{"loss", loss}});
}
mgr.wait_until_finished();
}
}  // namespace distributed_manager
#endif

// docs/incremental.md: incremental saves; progress.
namespace incremental_save {
using ::TrainState;
void snippet(std::int64_t step, const TrainState& state) {
ckpt::CheckpointManager<TrainState> mgr("/tmp/run", {.max_to_keep = 3, .incremental = true});
mgr.save(step, state);   // leaves unchanged since the latest step are not written again
}
}  // namespace incremental_save

namespace incremental_progress {
using ::TrainState;
bool stop_requested = false;
void snippet(const std::string& dir, const TrainState& state, ckpt::ManagerOptions& mgr_options) {
auto progress = [](const ckpt::Progress& p) {
  std::fprintf(stderr, "\r%5.1f%%", 100.0 * p.bytes_done / p.bytes_total);
  return !stop_requested;          // false cancels
};
ckpt::save(dir, state, {.progress = progress});
mgr_options.save_options.progress = progress;                     // the manager's saves
auto s = ckpt::restore<TrainState>(dir, {.progress = progress});  // restores (every format)
}
}  // namespace incremental_progress

// docs/manager.md: the loop; items beside the state.
namespace manager_loop {
using ::TrainState;
void train(TrainState&);
double evaluate(const TrainState&);
int snippet(std::int64_t total) {
TrainState state;
ckpt::CheckpointManager<TrainState, ckpt::async_save> mgr(
    "/tmp/run", {.max_to_keep = 3,
                 .best_metric = "eval/loss",
                 .best_mode = ckpt::BestMode::min,
                 .save_interval_steps = 1000});
if (auto step = mgr.latest_step()) state = mgr.restore(*step);
for (; state.step < total; ++state.step) {
  train(state);
  if (mgr.should_save(state.step))
    mgr.save(state.step, state, {{"eval/loss", evaluate(state)}});
  if (mgr.reached_preemption(state.step)) { mgr.wait_until_finished(); return 0; }  // SIGTERM
}
mgr.wait_until_finished();
return 0;
}
}  // namespace manager_loop

namespace manager_items {
using ::TrainState;
struct LoaderPosition { std::int64_t epoch = 0, index = 0; };
struct Loader { LoaderPosition position() const; void seek(const LoaderPosition&); };
void snippet(ckpt::CheckpointManager<TrainState>& mgr, std::int64_t step, const TrainState& state, double loss,
             Loader& loader, const nlohmann::json& config_json, const std::string& git_sha) {
mgr.save(step, state, {{"eval/loss", loss}},
         {.items = {{"dataset", ckpt::tree_item(loader.position())},   // any type ckpt can save
                    {"config", ckpt::json_item(config_json)}},          // nlohmann::json
          .custom_metadata = {{"git", git_sha}}});

loader.seek(mgr.restore_item<LoaderPosition>(step, "dataset"));
nlohmann::json cfg = mgr.item_json(step, "config");
nlohmann::json md  = mgr.custom_metadata(step);
}
}  // namespace manager_items

// docs/restore.md: migrations, transforms, lazy and abstract restores, a memory budget.
namespace restore_migrate {
const std::string dir = "run/1";
struct StateV1 { std::int64_t step; xt::xtensor<float, 2> kernel; std::vector<float> mu; float lr; };
struct Schedule { float peak; std::int64_t warmup; };
struct StateV2 { std::int64_t step; xt::xtensor<double, 2> kernel; std::vector<float> first_moment; Schedule schedule; };
struct StateV3 { std::int64_t step; xt::xtensor<double, 1> kernel; std::vector<float> first_moment; Schedule schedule; };

const auto m12 = ckpt::migration<StateV1, StateV2>(
    ckpt::rename<"mu", "first_moment">,                 // a leaf or a whole subtree moved
    ckpt::rename<"lr", "schedule.peak">,
    ckpt::fill<"schedule.warmup">([](const StateV1& old) { return old.step / 10; }));  // computed
const auto m23 = ckpt::migration<StateV2, StateV3>(
    ckpt::transform<"kernel">([](const xt::xtensor<double, 2>& k) {            // a type change
      return xt::xtensor<double, 1>(xt::flatten(k)); }));

StateV2 s2 = ckpt::restore<StateV2>(dir, m12);                    // dir was written by StateV1
StateV3 s3 = ckpt::restore<StateV3>(dir, ckpt::chain(m12, m23));  // dir written by V1, V2 or V3
}  // namespace restore_migrate

namespace restore_transform {
struct State { xt::xtensor<float, 2> encoder; };
void snippet(const std::string& dir, const std::string& dir2, const State& state) {
auto s = ckpt::restore<State>(dir, {.transform = [](ckpt::Tree& t) {
  t.rename("dense", "encoder");           // a leaf or subtree
  t.erase("old_note");
  t.set("schedule.warmup", std::int64_t{100});
}});
ckpt::save(dir2, state, {.transform = [](ckpt::Snapshot& s) {
  s.rename("dense", "encoder");           // the same edits, with the same errors
  s.erase("scratch");
  s.set("version", std::string("2"));
}});
}
}  // namespace restore_transform

namespace restore_lazy {
using ::TrainState;
void snippet(const std::string& dir) {
struct Frozen { ckpt::lazy<xt::xtensor<float, 2>> embedding; std::int64_t step; };
auto f = ckpt::restore<Frozen>(dir);                  // reads the manifest and `step` only
auto shape = f.embedding.shape();                     // known without reading the bytes
const auto& table = f.embedding.get();                // read (and verified) on first use

auto target = ckpt::allocate<TrainState>(dir);        // every array sized, no data read
ckpt::restore_into(dir, target);                      // then read straight into that memory
}
}  // namespace restore_lazy

namespace restore_budget {
void snippet(const std::string& dir, ::TrainState& state) {
ckpt::restore_into(dir, state, {.restore_dtype = ckpt::dtype::float32, .max_memory = 256 << 20});
ckpt::convert("run/step_100", "export", "safetensors", {.max_memory = 128 << 20});  // ckpt/convert.hpp
}
}  // namespace restore_budget

// docs/manager.md: the non-finite guard.
namespace manager_guard {
using ::TrainState;
bool diverged(double loss);
void snippet(TrainState& state, double loss) {
ckpt::CheckpointManager<TrainState> mgr("/tmp/run", {.max_to_keep = 3, .best_metric = "eval/loss",
                                                     .best_mode = ckpt::BestMode::min,
                                                     .guard_non_finite = true});
// ... train, save
if (diverged(loss)) state = mgr.restore(mgr.latest_finite_step());
}
}  // namespace manager_guard

// docs/storage.md: Google Cloud Storage.
#if CKPT_README_GCS
namespace storage_gcs {
using ::TrainState;
void snippet(const TrainState& state) {
#include <ckpt/storage/gcs.hpp>   // CMake: target_link_libraries(app ckpt::ckpt ckpt::gcs)
ckpt::save("gs://bucket/runs/a/checkpoint_100", state);
ckpt::gcs::configure({.user_project = "billing-project", .connections = 16});  // or the environment
ckpt::CheckpointManager<TrainState, ckpt::async_save, ckpt::gcs> mgr("bucket/runs/a", {.max_to_keep = 3});
}
}  // namespace storage_gcs
#endif

// docs/torch.md: Eigen's leaves.
#if CKPT_README_EIGEN
namespace torch_eigen {
#include <ckpt/eigen.hpp>   // ckpt.hpp, Eigen/Core and the Tensor module

struct Layer { Eigen::MatrixXf weight; Eigen::VectorXf bias; };
struct State {
  std::int64_t step = 0;
  std::vector<Layer> layers;
  Eigen::Matrix<double, 3, 3> rotation;
  Eigen::Tensor<float, 4> conv;            // the unsupported Tensor module
  xt::xtensor<float, 2> embed;
};

void save_and_restore(const State& state) {
  ckpt::save("/tmp/run/1", state);
  auto back = ckpt::restore<State>("/tmp/run/1");
}
}  // namespace torch_eigen
#endif

// docs/torch.md: PyTorch's files.
namespace torch_pt {
struct Linear { xt::xtensor<float, 2> weight; xt::xtensor<float, 1> bias; };
struct Net { Linear fc; };
using ::TrainState;
void snippet() {
#include <ckpt/formats.hpp>

auto tree = ckpt::restore_tree("model.pt");                 // any torch.save file
Net net = ckpt::restore<Net>("model.pt");                   // a state_dict into a struct of the same names
auto ck = ckpt::restore<TrainState>("checkpoint.pt", {.partial = true,
    .transform = [](ckpt::Tree& t) { t.rename("model", "net"); }});  // renamed paths
ckpt::save<ckpt::pytorch>("out.pt", net);                   // loads in torch.load + load_state_dict
ckpt::save<ckpt::pytorch>("mem://bucket/run", net);         // any storage: dir/pytorch_model.bin
}
}  // namespace torch_pt
