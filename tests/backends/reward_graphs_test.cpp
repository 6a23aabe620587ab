// The reward graphs as plain classes, driven without actors: the calls each step asks for,
// how answers are combined, provenance over all calls, and how a failed call fails the item.
// The actor that sends the calls through the scheduler is tested in
// tests/actors/reward_graph_test.cpp; the graphs run end to end in tests/e2e.
#include "backends/reward_graphs.hpp"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/config.hpp"

using namespace arbiter;
using namespace arbiter::backends;

namespace {

shared_item make_item(const std::string& kind, std::string solution,
                      std::vector<std::string> references, std::string extra_info = {}) {
  auto item = std::make_shared<score_item>();
  item->reward = kind;
  item->kind = kind;
  item->capability = kind == "info_gain" ? "ig" : kind;
  item->solution_str = std::move(solution);
  item->ground_truth = std::move(references);
  item->extra_info = std::move(extra_info);
  return item;
}

item_result answered(const std::string& source, std::shared_ptr<model_output> output,
                     uint32_t attempts = 1, bool cached = false) {
  item_result r;
  r.status = item_status::ok;
  r.source = source;
  r.attempts = attempts;
  r.cached = cached;
  r.output = std::move(output);
  return r;
}

item_result completions(const std::string& source, std::vector<std::string> texts,
                        uint32_t attempts = 1) {
  auto output = std::make_shared<model_output>();
  for (auto& text : texts) {
    generated_text t;
    t.text = std::move(text);
    t.mean_logprob = -0.5;
    t.tokens = 3;
    output->texts.push_back(std::move(t));
  }
  return answered(source, std::move(output), attempts);
}

item_result entailment(double p) {
  auto output = std::make_shared<model_output>();
  output->entailment = p;
  output->neutral = 1.0 - p;
  return answered("nli-1", std::move(output));
}

class RewardGraphs : public ::testing::Test {
protected:
  RewardGraphs() : catalog_(config::embedded_default()) {}
  reward_catalog catalog_;
};

} // namespace

TEST_F(RewardGraphs, OnlyGraphKindsHaveOne) {
  EXPECT_NE(make_reward_graph(make_item("judge", "a", {"a"}), catalog_), nullptr);
  EXPECT_NE(make_reward_graph(make_item("info_gain", "a", {"a"}), catalog_), nullptr);
  EXPECT_NE(make_reward_graph(make_item("em_info_gain", "a", {"a"}), catalog_), nullptr);
  EXPECT_EQ(make_reward_graph(make_item("lexical", "a", {"a"}), catalog_), nullptr);
}

TEST_F(RewardGraphs, JudgeAsksOneChatPerReferenceAndKeepsTheBestMeanOfVotes) {
  auto graph = make_reward_graph(
    make_item("judge", "The answer is 4.", {"4", "four"}, R"({"n": 2, "problem": "2+2?"})"),
    catalog_);
  auto step = graph->start();
  ASSERT_FALSE(step.done());
  ASSERT_EQ(step.calls.size(), 2u);
  for (const auto& call : step.calls) {
    EXPECT_EQ(call.capability, "chat");
    EXPECT_EQ(call.reward, "judge/chat");
    ASSERT_NE(call.call, nullptr);
    EXPECT_EQ(call.call->n, 2u);
    EXPECT_NE(call.call->prompt.find("The answer is 4."), std::string::npos);
    EXPECT_NE(call.call->prompt.find("2+2?"), std::string::npos);
  }
  step = graph->advance({completions("judge-a", {"REWARD: 0.5", "REWARD: 1.0"}, 2),
                         completions("judge-b", {"REWARD: 0.25", "no score here"})});
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::none) << step.outcome.error;
  EXPECT_DOUBLE_EQ(step.outcome.score, 0.75) << "(0.5 + 1.0) / 2 beats 0.25";
  EXPECT_EQ(graph->sources(), (std::set<std::string>{"judge-a", "judge-b"}));
  EXPECT_EQ(graph->attempts(), 3u);
  EXPECT_FALSE(graph->all_cached());
  EXPECT_DOUBLE_EQ(graph->queued_ms(), 0.0);
}

TEST_F(RewardGraphs, JudgeVotesCutInsideTheirScoreOrFilteredAreLeftOut) {
  auto with_finish = [](std::vector<std::pair<std::string, std::string>> texts) {
    auto output = std::make_shared<model_output>();
    for (auto& [text, finish] : texts) {
      generated_text t;
      t.text = text;
      t.finish_reason = finish;
      output->texts.push_back(std::move(t));
    }
    return answered("judge-a", std::move(output));
  };
  auto graph = make_reward_graph(make_item("judge", "x", {"a"}, R"({"n": 4})"), catalog_);
  ASSERT_EQ(graph->start().calls.size(), 1u);
  // Cut at max_tokens right after "REWARD: 0." (of 0.875): not a 0. A cut later in the reply,
  // after the number, keeps its vote; a choice the content filter withheld has none.
  auto step = graph->advance({with_finish({{"REWARD: 0.", "length"},
                                           {"REWARD: 0.5 because the", "length"},
                                           {"REWARD: 1", "stop"},
                                           {"", "content_filter"}})});
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::none) << step.outcome.error;
  EXPECT_DOUBLE_EQ(step.outcome.score, 0.75);
  graph = make_reward_graph(make_item("judge", "x", {"a"}), catalog_);
  graph->start();
  step = graph->advance({with_finish({{"Looks right. REWARD: 0", "length"}})});
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::reward_failed);
  EXPECT_EQ(step.outcome.error,
            "judge reply was cut at max_tokens inside its REWARD score: "
            "\"Looks right. REWARD: 0\"");
  graph = make_reward_graph(make_item("judge", "x", {"a"}), catalog_);
  graph->start();
  step = graph->advance({with_finish({{"", "content_filter"}})});
  EXPECT_EQ(step.outcome.code, errc::reward_failed);
  EXPECT_EQ(step.outcome.error, "judge reply was withheld by the provider's content filter");
}

TEST_F(RewardGraphs, AJudgeTemplateWithoutTheReferenceIsAskedOnceAndNeedsNone) {
  const std::string free = R"({"prompt_template": "Rate {CANDIDATE_SOLUTION}. REWARD: 0 to 1"})";
  auto graph = make_reward_graph(make_item("judge", "x", {}, free), catalog_);
  auto step = graph->start();
  ASSERT_FALSE(step.done()) << step.outcome.error;
  ASSERT_EQ(step.calls.size(), 1u);
  EXPECT_EQ(step.calls[0].call->prompt, "Rate x. REWARD: 0 to 1");
  graph = make_reward_graph(make_item("judge", "x", {"a", "b", "c"}, free), catalog_);
  EXPECT_EQ(graph->start().calls.size(), 1u) << "the same prompt three times would cost 3x";
  // The default template shows the reference: with none, the item fails.
  graph = make_reward_graph(make_item("judge", "x", {}), catalog_);
  step = graph->start();
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.error, "judge needs at least one reference in ground_truth");
}

TEST_F(RewardGraphs, AFailedCallFailsTheItemNamingTheCall) {
  auto graph = make_reward_graph(make_item("judge", "x", {"a", "b"}), catalog_);
  ASSERT_EQ(graph->start().calls.size(), 2u);
  item_result failed;
  failed.status = item_status::failed;
  failed.code = errc::upstream_failed;
  failed.error = "HTTP 503";
  auto step = graph->advance({completions("judge-a", {"REWARD: 1"}), failed});
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::upstream_failed);
  EXPECT_EQ(step.outcome.error, "judge call 2 of 2 failed: HTTP 503");
  EXPECT_EQ(graph->sources(), std::set<std::string>{"judge-a"}) << "the failed one ran nowhere";
  // One that failed at a source names it (an info_gain item failed by its NLI source named
  // only the generator that had answered; a judge item, "reward-graph"; helper-38).
  graph = make_reward_graph(make_item("judge", "x", {"a", "b"}), catalog_);
  ASSERT_EQ(graph->start().calls.size(), 2u);
  failed.source = "judge-b";
  step = graph->advance({completions("judge-a", {"REWARD: 1"}), failed});
  ASSERT_TRUE(step.done());
  EXPECT_EQ(graph->sources(), (std::set<std::string>{"judge-a", "judge-b"}));
}

TEST_F(RewardGraphs, InfoGainGeneratesBothSidesThenJudgesEverySampleThenTakesTheDelta) {
  auto graph = make_reward_graph(
    make_item("info_gain", "Paris is the capital of France.", {"Paris"},
              R"({"num_samples": 2, "seed": 7, "question": "What is the capital of France?"})"),
    catalog_);
  auto step = graph->start();
  ASSERT_EQ(step.calls.size(), 2u) << "with the context, then without";
  for (const auto& call : step.calls) {
    EXPECT_EQ(call.capability, "generate");
    EXPECT_EQ(call.call->n, 2u);
    EXPECT_EQ(call.call->seed, std::optional<uint64_t>{7});
    EXPECT_FALSE(call.call->stop.empty());
  }
  EXPECT_NE(step.calls[0].call->prompt.find("Paris is the capital"), std::string::npos);
  EXPECT_EQ(step.calls[1].call->prompt.find("Paris is the capital"), std::string::npos);

  auto with_context = completions("gen-1", {"Paris", "Paris."});
  auto without = completions("gen-1", {"Lyon", "Nice"});
  with_context.queue_ms = 30.0;
  without.queue_ms = 50.0; // queued together: the longer wait is the item's
  step = graph->advance({with_context, without});
  ASSERT_FALSE(step.done());
  // soft, one gold answer: for each sample, (sample => answer) and (answer => sample).
  ASSERT_EQ(step.calls.size(), 8u);
  for (const auto& call : step.calls) {
    EXPECT_EQ(call.capability, "nli");
    EXPECT_FALSE(call.call->hypothesis.empty());
  }
  std::vector<item_result> probs;
  for (int i = 0; i < 8; ++i) {
    probs.push_back(entailment(i < 4 ? 0.9 : 0.2));
    probs.back().queue_ms = i; // then up to 7 ms more
  }
  step = graph->advance(probs);
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::none) << step.outcome.error;
  // Equal weights: each side's IG is its mean of max(P(r=>a), P(a=>r)).
  EXPECT_NEAR(step.outcome.score, 0.9 - 0.2, 1e-12);
  auto detail = nlohmann::json::parse(step.outcome.detail);
  EXPECT_EQ(detail["variant"], "soft");
  EXPECT_NEAR(detail["delta"].get<double>(), 0.7, 1e-12);
  EXPECT_EQ(graph->sources(), (std::set<std::string>{"gen-1", "nli-1"}));
  EXPECT_EQ(graph->attempts(), 10u);
  EXPECT_DOUBLE_EQ(graph->queued_ms(), 50.0 + 7.0) << "each step's longest wait, summed";
}

TEST_F(RewardGraphs, InfoGainNamesTheStageThatFailed) {
  auto graph = make_reward_graph(make_item("info_gain", "ctx", {"a"}), catalog_);
  ASSERT_EQ(graph->start().calls.size(), 2u);
  auto step = graph->advance({completions("gen-1", {"a"}), completions("gen-1", {})});
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::internal);
  EXPECT_EQ(step.outcome.error, "a generation call returned no samples");

  auto needs_gold = make_reward_graph(make_item("info_gain", "ctx", {}), catalog_);
  step = needs_gold->start();
  ASSERT_TRUE(step.done());
  EXPECT_EQ(step.outcome.code, errc::reward_failed);
  EXPECT_NE(step.outcome.error.find("needs at least one gold answer"), std::string::npos);
}

TEST_F(RewardGraphs, EmInfoGainIsExactMatchAloneWithoutInformation) {
  auto graph = make_reward_graph(
    make_item("em_info_gain", "Question: capital?\n<answer> Paris </answer>", {"paris"}),
    catalog_);
  auto step = graph->start();
  ASSERT_TRUE(step.done());
  EXPECT_DOUBLE_EQ(step.outcome.score, 1.0);
  EXPECT_EQ(nlohmann::json::parse(step.outcome.detail)["information_blocks"], 0);
}

TEST_F(RewardGraphs, EmInfoGainScoresZeroWithNoAnswerAnywhereAndAsksNoDelta) {
  // qa_em.py: `if answer is None: all_score = 0`, whatever the information.
  auto graph = make_reward_graph(
    make_item("em_info_gain",
              "Question: capital of France?\n<information>Paris is the capital.</information>"
              "I think it is Paris.",
              {"Paris"}),
    catalog_);
  auto step = graph->start();
  ASSERT_TRUE(step.done()) << "no nested info_gain item";
  EXPECT_EQ(step.outcome.code, errc::none);
  EXPECT_DOUBLE_EQ(step.outcome.score, 0.0);
  auto detail = nlohmann::json::parse(step.outcome.detail);
  EXPECT_EQ(detail["information_blocks"], 1);
  EXPECT_TRUE(detail["answer"].is_null());
}

TEST_F(RewardGraphs, EmInfoGainAsksANestedInfoGainItemAndWeighsItsDelta) {
  auto graph = make_reward_graph(
    make_item("em_info_gain",
              "Question: capital of France?\n<information>Paris is the capital.</information>"
              "<answer>Lyon</answer>",
              {"Paris"}, R"({"info_gain_weight": 0.5, "num_samples": 3})"),
    catalog_);
  auto step = graph->start();
  ASSERT_EQ(step.calls.size(), 1u);
  const auto& nested = step.calls[0];
  EXPECT_EQ(nested.kind, "info_gain");
  EXPECT_EQ(nested.capability, "ig");
  EXPECT_EQ(nested.call, nullptr) << "a whole item, not a model call";
  auto extra = nlohmann::json::parse(nested.extra_info);
  EXPECT_EQ(extra["question"], "capital of France?");
  EXPECT_EQ(extra["context"], "Paris is the capital.");
  EXPECT_EQ(extra["num_samples"], 3) << "info_gain options pass through";
  EXPECT_FALSE(extra.contains("info_gain_weight"));

  item_result delta;
  delta.status = item_status::ok;
  delta.source = "ig-service";
  delta.score = 0.4;
  step = graph->advance({delta});
  ASSERT_TRUE(step.done());
  EXPECT_DOUBLE_EQ(step.outcome.score, 0.0 + 0.5 * 0.4) << "EM 0 (Lyon), plus half the delta";
  EXPECT_EQ(graph->sources(), std::set<std::string>{"ig-service"});
}
