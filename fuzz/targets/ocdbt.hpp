// fuzz/targets/ocdbt.hpp — the Orbax OCDBT reader: the input replaces one file of an
// OCDBT checkpoint (first byte: which one; see FileSet): the manifest, a B-tree node or
// value file under d/, _METADATA or _CHECKPOINT_METADATA. Two checkpoints take turns:
// one ckpt writes (fuzz::arrays_state()) and the one Orbax wrote in tests/data.
#pragma once

#include "../fuzz_common.hpp"

namespace fuzz::targets::ocdbt {

inline const FileSet& written() {
  static const FileSet s = [] {
    const auto p = fuzz::scratch() / "ocdbt";
    ckpt::save<ckpt::orbax>(p, fuzz::arrays_state(), {.force = true});
    return FileSet(p);
  }();
  return s;
}

inline const FileSet& from_orbax() {
  static const FileSet s(
      copy_to_scratch(fixture("orbax/ocdbt_compat_202603/checkpoints/v0_checkpoints/direct_checkpoint"), "ocdbt-orbax"));
  return s;
}

inline int run(const std::uint8_t* data, std::size_t size) {
  // the second byte picks the checkpoint; the rest is FileSet's input
  if (size < 2) return 0;
  const FileSet& set = data[1] % 2 == 0 ? written() : from_orbax();
  std::vector<std::uint8_t> in(data, data + size);
  in.erase(in.begin() + 1);
  set.with_input(in.data(), in.size(), [&] { fuzz::open_and_read<ckpt::orbax>(set.dir()); });
  return 0;
}

inline const Register registered{"ocdbt", &run};

}  // namespace fuzz::targets::ocdbt
