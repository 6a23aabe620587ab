#pragma once
// Internal to backends/remote/: the ASCII helpers remote_codec.cpp, error_body.cpp and
// judge_score.cpp share. remote_codec.hpp is the interface.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace arbiter::backends::remote::detail {

inline bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

inline bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// `text` with ASCII letters lower-cased; same length, so offsets carry over.
inline std::string ascii_lower(std::string_view text) {
  std::string out{text};
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

/// The first `max_bytes` bytes of `text`, with every byte that is not printable ASCII
/// replaced by '?' (the body may be anything, the result goes into logs and JSON).
inline std::string printable_prefix(std::string_view text, size_t max_bytes) {
  std::string out{text.substr(0, max_bytes)};
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      c = '?';
    }
  }
  return out;
}

/// `value` serialized; invalid UTF-8 (which the ingress should already have refused) becomes
/// U+FFFD instead of an exception.
inline std::string dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace arbiter::backends::remote::detail
