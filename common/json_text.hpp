#pragma once

// Writing JSON text directly, without building a document: the codecs' answers (net/) and the
// replay log's lines (backends/replay) append their fields with these.

#include <cstdint>
#include <string>
#include <string_view>

namespace arbiter {

/// Appends `text` to `out` as a JSON string literal, quotes included: `"` and `\` escaped,
/// control characters as \n, \r, \t or \u00XX, and every byte that is not part of valid UTF-8
/// as \ufffd (so the result is always valid JSON).
void append_json_string(std::string& out, std::string_view text);

/// Whether `text` is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
/// U+10FFFF), as a JSON string must be.
bool is_valid_utf8(std::string_view text);

/// Appends `value` as a JSON number in its shortest form that reads back to the same double
/// (an integral value gets ".0"), or `null` when not finite.
void append_json_number(std::string& out, double value);

/// Appends `value` as a JSON integer.
void append_json_integer(std::string& out, uint64_t value);

} // namespace arbiter
