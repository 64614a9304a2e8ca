// ckpt/storage/s3_xml.hpp — reading the XML documents of S3 and AWS STS: the text of
// an element, entities unescaped. Their documents are flat and machine-written; this is
// not a general XML parser.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail::s3 {

inline std::string xml_unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const auto end = s.find(';', i);
    if (end == std::string_view::npos) {
      out += s.substr(i);
      break;
    }
    const auto ent = s.substr(i + 1, end - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      const long code = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                            ? std::strtol(std::string(ent.substr(2)).c_str(), nullptr, 16)
                            : std::strtol(std::string(ent.substr(1)).c_str(), nullptr, 10);
      if (code > 0 && code < 128) out += static_cast<char>(code);
    } else {
      out += s.substr(i, end - i + 1);
    }
    i = end;
  }
  return out;
}

// Every <tag>value</tag> in document order (values unescaped, unless `raw`: an element
// whose own elements are read next).
inline std::vector<std::string> xml_all(std::string_view xml, std::string_view tag, bool raw = false) {
  std::vector<std::string> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  for (std::size_t at = 0;;) {
    const auto b = xml.find(open, at);
    if (b == std::string_view::npos) break;
    const auto e = xml.find(close, b + open.size());
    if (e == std::string_view::npos) break;
    const auto inner = xml.substr(b + open.size(), e - b - open.size());
    out.push_back(raw ? std::string(inner) : xml_unescape(inner));
    at = e + close.size();
  }
  return out;
}
inline std::string xml_first(std::string_view xml, std::string_view tag) {
  auto all = xml_all(xml, tag);
  return all.empty() ? std::string() : all.front();
}

}  // namespace ckpt::detail::s3
