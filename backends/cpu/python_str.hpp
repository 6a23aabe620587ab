#pragma once

// Python 3 `str` operations on UTF-8 text, where they differ from byte operations: lengths,
// indices and slices count code points, and whitespace and digits are Unicode's. `replace`,
// `split` and `in` on a UTF-8 needle need no help: in valid UTF-8 a needle can only match at
// code point boundaries. The input must be valid UTF-8 (the ingress checks it).

#include <string>
#include <string_view>
#include <vector>

namespace arbiter::backends::cpu::py {

/// `len(s)`: code points.
std::size_t len(std::string_view s);

/// `s[-n:]`: the last `n` code points (all of `s` when it has fewer).
std::string_view last(std::string_view s, std::size_t n);

/// `s[0]` as UTF-8 (empty when `s` is: Python raises IndexError there, the caller decides).
std::string_view first(std::string_view s);

/// `s[1:]`: everything after the first code point.
std::string_view after_first(std::string_view s);

/// `str.isspace()` for one code point: Zs, Zl, Zp, and the controls with bidi class B, S or
/// WS (\t \n \v \f \r, U+001C..U+001F, U+0085).
bool is_space(char32_t c);

/// `s.strip()`: leading and trailing `is_space` code points removed.
std::string_view strip(std::string_view s);

/// `s.isdigit()`: not empty, and every code point a decimal digit (Nd) or one of Unicode's
/// other digits (Numeric_Type=Digit: superscripts, circled digits, ...).
bool isdigit(std::string_view s);

/// `s.replace(old, new)` (every occurrence, left to right; `old` not empty).
std::string replace(std::string_view s, std::string_view old, std::string_view replacement);

/// `s = s.replace(old, new)` in place; no copy when `old` does not occur (the usual case).
void replace_in(std::string& s, std::string_view old, std::string_view replacement);

/// `s.split(sep)` (`sep` not empty).
std::vector<std::string_view> split(std::string_view s, std::string_view sep);

/// `s.count(sub)`: non-overlapping occurrences (`sub` not empty).
std::size_t count(std::string_view s, std::string_view sub);

/// `sep in s`.
inline bool contains(std::string_view s, std::string_view sep) {
  return s.find(sep) != std::string_view::npos;
}

} // namespace arbiter::backends::cpu::py
