#include "backends/rewards/text_similarity.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "common/enum_names.hpp"

namespace arbiter::backends::rewards {

namespace {

using json = nlohmann::json;

bool is_ascii_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/// `re.findall(r"[A-Za-z0-9]+", text)`.
std::vector<std::string_view> ascii_alnum_runs(std::string_view text) {
  std::vector<std::string_view> runs;
  size_t i = 0;
  while (i < text.size()) {
    if (!is_ascii_alnum(text[i])) {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < text.size() && is_ascii_alnum(text[i])) {
      ++i;
    }
    runs.push_back(text.substr(start, i - start));
  }
  return runs;
}

/// Python's truthiness of a JSON value.
bool truthy(const json& value) {
  switch (value.type()) {
    case json::value_t::boolean:
      return value.get<bool>();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return value.get<double>() != 0.0;
    case json::value_t::string:
      return !value.get_ref<const std::string&>().empty();
    case json::value_t::array:
    case json::value_t::object:
      return !value.empty();
    default:
      return false;
  }
}

/// Python's `str(value)` for the prompt, or nullopt for arrays and objects (see
/// `filter_references`).
std::optional<std::string> prompt_text(const json& value) {
  switch (value.type()) {
    case json::value_t::string:
      return value.get<std::string>();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return value.dump();
    case json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case json::value_t::null:
      return "None";
    default:
      return std::nullopt;
  }
}

/// The indices of `references` for which `keep` holds.
template <typename Keep>
std::vector<size_t> indices_where(const std::vector<std::string>& references, Keep keep) {
  std::vector<size_t> out;
  for (size_t i = 0; i < references.size(); ++i) {
    if (keep(references[i])) {
      out.push_back(i);
    }
  }
  return out;
}

/// Step 1 of `filter_references`: the references `target_gt` selects (empty: no selection).
std::vector<size_t> filter_by_target(const std::vector<std::string>& references,
                                     const json& options) {
  auto it = options.find("target_gt");
  if (it == options.end()) {
    return {};
  }
  const json& target = *it;
  if (target.is_string()) {
    const auto& wanted = target.get_ref<const std::string&>();
    return indices_where(references, [&](const std::string& r) { return r == wanted; });
  }
  if (target.is_array()) {
    return indices_where(references, [&](const std::string& r) {
      return std::any_of(target.begin(), target.end(), [&](const json& t) {
        return t.is_string() && t.get_ref<const std::string&>() == r;
      });
    });
  }
  return {};
}

/// Step 2 of `filter_references`: the references that contain the prompt's last word (empty:
/// no selection).
std::vector<size_t> filter_by_prompt_token(const std::vector<std::string>& references,
                                           const json& options) {
  auto flag = options.find("filter_gt_by_prompt_token");
  auto prompt = options.find("prompt");
  if (flag == options.end() || !truthy(*flag) || prompt == options.end()) {
    return {};
  }
  auto text = prompt_text(*prompt);
  if (!text) {
    return {};
  }
  auto words = python_split(*text);
  if (words.empty()) {
    return {};
  }
  const std::string last_word = ascii_lower(words.back());
  return indices_where(references, [&](const std::string& r) {
    const std::string lowered = ascii_lower(r);
    auto runs = ascii_alnum_runs(lowered);
    return std::find(runs.begin(), runs.end(), last_word) != runs.end();
  });
}

} // namespace

constexpr auto length_penalty_kind_names = names_of<length_penalty_kind::exponential>(
    "none", "ratio", "sqrt", "log", "quadratic", "exponential");

const char* to_string(length_penalty_kind kind) noexcept {
  return length_penalty_kind_names[kind];
}

std::string ascii_lower(std::string_view text) {
  std::string out{text};
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

std::optional<length_penalty_kind> parse_length_penalty(std::string_view name) {
  return length_penalty_kind_names.parse(name);
}

double length_penalty(std::string_view reference, std::string_view candidate,
                      length_penalty_kind kind, double threshold) {
  const size_t ref_words = python_split(reference).size();
  const size_t out_words = python_split(candidate).size();
  if (ref_words == 0 && out_words == 0) {
    return 1.0;
  }
  // The seeds' ratios; a zero count makes its ratio 0 (the other one is never the minimum).
  double ratio = 0.0;
  if (ref_words != 0 && out_words != 0) {
    const double ratio_short = static_cast<double>(out_words) / static_cast<double>(ref_words);
    const double ratio_long = static_cast<double>(ref_words) / static_cast<double>(out_words);
    if (1.0 / threshold <= ratio_short && ratio_short <= threshold) {
      return 1.0;
    }
    ratio = std::min(ratio_long, ratio_short);
  }
  switch (kind) {
    case length_penalty_kind::none:
      return 1.0;
    case length_penalty_kind::ratio:
      return std::min(1.0, ratio);
    case length_penalty_kind::sqrt:
      return std::min(1.0, std::pow(ratio, 0.5));
    case length_penalty_kind::log: {
      const auto shorter = static_cast<double>(std::min(ref_words, out_words));
      const auto longer = static_cast<double>(std::max(ref_words, out_words));
      return std::min(1.0, std::log(1.0 + shorter) / std::log(1.0 + longer));
    }
    case length_penalty_kind::quadratic:
      return std::min(1.0, std::pow(ratio, 2.0));
    case length_penalty_kind::exponential:
      return std::min(1.0, std::exp(-(1.0 - ratio)));
  }
  return 1.0;
}

double cosine_to_unit(double cosine) noexcept {
  return (cosine + 1.0) / 2.0;
}

std::vector<size_t> filter_references(const std::vector<std::string>& references,
                                      const nlohmann::json& options) {
  if (options.is_object()) {
    if (auto kept = filter_by_target(references, options); !kept.empty()) {
      return kept;
    }
    if (auto kept = filter_by_prompt_token(references, options); !kept.empty()) {
      return kept;
    }
  }
  std::vector<size_t> all(references.size());
  for (size_t i = 0; i < all.size(); ++i) {
    all[i] = i;
  }
  return all;
}

size_t python_space_at(std::string_view text, size_t pos) noexcept {
  if (pos >= text.size()) {
    return 0;
  }
  auto byte = [&](size_t k) {
    return pos + k < text.size() ? static_cast<unsigned char>(text[pos + k]) : 0u;
  };
  const unsigned b0 = byte(0);
  if ((b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20)) {
    return 1;
  }
  if (b0 == 0xC2) { // U+0085, U+00A0
    return byte(1) == 0x85 || byte(1) == 0xA0 ? 2 : 0;
  }
  if (b0 == 0xE1) { // U+1680
    return byte(1) == 0x9A && byte(2) == 0x80 ? 3 : 0;
  }
  if (b0 == 0xE2 && byte(1) == 0x80) { // U+2000–U+200A, U+2028, U+2029, U+202F
    const unsigned b2 = byte(2);
    return (b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF ? 3 : 0;
  }
  if (b0 == 0xE2 && byte(1) == 0x81) { // U+205F
    return byte(2) == 0x9F ? 3 : 0;
  }
  if (b0 == 0xE3) { // U+3000
    return byte(1) == 0x80 && byte(2) == 0x80 ? 3 : 0;
  }
  return 0;
}

std::vector<std::string_view> python_split(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    if (size_t space = python_space_at(text, i); space != 0) {
      i += space;
      continue;
    }
    const size_t start = i;
    while (i < text.size() && python_space_at(text, i) == 0) {
      ++i;
    }
    words.push_back(text.substr(start, i - start));
  }
  return words;
}

std::string_view python_strip(std::string_view text) noexcept {
  size_t begin = 0;
  while (size_t space = python_space_at(text, begin)) {
    begin += space;
  }
  // Scan forward so that multi-byte whitespace is recognized from its first byte: the end is
  // just past the last character that is not whitespace.
  size_t end = begin;
  size_t i = begin;
  while (i < text.size()) {
    if (size_t space = python_space_at(text, i); space != 0) {
      i += space;
    } else {
      ++i;
      end = i;
    }
  }
  return text.substr(begin, end - begin);
}

} // namespace arbiter::backends::rewards
