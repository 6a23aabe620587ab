#include "net/number_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

namespace arbiter::net {

namespace {

bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

bool is_json_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/// The decimal order of magnitude of a nonzero number written as `integer`.`fraction` ×
/// 10^`exponent`: the power of ten of its first significant digit.
int64_t order_of(std::string_view integer, std::string_view fraction, int64_t exponent) {
  if (auto at = integer.find_first_not_of('0'); at != std::string_view::npos) {
    return static_cast<int64_t>(integer.size() - at) - 1 + exponent;
  }
  auto at = fraction.find_first_not_of('0');
  return -static_cast<int64_t>(at == std::string_view::npos ? fraction.size() : at) - 1
         + exponent;
}

} // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value < 0 ? "-inf" : "inf";
  }
  // The shortest digits that read back to `value` (what Python's repr picks too), as
  // "[-]d[.ddd]e±XX".
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view text{buf, static_cast<size_t>(end - buf)};
  std::string out;
  if (!text.empty() && text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  auto e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') {
      digits += c;
    }
  }
  auto exponent_text = text.substr(e + 1);
  if (!exponent_text.empty() && exponent_text.front() == '+') {
    exponent_text.remove_prefix(1);
  }
  int exponent = 0;
  std::from_chars(exponent_text.data(), exponent_text.data() + exponent_text.size(), exponent);
  // CPython's format_float_short with repr's settings: the point sits after `decpt` digits;
  // scientific notation when decpt <= -4 or decpt > 16.
  const int decpt = exponent + 1;
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    out += exponent < 0 ? "e-" : "e+";
    if (std::abs(exponent) < 10) {
      out += '0';
    }
    out += std::to_string(std::abs(exponent));
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= n) {
    out += digits;
    out.append(static_cast<size_t>(decpt - n), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
  return out;
}

std::optional<std::string> python_number_text(std::string_view token) {
  while (!token.empty() && is_json_space(token.front())) {
    token.remove_prefix(1);
  }
  while (!token.empty() && is_json_space(token.back())) {
    token.remove_suffix(1);
  }
  // JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  const size_t n = token.size();
  size_t i = 0;
  const bool negative = i < n && token[i] == '-';
  if (negative) {
    ++i;
  }
  const size_t integer_begin = i;
  if (i < n && token[i] == '0') {
    ++i;
  } else if (i < n && is_digit(token[i])) {
    while (i < n && is_digit(token[i])) {
      ++i;
    }
  } else {
    return std::nullopt;
  }
  const auto integer = token.substr(integer_begin, i - integer_begin);
  bool is_float = false;
  std::string_view fraction;
  if (i < n && token[i] == '.') {
    const size_t begin = ++i;
    while (i < n && is_digit(token[i])) {
      ++i;
    }
    if (i == begin) {
      return std::nullopt;
    }
    fraction = token.substr(begin, i - begin);
    is_float = true;
  }
  int64_t exponent = 0;
  if (i < n && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    bool exponent_negative = false;
    if (i < n && (token[i] == '+' || token[i] == '-')) {
      exponent_negative = token[i] == '-';
      ++i;
    }
    const size_t begin = i;
    while (i < n && is_digit(token[i])) {
      // Saturates: far beyond any double's range either way.
      exponent = std::min<int64_t>(exponent * 10 + (token[i] - '0'), 1'000'000'000);
      ++i;
    }
    if (i == begin) {
      return std::nullopt;
    }
    if (exponent_negative) {
      exponent = -exponent;
    }
    is_float = true;
  }
  if (i != n) {
    return std::nullopt;
  }
  if (!is_float) {
    // Python's int: every digit kept.
    std::string digits{integer};
    return negative && digits != "0" ? "-" + digits : digits;
  }
  // Python's float: the nearest double, correctly rounded; past the range inf, below it 0.
  double value = 0.0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + n, value);
  if (ec == std::errc::result_out_of_range) {
    value = order_of(integer, fraction, exponent) > 0 ? std::numeric_limits<double>::infinity()
                                                      : 0.0;
    if (negative) {
      value = -value;
    }
  } else if (ec != std::errc{} || end != token.data() + n) {
    return std::nullopt;
  }
  return python_float_repr(value);
}

} // namespace arbiter::net
