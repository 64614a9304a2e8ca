// ckpt/detail/untrusted.hpp — what a checkpoint's files may hold, bounded where they
// are parsed, and untrusted values quoted for messages.
//
// Everything read from a checkpoint is untrusted. JSON is parsed here only, with the
// nesting bounded (max_nesting levels, as msgpack is in detail/msgpack.hpp), so that
// nothing downstream (a copy, a comparison, dump()) can recurse without bound; strings
// and counts are bounded by the file size each reader caps. Values going into a message
// are quoted by quote() and describe(): a bounded prefix, valid UTF-8, no NUL, never a
// whole dump() of something a file said.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>

namespace ckpt::detail {

// Deepest nesting of JSON (and msgpack) containers accepted from a file.
inline constexpr int max_nesting = 64;
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

namespace untrusted_detail {
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
}  // namespace untrusted_detail

// An untrusted string made safe for a message: printable ASCII and valid UTF-8 as
// they are; control characters (NUL among them) and invalid bytes as \xNN; at most
// about `max` bytes, then "..." and the string's size.
inline std::string safe_text(std::string_view s, std::size_t max = max_quoted_bytes) {
  std::string q;
  if (!untrusted_detail::escape_into(q, s, max, false)) q += "... (" + std::to_string(s.size()) + " bytes)";
  return q;
}

// An untrusted string for a message, in double quotes, as safe_text() makes it, with
// '"' and '\\' escaped as \xNN too.
inline std::string quote(std::string_view s, std::size_t max = max_quoted_bytes) {
  std::string q = "\"";
  const bool whole = untrusted_detail::escape_into(q, s, max, true);
  q += '"';
  if (!whole) q += "... (" + std::to_string(s.size()) + " bytes)";
  return q;
}

namespace untrusted_detail {
inline void describe_into(std::string& out, const nlohmann::json& j, int depth, std::size_t budget) {
  using t = nlohmann::json::value_t;
  switch (j.type()) {
    case t::string: out += quote(j.get_ref<const std::string&>(), std::min(budget, max_quoted_bytes)); return;
    case t::array: case t::object: {
      const bool obj = j.is_object();
      if (depth >= 3 || out.size() > budget) {
        out += obj ? "{...}" : "[...]";
        return;
      }
      out += obj ? '{' : '[';
      std::size_t n = 0;
      for (auto it = j.begin(); it != j.end(); ++it, ++n) {
        if (n) out += ", ";
        if (out.size() > budget) {
          out += "... (" + std::to_string(j.size()) + (obj ? " keys)" : " items)");
          break;
        }
        if (obj) out += quote(it.key(), 32) + ": ";
        describe_into(out, *it, depth + 1, budget);
      }
      out += obj ? '}' : ']';
      return;
    }
    case t::binary: out += "<" + std::to_string(j.get_binary().size()) + " bytes of binary>"; return;
    case t::discarded: out += "<nothing>"; return;
    default: out += j.dump(); return;  // null, booleans and numbers: short, and no strings in them
  }
}
}  // namespace untrusted_detail

// An untrusted JSON value for a message: compact JSON, containers shown at most 3
// levels deep and cut after about `budget` bytes, strings quoted by quote().
// Never recurses without bound and never throws on invalid UTF-8 (dump() does both).
inline std::string describe(const nlohmann::json& j, std::size_t budget = max_quoted_bytes) {
  std::string out;
  untrusted_detail::describe_into(out, j, 0, budget);
  return out;
}

// Parses untrusted JSON text; nesting deeper than max_nesting is refused while parsing
// (nlohmann's parser is iterative, and so is its destructor: only what is built after
// recurses). Every failure is a CorruptCheckpointError naming checkpoint and path and
// starting with `what` (the file: ".zarray", "_CHECKPOINT_METADATA").
inline nlohmann::json parse_json(std::string_view text, const std::string& checkpoint, const std::string& path,
                                 const std::string& what) {
  using json = nlohmann::json;
  struct TooDeep {};
  const json::parser_callback_t bound = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_nesting)
      throw TooDeep{};
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), bound);
  } catch (const TooDeep&) {
    throw CorruptCheckpointError(checkpoint, path,
                                 what + ": JSON nests deeper than " + std::to_string(max_nesting) + " levels");
  } catch (const std::exception& e) {
    // the parser's message quotes what it read last: bounded, and made printable
    throw CorruptCheckpointError(checkpoint, path, what + ": malformed JSON: " + safe_text(e.what(), 200));
  }
}

}  // namespace ckpt::detail
