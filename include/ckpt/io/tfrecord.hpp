// ckpt/io/tfrecord.hpp — TFRecord framing, the container of TensorBoard event files.
//
// Each record: uint64 length (little-endian), uint32 masked crc32c of those 8 bytes, the
// data, uint32 masked crc32c of the data. A file still being written may end inside a
// record: reading stops there (as TensorFlow's reader does on a partial tail); a crc
// that does not match is corruption and throws, naming the file and the offset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/crc32c.hpp>
#include <ckpt/io/file.hpp>

namespace ckpt::io {

// A record larger than this is taken for corruption (events are a few hundred bytes;
// TensorBoard's images and graphs rarely exceed a few MB).
inline constexpr std::uint64_t max_tfrecord_bytes = std::uint64_t{256} << 20;

}  // namespace ckpt::io

namespace ckpt::detail::tfrecord {
inline std::uint64_t le(std::span<const std::byte> b) {
  std::uint64_t v = 0;
  for (std::size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(b[i]);
  return v;
}
inline void put_le(std::vector<std::byte>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
}  // namespace ckpt::detail::tfrecord

namespace ckpt::io {

// Calls f(record bytes) for every complete record of the file, in order.
template <class F>
void for_each_tfrecord(const fs::path& file, F&& f) {
  namespace td = ckpt::detail::tfrecord;
  File in = File::open_read(file);
  const std::uint64_t size = in.size(file);
  std::uint64_t at = 0;
  std::byte head[12];
  std::vector<std::byte> data;
  auto corrupt = [&](const std::string& what) {
    throw CorruptCheckpointError(file.string(), "", what + " in the record at offset " + std::to_string(at));
  };
  while (size - at >= 12) {
    pread_exact(in, head, at, file);
    const std::uint64_t n = td::le(std::span<const std::byte>(head, 8));
    if (crc32c_mask(crc32c(std::span<const std::byte>(head, 8))) != td::le(std::span<const std::byte>(head + 8, 4)))
      corrupt("length crc32c mismatch");
    if (n > max_tfrecord_bytes) corrupt("record length " + std::to_string(n) + " is implausible");
    if (size - at - 12 < n + 4) return;  // a record still being written
    data.resize(static_cast<std::size_t>(n) + 4);
    pread_exact(in, data, at + 12, file);
    const auto body = std::span<const std::byte>(data).first(static_cast<std::size_t>(n));
    if (crc32c_mask(crc32c(body)) != td::le(std::span<const std::byte>(data).subspan(static_cast<std::size_t>(n), 4)))
      corrupt("data crc32c mismatch");
    f(body);
    at += 12 + n + 4;
  }
}

// One framed record, ready to append to a file.
inline std::vector<std::byte> frame_tfrecord(std::span<const std::byte> data) {
  namespace td = ckpt::detail::tfrecord;
  std::vector<std::byte> out;
  out.reserve(data.size() + 16);
  td::put_le(out, data.size(), 8);
  td::put_le(out, crc32c_mask(crc32c(std::span<const std::byte>(out.data(), 8))), 4);
  out.insert(out.end(), data.begin(), data.end());
  td::put_le(out, crc32c_mask(crc32c(data)), 4);
  return out;
}

}  // namespace ckpt::io
