// Judge-score extraction: the last "REWARD: x" (any case, markdown, '=', brackets or quotes)
// outside <think> blocks, as the seeds' judge scripts read it (remote_codec.hpp).
#include "backends/remote/remote_codec.hpp"

#include <charconv>
#include <limits>
#include <string>
#include <string_view>

#include "backends/remote/codec_text.hpp"

namespace arbiter::backends::remote {
namespace {

using namespace detail;

/// The length of what may stand between "REWARD" and its separator at `pos` (0 when
/// nothing): a markdown star, an ASCII space, or the quote that closes a JSON key.
size_t label_padding(std::string_view text, size_t pos) {
  const char ch = text[pos];
  return ch == '*' || ch == '"' || ch == '\'' || is_ascii_space(ch) ? 1 : 0;
}

/// The length of the separator at `pos`: ':', '=' or the full-width colon U+FF1A of Chinese
/// text; 0 when none.
size_t separator(std::string_view text, size_t pos) {
  if (text[pos] == ':' || text[pos] == '=') {
    return 1;
  }
  return text.substr(pos, 3) == "\xEF\xBC\x9A" ? 3 : 0;
}

/// The length of what may stand between the separator and the number at `pos` (0 when
/// nothing): whitespace (ASCII, the no-break space U+00A0, the ideographic space U+3000), or
/// what a judge wraps a number in: markdown stars or code, brackets, quotes, TeX `$` and
/// `\boxed{`.
size_t number_padding(std::string_view text, size_t pos) {
  constexpr std::string_view one_byte = "*[(`\"'$";
  if (is_ascii_space(text[pos]) || one_byte.find(text[pos]) != std::string_view::npos) {
    return 1;
  }
  for (std::string_view wide : {std::string_view{"\xC2\xA0"}, std::string_view{"\xE3\x80\x80"},
                                std::string_view{"\\boxed{"}}) {
    if (text.substr(pos, wide.size()) == wide) {
      return wide.size();
    }
  }
  return 0;
}

/// Where a score starts after "REWARD" ends at `pos`: optional padding (`label_padding`), a
/// separator, optional padding (`number_padding`); then the number, or nullopt.
std::optional<double> score_after(std::string_view text, size_t pos, bool* at_end) {
  while (pos < text.size() && label_padding(text, pos) > 0) {
    ++pos;
  }
  const size_t sep = pos < text.size() ? separator(text, pos) : 0;
  if (sep == 0) {
    return std::nullopt;
  }
  pos += sep;
  for (size_t skip = 0; pos < text.size() && (skip = number_padding(text, pos)) > 0;) {
    pos += skip;
  }
  // [+-]? (digits [. digits*]? | . digits) ([eE] [+-]? digits)?
  size_t start = pos;
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    ++pos;
  }
  size_t digits = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    ++pos;
    ++digits;
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && is_digit(text[pos])) {
      ++pos;
      ++digits;
    }
  }
  if (digits == 0) {
    return std::nullopt;
  }
  bool negative_exponent = false;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    size_t exp = pos + 1;
    if (exp < text.size() && (text[exp] == '+' || text[exp] == '-')) {
      negative_exponent = text[exp] == '-';
      ++exp;
    }
    if (exp < text.size() && is_digit(text[exp])) {
      while (exp < text.size() && is_digit(text[exp])) {
        ++exp;
      }
      pos = exp;
    } else {
      negative_exponent = false;
    }
  }
  bool negative = text[start] == '-';
  if (text[start] == '+' || text[start] == '-') {
    ++start;  // from_chars takes neither sign; '-' is applied below
  }
  double value = 0.0;
  auto [end, ec] = std::from_chars(text.data() + start, text.data() + pos, value);
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves `value` alone: a huge magnitude is infinite, a tiny one is zero.
    value = negative_exponent ? 0.0 : std::numeric_limits<double>::infinity();
  } else if (ec != std::errc{} || end != text.data() + pos) {
    return std::nullopt;
  }
  if (at_end != nullptr) {
    *at_end = pos == text.size();
  }
  return negative ? -value : value;
}

/// `reply` without its <think> blocks (see `extract_judge_score`).
std::string strip_think(std::string_view reply) {
  constexpr std::string_view open_tag = "<think>";
  constexpr std::string_view close_tag = "</think>";
  auto low = ascii_lower(reply);
  size_t pos = 0;
  auto first_open = low.find(open_tag);
  auto first_close = low.find(close_tag);
  if (first_close != std::string::npos
      && (first_open == std::string::npos || first_close < first_open)) {
    pos = first_close + close_tag.size();
  }
  std::string out;
  while (true) {
    auto open = low.find(open_tag, pos);
    if (open == std::string::npos) {
      out.append(reply.substr(pos));
      break;
    }
    out.append(reply.substr(pos, open - pos));
    auto close = low.find(close_tag, open + open_tag.size());
    if (close == std::string::npos) {
      break;  // unclosed: the rest is thinking
    }
    pos = close + close_tag.size();
  }
  return out;
}

} // namespace

std::optional<double> extract_judge_score(std::string_view reply, bool* at_end) {
  constexpr std::string_view label = "reward";
  auto text = strip_think(reply);
  auto low = ascii_lower(text);
  for (size_t pos = low.rfind(label); pos != std::string::npos;
       pos = pos == 0 ? std::string::npos : low.rfind(label, pos - 1)) {
    if (pos > 0 && is_ascii_letter(text[pos - 1])) {
      continue;
    }
    if (auto score = score_after(text, pos + label.size(), at_end)) {
      return score;
    }
  }
  return std::nullopt;
}

} // namespace arbiter::backends::remote
