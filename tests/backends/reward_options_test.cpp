#include "backends/rewards/reward_options.hpp"

#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/rewards/judge_template.hpp"

using namespace arbiter;
using namespace arbiter::backends;
using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

/// The reason `check_options` gives for `kind` with {key: value}, or "ok".
std::string problem(std::string_view kind, const std::string& key, const json& value) {
  auto found = check_options(kind, json{{key, value}});
  if (!found) {
    return "ok";
  }
  EXPECT_EQ(found->key, key);
  return found->reason;
}

void expect_good(std::string_view kind, const std::string& key, const std::vector<json>& values) {
  for (const auto& value : values) {
    EXPECT_EQ(problem(kind, key, value), "ok") << kind << "." << key << " = " << value.dump();
  }
}

void expect_bad(std::string_view kind, const std::string& key, const std::vector<json>& values,
                const std::string& reason_part) {
  for (const auto& value : values) {
    EXPECT_THAT(problem(kind, key, value), HasSubstr(reason_part))
      << kind << "." << key << " = " << value.dump();
  }
}

} // namespace

// ---- merging -------------------------------------------------------------------------------

TEST(RewardOptions, ExtraInfoKeysOverrideTheRewardsOptions) {
  auto merged = merged_options(R"({"length_penalty":"sqrt","length_threshold":2,"a":1})",
                               R"({"length_penalty":"log","b":[1,2]})");
  EXPECT_EQ(merged, (json{{"length_penalty", "log"}, {"length_threshold", 2}, {"a", 1},
                          {"b", {1, 2}}}));
}

TEST(RewardOptions, MergeTreatsTextThatIsNotAnObjectAsEmpty) {
  EXPECT_EQ(merged_options("", ""), json::object());
  EXPECT_EQ(merged_options("not json", "[1]"), json::object());
  EXPECT_EQ(merged_options(R"({"a":1})", "7"), (json{{"a", 1}}));
  EXPECT_EQ(merged_options("\"text\"", R"({"b":2})"), (json{{"b", 2}}));
  EXPECT_EQ(merged_options(R"({"a":1)", R"({"b":2})"), (json{{"b", 2}}));
}

TEST(RewardOptions, NullInExtraInfoLeavesTheRewardsOption) {
  // Trainers' data frames fill missing columns with None.
  auto merged = merged_options(R"({"length_penalty":"sqrt"})",
                               R"({"length_penalty":null,"dimensions":null})");
  EXPECT_EQ(merged, (json{{"length_penalty", "sqrt"}}));
}

TEST(RewardOptions, ReadingOnlySomeKeysGivesTheirFullMergeValues) {
  // Every key of `keys` as merged_options(item) has it, the others skipped: nested values,
  // escapes, numbers as nlohmann reads them, nulls, repeated keys (the last wins) and text
  // that is not an object.
  const std::vector<std::string> keys{"a", "b\"c", "n", "s", "z"};
  const char* options = R"({"a":0,"z":"reward","other":1})";
  for (const char* extra : {
         R"({"a":{"x":[1,{"y":null}]},"question":"long \" text","n":1e400})",
         R"({"b\"c":[1,2.50,-0],"n":18446744073709551616,"s":"\u00e9\n"})",
         R"({"a":1,"a":2,"z":null,"answer":{"deep":[[[]]]}})",
         R"({"a":1,"a":null})",
         R"({"s":"x","index":7,"split":"train"})",
         R"( { "a" : true , "n" : -12 } )",
         R"({})", R"([1])", R"("text")", R"(7)", R"()",
       }) {
    score_item item;
    item.options = options;
    item.extra_info = extra;
    json whole = merged_options(item);
    json some = merged_options(item, keys);
    for (const auto& key : keys) {
      EXPECT_EQ(whole.contains(key), some.contains(key)) << extra << " " << key;
      if (whole.contains(key) && some.contains(key)) {
        EXPECT_EQ(whole[key].dump(), some[key].dump()) << extra << " " << key;
      }
    }
    EXPECT_FALSE(some.contains("question") || some.contains("answer") || some.contains("index"))
      << extra;
    EXPECT_TRUE(some.contains("other")) << "the reward's own options stay whole: " << extra;
  }
}

TEST(RewardOptions, MergedOptionsOfAnItem) {
  score_item item;
  item.options = R"({"n":3,"temperature":0.5})";
  item.extra_info = R"({"n":5,"problem":"p"})";
  EXPECT_EQ(merged_options(item), (json{{"n", 5}, {"temperature", 0.5}, {"problem", "p"}}));
}

// ---- keys ----------------------------------------------------------------------------------

TEST(RewardOptions, EachKindListsItsKeys) {
  EXPECT_THAT(option_keys("embedding"),
              ElementsAre("length_penalty", "length_threshold", "target_gt",
                          "filter_gt_by_prompt_token", "prompt", "instruction", "dimensions"));
  EXPECT_THAT(option_keys("judge"),
              ElementsAre("prompt_template", "model_name", "model", "temperature", "top_p",
                          "max_new_tokens", "max_tokens", "enable_thinking", "n", "target_gt",
                          "filter_gt_by_prompt_token", "prompt", "problem", "question"));
  EXPECT_THAT(option_keys("info_gain"),
              ElementsAre("variant", "clustering", "threshold", "num_samples", "temperature",
                          "max_new_tokens", "max_context_words", "seed", "question", "context"));
  EXPECT_THAT(option_keys("em_info_gain"),
              ElementsAre("info_gain_weight", "info_gain_reward", "validation", "variant",
                          "clustering", "threshold", "num_samples", "temperature",
                          "max_new_tokens", "max_context_words", "seed", "question", "context"));
  for (const char* kind : {"lexical", "exact_match", "chat", "generate", "nli", "unknown"}) {
    EXPECT_TRUE(option_keys(kind).empty()) << kind;
  }
}

TEST(RewardOptions, KindsWithoutOptionsAcceptAnything) {
  EXPECT_EQ(check_options("lexical", json{{"length_penalty", "cubic"}, {"n", -1}}), std::nullopt);
  EXPECT_EQ(check_options("chat", json{{"temperature", "hot"}}), std::nullopt);
}

TEST(RewardOptions, UnknownKeysNullsAndNonObjectsPass) {
  EXPECT_EQ(check_options("embedding", json{{"trainer_field", {1, 2}}, {"index", -3}}),
            std::nullopt);
  EXPECT_EQ(check_options("embedding", json{{"length_penalty", nullptr}}), std::nullopt);
  EXPECT_EQ(check_options("judge", json::array()), std::nullopt);
  EXPECT_EQ(check_options("judge", json::object()), std::nullopt);
}

TEST(RewardOptions, TheFirstBadKeyInTheKindsOrderIsReported) {
  auto found = check_options("embedding", json{{"dimensions", -1}, {"length_penalty", "cubic"}});
  ASSERT_TRUE(found);
  EXPECT_EQ(found->key, "length_penalty");
}

TEST(RewardOptions, ALongBadValueIsShownByItsOpening) {
  // 100 "é" (200 bytes): the first 32 characters, cut on a character boundary, and "...".
  std::string long_text;
  for (int i = 0; i < 100; ++i) {
    long_text += "\xC3\xA9";
  }
  auto found = check_options("gsm8k", json{{"method", long_text}});
  ASSERT_TRUE(found);
  EXPECT_EQ(found->reason, "must be one of strict, flexible (got '" + long_text.substr(0, 64)
                             + "'...)");
  found = check_options("gsm8k", json{{"method", json::array({json(long_text)})}});
  ASSERT_TRUE(found);
  EXPECT_LT(found->reason.size(), 140u) << found->reason;
  EXPECT_NE(found->reason.find("...)"), std::string::npos) << found->reason;
}

// ---- embedding -----------------------------------------------------------------------------

TEST(RewardOptions, EmbeddingLengthPenalty) {
  expect_good("embedding", "length_penalty",
              {"none", "ratio", "sqrt", "log", "quadratic", "exponential"});
  EXPECT_EQ(problem("embedding", "length_penalty", "cubic"),
            "must be one of none, ratio, sqrt, log, quadratic, exponential (got 'cubic')");
  EXPECT_EQ(problem("embedding", "length_penalty", 3),
            "must be one of none, ratio, sqrt, log, quadratic, exponential (got 3)");
  expect_bad("embedding", "length_penalty", {"Ratio", "", true}, "must be one of");
}

TEST(RewardOptions, EmbeddingLengthThreshold) {
  expect_good("embedding", "length_threshold", {1.5, 1, 0.01, 1000});
  EXPECT_EQ(problem("embedding", "length_threshold", -1), "must be a number > 0 (got -1)");
  EXPECT_EQ(problem("embedding", "length_threshold", 0), "must be a number > 0 (got 0)");
  EXPECT_EQ(problem("embedding", "length_threshold", "1.5"), "must be a number > 0 (got '1.5')");
  expect_bad("embedding", "length_threshold", {false, json::array()}, "must be a number > 0");
}

TEST(RewardOptions, EmbeddingReferenceFilters) {
  expect_good("embedding", "target_gt", {"Paris", json::array({"a", "b"}), json::array()});
  EXPECT_EQ(problem("embedding", "target_gt", 3), "must be a string or a list of strings");
  expect_bad("embedding", "target_gt", {json::array({"a", 1}), json{{"a", "b"}}},
             "must be a string or a list of strings");
  expect_good("embedding", "filter_gt_by_prompt_token", {true, false});
  EXPECT_EQ(problem("embedding", "filter_gt_by_prompt_token", "yes"),
            "must be true or false (got 'yes')");
  expect_bad("embedding", "filter_gt_by_prompt_token", {1, 0}, "must be true or false");
  expect_good("embedding", "prompt", {"What is the capital?", ""});
  EXPECT_EQ(problem("embedding", "prompt", json::array({"a"})), "must be a string (got [\"a\"])");
}

TEST(RewardOptions, EmbeddingInstructionAndDimensions) {
  expect_good("embedding", "instruction", {"", "Retrieve the same answer"});
  expect_bad("embedding", "instruction", {1, false}, "must be a string");
  expect_good("embedding", "dimensions", {0, 1, 256, 65536, 128.0});
  EXPECT_EQ(problem("embedding", "dimensions", -1),
            "must be an integer from 0 to 65536 (got -1)");
  EXPECT_EQ(problem("embedding", "dimensions", 1.5),
            "must be an integer from 0 to 65536 (got 1.5)");
  expect_bad("embedding", "dimensions", {65537, "64", true}, "must be an integer from 0 to 65536");
}

TEST(RewardOptions, EmbeddingDefaults) {
  auto options = parse_embedding_options(json::object());
  EXPECT_EQ(options.length_penalty, rewards::length_penalty_kind::none);
  EXPECT_EQ(options.length_threshold, rewards::default_length_threshold);
  EXPECT_EQ(options.instruction, std::nullopt);
  EXPECT_EQ(options.dimensions, 0u);
  // Bad values read as the defaults.
  auto bad = parse_embedding_options(
    json{{"length_penalty", "cubic"}, {"length_threshold", -2}, {"instruction", 3},
         {"dimensions", 70000}});
  EXPECT_EQ(bad.length_penalty, rewards::length_penalty_kind::none);
  EXPECT_EQ(bad.length_threshold, rewards::default_length_threshold);
  EXPECT_EQ(bad.instruction, std::nullopt);
  EXPECT_EQ(bad.dimensions, 0u);
  EXPECT_EQ(parse_embedding_options(json::array()).dimensions, 0u);
}

TEST(RewardOptions, EmbeddingValues) {
  auto options = parse_embedding_options(
    json{{"length_penalty", "exponential"}, {"length_threshold", 2.5}, {"instruction", ""},
         {"dimensions", 256.0}});
  EXPECT_EQ(options.length_penalty, rewards::length_penalty_kind::exponential);
  EXPECT_EQ(options.length_threshold, 2.5);
  EXPECT_EQ(options.instruction, std::optional<std::string>{""});
  EXPECT_EQ(options.dimensions, 256u);
}

// ---- judge ---------------------------------------------------------------------------------

TEST(RewardOptions, JudgePromptTemplate) {
  expect_good("judge", "prompt_template",
              {"default", "detailed", "Grade {CANDIDATE_SOLUTION} against {REFERENCE_SOLUTION}."});
  // The template resolver's own message.
  std::string resolver_message;
  try {
    rewards::resolve_judge_template("detialed");
  } catch (const std::invalid_argument& e) {
    resolver_message = e.what();
  }
  ASSERT_FALSE(resolver_message.empty());
  EXPECT_EQ(problem("judge", "prompt_template", "detialed"), resolver_message);
  EXPECT_EQ(problem("judge", "prompt_template", 1), "must be a string (got 1)");
}

TEST(RewardOptions, JudgeSampling) {
  expect_good("judge", "model_name", {"gpt-4o-mini", ""});
  expect_good("judge", "model", {"Qwen/Qwen3-8B"});
  expect_bad("judge", "model_name", {1}, "must be a string");
  expect_bad("judge", "model", {json::array()}, "must be a string");
  expect_good("judge", "temperature", {0, 0.7, 2, 1.0});
  EXPECT_EQ(problem("judge", "temperature", 2.5), "must be a number from 0 to 2 (got 2.5)");
  expect_bad("judge", "temperature", {-0.1, "0.7", true}, "must be a number from 0 to 2");
  expect_good("judge", "top_p", {1, 0.8, 0.001});
  EXPECT_EQ(problem("judge", "top_p", 0), "must be a number > 0 and <= 1 (got 0)");
  expect_bad("judge", "top_p", {1.01, -1, "1"}, "must be a number > 0 and <= 1");
  for (const char* key : {"max_new_tokens", "max_tokens"}) {
    expect_good("judge", key, {1, 512, 131072, 256.0});
    EXPECT_EQ(problem("judge", key, 0), "must be an integer from 1 to 131072 (got 0)");
    expect_bad("judge", key, {131073, -5, 2.5, "512"}, "must be an integer from 1 to 131072");
  }
  expect_good("judge", "enable_thinking", {true, false});
  expect_bad("judge", "enable_thinking", {"false", 0}, "must be true or false");
  expect_good("judge", "n", {1, 16, 4.0});
  EXPECT_EQ(problem("judge", "n", 17), "must be an integer from 1 to 16 (got 17)");
  expect_bad("judge", "n", {0, -1, 1.5}, "must be an integer from 1 to 16");
}

TEST(RewardOptions, JudgeTextsAndFilters) {
  for (const char* key : {"problem", "question", "prompt"}) {
    expect_good("judge", key, {"Solve 2x = 8.", ""});
    expect_bad("judge", key, {8, json::object()}, "must be a string");
  }
  expect_good("judge", "target_gt", {"a", json::array({"a"})});
  expect_bad("judge", "target_gt", {1}, "must be a string or a list of strings");
  expect_bad("judge", "filter_gt_by_prompt_token", {"true"}, "must be true or false");
}

TEST(RewardOptions, JudgeDefaults) {
  auto options = parse_judge_options(json::object());
  EXPECT_EQ(options.prompt_template, rewards::resolve_judge_template("default"));
  EXPECT_EQ(options.model, "");
  EXPECT_EQ(options.temperature, std::nullopt);
  EXPECT_EQ(options.top_p, std::nullopt);
  EXPECT_EQ(options.max_tokens, std::nullopt);
  EXPECT_EQ(options.enable_thinking, std::nullopt);
  EXPECT_EQ(options.votes, 1u);
  auto bad = parse_judge_options(json{{"prompt_template", "detialed"}, {"temperature", 9},
                                      {"n", 0}, {"max_new_tokens", -1}});
  EXPECT_EQ(bad.prompt_template, rewards::resolve_judge_template("default"));
  EXPECT_EQ(bad.temperature, std::nullopt);
  EXPECT_EQ(bad.votes, 1u);
  EXPECT_EQ(bad.max_tokens, std::nullopt);
}

TEST(RewardOptions, JudgeValuesAndAliases) {
  auto options = parse_judge_options(json{{"prompt_template", "detailed"},
                                          {"model", "fallback-name"},
                                          {"model_name", "judge-model"},
                                          {"temperature", 0.0},
                                          {"top_p", 0.9},
                                          {"max_tokens", 64},
                                          {"max_new_tokens", 128},
                                          {"enable_thinking", false},
                                          {"n", 5}});
  EXPECT_EQ(options.prompt_template, rewards::resolve_judge_template("detailed"));
  EXPECT_EQ(options.model, "judge-model");
  EXPECT_EQ(options.temperature, 0.0);
  EXPECT_EQ(options.top_p, 0.9);
  EXPECT_EQ(options.max_tokens, 128u);
  EXPECT_EQ(options.enable_thinking, false);
  EXPECT_EQ(options.votes, 5u);
  // The aliases alone.
  auto aliases = parse_judge_options(json{{"model", "m"}, {"max_tokens", 64}});
  EXPECT_EQ(aliases.model, "m");
  EXPECT_EQ(aliases.max_tokens, 64u);
  // A custom template is kept as resolved.
  std::string custom = "Q: {PROBLEM}\nGold: {REFERENCE_SOLUTION}\nAnswer: {CANDIDATE_SOLUTION}";
  EXPECT_EQ(parse_judge_options(json{{"prompt_template", custom}}).prompt_template,
            rewards::resolve_judge_template(custom));
}

// ---- info_gain -----------------------------------------------------------------------------

TEST(RewardOptions, InfoGainKeys) {
  expect_good("info_gain", "variant", {"soft", "hard", "se_rao", "se_discrete"});
  EXPECT_EQ(problem("info_gain", "variant", "entropy"),
            "must be one of soft, hard, se_rao, se_discrete (got 'entropy')");
  expect_good("info_gain", "clustering", {"strict", "loose"});
  EXPECT_EQ(problem("info_gain", "clustering", "Strict"),
            "must be one of strict, loose (got 'Strict')");
  expect_good("info_gain", "threshold", {0.5, 0.01, 0.99});
  EXPECT_EQ(problem("info_gain", "threshold", 1), "must be a number > 0 and < 1 (got 1)");
  expect_bad("info_gain", "threshold", {0, -0.5, "0.5"}, "must be a number > 0 and < 1");
  expect_good("info_gain", "num_samples", {1, 10, 64});
  EXPECT_EQ(problem("info_gain", "num_samples", 65), "must be an integer from 1 to 64 (got 65)");
  expect_bad("info_gain", "num_samples", {0, 2.5}, "must be an integer from 1 to 64");
  expect_good("info_gain", "temperature", {0, 1.0, 2});
  expect_bad("info_gain", "temperature", {2.1, -1}, "must be a number from 0 to 2");
  expect_good("info_gain", "max_new_tokens", {1, 128, 4096});
  EXPECT_EQ(problem("info_gain", "max_new_tokens", 4097),
            "must be an integer from 1 to 4096 (got 4097)");
  expect_good("info_gain", "max_context_words", {1, 4096, 1000000});
  expect_bad("info_gain", "max_context_words", {0, 1000001}, "must be an integer from 1 to 1000000");
  expect_good("info_gain", "seed", {0, 42, json(18446744073709551615ULL)});
  EXPECT_EQ(problem("info_gain", "seed", -1), "must be an integer >= 0 (got -1)");
  expect_bad("info_gain", "seed", {0.5, "42"}, "must be an integer >= 0");
  for (const char* key : {"question", "context"}) {
    expect_good("info_gain", key, {"text", ""});
    expect_bad("info_gain", key, {1}, "must be a string");
  }
}

TEST(RewardOptions, InfoGainDefaultsAreInfoReasonersService) {
  auto options = parse_info_gain_options(json::object());
  EXPECT_EQ(options.variant, rewards::ig_variant::soft);
  EXPECT_EQ(options.clustering, rewards::ig_clustering::strict);
  EXPECT_EQ(options.threshold, rewards::default_ig_threshold);
  EXPECT_EQ(options.samples, rewards::default_ig_samples);
  EXPECT_EQ(options.temperature, rewards::default_ig_temperature);
  EXPECT_EQ(options.max_new_tokens, rewards::default_ig_max_new_tokens);
  EXPECT_EQ(options.max_context_words, rewards::default_ig_max_context_words);
  EXPECT_EQ(options.seed, std::nullopt);
  auto bad = parse_info_gain_options(json{{"variant", "x"}, {"num_samples", 0}, {"seed", -4}});
  EXPECT_EQ(bad.variant, rewards::ig_variant::soft);
  EXPECT_EQ(bad.samples, rewards::default_ig_samples);
  EXPECT_EQ(bad.seed, std::nullopt);
}

TEST(RewardOptions, InfoGainValues) {
  auto options = parse_info_gain_options(json{{"variant", "se_discrete"},
                                              {"clustering", "loose"},
                                              {"threshold", 0.7},
                                              {"num_samples", 4},
                                              {"temperature", 0.5},
                                              {"max_new_tokens", 32},
                                              {"max_context_words", 100},
                                              {"seed", 18446744073709551615ULL}});
  EXPECT_EQ(options.variant, rewards::ig_variant::se_discrete);
  EXPECT_EQ(options.clustering, rewards::ig_clustering::loose);
  EXPECT_EQ(options.threshold, 0.7);
  EXPECT_EQ(options.samples, 4u);
  EXPECT_EQ(options.temperature, 0.5);
  EXPECT_EQ(options.max_new_tokens, 32u);
  EXPECT_EQ(options.max_context_words, 100u);
  EXPECT_EQ(options.seed, 18446744073709551615ULL);
}

// ---- em_info_gain --------------------------------------------------------------------------

TEST(RewardOptions, EmInfoGainKeys) {
  expect_good("em_info_gain", "info_gain_weight", {0.6, 0, -1, 10});
  EXPECT_EQ(problem("em_info_gain", "info_gain_weight", "0.6"), "must be a number (got '0.6')");
  expect_good("em_info_gain", "info_gain_reward", {"info_gain", "my_ig"});
  expect_bad("em_info_gain", "info_gain_reward", {1}, "must be a string");
  expect_good("em_info_gain", "validation", {true, false});
  expect_bad("em_info_gain", "validation", {"true"}, "must be true or false");
  // The info_gain keys pass through to the ΔIG call, checked the same way.
  expect_good("em_info_gain", "variant", {"hard"});
  expect_bad("em_info_gain", "num_samples", {100}, "must be an integer from 1 to 64");
}

TEST(RewardOptions, EmInfoGainDefaultsAndValues) {
  auto options = parse_em_info_gain_options(json::object());
  EXPECT_EQ(options.weight, 0.6);
  EXPECT_EQ(options.info_gain_reward, "info_gain");
  EXPECT_FALSE(options.validation);
  options = parse_em_info_gain_options(
    json{{"info_gain_weight", 0.25}, {"info_gain_reward", "ig2"}, {"validation", true}});
  EXPECT_EQ(options.weight, 0.25);
  EXPECT_EQ(options.info_gain_reward, "ig2");
  EXPECT_TRUE(options.validation);
  EXPECT_EQ(parse_em_info_gain_options(json{{"info_gain_weight", "x"}}).weight, 0.6);
}
