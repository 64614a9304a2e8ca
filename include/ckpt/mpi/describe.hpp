// ckpt/mpi/describe.hpp — what each rank holds of each leaf, exchanged before a
// collective save so that every rank works out the same plan from the same facts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/checksum.hpp>
#include <ckpt/leaf/dtype.hpp>
#include <ckpt/mpi/comm.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/tree/path.hpp>

namespace ckpt::mpi::detail {

// What a rank holds of one leaf.
struct LeafDesc {
  std::string path;
  dtype type = dtype::none;
  Shape shape;  // of the bytes this rank holds
  bool boxed = false;
  Shape global, origin;
  std::uint64_t length = 0;
  std::uint64_t hash = 0;  // of a replicated leaf's bytes
};

inline std::vector<std::byte> describe(const Snapshot& snap) {
  Out o;
  o.u64(snap.leaves.size());
  for (const auto& l : snap.leaves) {
    o.str(l.path.str());
    o.u64(static_cast<std::uint64_t>(l.data.type));
    o.shape(l.data.shape);
    o.u64(l.box ? 1 : 0);
    o.shape(l.box ? l.box->global_shape : Shape{});
    o.shape(l.box ? l.box->origin : Shape{});
    o.u64(l.data.view.size());
    o.u64(l.box ? 0 : io::xxh3(l.data.view));
  }
  return std::move(o.b);
}

inline std::vector<LeafDesc> parse_description(std::span<const std::byte> bytes) {
  In in{bytes};
  std::vector<LeafDesc> out(static_cast<std::size_t>(in.u64()));
  for (auto& d : out) {
    d.path = in.str();
    d.type = static_cast<dtype>(in.u64());
    d.shape = in.shape();
    d.boxed = in.u64() != 0;
    d.global = in.shape();
    d.origin = in.shape();
    d.length = in.u64();
    d.hash = in.u64();
  }
  return out;
}

// Throws, the same error on every rank, unless every rank saves the same tree: the
// same paths, dtypes and Sharded-ness, the same global shape of each Sharded leaf, and
// equal values (by hash) of the leaves that are not Sharded.
inline void check_same_tree(const std::string& dir, const std::vector<std::vector<LeafDesc>>& all) {
  const int P = static_cast<int>(all.size());
  const auto& first = all[0];
  for (int r = 1; r < P; ++r)
    if (all[static_cast<std::size_t>(r)].size() != first.size())
      throw Error(dir, "", "rank " + std::to_string(r) + " saves " + std::to_string(all[static_cast<std::size_t>(r)].size()) +
                               " leaves, rank 0 " + std::to_string(first.size()) + ": every rank must save the same tree");
  for (std::size_t i = 0; i < first.size(); ++i) {
    const LeafDesc& d0 = first[i];
    for (int r = 1; r < P; ++r) {
      const LeafDesc& d = all[static_cast<std::size_t>(r)][i];
      const std::string who = "rank " + std::to_string(r);
      if (d.path != d0.path)
        throw Error(dir, d0.path, who + " has " + quote_for_message(d.path) + " here: every rank must save the same tree");
      if (d.type != d0.type || d.boxed != d0.boxed)
        throw Error(dir, d0.path, who + " saves it as " + std::string(dtype_name(d.type)) + (d.boxed ? " Sharded" : "") +
                                      ", rank 0 as " + std::string(dtype_name(d0.type)) + (d0.boxed ? " Sharded" : ""));
      if (d0.boxed && d.global != d0.global)
        throw ShapeMismatchError(dir, d0.path, "global shape " + shape_str(d.global) + " on " + who + ", " +
                                                   shape_str(d0.global) + " on rank 0");
      if (!d0.boxed && (d.shape != d0.shape || d.hash != d0.hash))
        throw Error(dir, d0.path, "a leaf that is not Sharded must be equal on every rank; " + who +
                                      " holds another value (make it Sharded if each rank has its own)");
    }
  }
}

}  // namespace ckpt::mpi::detail
