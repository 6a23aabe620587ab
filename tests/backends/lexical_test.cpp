// Tests for backends/cpu/lexical: sequence_matcher_ratio against Python's difflib on the
// fixture corpus (tests/backends/make_cpu_reward_fixtures.py), and decode_utf8.

#include "backends/cpu/lexical.hpp"

#include <cmath>
#include <cstddef>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cpu_reward_fixture.hpp"
#include <nlohmann/json.hpp>

namespace cpu = arbiter::backends::cpu;

namespace {

using arbiter::testing::load_cpu_reward_fixture;

/// The first code points of a UTF-8 string, for failure messages.
std::string head(const std::string& text) {
  const std::u32string points = cpu::decode_utf8(text);
  if (points.size() <= 40) {
    return text;
  }
  std::size_t bytes = 0;
  for (std::size_t n = 0; n < 40 && bytes < text.size(); ++n) {
    ++bytes;
    while (bytes < text.size() && (static_cast<unsigned char>(text[bytes]) & 0xC0) == 0x80) {
      ++bytes;
    }
  }
  return text.substr(0, bytes) + "... (" + std::to_string(points.size()) + " code points)";
}

double ratio(const std::u32string& a, const std::u32string& b) {
  return cpu::sequence_matcher_ratio(a, b);
}

} // namespace

TEST(SequenceMatcherRatio, MatchesPythonOnCorpus) {
  const nlohmann::json fixture = load_cpu_reward_fixture();
  ASSERT_TRUE(fixture.contains("ratio"));
  const auto& cases = fixture.at("ratio");
  ASSERT_GE(cases.size(), 150U);
  std::size_t failures = 0;
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const auto& entry = cases[index];
    const auto a = entry.at("a").get<std::string>();
    const auto b = entry.at("b").get<std::string>();
    const double expected = entry.at("ratio").get<double>();
    const double actual = cpu::sequence_matcher_ratio(cpu::decode_utf8(a), cpu::decode_utf8(b));
    if (std::fabs(actual - expected) > 1e-12) {
      ++failures;
      ADD_FAILURE() << "ratio case " << index << ": expected " << expected << ", got " << actual
                    << "\n  a = \"" << head(a) << "\"\n  b = \"" << head(b) << "\"";
    }
  }
  EXPECT_EQ(failures, 0U) << "of " << cases.size() << " cases";
}

TEST(SequenceMatcherRatio, EmptyInputs) {
  EXPECT_EQ(ratio(U"", U""), 1.0);
  EXPECT_EQ(ratio(U"", U"abc"), 0.0);
  EXPECT_EQ(ratio(U"abc", U""), 0.0);
}

TEST(SequenceMatcherRatio, SmallKnownValues) {
  // difflib.SequenceMatcher(None, "The answer is 4.", "4").ratio()
  EXPECT_DOUBLE_EQ(ratio(U"The answer is 4.", U"4"), 0.11764705882352941);
  // difflib.SequenceMatcher(None, "abxcd", "abcd").ratio()
  EXPECT_DOUBLE_EQ(ratio(U"abxcd", U"abcd"), 0.8888888888888888);
  // difflib.SequenceMatcher(None, "qabxcd", "abycdf").ratio()
  EXPECT_DOUBLE_EQ(ratio(U"qabxcd", U"abycdf"), 0.6666666666666666);
  EXPECT_EQ(ratio(U"same", U"same"), 1.0);
}

TEST(SequenceMatcherRatio, AutojunkStartsAtTwoHundredElements) {
  const std::u32string a = std::u32string(10, U'x') + U"aaa";
  // difflib.SequenceMatcher(None, "x"*10 + "aaa", "aaa" + "x"*196).ratio(): len(b) == 199,
  // no autojunk, the ten x's match.
  EXPECT_DOUBLE_EQ(ratio(a, U"aaa" + std::u32string(196, U'x')), 0.09433962264150944);
  // difflib.SequenceMatcher(None, "x"*10 + "aaa", "aaa" + "x"*197).ratio(): len(b) == 200,
  // 'x' (197 > 200//100 + 1) is popular, only "aaa" matches.
  EXPECT_DOUBLE_EQ(ratio(a, U"aaa" + std::u32string(197, U'x')), 0.028169014084507043);
}

TEST(SequenceMatcherRatio, ExtensionCoversPopularElements) {
  // difflib.SequenceMatcher(None, "a"*200, "a"*200).ratio() == 1.0: 'a' is popular, but the
  // empty match at (0, 0) is extended over equal elements.
  EXPECT_EQ(ratio(std::u32string(200, U'a'), std::u32string(200, U'a')), 1.0);
}

TEST(DecodeUtf8, DecodesCodePoints) {
  EXPECT_EQ(cpu::decode_utf8(""), U"");
  EXPECT_EQ(cpu::decode_utf8("abc"), U"abc");
  EXPECT_EQ(cpu::decode_utf8("caf\xC3\xA9"), U"caf\u00E9");
  EXPECT_EQ(cpu::decode_utf8("\xE4\xB8\xAD"), U"\u4E2D");
  EXPECT_EQ(cpu::decode_utf8("\xF0\x9F\x98\x80"), U"\U0001F600");
}

TEST(DecodeUtf8, ReplacesInvalidBytesLikePython) {
  // b"...".decode("utf-8", "replace"): one U+FFFD per maximal subpart.
  EXPECT_EQ(cpu::decode_utf8("a\xFF" "b"), U"a\uFFFDb");
  EXPECT_EQ(cpu::decode_utf8("\xC0\xAF"), U"\uFFFD\uFFFD");          // overlong
  EXPECT_EQ(cpu::decode_utf8("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(cpu::decode_utf8("\xE4\xB8"), U"\uFFFD");                  // truncated
  EXPECT_EQ(cpu::decode_utf8("\xE4\xB8" "a"), U"\uFFFDa");
  EXPECT_EQ(cpu::decode_utf8("\xF4\x90\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");  // > U+10FFFF
}
