#include "backends/rewards/reward_kinds.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "backends/cpu/cpu_rewards.hpp"

using namespace arbiter;
using namespace arbiter::backends;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

score_item item_of(const std::string& kind, const std::string& answer,
                   const std::string& reference) {
  score_item item;
  item.reward = kind;
  item.kind = kind;
  item.solution_str = answer;
  item.ground_truth = {reference};
  return item;
}

} // namespace

TEST(RewardKinds, EveryEntryIsWholeForHowItRuns) {
  std::set<std::string> names;
  for (const auto& k : reward_kinds()) {
    SCOPED_TRACE(k.name);
    EXPECT_TRUE(names.insert(k.name).second) << "registered twice";
    EXPECT_NE(std::string{name_of(k.needs)}, "unknown");
    switch (k.runner) {
    case reward_runner::cpu:
      EXPECT_NE(k.score, nullptr);
      EXPECT_EQ(k.needs, capability::cpu);
      EXPECT_TRUE(k.calls.empty());
      break;
    case reward_runner::graph:
      EXPECT_EQ(k.score, nullptr);
      EXPECT_FALSE(k.calls.empty()) << "a graph makes model calls";
      break;
    case reward_runner::embedding:
      EXPECT_EQ(k.score, nullptr);
      EXPECT_EQ(k.needs, capability::embed);
      break;
    }
    if (k.can_be_fallback) {
      EXPECT_EQ(k.runner, reward_runner::cpu) << "a fallback runs when no source can";
    }
    if (!k.default_fallback.empty()) {
      const auto* fallback = find_reward_kind(k.default_fallback);
      ASSERT_NE(fallback, nullptr);
      EXPECT_TRUE(fallback->can_be_fallback);
    }
    ASSERT_EQ(k.option_keys.size(), k.options.size());
    for (size_t i = 0; i < k.options.size(); ++i) {
      EXPECT_EQ(k.option_keys[i], k.options[i].key);
      EXPECT_TRUE(static_cast<bool>(k.options[i].check)) << k.options[i].key;
    }
    EXPECT_EQ(option_keys(k.name), k.option_keys);
    EXPECT_EQ(find_reward_kind(k.name), &k);
  }
  EXPECT_EQ(names.size(), 10u) << "lexical, exact_match, judge, embedding, info_gain, "
                                  "em_info_gain and verl's four rule rewards";
  EXPECT_EQ(find_reward_kind("fuzzy"), nullptr);
  EXPECT_TRUE(option_keys("fuzzy").empty());
  EXPECT_EQ(fallback_names(), (std::vector<std::string>{"lexical", "exact_match", "none"}));
}

TEST(RewardKinds, WhatTheSeedsAndGraphsExpect) {
  EXPECT_EQ(find_reward_kind("embedding")->default_fallback, "lexical");
  EXPECT_EQ(find_reward_kind("judge")->calls, std::vector<capability>{capability::chat});
  EXPECT_EQ(find_reward_kind("info_gain")->needs, capability::ig);
  EXPECT_EQ(find_reward_kind("info_gain")->calls,
            (std::vector<capability>{capability::generate, capability::nli}));
  EXPECT_EQ(find_reward_kind("em_info_gain")->calls, std::vector<capability>{capability::ig});
  EXPECT_EQ(find_reward_kind("gsm8k")->option_keys,
            (std::vector<std::string>{"method", "format_score", "score"}));
  EXPECT_TRUE(find_reward_kind("math")->options.empty());
}

TEST(RewardKinds, EvaluateCallsTheRegisteredFunction) {
  cpu_limits limits;
  // The registry's function and evaluate agree, kind by kind.
  for (const auto& k : reward_kinds()) {
    if (k.runner != reward_runner::cpu) {
      continue;
    }
    SCOPED_TRACE(k.name);
    auto item = item_of(k.name, "The answer is \\boxed{72}. #### 72 <answer>72</answer>", "72");
    auto direct = k.score(item, limits);
    auto through = cpu::evaluate(item, limits);
    EXPECT_EQ(through.code, errc::none) << through.error;
    EXPECT_DOUBLE_EQ(through.score, direct.score);
    EXPECT_EQ(through.extra, direct.extra);
  }
  auto graph = cpu::evaluate(item_of("judge", "a", "a"), limits);
  EXPECT_EQ(graph.code, errc::reward_failed);
  EXPECT_NE(graph.error.find("'judge' is not a CPU reward"), std::string::npos) << graph.error;
  limits.max_lexical_chars = 3;
  auto capped = cpu::evaluate(item_of("lexical", "abcd", "abc"), limits);
  EXPECT_EQ(capped.code, errc::reward_failed);
  EXPECT_NE(capped.error.find("cpu.max_lexical_chars"), std::string::npos) << capped.error;
}

TEST(RewardKinds, TheDocsNameEveryKind) {
  // rewards.md is the one list of kinds; configuration.md and the README point to it.
  for (const char* doc : {"/docs/rewards.md"}) {
    const std::string text = read_text(std::string{ARBITER_SOURCE_DIR} + doc);
    ASSERT_FALSE(text.empty()) << doc;
    for (const auto& name : reward_kind_names()) {
      EXPECT_NE(text.find("`" + name + "`"), std::string::npos) << doc << " lacks `" << name << "`";
    }
  }
}
