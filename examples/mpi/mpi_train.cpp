// mpi_train — data-parallel training with one row-sharded layer, checkpointed by every
// MPI rank into one checkpoint, resumed on another number of ranks.
//
//   mpirun -np 2 build/examples/mpi_train /tmp/mpi-run 20   # steps 0..19, a checkpoint every 5
//   mpirun -np 3 build/examples/mpi_train /tmp/mpi-run 40   # resumes after step 15 on 3 ranks
//
// (add --oversubscribe when there are fewer cores than ranks, --allow-run-as-root as root)
// The checkpoint directory must be on a file system every rank sees. The printed sum of
// the global embedding at step 40 is the one a single uninterrupted run prints
// (6.266208e+06): the state resumes exactly, onto another split.
#include <ckpt/mpi.hpp>
#include <xtensor/xtensor.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>

struct Model {
  ckpt::Sharded<xt::xtensor<float, 2>> embed;  // rows split over the ranks (model parallel)
  xt::xtensor<float, 1> bias;                  // the same on every rank (data parallel)
};
struct TrainState {
  std::int64_t step = 0;
  Model model;
  std::mt19937_64 rng{42};  // replicated: every rank draws the same numbers
};

constexpr std::size_t rows = 1000, cols = 64;

// This rank's rows: the first rows % size ranks get one more.
TrainState layout(int rank, int size) {
  const std::size_t base = rows / static_cast<std::size_t>(size), extra = rows % static_cast<std::size_t>(size);
  const auto r = static_cast<std::size_t>(rank);
  const std::size_t r0 = r * base + std::min(r, extra), n = base + (r < extra ? 1 : 0);
  TrainState s;
  s.model.embed = {{rows, cols}, {r0, 0}, xt::zeros<float>({n, cols})};
  s.model.bias = xt::zeros<float>({cols});
  return s;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    const ckpt::mpi::Comm comm(MPI_COMM_WORLD);
    const char* root = argc > 1 ? argv[1] : "/tmp/ckpt-mpi-train";
    const std::int64_t steps = argc > 2 ? std::atoll(argv[2]) : 20;

    ckpt::mpi::CheckpointManager<TrainState> mgr(comm, root, {.max_to_keep = 2, .save_interval_steps = 5});
    TrainState state = layout(comm.rank(), comm.size());
    if (auto last = mgr.latest_step()) {  // resume: each rank reads the rows it holds now
      mgr.restore_into(*last, state);
      ++state.step;
      if (comm.rank() == 0)
        std::printf("resumed from step %lld on %d ranks\n", static_cast<long long>(*last), comm.size());
    }
    for (; state.step < steps; ++state.step) {
      // "Training": every element of the embedding moves by a number all ranks draw alike.
      const float lr = std::uniform_real_distribution<float>(0.0f, 0.01f)(state.rng);
      auto& local = state.model.embed.local;
      for (std::size_t i = 0; i < local.shape()[0]; ++i)
        for (std::size_t j = 0; j < cols; ++j)
          local(i, j) += lr * static_cast<float>(state.model.embed.offset[0] + i + j);
      state.model.bias += lr;
      if (mgr.should_save(state.step)) mgr.save(state.step, state);
    }
    mgr.wait_until_finished();

    double mine = 0, all = 0;
    for (float v : state.model.embed.local) mine += v;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (comm.rank() == 0)
      std::printf("step %lld on %d ranks: sum of the embedding %.6e, steps kept:", static_cast<long long>(state.step),
                  comm.size(), all);
    for (auto s : mgr.all_steps())
      if (comm.rank() == 0) std::printf(" %lld", static_cast<long long>(s));
    if (comm.rank() == 0) std::printf("\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_train: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
