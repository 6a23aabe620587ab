#include "backends/cpu/python_str.hpp"

#include <utf8proc.h>

namespace arbiter::backends::cpu::py {
namespace {

bool is_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0u) == 0x80u;
}

/// Bytes of the code point that starts at `s[pos]` (1 for a stray byte).
std::size_t width_at(std::string_view s, std::size_t pos) {
  std::size_t end = pos + 1;
  while (end < s.size() && is_continuation(s[end])) {
    ++end;
  }
  return end - pos;
}

/// The code point at `s[pos]` and its width in bytes (U+FFFD for an invalid sequence).
std::pair<char32_t, std::size_t> decode_at(std::string_view s, std::size_t pos) {
  utf8proc_int32_t c = 0;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                            static_cast<utf8proc_ssize_t>(s.size() - pos), &c);
  if (n <= 0) {
    return {0xFFFD, 1};
  }
  return {static_cast<char32_t>(c), static_cast<std::size_t>(n)};
}

/// Code points of Numeric_Type=Digit, which `str.isdigit()` accepts beyond the decimal digits
/// (Nd): every `c` with `chr(c).isdigit() and not chr(c).isdecimal()` in Python 3.11's
/// unicodedata (Unicode 14.0), as ranges.
constexpr std::pair<char32_t, char32_t> other_digits[] = {
  {0x00B2, 0x00B3}, {0x00B9, 0x00B9}, {0x1369, 0x1371}, {0x19DA, 0x19DA},
  {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2460, 0x2468},
  {0x2474, 0x247C}, {0x2488, 0x2490}, {0x24EA, 0x24EA}, {0x24F5, 0x24FD},
  {0x24FF, 0x24FF}, {0x2776, 0x277E}, {0x2780, 0x2788}, {0x278A, 0x2792},
  {0x10A40, 0x10A43}, {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x1F100, 0x1F10A},
};

bool is_digit(char32_t c) {
  if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND) {
    return true;
  }
  for (const auto& [low, high] : other_digits) {
    if (c >= low && c <= high) {
      return true;
    }
  }
  return false;
}

} // namespace

std::size_t len(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) {
    n += is_continuation(c) ? 0 : 1;
  }
  return n;
}

std::string_view last(std::string_view s, std::size_t n) {
  if (n == 0) {
    return s.substr(s.size());
  }
  std::size_t pos = s.size();
  std::size_t seen = 0;
  while (pos > 0) {
    --pos;
    if (!is_continuation(s[pos]) && ++seen == n) {
      return s.substr(pos);
    }
  }
  return s;
}

std::string_view first(std::string_view s) {
  return s.empty() ? s : s.substr(0, width_at(s, 0));
}

std::string_view after_first(std::string_view s) {
  return s.empty() ? s : s.substr(width_at(s, 0));
}

bool is_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
  case UTF8PROC_CATEGORY_ZS:
  case UTF8PROC_CATEGORY_ZL:
  case UTF8PROC_CATEGORY_ZP:
    return true;
  default:
    return false;
  }
}

std::string_view strip(std::string_view s) {
  std::size_t begin = 0;
  while (begin < s.size()) {
    auto [c, n] = decode_at(s, begin);
    if (!is_space(c)) {
      break;
    }
    begin += n;
  }
  std::size_t end = s.size();
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && is_continuation(s[start])) {
      --start;
    }
    if (!is_space(decode_at(s, start).first)) {
      break;
    }
    end = start;
  }
  return s.substr(begin, end - begin);
}

bool isdigit(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (std::size_t pos = 0; pos < s.size();) {
    auto [c, n] = decode_at(s, pos);
    if (!is_digit(c)) {
      return false;
    }
    pos += n;
  }
  return true;
}

std::string replace(std::string_view s, std::string_view old, std::string_view replacement) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (true) {
    auto found = s.find(old, pos);
    if (found == std::string_view::npos) {
      out.append(s.substr(pos));
      return out;
    }
    out.append(s.substr(pos, found - pos));
    out.append(replacement);
    pos = found + old.size();
  }
}

void replace_in(std::string& s, std::string_view old, std::string_view replacement) {
  if (s.find(old) != std::string::npos) {
    s = replace(s, old, replacement);
  }
}

std::vector<std::string_view> split(std::string_view s, std::string_view sep) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (true) {
    auto found = s.find(sep, pos);
    if (found == std::string_view::npos) {
      parts.push_back(s.substr(pos));
      return parts;
    }
    parts.push_back(s.substr(pos, found - pos));
    pos = found + sep.size();
  }
}

std::size_t count(std::string_view s, std::string_view sub) {
  std::size_t n = 0;
  for (auto pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) {
    ++n;
  }
  return n;
}

} // namespace arbiter::backends::cpu::py
