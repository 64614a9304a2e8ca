// ckpt/mpi.hpp — many processes: one checkpoint written by every MPI rank in parallel,
// restored onto another layout or process count. Opt-in: needs <mpi.h> (CMake target
// ckpt::mpi, meson dependency('ckpt-mpi'), pkg-config ckpt-mpi); programs that do not
// include it do not need MPI.
//
//   ckpt::mpi::Comm comm(MPI_COMM_WORLD);            // the caller keeps MPI_Init/Finalize
//   ckpt::mpi::save(comm, "/shared/run/7", state);   // every rank, collectively
//   ckpt::mpi::restore_into(comm, "/shared/run/7", state);   // any layout
//   auto s = ckpt::mpi::restore<State>(comm, "/shared/run/7"); // the saved layout
//   ckpt::mpi::CheckpointManager<State, ckpt::async_save> mgr(comm, "/shared/run", {...});
//
// The model (docs/distributed.md): ckpt::Sharded<A> leaves are boxes of global arrays
// (leaf/sharded.hpp); other leaves are equal on every rank and written once; the
// checkpoint directory lies on a file system every rank sees.
#pragma once

#include <ckpt/ckpt.hpp>
#include <ckpt/mpi/comm.hpp>
#include <ckpt/mpi/save.hpp>
#include <ckpt/mpi/restore.hpp>
#include <ckpt/mpi/manager.hpp>
