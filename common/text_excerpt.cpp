#include "common/text_excerpt.hpp"

namespace arbiter {

std::string_view utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return text;
  }
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return text.substr(0, cut);
}

std::string quote_opening(std::string_view text, size_t max_bytes) {
  const auto head = utf8_prefix(text, max_bytes);
  std::string out = "\"";
  for (char c : head) {
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  out += '"';
  if (head.size() < text.size()) {
    out += "...";
  }
  return out;
}

} // namespace arbiter
