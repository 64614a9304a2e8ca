// ckpt/manager.hpp — CheckpointManager: numbered steps in one root directory, with
// save policies, retention, metrics, items beside the state, async saves and preemption.
// The header users include; the parts live in manager/, one concept each:
//   manager/options.hpp             ManagerOptions, SaveArgs (and their checks)
//   manager/step_catalogue.hpp      which committed steps a root holds, with their metadata
//   manager/step_deletion.hpp       deleting a step (a rename first, or into todelete_subdir)
//   manager/checkpoint_manager.hpp  the CheckpointManager class
//   manager/coordination.hpp        the coordination policy: one process (ckpt::mpi::ranks: MPI)
//   manager/step_name.hpp, lock.hpp, preemption.hpp, items.hpp, step_metadata.hpp
#pragma once

#include <ckpt/ckpt.hpp>
#include <ckpt/manager/checkpoint_manager.hpp>
