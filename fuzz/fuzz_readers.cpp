// fuzz/fuzz_readers.cpp — the one libFuzzer binary holding every reader's target.
//
// One translation unit, so the readers are compiled once, not once per target (CI
// builds this with the sanitizers on 2 cores). CMake links fuzz_<target> to it for each
// target in fuzz/targets/; the name it is run under picks the target (or
// CKPT_FUZZ_TARGET does). Run as `make_seeds OUT` it writes the seed corpora instead.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_common.hpp"
#include "seeds.hpp"
#include "targets/flax.hpp"
#include "targets/native.hpp"
#include "targets/ocdbt.hpp"
#include "targets/orbax.hpp"
#include "targets/pytorch.hpp"
#include "targets/safetensors.hpp"
#include "targets/step_metadata.hpp"
#include "targets/t5x.hpp"
#include "targets/tensorboard.hpp"
#include "targets/tf.hpp"
#include "targets/zarr.hpp"
#include "targets/zarr3.hpp"

namespace {
fuzz::TargetFn chosen = nullptr;

std::string known_targets() {
  std::string s;
  for (const auto& [name, fn] : fuzz::registry()) s += (s.empty() ? "" : ", ") + name;
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const std::string self = fuzz::fs::path((*argv)[0]).filename().string();
  if (self == "make_seeds") {
    if (*argc != 2) {
      std::fprintf(stderr, "usage: make_seeds OUT\n");
      std::exit(2);
    }
    std::exit(fuzz::seeds::make_seeds((*argv)[1]));
  }
  std::string name;
  if (const char* env = std::getenv("CKPT_FUZZ_TARGET")) name = env;
  else if (self.rfind("fuzz_", 0) == 0) name = self.substr(5);
  const auto it = fuzz::registry().find(name);
  if (it == fuzz::registry().end()) {
    std::fprintf(stderr, "fuzz: run me as fuzz_<target> or with CKPT_FUZZ_TARGET=<target>; targets: %s\n",
                 known_targets().c_str());
    std::exit(2);
  }
  chosen = it->second;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { return chosen(data, size); }
