#pragma once
// Excerpts of text that came from elsewhere (a model's reply, a provider's error), for error
// messages and logs: cut on a UTF-8 code point boundary, never in the middle of a character.

#include <cstddef>
#include <string>
#include <string_view>

namespace arbiter {

/// At most `max_bytes` of `text` (valid UTF-8), cut on a code point boundary.
std::string_view utf8_prefix(std::string_view text, size_t max_bytes);

/// `text`'s opening (at most `max_bytes`, cut on a code point boundary) in double quotes, with
/// control characters shown as spaces and "..." after the quote when something was cut.
std::string quote_opening(std::string_view text, size_t max_bytes);

} // namespace arbiter
