// examples/t5_from_tensorflow.cpp — bring a Mesh TensorFlow T5 checkpoint into a t5x-shaped
// tree, as t5x's Checkpointer.convert_from_tf_checkpoint does, and save it.
//
//   t5_from_tensorflow TF_PREFIX_OR_DIR [OUT_DIR]
// lists every variable with its new path; with OUT_DIR, writes the tree as a t5x
// checkpoint (readable by t5x's restore). Needs the data shards for OUT_DIR.
#include <cstdio>

#include <ckpt/formats.hpp>

#include "t5_mesh_tf_translator.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TF_PREFIX_OR_DIR [OUT_DIR]\n", argv[0]);
    return 2;
  }
  try {
    const ckpt::Tree tree = ckpt::tensorflow::convert(argv[1], t5_example::t5_mesh_tf_translator());
    for (const auto& l : tree.leaves())
      std::printf("%-70s %-9s %s\n", l.path().str().c_str(), std::string(ckpt::dtype_name(l.dtype())).c_str(),
                  ckpt::shape_str(l.shape()).c_str());
    if (argc > 2) {
      ckpt::Snapshot snap;
      for (const auto& l : tree.leaves()) snap.leaves.push_back({l.path(), ckpt::LeafBytes::own(l.dtype(), l.shape(), l.bytes())});
      ckpt::save_snapshot<ckpt::t5x>(argv[2], snap);
      std::printf("wrote %zu leaves to %s\n", snap.leaves.size(), argv[2]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
