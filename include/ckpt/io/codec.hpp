// ckpt/io/codec.hpp — gzip, zlib, zstd, blosc, lz4 and bz2, with decompression bounded by
// the size expected.
//
// Chunks of zarr arrays (t5x, Orbax, zarr) are compressed. A reader always knows how
// many bytes a chunk must decompress to, so decompression writes into a buffer of
// exactly that size and fails the moment the data wants more: a decompression bomb
// costs nothing but the time to notice it.
#pragma once

#include <blosc.h>
#include <bzlib.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>

namespace ckpt::io {

// blosc and lz4 are numcodecs' framings: blosc's own self-describing header (blosc 1
// format), and lz4 as a 4-byte little-endian decompressed size followed by one LZ4
// block. bz2 is a plain bzip2 stream.
enum class codec { none, gzip, zlib, zstd, blosc, lz4, bz2 };

inline const char* codec_name(codec c) noexcept {
  switch (c) {
    case codec::none: return "none";
    case codec::gzip: return "gzip";
    case codec::zlib: return "zlib";
    case codec::zstd: return "zstd";
    case codec::blosc: return "blosc";
    case codec::lz4: return "lz4";
    case codec::bz2: return "bz2";
  }
  return "?";
}

// What blosc needs to compress beyond a level (decompression reads it from the header).
// The defaults are numcodecs' Blosc(): lz4, byte shuffle, automatic block size.
struct blosc_params {
  std::string cname = "lz4";  // blosclz, lz4, lz4hc, zlib, zstd
  int shuffle = 1;            // 0 none, 1 byte, 2 bit
  std::size_t typesize = 1;
  std::size_t blocksize = 0;
};

inline bool blosc_cname_known(std::string_view n) {
  return n == "blosclz" || n == "lz4" || n == "lz4hc" || n == "zlib" || n == "zstd";
}

namespace detail {
// One zstd context per thread, reused: ZSTD_compress and ZSTD_decompress make and free
// one per call, which for a compression context means allocating (and touching) a few
// hundred KiB for every chunk.
struct ZstdContexts {
  ZSTD_CCtx* c = nullptr;
  ZSTD_DCtx* d = nullptr;
  ZstdContexts() = default;
  ZstdContexts(const ZstdContexts&) = delete;
  ZstdContexts& operator=(const ZstdContexts&) = delete;
  ~ZstdContexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};
inline ZstdContexts& zstd_contexts() {
  static thread_local ZstdContexts z;
  return z;
}
inline ZSTD_CCtx* zstd_cctx() {
  auto& z = zstd_contexts();
  if (!z.c && !(z.c = ZSTD_createCCtx())) throw Error("zstd: cannot allocate a compression context");
  return z.c;
}
inline ZSTD_DCtx* zstd_dctx() {
  auto& z = zstd_contexts();
  if (!z.d && !(z.d = ZSTD_createDCtx())) throw Error("zstd: cannot allocate a decompression context");
  return z.d;
}
// One zstd frame of src at `level` into out (resized to fit; its capacity is reused).
inline void zstd_compress_into(std::vector<std::byte>& out, std::span<const std::byte> src, int level) {
  out.resize(ZSTD_compressBound(src.size()));
  const std::size_t n = ZSTD_compressCCtx(zstd_cctx(), out.data(), out.size(), src.data(), src.size(), level);
  if (ZSTD_isError(n)) throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
  out.resize(n);
}
}  // namespace detail

// Compresses src; gzip and zlib use deflate's own framing (numcodecs' GZip and Zlib).
inline std::vector<std::byte> compress(codec c, int level, std::span<const std::byte> src,
                                       const blosc_params& bp = {}) {
  std::vector<std::byte> out;
  if (c == codec::none) return {src.begin(), src.end()};
  if (c == codec::blosc) {
    if (src.size() > BLOSC_MAX_BUFFERSIZE) throw Error("blosc cannot compress more than 2 GiB at once");
    if (!blosc_cname_known(bp.cname)) throw Error("blosc has no compressor " + bp.cname);
    out.resize(src.size() + BLOSC_MAX_OVERHEAD);
    const int n = blosc_compress_ctx(level, bp.shuffle, std::max<std::size_t>(bp.typesize, 1), src.size(), src.data(),
                                     out.data(), out.size(), bp.cname.c_str(), bp.blocksize, 1);
    if (n <= 0) throw Error("blosc compression failed (" + std::to_string(n) + ")");
    out.resize(static_cast<std::size_t>(n));
    return out;
  }
  if (c == codec::lz4) {
    if (src.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE)) throw Error("lz4 cannot compress more than ~2 GiB at once");
    const int bound = LZ4_compressBound(static_cast<int>(src.size()));
    out.resize(4 + static_cast<std::size_t>(bound));
    const auto size = static_cast<std::uint32_t>(src.size());
    for (int i = 0; i < 4; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>(size >> (8 * i));
    const int n = LZ4_compress_fast(reinterpret_cast<const char*>(src.data()), reinterpret_cast<char*>(out.data() + 4),
                                    static_cast<int>(src.size()), bound, std::max(level, 1));
    if (n <= 0) throw Error("lz4 compression failed");
    out.resize(4 + static_cast<std::size_t>(n));
    return out;
  }
  if (c == codec::bz2) {
    if (src.size() > std::numeric_limits<unsigned>::max() / 2) throw Error("bz2 cannot compress more than 2 GiB at once");
    auto cap = static_cast<unsigned>(src.size() + src.size() / 100 + 600);
    out.resize(cap);
    const int rc = BZ2_bzBuffToBuffCompress(reinterpret_cast<char*>(out.data()), &cap,
                                            reinterpret_cast<char*>(const_cast<std::byte*>(src.data())),
                                            static_cast<unsigned>(src.size()), std::clamp(level, 1, 9), 0, 0);
    if (rc != BZ_OK) throw Error("bz2 compression failed (" + std::to_string(rc) + ")");
    out.resize(cap);
    return out;
  }
  if (c == codec::zstd) {
    detail::zstd_compress_into(out, src, level);
    return out;
  }
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, c == codec::gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw Error("deflateInit2 failed");
  out.resize(deflateBound(&z, static_cast<uLong>(src.size())) + 64);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(src.data()));
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  std::size_t in_left = src.size(), out_left = out.size();
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    const auto in_step = static_cast<uInt>(std::min<std::size_t>(in_left, std::numeric_limits<uInt>::max()));
    const auto out_step = static_cast<uInt>(std::min<std::size_t>(out_left, std::numeric_limits<uInt>::max()));
    z.avail_in = in_step;
    z.avail_out = out_step;
    rc = deflate(&z, in_step == in_left ? Z_FINISH : Z_NO_FLUSH);
    in_left -= in_step - z.avail_in;
    out_left -= out_step - z.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      deflateEnd(&z);
      throw Error("deflate failed");
    }
    if (rc == Z_BUF_ERROR && out_left == 0) {
      deflateEnd(&z);
      throw Error("deflate: output larger than its bound");
    }
  }
  out.resize(out.size() - out_left);
  deflateEnd(&z);
  return out;
}

// Compresses src, unless that saves less than min_saving_percent of its bytes: then, for
// zstd, a frame of stored blocks (zstd's fastest level finds nothing in such data and
// keeps its bytes as they are), which any zstd decoder reads at the speed of a memcpy
// where a compressed chunk of float weights, only 7-11% smaller, decodes several times
// slower (docs/interop.md, "Compression that pays"). Other codecs, or 0: always compressed.
inline std::vector<std::byte> compress_if_it_pays(codec c, int level, int min_saving_percent,
                                                  std::span<const std::byte> src, const blosc_params& bp = {}) {
  std::vector<std::byte> out = compress(c, level, src, bp);
  if (c != codec::zstd || min_saving_percent <= 0) return out;
  const auto saved = static_cast<double>(src.size()) - static_cast<double>(out.size());
  if (saved * 100 >= static_cast<double>(src.size()) * min_saving_percent) return out;
  // Into the same buffer: its pages are already touched, where a fresh one of a chunk's
  // size costs more in page faults than this pass costs in work.
  detail::zstd_compress_into(out, src, ZSTD_minCLevel());
  return out;
}

// Decompresses src into dst, which must come out exactly full. Returns "" or what is wrong.
inline std::string decompress(codec c, std::span<const std::byte> src, std::span<std::byte> dst) {
  if (c == codec::none) {
    if (src.size() != dst.size())
      return "holds " + std::to_string(src.size()) + " bytes, " + std::to_string(dst.size()) + " expected";
    if (!dst.empty()) std::memcpy(dst.data(), src.data(), dst.size());
    return "";
  }
  if (c == codec::blosc) {
    // The header states both sizes: both must match before blosc touches dst, and
    // blosc_cbuffer_validate checks the header is consistent with the buffer's length.
    if (src.size() < BLOSC_MIN_HEADER_LENGTH) return "blosc: compressed data is truncated (no header)";
    std::size_t nbytes = 0, cbytes = 0, blocksize = 0;
    blosc_cbuffer_sizes(src.data(), &nbytes, &cbytes, &blocksize);
    if (nbytes != dst.size())
      return "blosc header says " + std::to_string(nbytes) + " bytes, " + std::to_string(dst.size()) + " expected";
    if (cbytes != src.size())
      return "blosc header says " + std::to_string(cbytes) + " compressed bytes, " + std::to_string(src.size()) + " stored";
    std::size_t checked = 0;
    if (blosc_cbuffer_validate(src.data(), src.size(), &checked) != 0 || checked != dst.size())
      return "blosc: malformed header";
    if (dst.empty()) return "";
    const int n = blosc_decompress_ctx(src.data(), dst.data(), dst.size(), 1);
    if (n < 0 || static_cast<std::size_t>(n) != dst.size()) return "blosc: corrupt compressed data (" + std::to_string(n) + ")";
    return "";
  }
  if (c == codec::lz4) {
    if (src.size() < 4) return "lz4: compressed data is truncated (no size header)";
    std::uint32_t size = 0;
    for (int i = 0; i < 4; ++i) size |= static_cast<std::uint32_t>(src[static_cast<std::size_t>(i)]) << (8 * i);
    if (size != dst.size()) return "lz4 header says " + std::to_string(size) + " bytes, " + std::to_string(dst.size()) + " expected";
    if (src.size() - 4 > static_cast<std::size_t>(std::numeric_limits<int>::max())) return "lz4: chunk too large";
    // LZ4_decompress_safe never writes past dst's capacity and never reads past src.
    const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src.data() + 4), reinterpret_cast<char*>(dst.data()),
                                      static_cast<int>(src.size() - 4), static_cast<int>(dst.size()));
    if (n < 0) return "lz4: corrupt compressed data";
    if (static_cast<std::size_t>(n) != dst.size())
      return "decompresses to " + std::to_string(n) + " bytes, " + std::to_string(dst.size()) + " expected";
    return "";
  }
  if (c == codec::bz2) {
    if (dst.size() > std::numeric_limits<unsigned>::max() || src.size() > std::numeric_limits<unsigned>::max())
      return "bz2: chunk too large";
    // Buffer-to-buffer decompression stops with BZ_OUTBUFF_FULL when dst is full.
    auto n = static_cast<unsigned>(dst.size());
    const int rc = BZ2_bzBuffToBuffDecompress(reinterpret_cast<char*>(dst.data()), &n,
                                              reinterpret_cast<char*>(const_cast<std::byte*>(src.data())),
                                              static_cast<unsigned>(src.size()), 0, 0);
    if (rc == BZ_OUTBUFF_FULL) return "decompresses to more than the " + std::to_string(dst.size()) + " bytes expected";
    if (rc == BZ_UNEXPECTED_EOF) return "compressed data is truncated";
    if (rc != BZ_OK) return "bz2: corrupt compressed data (" + std::to_string(rc) + ")";
    if (n != dst.size()) return "decompresses to " + std::to_string(n) + " bytes, " + std::to_string(dst.size()) + " expected";
    return "";
  }
  if (c == codec::zstd) {
    // Single-shot decompression writes into dst only and stops with an error when dst is
    // full: the frame's declared content size is never trusted for an allocation.
    const std::size_t n = ZSTD_decompressDCtx(detail::zstd_dctx(), dst.data(), dst.size(), src.data(), src.size());
    if (ZSTD_isError(n)) {
      if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall)
        return "decompresses to more than the " + std::to_string(dst.size()) + " bytes expected";
      return std::string("zstd: ") + ZSTD_getErrorName(n);
    }
    if (n != dst.size()) return "decompresses to " + std::to_string(n) + " bytes, " + std::to_string(dst.size()) + " expected";
    return "";
  }
  z_stream z{};
  // 32 + 15: accept gzip or zlib headers alike (t5x writes gzip; some writers zlib).
  if (inflateInit2(&z, 15 + 32) != Z_OK) return "inflateInit2 failed";
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(src.data()));
  z.next_out = reinterpret_cast<Bytef*>(dst.data());
  std::size_t in_left = src.size(), out_left = dst.size();
  std::string err;
  for (;;) {
    const auto in_step = static_cast<uInt>(std::min<std::size_t>(in_left, std::numeric_limits<uInt>::max()));
    const auto out_step = static_cast<uInt>(std::min<std::size_t>(out_left, std::numeric_limits<uInt>::max()));
    z.avail_in = in_step;
    z.avail_out = out_step;
    unsigned char spare = 0;
    if (out_step == 0) {  // dst full: anything more the stream produces is too much
      z.next_out = &spare;
      z.avail_out = 1;
    }
    const int rc = inflate(&z, Z_NO_FLUSH);
    in_left -= in_step - z.avail_in;
    if (out_step == 0) {
      if (z.avail_out == 0) { err = "decompresses to more than the " + std::to_string(dst.size()) + " bytes expected"; break; }
    } else {
      out_left -= out_step - z.avail_out;
    }
    if (rc == Z_STREAM_END) {
      if (out_left != 0)
        err = "decompresses to " + std::to_string(dst.size() - out_left) + " bytes, " + std::to_string(dst.size()) +
              " expected";
      break;
    }
    if (rc == Z_BUF_ERROR && in_left == 0) { err = "compressed data is truncated"; break; }
    if (rc != Z_OK && rc != Z_BUF_ERROR) { err = std::string("corrupt deflate data") + (z.msg ? std::string(": ") + z.msg : ""); break; }
  }
  inflateEnd(&z);
  return err;
}

}  // namespace ckpt::io
