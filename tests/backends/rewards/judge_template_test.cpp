#include "backends/rewards/judge_template.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace arbiter::backends::rewards;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

size_t count_of(std::string_view text, std::string_view needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string_view::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

std::string lower(std::string_view text) {
  std::string out{text};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view text) {
  const char* spaces = " \t\n\r\f\v";
  auto begin = text.find_first_not_of(spaces);
  if (begin == std::string_view::npos) {
    return {};
  }
  auto end = text.find_last_not_of(spaces);
  return std::string{text.substr(begin, end - begin + 1)};
}

/// What the fake provider reads from a judge prompt: the text after the last "reference:" and
/// the last "candidate:" (any case), each running to the other label or the end, trimmed.
struct graded_sections {
  std::string reference;
  std::string candidate;
};

graded_sections fake_provider_sections(std::string_view prompt) {
  auto low = lower(prompt);
  auto ref = low.rfind("reference:");
  auto cand = low.rfind("candidate:");
  EXPECT_NE(ref, std::string::npos);
  EXPECT_NE(cand, std::string::npos);
  auto section = [&](size_t start, size_t other) {
    size_t begin = start + 10;
    size_t end = other > start ? other : prompt.size();
    return trim(prompt.substr(begin, end - begin));
  };
  return {section(ref, cand), section(cand, ref)};
}

std::string invalid_argument_message(std::string_view prompt_template) {
  try {
    resolve_judge_template(prompt_template);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no throw";
}

} // namespace

// ---- named templates ----------------------------------------------------------------------

TEST(JudgeTemplate, NamedTemplatesHaveEachPlaceholderOnce) {
  for (auto name : {"default", "detailed"}) {
    auto tmpl = named_judge_template(name);
    ASSERT_TRUE(tmpl) << name;
    EXPECT_EQ(count_of(*tmpl, "{PROBLEM}"), 1u) << name;
    EXPECT_EQ(count_of(*tmpl, "{REFERENCE_SOLUTION}"), 1u) << name;
    EXPECT_EQ(count_of(*tmpl, "{CANDIDATE_SOLUTION}"), 1u) << name;
    EXPECT_EQ(resolve_judge_template(name), *tmpl);
  }
  EXPECT_EQ(named_judge_template("Default"), std::nullopt);
  EXPECT_EQ(named_judge_template("detialed"), std::nullopt);
  EXPECT_NE(*named_judge_template("default"), *named_judge_template("detailed"));
}

TEST(JudgeTemplate, NamedTemplatesAskForTheRewardLine) {
  auto plain = *named_judge_template("default");
  EXPECT_THAT(std::string{plain}, HasSubstr("REWARD: <number between 0 and 1 with 3 decimals>"));
  EXPECT_THAT(std::string{plain}, HasSubstr("ONE line"));
  auto detailed = std::string{*named_judge_template("detailed")};
  EXPECT_THAT(detailed, HasSubstr("REWARD: <score>"));
  EXPECT_THAT(detailed, HasSubstr("step by step"));
  EXPECT_THAT(detailed, HasSubstr("final answer"));
  EXPECT_THAT(detailed, HasSubstr("Completeness"));
}

TEST(JudgeTemplate, NamedTemplatesKeepTheLabelsForGraders) {
  for (auto name : {"default", "detailed"}) {
    SCOPED_TRACE(name);
    std::string tmpl{*named_judge_template(name)};
    auto low = lower(tmpl);
    // The labels occur once, each right before its placeholder, and the candidate comes last.
    EXPECT_EQ(count_of(low, "reference:"), 1u);
    EXPECT_EQ(count_of(low, "candidate:"), 1u);
    EXPECT_EQ(tmpl.find("Reference:\n{REFERENCE_SOLUTION}") + 11,
              tmpl.find("{REFERENCE_SOLUTION}"));
    EXPECT_TRUE(tmpl.size() >= 20 && tmpl.substr(tmpl.size() - 20) == "{CANDIDATE_SOLUTION}");
    EXPECT_LT(tmpl.find("{PROBLEM}"), tmpl.find("{REFERENCE_SOLUTION}"));
    EXPECT_LT(tmpl.find("{REFERENCE_SOLUTION}"), tmpl.find("{CANDIDATE_SOLUTION}"));
    EXPECT_LT(tmpl.find("REWARD:"), tmpl.find("Problem:\n{PROBLEM}"));

    auto prompt = render_judge_prompt(tmpl, "Solve 2x = 8.", "x = 4, so the answer is 4",
                                      "We divide by 2.\nAnswer: 4");
    auto sections = fake_provider_sections(prompt);
    EXPECT_EQ(sections.reference, "x = 4, so the answer is 4");
    EXPECT_EQ(sections.candidate, "We divide by 2.\nAnswer: 4");
  }
}

// ---- resolving ----------------------------------------------------------------------------

TEST(JudgeTemplate, CustomTemplatesResolveToThemselves) {
  for (auto custom : {"Grade {CANDIDATE_SOLUTION}", "{PROBLEM}", "ref={REFERENCE_SOLUTION}!",
                      "detailed {PROBLEM}"}) {
    EXPECT_EQ(resolve_judge_template(custom), custom);
  }
}

TEST(JudgeTemplate, NeitherNameNorTemplateIsRefused) {
  EXPECT_EQ(invalid_argument_message("detialed"),
            "prompt_template: 'detialed' is neither a template name (default, detailed) nor a "
            "template with {PROBLEM}, {REFERENCE_SOLUTION} or {CANDIDATE_SOLUTION}");
  EXPECT_THAT(invalid_argument_message(""), HasSubstr("prompt_template: '' is neither"));
  EXPECT_THAT(invalid_argument_message("{problem} lower case"), HasSubstr("is neither"));
  // A long string is quoted by its opening, cut on a code point boundary.
  std::string long_text(59, 'x');
  long_text += "é and much more text that no message needs to repeat";
  auto message = invalid_argument_message(long_text);
  EXPECT_THAT(message, HasSubstr("'" + std::string(59, 'x') + "...' is neither"));
  EXPECT_THAT(message, Not(HasSubstr("much more")));
}

// ---- rendering ----------------------------------------------------------------------------

TEST(JudgeTemplate, RendersInOnePassWithoutResubstituting) {
  auto prompt = render_judge_prompt("P={PROBLEM}|R={REFERENCE_SOLUTION}|C={CANDIDATE_SOLUTION}",
                                    "uses {REFERENCE_SOLUTION}", "{PROBLEM} {} {{x}}",
                                    "{CANDIDATE_SOLUTION}{");
  EXPECT_EQ(prompt, "P=uses {REFERENCE_SOLUTION}|R={PROBLEM} {} {{x}}|C={CANDIDATE_SOLUTION}{");
}

TEST(JudgeTemplate, LeavesOtherBracesAlone) {
  EXPECT_EQ(render_judge_prompt("{} {{PROBLEM}} {PROBLEM {problem} {PROBLEM}}", "p", "r", "c"),
            "{} {p} {PROBLEM {problem} p}");
  EXPECT_EQ(render_judge_prompt("no placeholders {", "p", "r", "c"), "no placeholders {");
  EXPECT_EQ(render_judge_prompt("", "p", "r", "c"), "");
}

TEST(JudgeTemplate, RepeatedPlaceholdersAreAllFilled) {
  EXPECT_EQ(render_judge_prompt("{CANDIDATE_SOLUTION} vs {REFERENCE_SOLUTION}; again "
                                "{CANDIDATE_SOLUTION}{CANDIDATE_SOLUTION} ({PROBLEM}, {PROBLEM})",
                                "q", "ref", "cand"),
            "cand vs ref; again candcand (q, q)");
}

TEST(JudgeTemplate, ValuesAreStrippedAsPythonStrips) {
  EXPECT_EQ(render_judge_prompt("[{PROBLEM}][{REFERENCE_SOLUTION}][{CANDIDATE_SOLUTION}]",
                                "\n  what is 2+2?\t", "\xC2\xA0 4 \xE3\x80\x80", " \r\n "),
            "[what is 2+2?][4][]");
  // Inner whitespace stays.
  EXPECT_EQ(render_judge_prompt("{PROBLEM}", " a \n\n b ", "", ""), "a \n\n b");
}

TEST(JudgeTemplate, UnicodeValuesPassThrough) {
  auto prompt = render_judge_prompt(*named_judge_template("default"), "Résous x² = 4 — 解",
                                    "x = ±2 ✓", "x = 2 或 x = −2 🙂");
  EXPECT_THAT(prompt, HasSubstr("Problem:\nRésous x² = 4 — 解\n"));
  auto sections = fake_provider_sections(prompt);
  EXPECT_EQ(sections.reference, "x = ±2 ✓");
  EXPECT_EQ(sections.candidate, "x = 2 或 x = −2 🙂");
}
