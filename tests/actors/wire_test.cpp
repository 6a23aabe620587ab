// The work messages through CAF's binary serializer and back (actors/wire.hpp): what the
// middleman will do to them between a coordinator and a worker node (issue 7).

#include "actors/wire.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::actors;

namespace {

class Wire : public ::testing::Test {
protected:
  template <class T>
  std::vector<char> save(T& value) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys_, buf};
    auto err = sink(value);
    EXPECT_FALSE(err) << sys_.render(err);
    return buf;
  }

  template <class T>
  T load(const std::vector<char>& buf) {
    T value;
    caf::binary_deserializer source{sys_, buf};
    auto err = source(value);
    EXPECT_FALSE(err) << sys_.render(err);
    return value;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_{cfg_};
};

score_item call_item() {
  score_item item;
  item.reward = "ig/generate";
  item.kind = "generate";
  item.capability = "generate@ig";
  item.route_suffix = "@ig";
  auto call = std::make_shared<model_call>();
  call->prompt = "Question: what is the capital of France?\nAnswer:";
  call->temperature = 0.7;
  call->max_tokens = 32;
  call->n = 4;
  call->enable_thinking = false;
  call->stop = {"\n", "</s>"};
  call->seed = 42;  // top_p left unset
  item.call = std::move(call);
  return item;
}

} // namespace

TEST_F(Wire, AWorkBatchArrivesWithItsItemsCallsAndTimeLeft) {
  work_batch batch;
  batch.id = 77;
  batch.priority = 2;
  batch.deadline = steady_clock::now() + std::chrono::seconds{30};
  batch.record = true;
  score_item reward;
  reward.reward = "lexical";
  reward.kind = "lexical";
  reward.capability = "cpu";
  reward.solution_str = "Paris ✓";
  reward.ground_truth = {"Paris", "paris"};
  reward.extra_info = R"({"k":1})";
  batch.items = {std::make_shared<const score_item>(reward),
                 std::make_shared<const score_item>(call_item())};
  auto got = load<work_batch>(save(batch));
  EXPECT_EQ(got.id, 77u);
  EXPECT_EQ(got.priority, 2u);
  EXPECT_TRUE(got.record) << "a node's sources keep evidence for the replay log";
  auto left = got.deadline - steady_clock::now();
  EXPECT_GT(left, std::chrono::seconds{29});
  EXPECT_LE(left, std::chrono::seconds{30});
  ASSERT_EQ(got.items.size(), 2u);
  EXPECT_NE(got.items[0].get(), batch.items[0].get()) << "rebuilt, not shared";
  EXPECT_EQ(got.items[0]->solution_str, "Paris ✓");
  EXPECT_EQ(got.items[0]->ground_truth, reward.ground_truth);
  EXPECT_EQ(got.items[0]->extra_info, reward.extra_info);
  EXPECT_EQ(got.items[0]->call, nullptr);
  const auto& call = *got.items[1]->call;
  EXPECT_EQ(got.items[1]->route_suffix, "@ig");
  EXPECT_EQ(call.prompt, batch.items[1]->call->prompt);
  EXPECT_EQ(call.temperature, 0.7);
  EXPECT_FALSE(call.top_p.has_value());
  EXPECT_EQ(call.max_tokens, 32u);
  EXPECT_EQ(call.n, 4u);
  EXPECT_EQ(call.enable_thinking, false);
  EXPECT_EQ(call.stop, (std::vector<std::string>{"\n", "</s>"}));
  EXPECT_EQ(call.seed, 42u);
}

TEST_F(Wire, APastDeadlineStaysPast) {
  work_batch batch;
  batch.deadline = steady_clock::now() - std::chrono::seconds{5};
  auto got = load<work_batch>(save(batch));
  EXPECT_LT(got.deadline, steady_clock::now() - std::chrono::seconds{4});
}

TEST_F(Wire, AWorkResultArrivesWithOutcomesOutputsAndTheReport) {
  work_result result;
  result.id = 9;
  result.report.kind = scheduler::attempt_outcome_kind::rate_limited;
  result.report.retry_after = std::chrono::milliseconds{1500};
  result.report.headers.remaining_requests = 3;
  result.report.headers.reset_tokens = std::chrono::seconds{6};
  result.report.latency = std::chrono::milliseconds{12};
  result.report.detail = "HTTP 429";
  result.report.cancelled = true;
  result.report.unsent = true;  // a node's cancelled call its client never wrote
  result.report.extra_requests = 2; // a TEI call sent in three parts
  item_outcome failed;
  failed.code = errc::upstream_failed;
  failed.error = "HTTP 429: slow down";
  failed.retry_after_ms = 29000;
  item_outcome scored;
  scored.score = 0.25;
  scored.run_ms = 3.5;
  scored.sources = {"vllm-a", "tei"};
  scored.cached = true;
  scored.coalesced = true;
  scored.attempts = 2;
  scored.detail = R"({"samples":[]})";
  scored.evidence = R"({"model":"m","vectors":[[0.5]]})";
  auto output = std::make_shared<model_output>();
  output->texts = {{"Paris", -0.5, 2, "stop", {}, {}, false},
                   {"", 0.0, 0, "length", "Let me think", "I can't", true}};
  output->entailment = 0.9;
  output->neutral = 0.07;
  output->contradiction = 0.03;
  output->embedding = {0.5f, -0.25f, 1e-30f};
  output->prompt_tokens = 11;
  output->completion_tokens = 5;
  output->model = "m-2026";
  scored.output = output;
  result.outcomes = {failed, scored};
  auto got = load<work_result>(save(result));
  EXPECT_EQ(got.id, 9u);
  EXPECT_EQ(got.report.kind, scheduler::attempt_outcome_kind::rate_limited);
  EXPECT_EQ(got.report.retry_after, std::chrono::milliseconds{1500});
  EXPECT_EQ(got.report.headers.remaining_requests, 3u);
  EXPECT_FALSE(got.report.headers.limit_requests.has_value());
  EXPECT_EQ(got.report.headers.reset_tokens, std::chrono::seconds{6});
  EXPECT_EQ(got.report.latency, std::chrono::milliseconds{12});
  EXPECT_EQ(got.report.detail, "HTTP 429");
  EXPECT_TRUE(got.report.cancelled);
  EXPECT_TRUE(got.report.unsent);
  EXPECT_EQ(got.report.extra_requests, 2u);
  ASSERT_EQ(got.outcomes.size(), 2u);
  EXPECT_EQ(got.outcomes[0].code, errc::upstream_failed);
  EXPECT_EQ(got.outcomes[0].retry_after_ms, 29000);
  EXPECT_EQ(got.outcomes[0].error, failed.error);
  EXPECT_EQ(got.outcomes[0].output, nullptr);
  const auto& s = got.outcomes[1];
  EXPECT_EQ(s.code, errc::none);
  EXPECT_EQ(s.score, 0.25);
  EXPECT_EQ(s.sources, scored.sources);
  EXPECT_TRUE(s.cached);
  EXPECT_TRUE(s.coalesced);
  EXPECT_EQ(s.attempts, 2u);
  EXPECT_EQ(s.detail, scored.detail);
  EXPECT_EQ(s.evidence, scored.evidence);
  ASSERT_NE(s.output, nullptr);
  ASSERT_EQ(s.output->texts.size(), 2u);
  EXPECT_EQ(s.output->texts[0].text, "Paris");
  EXPECT_EQ(s.output->texts[0].mean_logprob, -0.5);
  EXPECT_EQ(s.output->texts[1].finish_reason, "length");
  EXPECT_EQ(s.output->texts[1].reasoning, "Let me think");
  EXPECT_EQ(s.output->texts[1].refusal, "I can't");
  EXPECT_TRUE(s.output->texts[1].no_content);
  EXPECT_EQ(s.output->entailment, 0.9);
  EXPECT_EQ(s.output->embedding, output->embedding);
  EXPECT_EQ(s.output->completion_tokens, 5u);
  EXPECT_EQ(s.output->model, "m-2026");
}

TEST_F(Wire, AnUnknownEnumValueIsRefused) {
  work_result result;
  result.outcomes.resize(1);
  auto buf = save(result);
  // The outcome's code is the last 16-bit field before the score; find it by saving a known
  // value and flipping it to one errc does not have.
  result.outcomes[0].code = errc::upstream_rejected;
  auto marked = save(result);
  ASSERT_EQ(buf.size(), marked.size());
  size_t at = 0;
  while (at < buf.size() && buf[at] == marked[at]) {
    ++at;
  }
  ASSERT_LT(at, buf.size());
  marked[at] = static_cast<char>(200);
  work_result bad;
  caf::binary_deserializer source{sys_, marked};
  EXPECT_TRUE(source(bad));
}

TEST_F(Wire, MessagesCanBePrinted) {
  // CAF prints message contents with the same inspect overloads (logs, errors).
  work_batch batch;
  batch.id = 5;
  batch.items = {std::make_shared<const score_item>(call_item())};
  auto text = caf::deep_to_string(batch);
  EXPECT_NE(text.find("work_batch"), std::string::npos) << text;
  EXPECT_NE(text.find("capital of France"), std::string::npos) << text;
}

TEST_F(Wire, ASourceSpecArrivesWhole) {
  // What a worker node registers with: a remote source's pacing, breaker and AIMD settings.
  scheduler::source_spec spec;
  spec.name = "judge";
  spec.capabilities = {"chat", "chat:judge-8b"};
  spec.max_batch_items = 1;
  spec.max_batch_inputs = 31; // a TEI endpoint's cap on the node
  spec.single_item = {"chat"};
  spec.batch_wait = std::chrono::milliseconds{5};
  spec.wait_when_idle = true;
  spec.max_inflight = 64;
  spec.adaptive = true;
  spec.concurrency.initial_limit = 8;
  spec.concurrency.growth_tolerance = 1e9;
  spec.concurrency.target_latency = std::chrono::milliseconds{250};
  spec.concurrency.regrowth_rounds = 3;
  scheduler::rate_limit_config rl;
  rl.requests_per_minute = 600;
  rl.tokens_per_minute = 90000;
  rl.burst = std::chrono::seconds{6};
  spec.rate_limit = rl;
  spec.completion_tokens = 512;
  spec.remote = true;
  spec.local_model = true; // not both in practice: each field on its own
  spec.input_cost_per_million = 0.15;
  spec.output_cost_per_million = 0.6;
  spec.feeds = {{"judge", {"chat"}}};
  auto got = load<scheduler::source_spec>(save(spec));
  EXPECT_EQ(got.name, "judge");
  EXPECT_EQ(got.capabilities, spec.capabilities);
  EXPECT_EQ(got.max_batch_items, 1u);
  EXPECT_EQ(got.max_batch_inputs, 31u) << "else the node's TEI gets calls over its cap";
  EXPECT_EQ(got.single_item, spec.single_item) << "else its chat items go 32 a call";
  EXPECT_EQ(got.batch_wait, std::chrono::milliseconds{5});
  EXPECT_TRUE(got.wait_when_idle);
  EXPECT_EQ(got.max_inflight, 64u);
  EXPECT_TRUE(got.adaptive);
  EXPECT_EQ(got.concurrency.initial_limit, 8u);
  EXPECT_EQ(got.concurrency.growth_tolerance, 1e9);
  EXPECT_EQ(got.concurrency.target_latency, std::chrono::milliseconds{250});
  EXPECT_EQ(got.concurrency.regrowth_rounds, 3u);
  ASSERT_TRUE(got.rate_limit.has_value());
  EXPECT_EQ(got.rate_limit->requests_per_minute, 600u);
  EXPECT_EQ(got.rate_limit->tokens_per_minute, 90000u);
  EXPECT_EQ(got.rate_limit->burst, std::chrono::seconds{6});
  EXPECT_FALSE(got.breaker.has_value());
  EXPECT_EQ(got.completion_tokens, 512u);
  EXPECT_TRUE(got.remote);
  EXPECT_TRUE(got.local_model);
  EXPECT_EQ(got.input_cost_per_million, 0.15) << "else the node's calls cost nothing";
  EXPECT_EQ(got.output_cost_per_million, 0.6);
  EXPECT_EQ(got.feeds, spec.feeds);

  spec.breaker = scheduler::circuit_breaker_config{};
  spec.breaker->consecutive_failures = 9;
  spec.breaker->max_ejection = std::chrono::seconds{30};
  spec.rate_limit.reset();
  got = load<scheduler::source_spec>(save(spec));
  ASSERT_TRUE(got.breaker.has_value());
  EXPECT_EQ(got.breaker->consecutive_failures, 9u);
  EXPECT_EQ(got.breaker->max_ejection, std::chrono::seconds{30});
  EXPECT_FALSE(got.rate_limit.has_value());
}
