#pragma once

#include <string>
#include <string_view>

namespace arbiter::backends::cpu {

/// Python's `difflib.SequenceMatcher(None, a, b).ratio()`, ported exactly, autojunk heuristic
/// included: when `b` has 200 or more elements, every element occurring more than
/// `len(b) // 100 + 1` times is treated as junk. Elements are Unicode code points, as they are
/// for Python `str`. Returns 1.0 when both are empty.
double sequence_matcher_ratio(std::u32string_view a, std::u32string_view b);

/// Decodes UTF-8 into code points. The input must be valid UTF-8 (the ingress checks it);
/// invalid bytes decode as U+FFFD.
std::u32string decode_utf8(std::string_view text);

} // namespace arbiter::backends::cpu
