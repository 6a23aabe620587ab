// Tests for backends/cpu/exact_match: normalize_answer and exact_match against the SQuAD v1.1
// script run by Python (fixture from tests/backends/make_cpu_reward_fixtures.py).

#include "backends/cpu/exact_match.hpp"

#include <cstddef>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cpu_reward_fixture.hpp"
#include <nlohmann/json.hpp>

namespace cpu = arbiter::backends::cpu;

namespace {

using arbiter::testing::load_cpu_reward_fixture;

} // namespace

TEST(NormalizeAnswer, MatchesPythonOnCorpus) {
  const nlohmann::json fixture = load_cpu_reward_fixture();
  ASSERT_TRUE(fixture.contains("normalize"));
  const auto& cases = fixture.at("normalize");
  ASSERT_GE(cases.size(), 80U);
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const auto text = cases[index].at("text").get<std::string>();
    const auto expected = cases[index].at("normalized").get<std::string>();
    EXPECT_EQ(cpu::normalize_answer(text), expected)
        << "normalize case " << index << ": text = \"" << text << "\"";
  }
}

TEST(ExactMatch, MatchesPythonOnPairs) {
  const nlohmann::json fixture = load_cpu_reward_fixture();
  ASSERT_TRUE(fixture.contains("exact_match"));
  const auto& cases = fixture.at("exact_match");
  ASSERT_FALSE(cases.empty());
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const auto prediction = cases[index].at("prediction").get<std::string>();
    const auto reference = cases[index].at("reference").get<std::string>();
    const double expected = cases[index].at("score").get<double>();
    EXPECT_EQ(cpu::exact_match(prediction, reference), expected)
        << "exact-match case " << index << ": \"" << prediction << "\" vs \"" << reference
        << "\"";
  }
}

TEST(NormalizeAnswer, RemovesArticlesOnlyAtWordBoundaries) {
  EXPECT_EQ(cpu::normalize_answer("The Eiffel Tower"), "eiffel tower");
  EXPECT_EQ(cpu::normalize_answer("an apple"), "apple");
  EXPECT_EQ(cpu::normalize_answer("theatre"), "theatre");
  EXPECT_EQ(cpu::normalize_answer("A"), "");
  // Punctuation goes first, so the hyphens no longer separate the articles.
  EXPECT_EQ(cpu::normalize_answer("a-an-the"), "aanthe");
  // U+0301 is not a word character, so \b follows "the".
  EXPECT_EQ(cpu::normalize_answer("the\xCC\x81"), "\xCC\x81");
}

TEST(NormalizeAnswer, LowersAndStripsAsciiPunctuationOnly) {
  EXPECT_EQ(cpu::normalize_answer("\xC3\x89" "COLE"), "\xC3\xA9" "cole");  // ÉCOLE -> école
  EXPECT_EQ(cpu::normalize_answer("U.S.A."), "usa");
  // « and » are not in string.punctuation.
  EXPECT_EQ(cpu::normalize_answer("\xC2\xAB" "Paris" "\xC2\xBB"),
            "\xC2\xAB" "paris" "\xC2\xBB");
  // "ΟΔΟΣ".lower() == "οδος" (final sigma).
  EXPECT_EQ(cpu::normalize_answer("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3"),
            "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");
  // "İ".lower() == "i\u0307" (full case mapping).
  EXPECT_EQ(cpu::normalize_answer("\xC4\xB0"), "i\xCC\x87");
}

TEST(NormalizeAnswer, CollapsesUnicodeWhitespace) {
  EXPECT_EQ(cpu::normalize_answer("  many \t\n spaces  "), "many spaces");
  EXPECT_EQ(cpu::normalize_answer("new\xC2\xA0york"), "new york");         // U+00A0
  EXPECT_EQ(cpu::normalize_answer("a\xE3\x80\x80" "b"), "b");              // U+3000
  EXPECT_EQ(cpu::normalize_answer("x\x1C" "y\xC2\x85" "z"), "x y z");     // \x1c, \x85
  EXPECT_EQ(cpu::normalize_answer("zero\xE2\x80\x8Bwidth"), "zero\xE2\x80\x8Bwidth");  // U+200B
}

TEST(ExactMatch, ScoresOneOrZero) {
  EXPECT_EQ(cpu::exact_match("The Eiffel Tower.", "eiffel tower"), 1.0);
  EXPECT_EQ(cpu::exact_match("4", "The answer is 4."), 0.0);
  EXPECT_EQ(cpu::exact_match("", "the"), 1.0);
}
