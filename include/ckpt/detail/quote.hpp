// ckpt/detail/quote.hpp — untrusted strings made safe to put in an error message.
//
// A name or a value read from a checkpoint may hold anything: a NUL (which would cut
// what() short), control characters (which garble terminals), invalid UTF-8 (which
// makes JSON libraries throw), or a megabyte of text. quote() and safe_text() keep
// printable ASCII and valid UTF-8, write everything else as \xNN, and cut after a
// bounded prefix. Readers quote untrusted strings through these (or through
// ckpt::quote_for_message, which is quote()).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace ckpt::detail {

// Bytes of an untrusted string quoted in a message before it is cut.
inline constexpr std::size_t max_quoted_bytes = 96;

// Length of the valid UTF-8 sequence at s[i] (a lead byte >= 0x80), or 0.
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) { n = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
  else if (c >= 0xf0 && c <= 0xf4) { n = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
  else return 0;
  if (s.size() - i < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(k) < 0x80 || b(k) > 0xbf) return 0;
  if (c == 0xc2 && b(1) < 0xa0) return 0;  // C1 control characters: escaped like C0 ones
  return n;
}

namespace quoting {
// Appends s made printable (see safe_text()); returns false when cut at `max` bytes.
inline bool escape_into(std::string& q, std::string_view s, std::size_t max, bool quotes) {
  const std::size_t start = q.size();
  std::size_t i = 0;
  while (i < s.size()) {
    if (q.size() - start >= max) return false;
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u < 0x7f && !(quotes && (u == '"' || u == '\\'))) {
      q.push_back(s[i++]);
      continue;
    }
    if (const std::size_t n = u >= 0x80 ? utf8_sequence(s, i) : 0; n > 0) {
      q.append(s.substr(i, n));
      i += n;
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", u);
    q += buf;
    ++i;
  }
  return true;
}
}  // namespace quoting

// An untrusted string made safe for a message: printable ASCII and valid UTF-8 as
// they are; control characters (NUL among them) and invalid bytes as \xNN; at most
// about `max` bytes, then "..." and the string's size.
inline std::string safe_text(std::string_view s, std::size_t max = max_quoted_bytes) {
  std::string q;
  if (!quoting::escape_into(q, s, max, false)) q += "... (" + std::to_string(s.size()) + " bytes)";
  return q;
}

// An untrusted string for a message, in double quotes, as safe_text() makes it, with
// '"' and '\\' escaped as \xNN too.
inline std::string quote(std::string_view s, std::size_t max = max_quoted_bytes) {
  std::string q = "\"";
  const bool whole = quoting::escape_into(q, s, max, true);
  q += '"';
  if (!whole) q += "... (" + std::to_string(s.size()) + " bytes)";
  return q;
}

}  // namespace ckpt::detail
