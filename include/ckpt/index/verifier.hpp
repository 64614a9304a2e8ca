// ckpt/index/verifier.hpp — checks a leaf's bytes that arrive in pieces.
//
// Reading a leaf through a buffer smaller than the leaf (Index::read_pieces under
// RestoreOptions::max_memory, the streams of ckpt::convert) still verifies every byte:
// against the chunk checksums of native format v2 as each chunk completes, or against
// the leaf's xxh3 when its last byte arrives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include <ckpt/error.hpp>
#include <ckpt/index/entry.hpp>
#include <ckpt/io/checksum.hpp>

namespace ckpt {

// Checks a leaf's bytes that arrive front to back in pieces of any size, against the
// entry's chunk checksums (format v2) as each chunk completes, or its xxh3 at the end.
class LeafVerifier {
 public:
  // From byte `start` of the leaf on: 0, or the start of a chunk of a leaf with chunk
  // checksums (a part of the leaf, read on its own). Else throws ckpt::Error. Errors
  // name `checkpoint` (the Index's: it outlives the verifier, as e does).
  LeafVerifier(const std::string& checkpoint, const IndexEntry& e, std::uint64_t start = 0);
  LeafVerifier(std::string&&, const IndexEntry&, std::uint64_t = 0) = delete;  // it keeps a reference
  // The next bytes of the leaf, in order; throws CorruptCheckpointError at the first
  // chunk (or, unchunked, the last byte) whose checksum does not match.
  void update(std::span<const std::byte> bytes);

 private:
  [[noreturn]] void fail(const std::string& where) const;
  void check_chunk(std::uint64_t digest, std::uint64_t size);
  const std::string& checkpoint_;
  const IndexEntry& e_;
  std::uint64_t seen_ = 0, chunk_fill_ = 0;
  std::size_t chunk_ = 0;
  io::Xxh3Stream hash_;
};

inline void LeafVerifier::fail(const std::string& where) const {
  throw CorruptCheckpointError(checkpoint_, e_.path.str(),
                               "checksum mismatch" + where + ": the leaf's bytes were altered or torn");
}

inline LeafVerifier::LeafVerifier(const std::string& checkpoint, const IndexEntry& e, std::uint64_t start)
    : checkpoint_(checkpoint), e_(e) {
  if (start == 0) return;
  if (e.chunk_xxh3.empty() || e.chunk_bytes == 0 || start % e.chunk_bytes != 0 || start > e.length)
    throw Error(checkpoint, e.path.str(),
                "checking the leaf from byte " + std::to_string(start) + ", which starts none of its checksummed chunks");
  seen_ = start;
  chunk_ = static_cast<std::size_t>(start / e.chunk_bytes);
}

inline void LeafVerifier::update(std::span<const std::byte> bytes) {
  if (bytes.size() > e_.length - seen_) fail(" (more bytes than the leaf holds)");
  if (e_.chunk_xxh3.empty() || e_.chunk_bytes == 0) {
    if (seen_ == 0 && bytes.size() == e_.length) {  // the whole leaf at once: no streaming state
      seen_ = e_.length;
      if (io::xxh3(bytes) != e_.checksum) fail("");
      return;
    }
    hash_.update(bytes);
    seen_ += bytes.size();
    if (seen_ == e_.length && hash_.digest() != e_.checksum) fail("");
    return;
  }
  while (!bytes.empty()) {
    const auto whole = static_cast<std::size_t>(std::min<std::uint64_t>(e_.chunk_bytes, e_.length - seen_));
    if (chunk_fill_ == 0 && bytes.size() >= whole) {  // a whole chunk at once: no streaming state
      seen_ += whole;
      check_chunk(io::xxh3(bytes.first(whole)), whole);
      bytes = bytes.subspan(whole);
      continue;
    }
    const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), e_.chunk_bytes - chunk_fill_));
    hash_.update(bytes.first(take));
    bytes = bytes.subspan(take);
    seen_ += take;
    chunk_fill_ += take;
    if (chunk_fill_ == e_.chunk_bytes || seen_ == e_.length) {
      check_chunk(hash_.digest(), chunk_fill_);
      chunk_fill_ = 0;
      hash_ = io::Xxh3Stream{};
    }
  }
}

// The chunk that ends at seen_, size bytes long, hashed to digest: the next one is due.
inline void LeafVerifier::check_chunk(std::uint64_t digest, std::uint64_t size) {
  if (chunk_ >= e_.chunk_xxh3.size() || digest != e_.chunk_xxh3[chunk_])
    fail(" in bytes [" + std::to_string(seen_ - size) + ", +" + std::to_string(size) + ")");
  ++chunk_;
}

}  // namespace ckpt
