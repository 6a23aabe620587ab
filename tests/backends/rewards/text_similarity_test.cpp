#include "backends/rewards/text_similarity.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::rewards;
using json = nlohmann::json;

namespace {

constexpr double tolerance = 1e-12;

/// `n` words "w0 w1 ...".
std::string words(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "w" : " w") + std::to_string(i);
  }
  return out;
}

double penalty(size_t ref_words, size_t candidate_words, length_penalty_kind kind,
               double threshold = default_length_threshold) {
  return length_penalty(words(ref_words), words(candidate_words), kind, threshold);
}

/// Every kind's expected factor for word counts whose ratio is outside the threshold, written
/// out from the seeds' formulas.
struct expected_penalties {
  double ratio, sqrt, log, quadratic, exponential;
};

expected_penalties outside(double shorter, double longer) {
  const double r = shorter / longer;
  return {r, std::sqrt(r), std::log(1.0 + shorter) / std::log(1.0 + longer), r * r,
          std::exp(r - 1.0)};
}

void expect_penalties(size_t ref_words, size_t candidate_words, double threshold,
                      const expected_penalties& want) {
  SCOPED_TRACE("reference " + std::to_string(ref_words) + " words, candidate "
               + std::to_string(candidate_words) + ", threshold " + std::to_string(threshold));
  auto at = [&](length_penalty_kind kind) {
    return penalty(ref_words, candidate_words, kind, threshold);
  };
  EXPECT_EQ(at(length_penalty_kind::none), 1.0);
  EXPECT_NEAR(at(length_penalty_kind::ratio), want.ratio, tolerance);
  EXPECT_NEAR(at(length_penalty_kind::sqrt), want.sqrt, tolerance);
  EXPECT_NEAR(at(length_penalty_kind::log), want.log, tolerance);
  EXPECT_NEAR(at(length_penalty_kind::quadratic), want.quadratic, tolerance);
  EXPECT_NEAR(at(length_penalty_kind::exponential), want.exponential, tolerance);
}

void expect_no_penalty(size_t ref_words, size_t candidate_words, double threshold) {
  expect_penalties(ref_words, candidate_words, threshold, {1.0, 1.0, 1.0, 1.0, 1.0});
}

const length_penalty_kind all_kinds[] = {
  length_penalty_kind::none, length_penalty_kind::ratio,     length_penalty_kind::sqrt,
  length_penalty_kind::log,  length_penalty_kind::quadratic, length_penalty_kind::exponential,
};

std::vector<size_t> filtered(const std::vector<std::string>& refs, const json& options) {
  return filter_references(refs, options);
}

} // namespace

// ---- kinds --------------------------------------------------------------------------------

TEST(LengthPenalty, KindNamesRoundTrip) {
  for (auto kind : all_kinds) {
    EXPECT_EQ(parse_length_penalty(to_string(kind)), kind);
  }
  EXPECT_EQ(parse_length_penalty("Ratio"), std::nullopt);
  EXPECT_EQ(parse_length_penalty("linear"), std::nullopt);
  EXPECT_EQ(parse_length_penalty(""), std::nullopt);
}

// ---- the threshold ------------------------------------------------------------------------

TEST(LengthPenalty, LongerCandidateAtTheThresholdIsNotPenalized) {
  expect_no_penalty(4, 6, 1.5); // 6/4 == 1.5 exactly
  expect_no_penalty(10, 15, 1.5);
  expect_no_penalty(10, 20, 2.0);
}

TEST(LengthPenalty, LongerCandidateJustAboveTheThresholdIsPenalized) {
  expect_penalties(10, 16, 1.5, outside(10, 16)); // 1.6 > 1.5
  expect_penalties(4, 7, 1.5, outside(4, 7));
  expect_penalties(10, 21, 2.0, outside(10, 21));
}

TEST(LengthPenalty, JustBelowTheThresholdIsNotPenalized) {
  expect_no_penalty(10, 14, 1.5);
  expect_no_penalty(10, 19, 2.0);
  expect_no_penalty(10, 10, 1.5);
}

TEST(LengthPenalty, ShorterCandidateAtTheReciprocalIsNotPenalized) {
  expect_no_penalty(4, 2, 2.0); // 2/4 == 1/2 exactly
  // 2/3 and 1/1.5 round to the same double, so the boundary holds.
  expect_no_penalty(3, 2, 1.5);
  expect_no_penalty(15, 10, 1.5);
}

TEST(LengthPenalty, ShorterCandidateJustBelowTheReciprocalIsPenalized) {
  expect_penalties(16, 10, 1.5, outside(10, 16));
  expect_penalties(7, 4, 1.5, outside(4, 7));
  expect_penalties(21, 10, 2.0, outside(10, 21));
  expect_penalties(4, 1, 2.0, outside(1, 4));
}

TEST(LengthPenalty, ShorterAndLongerCandidatesArePenalizedAlike) {
  for (auto kind : all_kinds) {
    EXPECT_NEAR(penalty(3, 12, kind), penalty(12, 3, kind), tolerance) << to_string(kind);
  }
}

TEST(LengthPenalty, ThresholdBelowOnePenalizesEvenEqualLengths) {
  // 1/0.8 > 0.8: no ratio is inside, and equal lengths give ratio 1 (log 1, e^0).
  expect_penalties(5, 5, 0.8, {1.0, 1.0, 1.0, 1.0, 1.0});
  expect_penalties(5, 6, 0.8, outside(5, 6));
}

TEST(LengthPenalty, EmptyTexts) {
  for (auto kind : all_kinds) {
    EXPECT_EQ(length_penalty("", "", kind, 1.5), 1.0) << to_string(kind);
    EXPECT_EQ(length_penalty(" \n\t ", "", kind, 1.5), 1.0) << to_string(kind);
  }
  const double e_minus_one = std::exp(-1.0);
  for (auto [ref, candidate] : {std::pair{"", "two words"}, std::pair{"two words", "  "}}) {
    EXPECT_EQ(length_penalty(ref, candidate, length_penalty_kind::none, 1.5), 1.0);
    EXPECT_EQ(length_penalty(ref, candidate, length_penalty_kind::ratio, 1.5), 0.0);
    EXPECT_EQ(length_penalty(ref, candidate, length_penalty_kind::sqrt, 1.5), 0.0);
    EXPECT_EQ(length_penalty(ref, candidate, length_penalty_kind::log, 1.5), 0.0);
    EXPECT_EQ(length_penalty(ref, candidate, length_penalty_kind::quadratic, 1.5), 0.0);
    EXPECT_NEAR(length_penalty(ref, candidate, length_penalty_kind::exponential, 1.5),
                e_minus_one, tolerance);
  }
}

TEST(LengthPenalty, CountsWordsAsPythonSplitDoes) {
  // Tabs, newlines, \x1c..\x1f, NO-BREAK SPACE and IDEOGRAPHIC SPACE separate words; a
  // ZERO WIDTH SPACE (not whitespace to Python) does not.
  const std::string four = "a\tb\x1c" "c\xC2\xA0" "d";
  const std::string also_four = "  a\n\nb\xE3\x80\x80" "c\x1f" "d \r\n";
  const std::string one = "a\xE2\x80\x8B" "b";
  EXPECT_EQ(python_split(four).size(), 4u);
  EXPECT_EQ(python_split(also_four).size(), 4u);
  EXPECT_EQ(python_split(one).size(), 1u);
  EXPECT_EQ(length_penalty(four, also_four, length_penalty_kind::ratio, 1.5), 1.0);
  EXPECT_NEAR(length_penalty(four, one, length_penalty_kind::ratio, 1.5), 0.25, tolerance);
}

TEST(PythonText, SplitAndStrip) {
  const std::vector<std::string_view> want = {"Zoé", "Kézako", "日本"};
  EXPECT_EQ(python_split("\xE2\x80\xA8Zoé  Kézako\xE2\x81\x9F日本\xC2\x85"), want);
  EXPECT_TRUE(python_split(" \t\xE1\x9A\x80 ").empty());
  EXPECT_EQ(python_strip("\xE2\x80\x83 x y\t\xE2\x80\xAF"), "x y");
  EXPECT_EQ(python_strip("é"), "é");
  EXPECT_EQ(python_strip("\xC2\xA0\xC2\xA0"), "");
  EXPECT_EQ(python_strip(""), "");
  // U+2030 (per mille sign) shares its first two bytes with U+2028..U+202F but is no space.
  EXPECT_EQ(python_strip(" \xE2\x80\xB0 "), "\xE2\x80\xB0");
  EXPECT_EQ(python_space_at("\xE2\x80\x8A", 0), 3u);
  EXPECT_EQ(python_space_at("\xE2\x80", 0), 0u); // cut short
  EXPECT_EQ(python_space_at("a", 1), 0u);
}

// ---- cosine -------------------------------------------------------------------------------

TEST(CosineToUnit, MapsMinusOneToOneOntoZeroToOne) {
  EXPECT_EQ(cosine_to_unit(-1.0), 0.0);
  EXPECT_EQ(cosine_to_unit(0.0), 0.5);
  EXPECT_EQ(cosine_to_unit(1.0), 1.0);
  EXPECT_NEAR(cosine_to_unit(0.3), 0.65, tolerance);
}

// ---- reference filters --------------------------------------------------------------------

TEST(FilterReferences, NoOptionsKeepAll) {
  const std::vector<std::string> refs = {"a", "b", "c"};
  const std::vector<size_t> all = {0, 1, 2};
  EXPECT_EQ(filtered(refs, json::object()), all);
  EXPECT_EQ(filtered(refs, json(nullptr)), all);
  EXPECT_EQ(filtered(refs, json::array({"a"})), all);
  EXPECT_EQ(filtered(refs, json("target_gt")), all);
  EXPECT_TRUE(filtered({}, json{{"target_gt", "a"}}).empty());
}

TEST(FilterReferences, TargetStringKeepsEqualReferences) {
  const std::vector<std::string> refs = {"Paris", "paris", "Paris", "Lyon"};
  EXPECT_EQ(filtered(refs, json{{"target_gt", "Paris"}}), (std::vector<size_t>{0, 2}));
  // No equal reference: the filter is ignored.
  EXPECT_EQ(filtered(refs, json{{"target_gt", "Nice"}}), (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(FilterReferences, TargetListKeepsReferencesInIt) {
  const std::vector<std::string> refs = {"Paris", "Lyon", "Nice"};
  EXPECT_EQ(filtered(refs, json{{"target_gt", {"Nice", "Paris", 3}}}),
            (std::vector<size_t>{0, 2}));
  EXPECT_EQ(filtered(refs, json{{"target_gt", json::array()}}),
            (std::vector<size_t>{0, 1, 2}));
  // Another type is no filter.
  EXPECT_EQ(filtered(refs, json{{"target_gt", 1}}), (std::vector<size_t>{0, 1, 2}));
}

TEST(FilterReferences, PromptTokenKeepsReferencesWithTheLastWord) {
  const std::vector<std::string> refs = {"The capital is PARIS.", "Lyon, France",
                                         "paris-based", "Parisian"};
  json options = {{"filter_gt_by_prompt_token", true}, {"prompt", "  Which city: Paris \n"}};
  EXPECT_EQ(filtered(refs, options), (std::vector<size_t>{0, 2}));
  // The last word is taken whole: "city:" is no [A-Za-z0-9]+ run of any reference.
  options["prompt"] = "Name the city:";
  EXPECT_EQ(filtered(refs, options), (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(FilterReferences, PromptTokenNeedsATruthyFlagAndAPrompt) {
  const std::vector<std::string> refs = {"one paris", "two lyon"};
  const std::vector<size_t> all = {0, 1};
  const std::vector<size_t> first = {0};
  for (const json& off : {json(false), json(0), json(0.0), json(""), json(nullptr),
                          json::array(), json::object()}) {
    EXPECT_EQ(filtered(refs, json{{"filter_gt_by_prompt_token", off}, {"prompt", "paris"}}),
              all)
      << off.dump();
  }
  for (const json& on : {json(true), json(2), json(-0.5), json("no"), json::array({0})}) {
    EXPECT_EQ(filtered(refs, json{{"filter_gt_by_prompt_token", on}, {"prompt", "paris"}}),
              first)
      << on.dump();
  }
  EXPECT_EQ(filtered(refs, json{{"filter_gt_by_prompt_token", true}}), all);
  EXPECT_EQ(filtered(refs, json{{"filter_gt_by_prompt_token", true}, {"prompt", " \n "}}), all);
}

TEST(FilterReferences, NonStringPromptsAsPythonStrWritesThem) {
  const std::vector<std::string> refs = {"answer 42", "answer none", "answer true"};
  auto with_prompt = [&](const json& prompt) {
    return filtered(refs, json{{"filter_gt_by_prompt_token", true}, {"prompt", prompt}});
  };
  EXPECT_EQ(with_prompt(42), (std::vector<size_t>{0}));
  EXPECT_EQ(with_prompt(nullptr), (std::vector<size_t>{1}));
  EXPECT_EQ(with_prompt(true), (std::vector<size_t>{2}));
  EXPECT_EQ(with_prompt(json::array({"true"})), (std::vector<size_t>{0, 1, 2}));
}

TEST(FilterReferences, TargetThatKeepsNothingFallsThroughToThePromptFilter) {
  const std::vector<std::string> refs = {"red apple", "green pear"};
  json options = {{"target_gt", "blue"}, {"filter_gt_by_prompt_token", true}, {"prompt", "Pear"}};
  EXPECT_EQ(filtered(refs, options), (std::vector<size_t>{1}));
  // A target that keeps something wins over the prompt filter.
  options["target_gt"] = "red apple";
  EXPECT_EQ(filtered(refs, options), (std::vector<size_t>{0}));
}
