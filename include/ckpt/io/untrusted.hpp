// ckpt/io/untrusted.hpp — what a checkpoint's files may hold, bounded where they
// are parsed, and untrusted values quoted for messages.
//
// Everything read from a checkpoint is untrusted. JSON is parsed here only, with the
// nesting bounded (max_nesting levels, as msgpack is in format/msgpack.hpp), so that
// nothing downstream (a copy, a comparison, dump()) can recurse without bound; strings
// and counts are bounded by the file size each reader caps. Values going into a message
// are quoted by quote() (detail/quote.hpp) and describe(): a bounded prefix, valid UTF-8, no NUL, never a
// whole dump() of something a file said.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <ckpt/detail/quote.hpp>
#include <ckpt/error.hpp>

namespace ckpt::detail {

// Deepest nesting of JSON (and msgpack) containers accepted from a file.
inline constexpr int max_nesting = 64;
namespace untrusted {
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
}  // namespace untrusted

// An untrusted JSON value for a message: compact JSON, containers shown at most 3
// levels deep and cut after about `budget` bytes, strings quoted by quote().
// Never recurses without bound and never throws on invalid UTF-8 (dump() does both).
inline std::string describe(const nlohmann::json& j, std::size_t budget = max_quoted_bytes) {
  std::string out;
  untrusted::describe_into(out, j, 0, budget);
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

// The same, for the bytes of a file.
inline nlohmann::json parse_json(std::span<const std::byte> bytes, const std::string& checkpoint,
                                 const std::string& path, const std::string& what) {
  return parse_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), checkpoint, path, what);
}

}  // namespace ckpt::detail
