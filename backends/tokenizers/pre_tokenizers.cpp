#include "backends/tokenizers/pre_tokenizers.hpp"

#include <array>
#include <unordered_map>
#include <optional>

#include "backends/tokenizers/unicode.hpp"

namespace arbiter::backends::tokenizers {

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

constexpr std::string_view qwen2_source =
  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view llama3_source =
  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view gpt2_source =
  R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool is_newline(char32_t c) { return c == U'\r' || c == U'\n'; }
/// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }

/// Matches of one regex at positions of one text; each returns the match length in code
/// points, 0 for no match.
class matcher {
 public:
  explicit matcher(std::u32string_view text) : t_{text} {}

  char32_t at(std::size_t i) const { return i < t_.size() ? t_[i] : 0; }

  /// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive.
  std::size_t contraction(std::size_t i, bool ignore_case) const {
    if (at(i) != U'\'') return 0;
    auto fold = [&](char32_t c) { return ignore_case && c >= U'A' && c <= U'Z' ? c + 32 : c; };
    const char32_t a = fold(at(i + 1));
    const char32_t b = fold(at(i + 2));
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
    return 0;
  }

  /// The end of the run of characters satisfying `pred` from `i`.
  template <class Pred>
  std::size_t run_end(std::size_t i, Pred pred) const {
    while (i < t_.size() && pred(t_[i])) ++i;
    return i;
  }

  /// `prefix?` then `pred+`, where prefix is one character satisfying `prefix_ok`.
  template <class PrefixOk, class Pred>
  std::size_t optional_prefix_then_run(std::size_t i, PrefixOk prefix_ok, Pred pred) const {
    if (prefix_ok(at(i)) && i + 1 < t_.size() && pred(t_[i + 1]))
      return run_end(i + 1, pred) - i;
    if (i < t_.size() && pred(t_[i])) return run_end(i, pred) - i;
    return 0;
  }

  /// \s*[\r\n]+ : up to and including the last newline of the whitespace run at `i`.
  std::size_t spaces_then_newlines(std::size_t i) const {
    const std::size_t end = run_end(i, is_whitespace);
    for (std::size_t k = end; k > i; --k)
      if (is_newline(t_[k - 1])) return k - i;
    return 0;
  }

  /// \s+(?!\S) : the whitespace run, less its last character unless it ends the text.
  std::size_t spaces_not_before_text(std::size_t i) const {
    const std::size_t len = run_end(i, is_whitespace) - i;
    if (len == 0) return 0;
    if (i + len == t_.size()) return len;
    return len >= 2 ? len - 1 : 0;
  }

  std::size_t spaces(std::size_t i) const { return run_end(i, is_whitespace) - i; }

  std::size_t qwen2(std::size_t i, std::size_t max_digits) const {
    if (auto n = contraction(i, true)) return n;
    auto letter_prefix = [](char32_t c) { return !is_newline(c) && !is_letter(c) && !is_number(c); };
    if (auto n = optional_prefix_then_run(i, letter_prefix, is_letter)) return n;
    if (is_number(at(i))) {
      std::size_t n = 1;
      while (n < max_digits && is_number(at(i + n))) ++n;
      return n;
    }
    if (auto n = optional_prefix_then_run(i, [](char32_t c) { return c == U' '; }, is_other))
      return run_end(i + n, is_newline) - i;
    if (auto n = spaces_then_newlines(i)) return n;
    if (auto n = spaces_not_before_text(i)) return n;
    return spaces(i);
  }

  std::size_t gpt2(std::size_t i) const {
    if (auto n = contraction(i, false)) return n;
    auto space = [](char32_t c) { return c == U' '; };
    if (auto n = optional_prefix_then_run(i, space, is_letter)) return n;
    if (auto n = optional_prefix_then_run(i, space, is_number)) return n;
    if (auto n = optional_prefix_then_run(i, space, is_other)) return n;
    if (auto n = spaces_not_before_text(i)) return n;
    return spaces(i);
  }

 private:
  std::u32string_view t_;
};

std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

} // namespace

bool recognise_split_regex(std::string_view source, split_regex& out) {
  if (source == qwen2_source) out = split_regex::qwen2;
  else if (source == llama3_source) out = split_regex::llama3;
  else if (source == gpt2_source) out = split_regex::gpt2;
  else return false;
  return true;
}

std::vector<std::u32string> split_isolated(std::u32string_view text, split_regex which) {
  const matcher m{text};
  std::vector<std::u32string> pieces;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t n = 0;
    switch (which) {
      case split_regex::qwen2: n = m.qwen2(i, 1); break;
      case split_regex::llama3: n = m.qwen2(i, 3); break;
      case split_regex::gpt2: n = m.gpt2(i); break;
    }
    if (n == 0) n = 1;  // unreachable: the alternatives cover every character
    pieces.emplace_back(text.substr(i, n));
    i += n;
  }
  return pieces;
}

std::vector<std::u32string> split_bert(std::u32string_view text) {
  std::vector<std::u32string> pieces;
  std::u32string current;
  auto flush = [&] {
    if (!current.empty()) pieces.push_back(std::move(current));
    current.clear();
  };
  for (char32_t c : text) {
    if (is_whitespace(c)) {
      flush();
    } else if (unicode::is_bert_punctuation(c)) {
      flush();
      pieces.emplace_back(1, c);
    } else {
      current.push_back(c);
    }
  }
  flush();
  return pieces;
}

std::optional<unsigned char> byte_level_unmap(char32_t c) {
  static const std::unordered_map<char32_t, unsigned char> inverse = [] {
    std::unordered_map<char32_t, unsigned char> m;
    const auto table = make_byte_table();
    for (std::size_t b = 0; b < table.size(); ++b) m.emplace(table[b], static_cast<unsigned char>(b));
    return m;
  }();
  auto it = inverse.find(c);
  if (it == inverse.end()) return std::nullopt;
  return it->second;
}

std::u32string byte_level_map(std::u32string_view text) {
  static const std::array<char32_t, 256> table = make_byte_table();
  std::u32string out;
  for (unsigned char byte : unicode::encode(text)) out.push_back(table[byte]);
  return out;
}

} // namespace arbiter::backends::tokenizers
