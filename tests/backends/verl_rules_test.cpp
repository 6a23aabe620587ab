// verl's rule rewards against verl 0.9.1 itself: every case of the corpus that
// tests/backends/make_rule_reward_corpus.py recorded from the Python functions must score the
// same, bit for bit. ARBITER_RULE_CORPUS names another corpus (a JSON Lines file the script
// wrote with a fresh seed), for the offline runs.

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_rewards.hpp"
#include "backends/cpu/python_regex.hpp"
#include "backends/cpu/python_str.hpp"
#include "backends/cpu/verl_rules.hpp"
#include "backends/rewards/reward_options.hpp"

namespace arbiter::backends::cpu {
namespace {

using nlohmann::json;

std::string corpus_path() {
  const char* custom = std::getenv("ARBITER_RULE_CORPUS");
  if (custom != nullptr && *custom != '\0') {
    return custom;
  }
  return ARBITER_SOURCE_DIR "/tests/backends/fixtures/rule_reward_cases.jsonl";
}

/// The references as the ingress reads them: a string, a list, or {"target": ...}.
std::vector<std::string> references(const json& ground_truth) {
  const json& value = ground_truth.is_object() ? ground_truth.at("target") : ground_truth;
  std::vector<std::string> out;
  if (value.is_array()) {
    for (const auto& v : value) {
      out.push_back(v.get<std::string>());
    }
  } else {
    out.push_back(value.get<std::string>());
  }
  return out;
}

TEST(VerlRules, EqualToVerlOnTheCorpus) {
  std::ifstream in(corpus_path());
  ASSERT_TRUE(in) << "cannot open " << corpus_path();
  arbiter::backends::cpu_limits cfg;
  std::map<std::string, size_t> cases;
  std::map<std::string, size_t> mismatches;
  std::string line;
  size_t shown = 0;
  while (std::getline(in, line)) {
    if (line.empty()) {
      continue;
    }
    auto c = json::parse(line);
    score_item item;
    item.kind = c.at("fn").get<std::string>();
    item.reward = item.kind;
    item.solution_str = c.at("solution_str").get<std::string>();
    item.ground_truth = references(c.at("ground_truth"));
    if (!c.at("options").empty()) {
      item.extra_info = c.at("options").dump();
      ASSERT_FALSE(check_options(item.kind, c.at("options"))) << line;
    }
    auto out = evaluate(item, cfg);
    const auto& expected = c.at("expected");
    ++cases[item.kind];
    bool same = out.code == errc::none && out.score == expected.at("score").get<double>();
    if (item.kind == "math_dapo") {
      json extra = json::parse(out.extra.empty() ? "{}" : out.extra);
      same = same && extra.value("acc", json()) == expected.at("acc")
             && extra.value("pred", json("<absent>")) == expected.at("pred");
    } else {
      same = same && out.extra.empty();
    }
    if (!same) {
      ++mismatches[item.kind];
      if (shown++ < 20) {
        ADD_FAILURE() << "case " << line << "\n  got score " << out.score << " extra "
                      << out.extra << " error '" << out.error << "'";
      }
    }
  }
  for (const auto* fn : {"gsm8k", "math", "math_dapo", "search_r1_qa_em"}) {
    EXPECT_GT(cases[fn], 0u) << fn << ": no case in " << corpus_path();
    EXPECT_EQ(mismatches[fn], 0u) << fn << ": " << mismatches[fn] << " of " << cases[fn]
                                  << " cases differ from verl";
    std::cout << fn << ": " << cases[fn] << " cases, " << mismatches[fn] << " mismatches\n";
  }
}

// ---- hand-picked cases: each pins one Python behaviour the port must keep ----------------

TEST(VerlRules, Gsm8kStrictTakesTheLastMarkerAndDropsCommas) {
  verl::gsm8k_options strict;
  EXPECT_EQ(verl::gsm8k("#### 1 then #### 1,000", {"1000"}, strict), 1.0);
  EXPECT_EQ(verl::gsm8k("The answer is 1000", {"1000"}, strict), 0.0); // no marker: None
  verl::gsm8k_options scored{false, 0.1, 2.0};
  EXPECT_EQ(verl::gsm8k("#### 999", {"1000"}, scored), 0.1);
  EXPECT_EQ(verl::gsm8k("#### 1000", {"1000"}, scored), 2.0);
  // Only the last 300 code points are searched: a marker before them is not seen, and 300
  // two-byte characters after it are 600 bytes but 300 characters.
  std::string tail;
  for (int i = 0; i < 300; ++i) {
    tail += "é";
  }
  EXPECT_EQ(verl::gsm8k("#### 7 " + tail, {"7"}, strict), 0.0);
  EXPECT_EQ(verl::gsm8k("#### 7" + tail.substr(2 * 7), {"7"}, strict), 1.0);
}

TEST(VerlRules, Gsm8kFlexibleSkipsALoneDot) {
  verl::gsm8k_options flexible{true, 0.0, 1.0};
  EXPECT_EQ(verl::gsm8k("so 42 is it.", {"42"}, flexible), 1.0); // "42", then "." skipped
  EXPECT_EQ(verl::gsm8k("so 42 is 4.", {"42"}, flexible), 0.0);   // "4." is the last number
  EXPECT_EQ(verl::gsm8k("1,000", {"1,000"}, flexible), 1.0); // commas kept
}

TEST(VerlRules, MathFollowsStripString) {
  EXPECT_EQ(verl::math("so \\boxed{\\dfrac12}", {"\\frac{1}{2}"}), 1.0);
  EXPECT_EQ(verl::math("so \\boxed{0.5}", {"\\frac12"}), 1.0);
  EXPECT_EQ(verl::math("\\boxed{3/4}", {"\\frac{3}{4}"}), 1.0);
  EXPECT_EQ(verl::math("\\boxed{-0/4}", {"\\frac{-0}{4}"}), 0.0); // int("-0") prints "0"
  EXPECT_EQ(verl::math("\\boxed{x = 5}", {"5"}), 1.0);
  EXPECT_EQ(verl::math("\\boxed{10\\text{ cm}}", {"10"}), 1.0);
  EXPECT_EQ(verl::math("\\boxed 5$ and more", {"5"}), 1.0);
  // \fbox is found but remove_boxed asserts on it: never scores.
  EXPECT_EQ(verl::math("\\fbox{5}", {"5"}), 0.0);
  // strip_string raises (IndexError on a trailing \frac): is_equiv compares the raw strings.
  EXPECT_FALSE(verl::math_strip_string("1\\frac"));
  EXPECT_EQ(verl::math("\\boxed{1\\frac}", {"1\\frac"}), 1.0);
  EXPECT_EQ(verl::math("\\boxed{1\\frac}", {"1 \\frac"}), 0.0);
  // Unbalanced: no closing brace, no answer.
  EXPECT_EQ(verl::math("\\boxed{5", {"5"}), 0.0);
}

TEST(VerlRules, MathDapoPrefersTheAnswerLine) {
  auto r = verl::math_dapo("work...\nAnswer: $\\frac{1}{2}$ dollars", {"\\frac{1}{2}"}, false);
  EXPECT_EQ(r.score, 1.0);
  EXPECT_TRUE(r.acc);
  EXPECT_EQ(r.pred, "\\frac{1}{2}");
  // No answer line: the last box of the last 100 characters, compared as it is.
  r = verl::math_dapo("so \\boxed{7}", {"7"}, false);
  EXPECT_EQ(r.score, 1.0);
  EXPECT_EQ(r.pred, "7");
  r = verl::math_dapo("nothing here", {"7"}, false);
  EXPECT_EQ(r.score, -1.0);
  EXPECT_FALSE(r.acc);
  EXPECT_EQ(r.pred, "[INVALID]");
  // Strict box mode: no box is Python's None.
  r = verl::math_dapo("Answer: 7", {"7"}, true);
  EXPECT_EQ(r.score, -1.0);
  EXPECT_FALSE(r.pred.has_value());
  // Case-insensitive, and \s includes U+001C..U+001F as Python's does.
  r = verl::math_dapo("ANSWER\x1c:\x1f 1,234", {"1234"}, false);
  EXPECT_TRUE(r.acc);
  EXPECT_EQ(r.pred, "1234");
}

TEST(VerlRules, NormalizeFinalAnswerUsesUnicodeDigits) {
  EXPECT_EQ(verl::normalize_final_answer("1,000"), "1000");
  EXPECT_EQ(verl::normalize_final_answer("²,³"), "²³"); // superscripts are digits to isdigit
  EXPECT_EQ(verl::normalize_final_answer("x = \\text{5 units}"), "5");
  EXPECT_EQ(verl::normalize_final_answer("\\fracab"), "\\frac{a}{b}");
  EXPECT_EQ(verl::normalize_final_answer("\\sqrt2"), "\\sqrt{2}");
  EXPECT_EQ(verl::normalize_final_answer("\\boxed{\\boxed{4}}"), "\\boxed{4}");
}

TEST(VerlRules, SearchR1TakesTheLastAnswerAndCountsTags) {
  verl::search_r1_options plain;
  EXPECT_EQ(verl::search_r1_qa_em("<answer>x</answer><answer> The Paris! </answer>",
                                  {"paris"}, plain),
            1.0);
  EXPECT_EQ(verl::search_r1_qa_em("no tags", {"paris"}, plain), 0.0);
  verl::search_r1_options scored{0.2, 1.0};
  EXPECT_EQ(verl::search_r1_qa_em("<answer>London</answer>", {"paris", "rome"}, scored), 0.2);
  EXPECT_EQ(verl::search_r1_qa_em("<answer>Rome</answer>", {"paris", "rome"}, scored), 1.0);
  // More than ten closing tags: a quarter of the score.
  std::string spam;
  for (int i = 0; i < 10; ++i) {
    spam += "</answer>";
  }
  EXPECT_EQ(verl::search_r1_qa_em("<answer>paris</answer>" + spam, {"paris"}, scored), 0.25);
  // Opening tags before: the lazy match starts at the first, so the answer is not "paris".
  EXPECT_EQ(verl::search_r1_qa_em("<answer><answer>paris</answer>", {"paris"}, scored), 0.2);
  // DOTALL: the answer may span lines.
  EXPECT_EQ(verl::search_r1_qa_em("<answer>new\nyork</answer>", {"New York"}, plain), 1.0);
}

TEST(PythonRegex, FindAllAndSubFollowPythonsRe) {
  py::regex number{R"((\-?[0-9\.\,]+))"};
  auto all = number.find_all("a 1,2 b -3. c", 1);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], "1,2");
  EXPECT_EQ(all[1], "-3.");
  // Empty matches: re.findall('x*', 'axb') == ['', 'x', '', '']
  py::regex xs{"x*"};
  auto empty = xs.find_all("axb", 0);
  ASSERT_EQ(empty.size(), 4u);
  EXPECT_EQ(empty[1], "x");
  // re.sub('x*', '-', 'abxd') == '-a-b--d-' (Python 3.7+)
  EXPECT_EQ(xs.sub("abxd", "-"), "-a-b--d-");
  // `.` stops at '\n' only.
  py::regex dot{"a.b"};
  EXPECT_EQ(dot.find_all("a\rb a\nb", 0).size(), 1u);
  // Unicode case folding: (?i)s matches U+017F as Python's re does.
  py::regex answer{"answer", py::regex::ignorecase};
  EXPECT_EQ(answer.find_all("AN\xC5\xBFWER", 0).size(), 1u);
  EXPECT_THROW(py::regex{"("}, std::invalid_argument);
}

TEST(PythonRegex, ValidUtf8IsMatchedUncheckedAndInvalidUtf8IsStillRefused) {
  // Valid subjects skip PCRE2's own check (simdjson validates them once); matches after
  // multi-byte characters keep their offsets.
  py::regex number{R"((\-?[0-9\.\,]+))"};
  auto all = number.find_all("\xC3\xA9 1 \xE2\x82\xAC 22 \xF0\x9F\x98\x80 333", 1);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2], "333");
  EXPECT_EQ(number.sub("\xC3\xA9 1 \xE2\x82\xAC", "#"), "\xC3\xA9 # \xE2\x82\xAC");
  // An invalid subject (a lone continuation byte, a surrogate) is PCRE2's to refuse, as before.
  for (std::string bad : {"1 \x80 2", "1 \xED\xA0\x80 2", "\xC3"}) {
    EXPECT_THROW(number.find_all(bad, 1), std::runtime_error) << bad;
    EXPECT_THROW(number.sub(bad, "#"), std::runtime_error) << bad;
  }
  // A bytes pattern never checks.
  py::regex bytes{"[0-9]+", py::regex::bytes};
  EXPECT_EQ(bytes.find_all("1 \x80 2", 0).size(), 2u);
}

TEST(PythonStr, CodePointsAndUnicodeClasses) {
  EXPECT_EQ(py::len("héllo"), 5u);
  EXPECT_EQ(py::last("héllo", 4), "éllo");
  EXPECT_EQ(py::last("hé", 9), "hé");
  EXPECT_EQ(py::strip("\x1c\xC2\xA0 x \xE3\x80\x80"), "x");
  EXPECT_TRUE(py::isdigit("12\xC2\xB2"));   // "12²"
  EXPECT_TRUE(py::isdigit("\xD9\xA3"));     // Arabic-Indic three
  EXPECT_FALSE(py::isdigit("\xC2\xBD"));    // "½" is numeric, not a digit
  EXPECT_FALSE(py::isdigit(""));
  EXPECT_EQ(py::count("aaaa", "aa"), 2u);
}

TEST(VerlRuleOptions, CheckedAndRead) {
  EXPECT_TRUE(check_options("gsm8k", json{{"method", "loose"}}));
  EXPECT_TRUE(check_options("gsm8k", json{{"score", "1"}}));
  EXPECT_FALSE(check_options("gsm8k", json{{"method", "flexible"}, {"format_score", 0.1}}));
  EXPECT_TRUE(check_options("math_dapo", json{{"strict_box_verify", 1}}));
  EXPECT_TRUE(parse_gsm8k_options(json{{"method", "flexible"}}).flexible);
  EXPECT_EQ(parse_search_r1_options(json{{"score", 2}}).score, 2.0);
}

TEST(VerlRules, EvaluateCarriesMathDapoExtraAndOptions) {
  arbiter::backends::cpu_limits cfg;
  score_item item;
  item.kind = "math_dapo";
  item.solution_str = "\\boxed{4}";
  item.ground_truth = {"4"};
  item.extra_info = R"({"strict_box_verify": true, "split": "train"})";
  auto out = evaluate(item, cfg);
  EXPECT_EQ(out.score, 1.0);
  EXPECT_EQ(json::parse(out.extra), (json{{"acc", true}, {"pred", "4"}}));
  item.kind = "gsm8k";
  item.solution_str = "42";
  item.ground_truth = {"42"};
  item.extra_info = R"({"method": "flexible", "score": 3})";
  out = evaluate(item, cfg);
  EXPECT_EQ(out.score, 3.0);
  EXPECT_TRUE(out.extra.empty());
}

TEST(VerlRules, SearchR1ScoresNoTargetsAsVerlDoesAndOtherKindsFailTheItem) {
  // A search-R1 row whose golden answers are empty ({"target": []}): verl's em_check matches
  // nothing, so the rollout gets format_score, or 0 with no <answer>.
  arbiter::backends::cpu_limits cfg;
  score_item item;
  item.kind = "search_r1_qa_em";
  item.solution_str = "<answer>Paris</answer>";
  item.extra_info = R"({"format_score": 0.2})";
  auto out = evaluate(item, cfg);
  EXPECT_EQ(out.code, errc::none) << out.error;
  EXPECT_EQ(out.score, 0.2);
  item.solution_str = "no answer tag";
  out = evaluate(item, cfg);
  EXPECT_EQ(out.code, errc::none) << out.error;
  EXPECT_EQ(out.score, 0.0);
  // The others have nothing to compare with: the item fails, saying so.
  for (const auto* kind : {"lexical", "exact_match", "gsm8k", "math", "math_dapo"}) {
    item.kind = kind;
    item.extra_info.clear();
    out = evaluate(item, cfg);
    EXPECT_EQ(out.code, errc::reward_failed) << kind;
    EXPECT_EQ(out.error, "ground_truth is empty") << kind;
  }
}

} // namespace
} // namespace arbiter::backends::cpu
