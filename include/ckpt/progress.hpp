// ckpt/progress.hpp — progress of a save or a restore, reported to a callback.
//
//   ckpt::save(dir, state, {.progress = [](const ckpt::Progress& p) {
//     std::printf("%llu / %llu bytes\n", p.bytes_done, p.bytes_total);
//     return !stop_requested;   // false cancels: the save leaves no checkpoint
//   }});
//
// The callback is called at most every `min_interval` (plus once at the start and once
// when everything is done), from whichever thread did the work, never from two threads
// at once. Returning false stops the work at the next piece: a save throws
// ckpt::CancelledError and its staging directory is removed; a restore throws it too
// (what it filled so far is left as it is).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace ckpt {

struct Progress {
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::size_t leaves_done = 0;
  std::size_t leaves_total = 0;
};

// Returns false to cancel.
using ProgressFn = std::function<bool(const Progress&)>;

}  // namespace ckpt
