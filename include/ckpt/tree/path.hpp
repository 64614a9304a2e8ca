// ckpt/tree/path.hpp — a key path into a tree: field names, list indices, map keys.
//
// A path is a list of segments. Map keys are arbitrary strings, so the segments
// are what checkpoints store; the dotted string ("params.encoder.kernel") is for
// people and escapes the characters that would make it ambiguous:
// '\' -> "\\", '.' -> "\.", NUL -> "\0".
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>

namespace ckpt {

class Path {
 public:
  Path() = default;
  explicit Path(std::vector<std::string> segments) : segments_(std::move(segments)) {}

  // Parses the dotted form; "" is the root. Throws ckpt::Error on a dangling escape.
  static Path parse(std::string_view dotted) {
    Path p;
    if (dotted.empty()) return p;
    std::string seg;
    for (std::size_t i = 0; i < dotted.size(); ++i) {
      const char c = dotted[i];
      if (c == '\\') {
        if (i + 1 == dotted.size()) throw Error("", std::string(dotted), "path ends with a lone '\\'");
        const char n = dotted[++i];
        if (n == '0') seg.push_back('\0');
        else if (n == '.' || n == '\\') seg.push_back(n);
        else throw Error("", std::string(dotted), std::string("unknown escape '\\") + n + "' in path");
      } else if (c == '.') {
        p.segments_.push_back(std::move(seg));
        seg.clear();
      } else {
        seg.push_back(c);
      }
    }
    p.segments_.push_back(std::move(seg));
    return p;
  }

  static std::string escape(std::string_view segment) {
    std::string s;
    s.reserve(segment.size());
    for (char c : segment) {
      if (c == '\\') s += "\\\\";
      else if (c == '.') s += "\\.";
      else if (c == '\0') s += "\\0";
      else s.push_back(c);
    }
    return s;
  }

  std::string str() const {
    std::string s;
    for (std::size_t i = 0; i < segments_.size(); ++i) {
      if (i) s.push_back('.');
      s += escape(segments_[i]);
    }
    return s;
  }

  const std::vector<std::string>& segments() const noexcept { return segments_; }
  std::size_t size() const noexcept { return segments_.size(); }
  bool empty() const noexcept { return segments_.empty(); }

  Path child(std::string segment) const {
    Path p = *this;
    p.segments_.push_back(std::move(segment));
    return p;
  }
  Path& push(std::string segment) { segments_.push_back(std::move(segment)); return *this; }
  void pop() { segments_.pop_back(); }

  Path joined(const Path& tail) const {
    Path p = *this;
    p.segments_.insert(p.segments_.end(), tail.segments_.begin(), tail.segments_.end());
    return p;
  }

  bool starts_with(const Path& prefix) const {
    if (prefix.size() > size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
      if (segments_[i] != prefix.segments_[i]) return false;
    return true;
  }

  friend bool operator==(const Path&, const Path&) = default;
  friend auto operator<=>(const Path&, const Path&) = default;

 private:
  std::vector<std::string> segments_;
};

}  // namespace ckpt
