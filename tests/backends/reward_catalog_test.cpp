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
  EXPECT_EQ(catalog.find("judge")->capability, "chat");
  EXPECT_EQ(catalog.find("embedding")->capability, "embed");
  EXPECT_EQ(catalog.find("info_gain")->capability, "ig");
  EXPECT_EQ(catalog.find("unheard_of"), nullptr);
  ASSERT_NE(catalog.for_data_source("llm_judge_remote_math"), nullptr);
  EXPECT_EQ(catalog.for_data_source("llm_judge_remote_math")->name, "judge");
  EXPECT_EQ(catalog.for_data_source("embedding_remote_qa")->name, "embedding");
}

TEST(RewardCatalog, ConfiguredNamesAndLongestPrefixWin) {
  auto cfg = config::embedded_default();
  cfg.rewards["squad_em"] = config::reward_config{"squad_em", "exact_match"};
  cfg.data_sources = {{"squad", "lexical"}, {"squad_v2", "squad_em"}};
  reward_catalog catalog{cfg};
  ASSERT_NE(catalog.for_data_source("squad_v2_dev"), nullptr);
  EXPECT_EQ(catalog.for_data_source("squad_v2_dev")->name, "squad_em");
  EXPECT_EQ(catalog.for_data_source("squad_v1")->name, "lexical");
  EXPECT_EQ(catalog.for_data_source("gsm8k"), nullptr);
  EXPECT_EQ(catalog.rewards().size(), 6u) << "five built-in kinds and squad_em";
}
