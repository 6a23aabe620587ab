// Ports of verl 0.9.1's verl/utils/reward_score/{gsm8k,math_reward,math_dapo,
// search_r1_like_qa_em}.py. Each function follows its Python original step by step; the
// comments name the Python they stand for. Regular expressions run in PCRE2 (python_regex),
// string operations on code points (python_str).

#include "backends/cpu/verl_rules.hpp"

#include <stdexcept>
#include <utility>

#include "backends/cpu/exact_match.hpp"
#include "backends/cpu/python_regex.hpp"
#include "backends/cpu/python_str.hpp"

namespace arbiter::backends::cpu::verl {
namespace {

/// Where the Python raises (an assert, an IndexError) and a caller catches it.
struct python_exception : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Python's `\s` on str (str.isspace), spelled out: PCRE2's Unicode \s leaves out
/// U+001C..U+001F, which Python counts.
#define PY_SPACE "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f\\x85\\p{Zs}\\x{2028}\\x{2029}]"

// ---- gsm8k.py ------------------------------------------------------------------------------

constexpr std::size_t gsm8k_clip_chars = 300; // _SOLUTION_CLIP_CHARS

/// extract_solution(solution_str, method); nullopt for None.
std::optional<std::string> gsm8k_extract(std::string_view solution, bool flexible) {
  static const py::regex strict{R"(#### (\-?[0-9\.\,]+))"};
  static const py::regex any_number{R"((\-?[0-9\.\,]+))"};
  solution = py::last(solution, gsm8k_clip_chars); // the whole string when it is shorter
  if (!flexible) {
    auto solutions = strict.find_all(solution, 1);
    if (solutions.empty()) {
      return std::nullopt;
    }
    return py::replace(py::replace(solutions.back(), ",", ""), "$", "");
  }
  auto answers = any_number.find_all(solution, 1);
  if (answers.empty()) {
    return std::nullopt;
  }
  // The last number that is not "" or "."; when all are, the loop variable ends on the first.
  std::string_view final_answer;
  for (auto it = answers.rbegin(); it != answers.rend(); ++it) {
    final_answer = *it;
    if (final_answer != "" && final_answer != ".") {
      break;
    }
  }
  return std::string{final_answer};
}

// ---- math_reward.py ------------------------------------------------------------------------

/// The loop both last_boxed_only_string share: `string[idx:]` up to the first '}' that brings
/// the count of open braces back to zero, or nullopt (None) when none does.
std::optional<std::string> braced_from(std::string_view string, std::size_t idx) {
  int open = 0;
  for (std::size_t i = idx; i < string.size(); ++i) {
    if (string[i] == '{') {
      ++open;
    }
    if (string[i] == '}') {
      --open;
      if (open == 0) {
        return std::string{string.substr(idx, i + 1 - idx)};
      }
    }
  }
  return std::nullopt;
}

/// last_boxed_only_string(string) of math_reward.py; nullopt for None.
std::optional<std::string> math_last_boxed(std::string_view string) {
  auto idx = string.rfind("\\boxed");
  if (py::contains(string, "\\boxed ")) {
    auto after = py::split(string, "\\boxed ").back();
    return "\\boxed " + std::string{py::split(after, "$").front()};
  }
  if (idx == std::string_view::npos) {
    idx = string.rfind("\\fbox");
    if (idx == std::string_view::npos) {
      return std::nullopt;
    }
  }
  return braced_from(string, idx);
}

/// remove_boxed(s) of math_reward.py; throws where its asserts fail.
std::string math_remove_boxed(std::string_view s) {
  constexpr std::string_view spaced = "\\boxed ";
  if (py::contains(s, spaced)) {
    if (s.substr(0, spaced.size()) != spaced) {
      throw python_exception("AssertionError");
    }
    return std::string{s.substr(spaced.size())};
  }
  constexpr std::string_view left = "\\boxed{";
  if (s.substr(0, left.size()) != left || s.empty() || s.back() != '}') {
    throw python_exception("AssertionError");
  }
  return std::string{s.substr(left.size(), s.size() - left.size() - 1)};
}

/// fix_fracs(string).
std::string fix_fracs(const std::string& string) {
  auto substrs = py::split(string, "\\frac");
  std::string out{substrs.front()};
  for (std::size_t k = 1; k < substrs.size(); ++k) {
    std::string_view substr = substrs[k];
    out += "\\frac";
    if (substr.empty()) {
      throw python_exception("IndexError"); // substr[0]
    }
    if (substr.front() == '{') {
      out += substr;
      continue;
    }
    if (py::len(substr) < 2) {
      return string;
    }
    auto a = py::first(substr);
    auto rest = py::after_first(substr);
    auto b = py::first(rest);
    auto post = py::after_first(rest); // substr[2:]
    if (b != "{") {
      out += "{" + std::string{a} + "}{" + std::string{b} + "}" + std::string{post};
    } else {
      out += "{" + std::string{a} + "}" + std::string{b} + std::string{post};
    }
  }
  return out;
}

/// Whether Python's `str(int(text)) == text`: a canonical decimal integer, within
/// int()'s default limit of 4300 digits.
bool canonical_int(std::string_view text) {
  if (!text.empty() && text.front() == '-') {
    text.remove_prefix(1);
    if (text == "0") {
      return false; // int("-0") is 0, written "0"
    }
  }
  if (text.empty() || text.size() > 4300 || (text.front() == '0' && text.size() > 1)) {
    return false;
  }
  for (char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

/// fix_a_slash_b(string).
std::string fix_a_slash_b(const std::string& string) {
  auto parts = py::split(string, "/");
  if (parts.size() != 2 || !canonical_int(parts[0]) || !canonical_int(parts[1])) {
    return string;
  }
  return "\\frac{" + std::string{parts[0]} + "}{" + std::string{parts[1]} + "}";
}

/// remove_right_units(string).
std::string remove_right_units(const std::string& string) {
  if (!py::contains(string, "\\text{ ")) {
    return string;
  }
  auto splits = py::split(string, "\\text{ ");
  if (splits.size() != 2) {
    throw python_exception("AssertionError");
  }
  return std::string{splits[0]};
}

/// fix_sqrt(string).
std::string fix_sqrt(const std::string& string) {
  if (!py::contains(string, "\\sqrt")) {
    return string;
  }
  auto splits = py::split(string, "\\sqrt");
  std::string out{splits.front()};
  for (std::size_t k = 1; k < splits.size(); ++k) {
    std::string_view split = splits[k];
    if (split.empty()) {
      throw python_exception("IndexError"); // split[0]
    }
    if (split.front() != '{') {
      out += "\\sqrt{" + std::string{py::first(split)} + "}" + std::string{py::after_first(split)};
    } else {
      out += "\\sqrt" + std::string{split};
    }
  }
  return out;
}

/// strip_string(string); throws where the Python raises.
std::string strip_string(std::string_view input) {
  std::string s = py::replace(input, "\n", "");
  py::replace_in(s, "\\!", "");
  py::replace_in(s, "\\\\", "\\");
  py::replace_in(s, "tfrac", "frac");
  py::replace_in(s, "dfrac", "frac");
  py::replace_in(s, "\\left", "");
  py::replace_in(s, "\\right", "");
  py::replace_in(s, "^{\\circ}", "");
  py::replace_in(s, "^\\circ", "");
  py::replace_in(s, "\\$", "");
  s = remove_right_units(s);
  py::replace_in(s, "\\\\%", "");
  py::replace_in(s, "\\%", "");
  py::replace_in(s, " .", " 0.");
  py::replace_in(s, "{.", "{0.");
  if (s.empty()) {
    return s;
  }
  if (s.front() == '.') {
    s = "0" + s;
  }
  {
    auto sides = py::split(s, "=");
    if (sides.size() == 2 && py::len(sides[0]) <= 2) {
      s = std::string{sides[1]};
    }
  }
  s = fix_sqrt(s);
  py::replace_in(s, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") {
    s = "\\frac{1}{2}";
  }
  return fix_a_slash_b(s);
}

/// is_equiv(str1, str2): the strip_string forms compared, or the raw strings when
/// strip_string raises.
bool math_is_equiv(std::string_view str1, std::string_view str2) {
  try {
    return strip_string(str1) == strip_string(str2);
  } catch (const python_exception&) {
    return str1 == str2;
  }
}

// ---- math_dapo.py --------------------------------------------------------------------------

/// last_boxed_only_string(string) of math_dapo.py (only "\boxed{").
std::optional<std::string> dapo_last_boxed(std::string_view string) {
  auto idx = string.rfind("\\boxed{");
  if (idx == std::string_view::npos) {
    return std::nullopt;
  }
  return braced_from(string, idx);
}

/// SUBSTITUTIONS and REMOVED_EXPRESSIONS, in order.
constexpr std::pair<std::string_view, std::string_view> substitutions[] = {
  {"an ", ""},
  {"a ", ""},
  {".$", "$"},
  {"\\$", ""},
  {"\\ ", ""},
  {" ", ""},
  {"mbox", "text"},
  {",\\text{and}", ","},
  {"\\text{and}", ","},
  {"\\text{m}", "\\text{}"},
};

constexpr std::string_view removed_expressions[] = {
  "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units",
  "\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm",
  "pounds", "meters", "meals", "edges", "students", "childrentickets", "multiples",
  "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}",
  "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", "\"", "\\dots",
};

/// is_correct_strict_box(pred, gt) without pause tokens: (correct, extracted prediction).
std::pair<bool, std::optional<std::string>> strict_box(std::string_view pred,
                                                       const std::vector<std::string>& gts) {
  auto boxed = dapo_last_boxed(py::last(pred, 100));
  if (!boxed) {
    return {false, std::nullopt}; // None == gt is False
  }
  // remove_boxed: the box starts with "\boxed{" and ends with "}" by construction.
  std::string extracted = boxed->substr(7, boxed->size() - 8);
  bool correct = false;
  for (const auto& gt : gts) {
    correct = correct || extracted == gt;
  }
  return {correct, std::move(extracted)};
}

// ---- search_r1_like_qa_em.py ---------------------------------------------------------------

/// extract_solution(solution_str): the last <answer>...</answer>, stripped; nullopt for None.
std::optional<std::string_view> answer_of(std::string_view solution) {
  static const py::regex tag{R"(<answer>(.*?)</answer>)", py::regex::dotall};
  auto matches = tag.find_all(solution, 1);
  if (matches.empty()) {
    return std::nullopt;
  }
  return py::strip(matches.back());
}

} // namespace

double gsm8k(std::string_view solution_str, const std::vector<std::string>& ground_truth,
             const gsm8k_options& options) {
  auto answer = gsm8k_extract(solution_str, options.flexible);
  if (!answer) {
    return 0.0;
  }
  for (const auto& gt : ground_truth) {
    if (*answer == gt) {
      return options.score;
    }
  }
  return options.format_score;
}

std::optional<std::string> math_strip_string(std::string_view text) {
  try {
    return strip_string(text);
  } catch (const python_exception&) {
    return std::nullopt;
  }
}

double math(std::string_view solution_str, const std::vector<std::string>& ground_truth) {
  // compute_score's `except Exception` covers last_boxed_only_string and remove_boxed;
  // is_equiv catches strip_string's own.
  try {
    auto boxed = math_last_boxed(solution_str);
    if (!boxed) {
      return 0.0;
    }
    auto answer = math_remove_boxed(*boxed);
    for (const auto& gt : ground_truth) {
      if (math_is_equiv(answer, gt)) {
        return 1.0;
      }
    }
  } catch (const python_exception&) {
  }
  return 0.0;
}

std::string normalize_final_answer(std::string_view final_answer) {
  static const py::regex dollars{R"((.*?)(\$)(.*?)(\$)(.*))"};
  // The re.sub calls after the dollars, in order, each only where its literal part occurs
  // (most answers hold none of them).
  struct rewrite {
    std::string_view literal;
    py::regex pattern;
    const char* replacement;
  };
  static const rewrite rewrites[] = {
    {"\\text{", py::regex{R"((\\text\{)(.*?)(\}))"}, "${2}"},
    {"\\textbf{", py::regex{R"((\\textbf\{)(.*?)(\}))"}, "${2}"},
    {"\\overline{", py::regex{R"((\\overline\{)(.*?)(\}))"}, "${2}"},
    {"\\boxed{", py::regex{R"((\\boxed\{)(.*)(\}))"}, "${2}"},
    {"frac", py::regex{R"((frac)([^{])(.))"}, "frac{${2}}{${3}}"},
    {"sqrt", py::regex{R"((sqrt)([^{]))"}, "sqrt{${2}}"},
  };

  std::string s{py::split(final_answer, "=").back()};
  for (const auto& [before, after] : substitutions) {
    py::replace_in(s, before, after);
  }
  for (auto expr : removed_expressions) {
    py::replace_in(s, expr, "");
  }
  if (py::count(s, "$") >= 2) {
    s = dollars.sub(s, "$$${3}$$"); // "$\3$"
  }
  for (const auto& r : rewrites) {
    if (s.find(r.literal) != std::string::npos) {
      s = r.pattern.sub(s, r.replacement);
    }
  }
  py::replace_in(s, "$", "");
  if (py::isdigit(py::replace(s, ",", ""))) {
    py::replace_in(s, ",", "");
  }
  return std::string{py::strip(s)};
}

math_dapo_result math_dapo(std::string_view solution_str,
                           const std::vector<std::string>& ground_truth,
                           bool strict_box_verify) {
  static const py::regex answer_line{"Answer" PY_SPACE "*:" PY_SPACE "*([^\\n]+)",
                                     py::regex::ignorecase};
  const std::string_view solution = py::last(solution_str, 300);
  math_dapo_result out;
  auto finish = [&](bool correct, std::optional<std::string> pred) {
    out.acc = correct;
    out.score = correct ? 1.0 : -1.0;
    out.pred = std::move(pred);
    return out;
  };
  if (strict_box_verify) {
    auto [correct, pred] = strict_box(solution, ground_truth);
    return finish(correct, std::move(pred));
  }
  // is_correct_minerva
  auto matches = answer_line.find_all(solution, 1);
  std::string pred = normalize_final_answer(matches.empty() ? "[INVALID]" : matches.back());
  bool correct = false;
  for (const auto& gt : ground_truth) {
    correct = correct || pred == normalize_final_answer(gt);
  }
  if (pred != "[INVALID]") {
    return finish(correct, std::move(pred));
  }
  auto [box_correct, box_pred] = strict_box(solution, ground_truth);
  if (box_pred) {
    return finish(box_correct, std::move(box_pred));
  }
  return finish(correct, std::move(pred));
}

double search_r1_qa_em(std::string_view solution_str, const std::vector<std::string>& targets,
                       const search_r1_options& options) {
  auto answer = answer_of(solution_str);
  if (!answer) {
    return 0.0;
  }
  const std::string prediction = normalize_answer(*answer);
  for (const auto& target : targets) {
    if (normalize_answer(target) == prediction) {
      if (py::count(solution_str, "<answer>") > 10 || py::count(solution_str, "</answer>") > 10) {
        return options.score / 4;
      }
      return options.score;
    }
  }
  return options.format_score;
}

} // namespace arbiter::backends::cpu::verl
