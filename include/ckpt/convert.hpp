// ckpt/convert.hpp — ckpt::convert: a checkpoint rewritten in another format, streamed.
//
// The leaves are not read into memory first: each becomes a LeafStream that the
// writer pulls piece by piece, so that converting a checkpoint larger than memory,
// or a single leaf larger than SaveOptions::max_memory, holds a buffer, not the leaf.
// The bytes are verified as they pass; a leaf that turns out corrupt
// fails the conversion, and no checkpoint appears at dst.
//
// Where the source format reads only whole leaves (zarr chunks of t5x and Orbax,
// Flax's msgpack), each leaf is read whole when the writer reaches it and freed after:
// one such leaf at a time. Where the target format takes leaves in memory only (Flax's
// msgpack file), all the leaves are read before writing. Under a max_memory, either is
// checked before anything is read, and refused with an Error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/index.hpp>
#include <ckpt/options.hpp>
#include <ckpt/save.hpp>
#include <ckpt/snapshot.hpp>
#if CKPT_DEFINE_API
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>
#include <ckpt/index/verifier.hpp>
#endif

namespace ckpt {

class LeafVerifier;  // index/verifier.hpp, needed only where the stream is defined

struct ConvertResult {
  std::string from;      // the source's format name
  std::size_t leaves = 0;
  std::uint64_t bytes = 0;
};

// Writes the checkpoint at src to dst in the registered, writable format `to` (with
// opts: force, progress, max_memory, ...). Every failure is a ckpt::Error naming the
// checkpoint, and the leaf when one is at fault.
CKPT_API ConvertResult convert(const std::filesystem::path& src, const std::filesystem::path& dst,
                               const FormatEntry& to, const SaveOptions& opts = {});
CKPT_API ConvertResult convert(const std::filesystem::path& src, const std::filesystem::path& dst, std::string_view to,
                               const SaveOptions& opts = {});

namespace detail {
// One stored leaf, as a stream read front to back: ranges where the format reads them,
// else the whole leaf read at the first piece and freed after the last.
class IndexLeafStream final : public LeafStream {
 public:
  IndexLeafStream(std::shared_ptr<const Index> index, const IndexEntry& e);
  ~IndexLeafStream() override;
  std::uint64_t size() const override { return e_.length; }
  void read(std::uint64_t offset, std::span<std::byte> dst) const override;

 private:
  std::shared_ptr<const Index> index_;
  const IndexEntry& e_;
  // A writer reads one leaf from one thread, front to back: the position, the running
  // checksum and the whole-leaf buffer change under a const read.
  mutable std::uint64_t next_ = 0;
  mutable std::unique_ptr<LeafVerifier> verifier_;
  mutable std::vector<std::byte> whole_;
};
}  // namespace detail

#if CKPT_DEFINE_API
CKPT_API detail::IndexLeafStream::IndexLeafStream(std::shared_ptr<const Index> index, const IndexEntry& e)
    : index_(std::move(index)), e_(e) {}
CKPT_API detail::IndexLeafStream::~IndexLeafStream() = default;

CKPT_API void detail::IndexLeafStream::read(std::uint64_t offset, std::span<std::byte> dst) const {
  if (offset != next_ || dst.size() > e_.length - offset)
    throw Error(index_->checkpoint(), e_.path.str(), "a streamed leaf is read front to back, within its length");
  if (index_->reads_pieces(e_)) {
    try {
      index_->reader()->read_range(*index_, e_, offset, dst);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& x) {
      throw CorruptCheckpointError(index_->checkpoint(), e_.path.str(), std::string("cannot read the leaf: ") + x.what());
    }
    if (index_->reader()->has_xxh3()) {  // native; other formats check what they decode
      if (!verifier_) verifier_ = std::make_unique<LeafVerifier>(index_->checkpoint(), e_);
      verifier_->update(dst);
    }
  } else {
    if (offset == 0) {
      whole_.resize(static_cast<std::size_t>(e_.length));
      index_->read(e_, whole_, true);
    }
    if (!dst.empty()) std::memcpy(dst.data(), whole_.data() + offset, dst.size());
  }
  next_ = offset + dst.size();
  if (next_ == e_.length) std::vector<std::byte>().swap(whole_);  // one whole leaf held at a time
}

CKPT_API ConvertResult convert(const std::filesystem::path& src, const std::filesystem::path& dst,
                               const FormatEntry& to, const SaveOptions& opts) {
  if (!to.write_to && !to.save_file) throw Error(dst.string(), "", "ckpt cannot write the " + std::string(to.name) + " format");
  const std::shared_ptr<const Index> index = open_index(src);
  Snapshot snap;
  snap.type_name = index->info().type_name;
  snap.schema = index->info().schema;
  snap.fingerprint = index->info().fingerprint;
  // Arrays from the inline threshold up are streamed; the rest (scalars, strings, small
  // arrays, which the native target keeps in its manifest and t5x and Orbax in msgpack
  // or JSON) are read now. What a max_memory must hold besides the writer's buffers:
  // the largest leaf read whole, or, for a target that takes leaves in memory (Flax),
  // all of them (checked by save_snapshot).
  const bool target_streams = detail::takes_streams(to, dst);
  std::uint64_t largest_whole = 0;
  const IndexEntry* largest = nullptr;
  for (const IndexEntry& e : index->entries()) {
    if (e.length < std::max<std::uint64_t>(opts.inline_threshold, 1) || !is_numeric(e.type) || e.shape.empty()) {
      std::vector<std::byte> b(static_cast<std::size_t>(e.length));
      index->read(e, b, true);
      snap.leaves.push_back({e.path, LeafBytes::own(e.type, e.shape, std::move(b))});
      continue;
    }
    if (!index->reads_pieces(e) && e.length > largest_whole) largest_whole = e.length, largest = &e;
    snap.leaves.push_back(
        {e.path, LeafBytes::streamed(e.type, e.shape, std::make_shared<detail::IndexLeafStream>(index, e))});
  }
  SaveOptions o = opts;
  if (opts.max_memory != 0 && target_streams) {
    // Half the budget for the writer's buffers, the rest for a leaf the source reads whole.
    o.max_memory = opts.max_memory / 2;
    if (largest && largest_whole > opts.max_memory - o.max_memory)
      throw Error(index->checkpoint(), largest->path.str(),
                  "the " + index->info().format + " reader reads this leaf whole (" + std::to_string(largest_whole) +
                      " bytes), more than half of max_memory (" + std::to_string(opts.max_memory) + " bytes)");
  }
  save_snapshot(to, dst, snap, o);
  return {index->info().format, snap.leaves.size(), snap.total_bytes()};
}

CKPT_API ConvertResult convert(const std::filesystem::path& src, const std::filesystem::path& dst, std::string_view to,
                               const SaveOptions& opts) {
  const FormatEntry* f = find_format(to);
  if (!f) throw Error(dst.string(), "", "no registered format is called \"" + std::string(to) + "\" (" + registered_format_names() + ")");
  return convert(src, dst, *f, opts);
}
#endif

}  // namespace ckpt
