// Which routing keys each configured source serves (actors/source_capabilities.cpp).

#include "actors/source_capabilities.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::actors;

TEST(SourceCapabilities, ASourceServesItsKindsDefaultsUnlessConfigured) {
  config::source_config tei;
  tei.name = "tei";
  tei.kind = "tei";
  EXPECT_TRUE(serves(tei, capability::embed));
  EXPECT_FALSE(serves(tei, capability::nli));
  tei.capabilities = {"nli"};
  EXPECT_TRUE(serves(tei, capability::nli));
  EXPECT_FALSE(serves(tei, capability::embed));
  EXPECT_EQ(keys_of(default_capabilities("openai")), std::vector<std::string>{"chat"});
  EXPECT_EQ(keys_of(default_capabilities("ig_service")), std::vector<std::string>{"ig"});
  EXPECT_TRUE(default_capabilities("other").empty());
}

TEST(SourceCapabilities, ModelsServeByKind) {
  config::model_config m;
  EXPECT_EQ(model_capabilities(m), std::vector<capability>{capability::embed});
  m.kind = "generator";
  EXPECT_EQ(model_capabilities(m),
            (std::vector<capability>{capability::generate, capability::chat}));
  m.kind = "nli";
  EXPECT_EQ(model_capabilities(m), std::vector<capability>{capability::nli});
}

TEST(SourceCapabilities, RoutingKeysAreNarrowedByTheModelAndTheRewardsNamingTheSource) {
  config::arbiter_config cfg;
  config::source_config judge;
  judge.name = "judge-a";
  judge.kind = "openai";
  judge.model = "qwen3-8b";
  cfg.sources.push_back(judge);
  config::reward_config strict;
  strict.kind = "judge";
  strict.sources = {"judge-a"};
  cfg.rewards["strict_judge"] = strict;
  config::reward_config other;
  other.kind = "judge";
  other.sources = {"judge-b"};
  cfg.rewards["other_judge"] = other;
  EXPECT_EQ(routed_capabilities(judge, cfg),
            (std::vector<std::string>{"chat", "chat@model:qwen3-8b", "chat@strict_judge"}));
  // The keys a source serves are what the scheduler matches an item's key against.
  auto keys = routed_capabilities(judge, cfg);
  EXPECT_TRUE(serves(keys, capability::chat));
  EXPECT_FALSE(serves(keys, capability::embed));
}
