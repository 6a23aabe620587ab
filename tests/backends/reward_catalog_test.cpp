#include "backends/reward_catalog.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::backends;

TEST(RewardCatalog, OffersBuiltinsUnderTheirOwnNames) {
  reward_catalog catalog{config::embedded_default()};
  ASSERT_NE(catalog.find("lexical"), nullptr);
  EXPECT_EQ(catalog.find("lexical")->capability, "cpu");
  ASSERT_NE(catalog.find("exact_match"), nullptr);
  ASSERT_NE(catalog.find("judge"), nullptr);
  EXPECT_EQ(catalog.find("judge")->capability, "judge");
  EXPECT_EQ(catalog.find("embedding")->capability, "embed");
  EXPECT_EQ(catalog.find("info_gain")->capability, "ig");
  EXPECT_EQ(catalog.find("unheard_of"), nullptr);
  ASSERT_NE(catalog.for_data_source("llm_judge_remote_math"), nullptr);
  EXPECT_EQ(catalog.for_data_source("llm_judge_remote_math")->name, "judge");
  EXPECT_EQ(catalog.for_data_source("embedding_remote_qa")->name, "embedding");
  // verl's names exactly (aime* as verl's startswith): what verl refuses is refused here.
  EXPECT_EQ(catalog.for_data_source("math")->name, "math_dapo");
  EXPECT_EQ(catalog.for_data_source("aime2025")->name, "math_dapo");
  EXPECT_EQ(catalog.for_data_source("searchR1_nq")->name, "search_r1_qa_em");
  EXPECT_EQ(catalog.for_data_source("lighteval/MATH")->name, "math");
  for (const char* refused : {"mathvista", "math_reward", "lighteval/MATH-Hard", "searchR1_other",
                              "openai/gsm8k_v2", "openai/gsm8k "}) {
    EXPECT_EQ(catalog.for_data_source(refused), nullptr) << refused;
  }
}

TEST(RewardCatalog, ConfiguredNamesExactFirstThenTheLongestPrefix) {
  auto cfg = config::embedded_default();
  config::reward_config squad;
  squad.name = "squad_em";
  squad.kind = "exact_match";
  cfg.rewards["squad_em"] = squad;
  cfg.data_sources = {{"squad*", "lexical"}, {"squad_v2*", "squad_em"}, {"squad_v1", "judge"}};
  reward_catalog catalog{cfg};
  ASSERT_NE(catalog.for_data_source("squad_v2_dev"), nullptr);
  EXPECT_EQ(catalog.for_data_source("squad_v2_dev")->name, "squad_em");
  EXPECT_EQ(catalog.for_data_source("squad_v1")->name, "judge");
  EXPECT_EQ(catalog.for_data_source("squad_v1_dev")->name, "lexical");
  EXPECT_EQ(catalog.for_data_source("gsm8k"), nullptr);
  EXPECT_EQ(catalog.rewards().size(), 11u) << "ten built-in kinds and squad_em";

  // "*" alone is a catch-all, below every longer key.
  cfg.data_sources["*"] = "exact_match";
  reward_catalog with_default{cfg};
  EXPECT_EQ(with_default.for_data_source("gsm8k")->name, "exact_match");
  EXPECT_EQ(with_default.for_data_source("")->name, "exact_match");
  EXPECT_EQ(with_default.for_data_source("squad_v1_dev")->name, "lexical");
}

TEST(RewardCatalog, RewardsWithSourcesGetARouteSuffixAndFallbacksDefaultByKind) {
  auto cfg = config::embedded_default();
  config::reward_config strict;
  strict.name = "strict";
  strict.kind = "embedding";
  strict.sources = {"tei-a"};
  strict.fallback = "none";
  strict.options = R"({"length_penalty":"sqrt"})";
  cfg.rewards["strict"] = strict;
  reward_catalog catalog{cfg};
  const auto* s = catalog.find("strict");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->capability, "embed@strict");
  EXPECT_EQ(s->route_suffix, "@strict");
  EXPECT_EQ(s->fallback, "");
  EXPECT_EQ(s->options, strict.options);
  EXPECT_EQ(catalog.find("embedding")->fallback, "lexical") << "the seeds fall back to lexical";
  EXPECT_EQ(catalog.find("judge")->fallback, "");
  EXPECT_EQ(catalog.find("judge")->capability, "judge");
  EXPECT_EQ(catalog.find("em_info_gain")->capability, "em_ig");
}
