#include "backends/rewards/judge_template.hpp"

#include <stdexcept>
#include <utility>

#include "backends/rewards/text_similarity.hpp"

namespace arbiter::backends::rewards {

namespace {

constexpr std::string_view problem_placeholder = "{PROBLEM}";
constexpr std::string_view reference_placeholder = "{REFERENCE_SOLUTION}";
constexpr std::string_view candidate_placeholder = "{CANDIDATE_SOLUTION}";

/// How much of a bad `prompt_template` the error message quotes.
constexpr size_t quoted_template_bytes = 60;

// Both templates give their instructions first and then the inputs, under the labels
// "Problem:", "Reference:" and "Candidate:" (the candidate last of all). The instructions never
// write "reference" or "candidate" directly followed by ':', so a grader that reads the text
// after the last "Reference:" and the last "Candidate:" (the fake provider) sees exactly the
// item's texts.

constexpr std::string_view default_instructions =
  "Rate how similar a candidate solution is to a reference solution for the problem below: "
  "do they reach the same result, by equally sound means?\n"
  "Give a value between 0 and 1 with 3 decimals, where 0.000 means unrelated or wrong and "
  "1.000 means equivalent.\n"
  "Output exactly ONE line, in this format and nothing else:\n"
  "REWARD: <number between 0 and 1 with 3 decimals>\n";

constexpr std::string_view detailed_instructions =
  "Grade a candidate solution to the problem below, using the reference solution as the "
  "standard.\n"
  "Think step by step before you decide, and write your reasoning down:\n"
  "1. Final answer: does the candidate solution reach the same final answer as the reference "
  "solution?\n"
  "2. Reasoning: is each step of the candidate solution valid, and do the steps lead to its "
  "answer?\n"
  "3. Completeness: does the candidate solution address everything the problem asks for?\n"
  "After your reasoning, end with one final line holding a score between 0 and 1 with 3 "
  "decimals, in this format:\n"
  "REWARD: <score>\n";

constexpr std::string_view inputs_section =
  "\n"
  "Problem:\n"
  "{PROBLEM}\n"
  "\n"
  "Reference:\n"
  "{REFERENCE_SOLUTION}\n"
  "\n"
  "Candidate:\n"
  "{CANDIDATE_SOLUTION}";

/// `instructions` followed by the inputs section.
std::string with_inputs(std::string_view instructions) {
  std::string out{instructions};
  out += inputs_section;
  return out;
}

bool has_placeholder(std::string_view text) {
  for (auto placeholder : {problem_placeholder, reference_placeholder, candidate_placeholder}) {
    if (text.find(placeholder) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

/// At most `max_bytes` of `text`, cut on a UTF-8 code point boundary, with "..." when cut.
std::string quote_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return std::string{text};
  }
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return std::string{text.substr(0, cut)} + "...";
}

} // namespace

std::optional<std::string_view> named_judge_template(std::string_view name) {
  static const std::string default_template = with_inputs(default_instructions);
  static const std::string detailed_template = with_inputs(detailed_instructions);
  if (name == "default") {
    return default_template;
  }
  if (name == "detailed") {
    return detailed_template;
  }
  return std::nullopt;
}

std::string resolve_judge_template(std::string_view prompt_template) {
  if (auto named = named_judge_template(prompt_template)) {
    return std::string{*named};
  }
  if (has_placeholder(prompt_template)) {
    return std::string{prompt_template};
  }
  throw std::invalid_argument(
    "prompt_template: '" + quote_prefix(prompt_template, quoted_template_bytes)
    + "' is neither a template name (default, detailed) nor a template with {PROBLEM}, "
      "{REFERENCE_SOLUTION} or {CANDIDATE_SOLUTION}");
}

bool uses_reference(std::string_view resolved_template) {
  return resolved_template.find(reference_placeholder) != std::string_view::npos;
}

std::string render_judge_prompt(std::string_view tmpl, std::string_view problem,
                                std::string_view reference, std::string_view candidate) {
  const std::pair<std::string_view, std::string_view> fills[] = {
    {problem_placeholder, python_strip(problem)},
    {reference_placeholder, python_strip(reference)},
    {candidate_placeholder, python_strip(candidate)},
  };
  std::string out;
  out.reserve(tmpl.size() + problem.size() + reference.size() + candidate.size());
  size_t i = 0;
  while (i < tmpl.size()) {
    bool filled = false;
    if (tmpl[i] == '{') {
      for (const auto& [placeholder, value] : fills) {
        if (tmpl.substr(i, placeholder.size()) == placeholder) {
          out += value;
          i += placeholder.size();
          filled = true;
          break;
        }
      }
    }
    if (!filled) {
      out += tmpl[i];
      ++i;
    }
  }
  return out;
}

} // namespace arbiter::backends::rewards
