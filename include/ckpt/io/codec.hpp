// ckpt/io/codec.hpp — gzip, zlib and zstd, with decompression bounded by the size expected.
//
// Chunks of zarr arrays (t5x, Orbax, zarr) are compressed. A reader always knows how
// many bytes a chunk must decompress to, so decompression writes into a buffer of
// exactly that size and fails the moment the data wants more: a decompression bomb
// costs nothing but the time to notice it.
#pragma once

#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>

namespace ckpt::io {

enum class codec { none, gzip, zlib, zstd };

inline const char* codec_name(codec c) noexcept {
  switch (c) {
    case codec::none: return "none";
    case codec::gzip: return "gzip";
    case codec::zlib: return "zlib";
    case codec::zstd: return "zstd";
  }
  return "?";
}

// Compresses src; gzip and zlib use deflate's own framing (numcodecs' GZip and Zlib).
inline std::vector<std::byte> compress(codec c, int level, std::span<const std::byte> src) {
  std::vector<std::byte> out;
  if (c == codec::none) return {src.begin(), src.end()};
  if (c == codec::zstd) {
    out.resize(ZSTD_compressBound(src.size()));
    const std::size_t n = ZSTD_compress(out.data(), out.size(), src.data(), src.size(), level);
    if (ZSTD_isError(n)) throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    out.resize(n);
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

// Decompresses src into dst, which must come out exactly full. Returns "" or what is wrong.
inline std::string decompress(codec c, std::span<const std::byte> src, std::span<std::byte> dst) {
  if (c == codec::none) {
    if (src.size() != dst.size())
      return "holds " + std::to_string(src.size()) + " bytes, " + std::to_string(dst.size()) + " expected";
    if (!dst.empty()) std::memcpy(dst.data(), src.data(), dst.size());
    return "";
  }
  if (c == codec::zstd) {
    // Single-shot decompression writes into dst only and stops with an error when dst is
    // full: the frame's declared content size is never trusted for an allocation.
    const std::size_t n = ZSTD_decompress(dst.data(), dst.size(), src.data(), src.size());
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
