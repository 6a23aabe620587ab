#include "backends/remote/redaction.hpp"

#include <memory>

#include "backends/cpu/python_regex.hpp"
#include "common/text_excerpt.hpp"

namespace arbiter::backends::remote {
namespace {

/// Longest text the patterns are run over; error text beyond it is cut anyway.
constexpr size_t max_scanned_bytes = 8192;
/// Shortest run of token characters taken for a key on its own.
constexpr size_t opaque_token_chars = 32;

bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'
         || c == '_' || c == '+' || c == '/' || c == '=' || c == '.';
}

/// Replaces runs of `opaque_token_chars` or more token characters that hold both a letter and
/// a digit: API keys, hashes, base64 secrets. Words and numbers alone are left.
std::string blank_opaque_tokens(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (!is_token_char(text[i])) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    bool letter = false;
    bool digit = false;
    while (end < text.size() && is_token_char(text[end])) {
      const char c = text[end];
      letter = letter || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      digit = digit || (c >= '0' && c <= '9');
      ++end;
    }
    if (end - i >= opaque_token_chars && letter && digit) {
      out += redacted;
    } else {
      out.append(text, i, end - i);
    }
    i = end;
  }
  return out;
}

struct rule {
  cpu::py::regex pattern;
  /// In PCRE2's syntax: $1 is the first group.
  const char* replacement;
};

/// The patterns run over bytes (an error body need not be UTF-8), case-insensitive where a
/// name is matched, by PCRE2 like the rule rewards' (backends/cpu/python_regex.hpp).
const std::vector<std::unique_ptr<rule>>& rules() {
  using cpu::py::regex;
  static const std::vector<std::unique_ptr<rule>> all = [] {
    std::vector<std::unique_ptr<rule>> out;
    auto add = [&out](const char* pattern, uint32_t flags, const char* replacement) {
      out.push_back(std::unique_ptr<rule>(
        new rule{regex{pattern, regex::bytes | flags}, replacement}));
    };
    // A scheme and its credentials: "Bearer sk-...", "Basic dXNlcjpwYXNz".
    add(R"(\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]+)", regex::ignorecase, "$1$2[redacted]");
    // name: value, name=value, "name": "value" for the usual names of a secret.
    add(R"re(\b((?:x-)?(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|client[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token|id[_-]?token|token|secret|password|passwd|authorization)["']?\s*[:=]\s*["']?)(?!\[redacted\])[^\s"',;&})\]<>]+)re",
        regex::ignorecase, "$1[redacted]");
    // OpenAI-, Anthropic- and Stripe-style keys: sk-..., sk-proj-..., pk-..., rk-...
    add(R"(\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,})", regex::none, "[redacted]");
    // AWS access key ids.
    add(R"(\b(?:AKIA|ASIA)[0-9A-Z]{16}\b)", regex::none, "[redacted]");
    // JSON Web Tokens.
    add(R"(\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*)", regex::none, "[redacted]");
    return out;
  }();
  return all;
}

} // namespace

std::string redact_secrets(std::string_view text, std::string_view known_secret) {
  std::string out{utf8_prefix(text, max_scanned_bytes)};
  if (!known_secret.empty()) {
    for (size_t at = out.find(known_secret); at != std::string::npos;
         at = out.find(known_secret, at + redacted.size())) {
      out.replace(at, known_secret.size(), redacted);
    }
  }
  for (const auto& r : rules()) {
    out = r->pattern.sub(out, r->replacement);
  }
  return blank_opaque_tokens(out);
}

std::string redacted_excerpt(std::string_view text, size_t max_bytes,
                             std::string_view known_secret) {
  const std::string clean = redact_secrets(text, known_secret);
  auto head = utf8_prefix(clean, max_bytes);
  std::string out{head};
  if (head.size() < clean.size()) {
    out += "...";
  }
  return out;
}

} // namespace arbiter::backends::remote
