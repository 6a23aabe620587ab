#include "common/json_text.hpp"

#include <charconv>
#include <cmath>

namespace arbiter {

namespace {

/// The length of the valid UTF-8 sequence at the start of `s` (which is not empty and starts
/// with a byte >= 0x80), or 0 when it is not one (RFC 3629: no overlongs, no surrogates,
/// nothing above U+10FFFF).
size_t utf8_sequence(std::string_view s) {
  auto b = [&s](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF) {
    return cont(1) ? 2 : 0;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) {
      return 0;
    }
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) {
      return 0; // overlong, or a surrogate
    }
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) {
      return 0;
    }
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) {
      return 0; // overlong, or above U+10FFFF
    }
    return 4;
  }
  return 0;
}

} // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    auto n = utf8_sequence(text.substr(i));
    if (n == 0) {
      return false;
    }
    i += n;
  }
  return true;
}

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      auto n = utf8_sequence(text.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 0xf]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

void append_json_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc{}) {
    out += "null";
    return;
  }
  std::string_view text{buf, static_cast<size_t>(end - buf)};
  out += text;
  // Keep integral values recognizably floating point ("1.0", not "1").
  if (text.find_first_of(".e") == std::string_view::npos) {
    out += ".0";
  }
}

void append_json_integer(std::string& out, uint64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, ec == std::errc{} ? static_cast<size_t>(end - buf) : 0);
}

} // namespace arbiter
