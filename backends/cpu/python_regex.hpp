#pragma once

// A compiled regular expression (PCRE2, JIT) used as Python's `re` uses one on `str`: UTF-8,
// Unicode classes (UCP), `.` matching anything but '\n', non-overlapping matches left to right
// with Python 3.7's empty-match rule. PCRE2 and Python's `re` are both backtracking engines
// with the same syntax for what the rule rewards use; where they differ (`\s` counts
// U+001C..U+001F as space in Python only), the patterns spell the class out.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::backends::cpu::py {

class regex {
public:
  /// Compile flags, as Python's; `bytes` matches bytes, as Python's `re` on `bytes` does (no
  /// UTF-8 decoding, ASCII classes), for text that may not be valid UTF-8.
  enum flags : uint32_t { none = 0, dotall = 1, ignorecase = 2, bytes = 4 };

  /// Compiles `pattern`; throws std::invalid_argument naming the pattern when it is bad.
  explicit regex(std::string_view pattern, uint32_t flags = none);
  ~regex();
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  /// `[m.group(group) for m in re.finditer(pattern, text)]` (group 0: the whole match).
  /// Throws std::runtime_error when PCRE2 gives up (its match limit), where Python would only
  /// be slow.
  std::vector<std::string_view> find_all(std::string_view text, int group) const;

  /// `re.sub(pattern, replacement, text)`, every match. `replacement` is in PCRE2's syntax:
  /// `${2}` for Python's `\2`, `$$` for a literal '$'. Throws std::runtime_error as above.
  std::string sub(std::string_view text, std::string_view replacement) const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace arbiter::backends::cpu::py
