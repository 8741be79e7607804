// JSON text of values that may hold the user's strings (paths, file and class names, messages).
// nlohmann's dump() throws on a string that is not UTF-8, and a path on Linux is any bytes: a
// file named in Latin-1 ended the run at its first log line, or at a checkpoint save after an
// epoch of training. json_text() writes such bytes as U+FFFD instead. A value that must come
// back as it was (a flag in config.json) is refused where it is given: first_invalid_utf8.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ddptrain {

/// j.dump(indent), with any byte that is not UTF-8 written as U+FFFD rather than thrown.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The offset of the first byte of s that is not part of a well-formed UTF-8 sequence; nullopt
/// when s is UTF-8 (overlong forms, surrogates and code points above U+10FFFF are not).
inline std::optional<size_t> first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    if (b < 0x80) {
      ++i;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      n = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2;
      if (b == 0xE0) lo = 0xA0;  // not overlong
      if (b == 0xED) hi = 0x9F;  // not a surrogate
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3;
      if (b == 0xF0) lo = 0x90;  // not overlong
      if (b == 0xF4) hi = 0x8F;  // not above U+10FFFF
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::nullopt;
}

}  // namespace ddptrain
