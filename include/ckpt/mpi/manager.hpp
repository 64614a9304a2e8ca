// ckpt/mpi/manager.hpp — ckpt::mpi::CheckpointManager: numbered steps saved by every rank.
//
//   ckpt::mpi::CheckpointManager<TrainState, ckpt::async_save> mgr(comm, "/shared/run",
//       {.max_to_keep = 2, .save_interval_steps = 100});
//   if (mgr.should_save(step)) mgr.save(step, state, {{"eval/loss", loss}});   // every rank
//
// ckpt::CheckpointManager (manager/checkpoint_manager.hpp) with the coordination policy
// ckpt::mpi::ranks (mpi/coordination.hpp): the same methods, every one called by every
// rank, each rank passing its own state and items. Rank 0 decides (the step list, the
// times, the values steps are ranked by) and every rank takes its decisions; rank 0
// alone locks the root, deletes steps and writes the step metadata; a failure on one
// rank is thrown on every rank. Steps are written as ckpt::mpi::save writes them
// (native, or ckpt::t5x, ckpt::orbax, ckpt::orbax_without_ocdbt: restore those with
// restore_into, as they do not record which rank held which box). docs/distributed.md
// says what each option does across ranks.
#pragma once

#include <ckpt/manager.hpp>
#include <ckpt/mpi/coordination.hpp>

namespace ckpt::mpi {

// Constructed as (comm, root, options) on every rank of comm.
template <class State, class... Policies>
using CheckpointManager = ckpt::CheckpointManager<State, ranks, Policies...>;

}  // namespace ckpt::mpi
