#include "net/json_body.hpp"

#include <charconv>

namespace arbiter::net {

namespace {

/// The code unit of the `\uXXXX` escape at `text[at]` (its backslash), or -1.
long escaped_unit(std::string_view text, size_t at) noexcept {
  if (at + 6 > text.size() || text[at] != '\\' || text[at + 1] != 'u') {
    return -1;
  }
  unsigned unit = 0;
  const char* first = text.data() + at + 2;
  auto [end, error] = std::from_chars(first, first + 4, unit, 16);
  return error == std::errc{} && end == first + 4 ? static_cast<long>(unit) : -1;
}

bool high_surrogate(long unit) noexcept {
  return unit >= 0xD800 && unit <= 0xDBFF;
}

bool low_surrogate(long unit) noexcept {
  return unit >= 0xDC00 && unit <= 0xDFFF;
}

} // namespace

bool check_json_text(std::string_view body, std::string& fixed, codec_error& err) {
  fixed.clear();
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '"') {
        in_string = false;
      } else if (c == '\\') {
        const long unit = escaped_unit(body, i);
        if (unit < 0) {
          ++i; // a one-letter escape (or a malformed one, which the parser names)
        } else if (high_surrogate(unit) && low_surrogate(escaped_unit(body, i + 6))) {
          i += 11; // a pair
        } else {
          if (high_surrogate(unit) || low_surrogate(unit)) {
            if (fixed.empty()) {
              fixed.assign(body);
            }
            fixed.replace(i + 2, 4, "fffd");
          }
          i += 5;
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_depth) {
        err = {refusal::invalid, "body",
               "body: nested deeper than " + std::to_string(max_json_depth) + " levels"};
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

bool parse_json_object(std::string_view body, nlohmann::json& doc, codec_error& err) {
  std::string fixed;
  if (!check_json_text(body, fixed, err)) {
    return false;
  }
  const std::string_view text = fixed.empty() ? body : std::string_view{fixed};
  doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    err = {refusal::invalid, "body", "body: not valid JSON"};
    return false;
  }
  if (!doc.is_object()) {
    err = {refusal::invalid, "body", "body: expected a JSON object"};
    return false;
  }
  return true;
}

} // namespace arbiter::net
