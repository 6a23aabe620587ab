// Which routing keys each configured source serves (actors/source_capabilities.cpp).

#include "actors/source_capabilities.hpp"
#include "actors/remote_source_actor.hpp"

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

TEST(SourceCapabilities, AnOpenAiUrlEndingInV1IsCalledWithoutIt) {
  // OpenAI's SDKs take the base URL with /v1; the API's paths already begin with it.
  auto base = [](std::string kind, std::string url) {
    config::source_config s;
    s.kind = std::move(kind);
    s.url = std::move(url);
    return base_url(s);
  };
  EXPECT_EQ(base("openai", "http://h:8000/v1"), "http://h:8000");
  EXPECT_EQ(base("openai", "https://gateway/openai/v1/"), "https://gateway/openai");
  EXPECT_EQ(base("openai", "http://h:8000"), "http://h:8000");
  EXPECT_EQ(base("openai", "http://h/v1beta"), "http://h/v1beta");
  EXPECT_EQ(base("openai", "http://v1"), "http://v1") << "a host, not a path";
  EXPECT_EQ(base("tei", "http://h/v1"), "http://h/v1") << "TEI's paths do not begin with /v1";
  EXPECT_EQ(base("ig_service", "http://h/v1"), "http://h/v1");
}

TEST(SourceCapabilities, AnApiKeyLosesTheBlanksAndLineBreaksAroundIt) {
  config::source_config s;
  s.api_key = "  sk-abc\n";
  EXPECT_EQ(resolve_api_key(s), "sk-abc");
  s.api_key.clear();
  s.api_key_env = "ARBITER_TEST_SOURCE_KEY";
  setenv("ARBITER_TEST_SOURCE_KEY", "hunter2hunter2\r\n", 1);
  EXPECT_EQ(resolve_api_key(s), "hunter2hunter2") << "a Secret made with --from-file";
  setenv("ARBITER_TEST_SOURCE_KEY", "\n", 1);
  EXPECT_EQ(resolve_api_key(s), "");
  unsetenv("ARBITER_TEST_SOURCE_KEY");
  EXPECT_EQ(resolve_api_key(s), "");
}
