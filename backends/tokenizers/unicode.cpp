#include "backends/tokenizers/unicode.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include <utf8proc.h>

namespace arbiter::backends::tokenizers::unicode {

namespace {

utf8proc_category_t category_of(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

} // namespace

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(utf8.data());
  auto remaining = static_cast<utf8proc_ssize_t>(utf8.size());
  while (remaining > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes, remaining, &c);
    if (n <= 0) {
      out.push_back(U'\uFFFD');
      ++bytes;
      --remaining;
      continue;
    }
    out.push_back(static_cast<char32_t>(c));
    bytes += n;
    remaining -= n;
  }
  return out;
}

namespace {

/// The length of the longest prefix of `bytes` that starts a well-formed UTF-8 sequence
/// (Unicode's table 3-7), and whether that prefix is the whole sequence.
struct utf8_prefix {
  std::size_t length = 0;
  bool complete = false;
};

utf8_prefix well_formed_prefix(std::string_view bytes) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return {1, true};
  std::size_t need = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return {0, false};
  }
  std::size_t n = 1;
  for (; n < need && n < bytes.size(); ++n) {
    const unsigned char b = byte(n);
    const unsigned char lo = n == 1 ? low : 0x80;
    const unsigned char hi = n == 1 ? high : 0xBF;
    if (b < lo || b > hi) break;
  }
  return {n, n == need};
}

} // namespace

std::string to_valid_utf8(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  std::size_t i = 0;
  while (i < utf8.size()) {
    const utf8_prefix p = well_formed_prefix(utf8.substr(i));
    if (p.complete) {
      out.append(utf8, i, p.length);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal subpart, or for one stray byte
    }
    i += std::max<std::size_t>(p.length, 1);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

bool is_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto cat = category_of(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_letter(char32_t c) {
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return true;
    default: return false;
  }
}

bool is_number(char32_t c) {
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

bool is_mark_nonspacing(char32_t c) { return category_of(c) == UTF8PROC_CATEGORY_MN; }

bool is_mark(char32_t c) {
  const auto cat = category_of(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

bool is_bert_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96)
      || (c >= 123 && c <= 126))
    return true;
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

bool is_bert_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  const auto cat = category_of(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF
         || cat == UTF8PROC_CATEGORY_CO;
}

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF)
         || (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F)
         || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF)
         || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_word_char(char32_t c) {
  if (is_letter(c)) return true;
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return c == 0x200C || c == 0x200D;  // Join_Control
  }
}

std::u32string normalize(std::u32string_view text, normal_form form) {
  if (text.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case normal_form::nfc: options |= UTF8PROC_COMPOSE; break;
    case normal_form::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case normal_form::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case normal_form::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  const std::string utf8 = encode(text);
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
    utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                 static_cast<utf8proc_ssize_t>(utf8.size()), &mapped,
                 static_cast<utf8proc_option_t>(options));
  if (n < 0) throw std::runtime_error(utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner{mapped, &std::free};
  return decode({reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n)});
}

std::u32string to_lower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
      out += U"i\u0307";
      continue;
    }
    out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

} // namespace arbiter::backends::tokenizers::unicode
