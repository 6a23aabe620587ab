#include "backends/cpu/python_regex.hpp"

#include <stdexcept>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <simdjson.h>

namespace arbiter::backends::cpu::py {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) {
    return "PCRE2 error " + std::to_string(code);
  }
  return reinterpret_cast<const char*>(buffer);
}

struct match_data_deleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

using match_data = std::unique_ptr<pcre2_match_data, match_data_deleter>;

} // namespace

struct regex::impl {
  pcre2_code* code = nullptr;
  std::string pattern;
  bool utf = true;

  /// One match attempt; <0 is PCRE2's "no match" or error. A JIT that runs out of its stack
  /// hands over to the interpreter, which has no such limit.
  int match(std::string_view text, std::size_t offset, uint32_t options, pcre2_match_data* m) const {
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    int rc = pcre2_match(code, subject, text.size(), offset, options, m, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), offset, options | PCRE2_NO_JIT, m, nullptr);
    }
    return rc;
  }

  /// PCRE2_NO_UTF_CHECK when the subject needs no check: not a UTF pattern, or valid UTF-8.
  /// PCRE2 checks byte by byte on every call (from the offset to the end); simdjson's SIMD
  /// check is many times faster. An invalid subject is left to PCRE2, which reports it.
  uint32_t utf_checked(std::string_view text) const {
    return !utf || simdjson::validate_utf8(text.data(), text.size()) ? PCRE2_NO_UTF_CHECK : 0u;
  }

  [[noreturn]] void fail(int rc) const {
    throw std::runtime_error("regular expression '" + pattern + "': " + pcre2_message(rc));
  }
};

regex::regex(std::string_view pattern, uint32_t flags) : impl_(std::make_unique<impl>()) {
  impl_->pattern = std::string{pattern};
  impl_->utf = (flags & bytes) == 0;
  uint32_t options = (flags & bytes) != 0 ? 0u : PCRE2_UTF | PCRE2_UCP;
  if ((flags & dotall) != 0) {
    options |= PCRE2_DOTALL;
  }
  if ((flags & ignorecase) != 0) {
    options |= PCRE2_CASELESS;
  }
  // Python's `.` stops at '\n' only, whatever newline convention PCRE2 was built with.
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              options, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (impl_->code == nullptr) {
    throw std::invalid_argument("regular expression '" + impl_->pattern + "' at "
                                + std::to_string(offset) + ": " + pcre2_message(error));
  }
  // Without JIT support PCRE2 interprets; the results are the same.
  (void)pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

regex::~regex() {
  pcre2_code_free(impl_->code);
}

std::vector<std::string_view> regex::find_all(std::string_view text, int group) const {
  std::vector<std::string_view> out;
  match_data m{pcre2_match_data_create_from_pattern(impl_->code, nullptr)};
  const bool utf = impl_->utf;
  std::size_t offset = 0;
  uint32_t options = 0;
  const uint32_t checked = impl_->utf_checked(text);
  while (offset <= text.size()) {
    int rc = impl_->match(text, offset, options | checked, m.get());
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) {
        break;
      }
      // No non-empty match where an empty one was: step over one code point and search on.
      options = 0;
      if (offset >= text.size()) {
        break;
      }
      ++offset;
      while (utf && offset < text.size()
             && (static_cast<unsigned char>(text[offset]) & 0xC0u) == 0x80u) {
        ++offset;
      }
      continue;
    }
    if (rc < 0) {
      impl_->fail(rc);
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(m.get());
    const auto g = static_cast<std::size_t>(group);
    if (ovector[2 * g] == PCRE2_UNSET) {
      out.emplace_back();
    } else {
      out.push_back(text.substr(ovector[2 * g], ovector[2 * g + 1] - ovector[2 * g]));
    }
    const std::size_t start = ovector[0];
    offset = ovector[1];
    // After an empty match, the next one may not be empty at the same place (Python 3.7+ and
    // Perl alike).
    options = start == offset ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
  }
  return out;
}

std::string regex::sub(std::string_view text, std::string_view replacement) const {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  auto with = reinterpret_cast<PCRE2_SPTR>(replacement.data());
  std::string out(text.size() + replacement.size() + 16, '\0');
  uint32_t options = PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH
                     | impl_->utf_checked(text);
  for (int attempt = 0; attempt < 3; ++attempt) {
    PCRE2_SIZE length = out.size();
    int rc = pcre2_substitute(impl_->code, subject, text.size(), 0, options, nullptr, nullptr,
                              with, replacement.size(),
                              reinterpret_cast<PCRE2_UCHAR*>(out.data()), &length);
    if (rc >= 0) {
      out.resize(length);
      return out;
    }
    if (rc == PCRE2_ERROR_NOMEMORY) {
      out.assign(length + 1, '\0'); // the length it needs, reported by OVERFLOW_LENGTH
    } else if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      options |= PCRE2_NO_JIT;
    } else {
      impl_->fail(rc);
    }
  }
  impl_->fail(PCRE2_ERROR_NOMEMORY);
}

} // namespace arbiter::backends::cpu::py
