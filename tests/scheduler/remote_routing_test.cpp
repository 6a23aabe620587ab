// The scheduler core with remote-style sources: retries, pacing, ejection, hedging,
// coalescing and the result cache, driven by a manual clock.

#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/token_estimate.hpp"
#include "scheduler/scheduler_core.hpp"
#include "test_support.hpp"

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace arbiter::scheduler::testing;
using namespace std::chrono_literals;

namespace {

score_item judge_item(std::string text) {
  score_item item;
  item.reward = "judge";
  item.kind = "judge";
  item.capability = "chat";
  item.solution_str = std::move(text);
  item.ground_truth = {"reference"};
  return item;
}

score_item embedding_item(std::string text) {
  score_item item;
  item.reward = "embedding";
  item.kind = "embedding";
  item.capability = "embed";
  item.solution_str = std::move(text);
  item.ground_truth = {"reference"};
  return item;
}

std::vector<score_item> judge_items(size_t n, const std::string& prefix = "answer ") {
  std::vector<score_item> items;
  for (size_t i = 0; i < n; ++i) {
    items.push_back(judge_item(prefix + std::to_string(i)));
  }
  return items;
}

/// `n` judge items of about 2,000 tokens each (6,000 bytes), their texts starting `prefix`.
std::vector<score_item> long_judge_items(size_t n, const std::string& prefix = "") {
  std::vector<score_item> items;
  for (size_t i = 0; i < n; ++i) {
    items.push_back(judge_item(prefix + std::to_string(i) + std::string(6000, 'x')));
  }
  return items;
}

source_spec endpoint(std::string name, uint32_t rpm = 0) {
  source_spec s;
  s.name = std::move(name);
  s.capabilities = {"chat"};
  s.max_batch_items = 1;
  s.max_inflight = 8;
  s.remote = true;
  rate_limit_config rl;
  rl.requests_per_minute = rpm;
  rl.burst = 1s;
  s.rate_limit = rl;
  s.breaker = circuit_breaker_config{};
  return s;
}

/// `endpoint` whose bucket holds `burst` of its per-minute limit (a minute: all of it).
source_spec endpoint(std::string name, uint32_t rpm, nanoseconds burst) {
  auto s = endpoint(std::move(name), rpm);
  s.rate_limit->burst = burst;
  return s;
}

attempt_report outcome(attempt_outcome_kind kind, nanoseconds latency = 100ms) {
  attempt_report r;
  r.kind = kind;
  r.latency = latency;
  if (kind != attempt_outcome_kind::ok) {
    r.detail = "HTTP 503: overloaded";
  }
  return r;
}

config::routing_config routing() {
  config::routing_config r;
  r.retry_backoff_base = 100ms;
  r.retry_backoff_cap = 100ms;
  r.hedge = false;
  return r;
}

class RemoteRouting : public ::testing::Test {
protected:
  explicit RemoteRouting(config::routing_config r = routing())
    : metrics_(cfg_), core_(cfg_, clock_, metrics_.metrics, r) {
  }

  void ok(const dispatch_batch& b, double score) {
    std::vector<item_outcome> outcomes(b.items.size(), ok_outcome(score));
    core_.complete(b.id, outcome(attempt_outcome_kind::ok), outcomes);
  }

  void fail(const dispatch_batch& b, attempt_outcome_kind kind) {
    core_.complete(b.id, outcome(kind), {});
  }

  /// Sends `calls` single items one after another, each answered after `latency`, so the
  /// sources learn it; forgets their requests.
  void warm_up(int calls, nanoseconds latency) {
    for (int i = 0; i < calls; ++i) {
      ASSERT_TRUE(core_.submit(100 + static_cast<request_id>(i), 1, clock_.now() + 10s,
                               judge_items(1, "warm" + std::to_string(i) + "-"))
                    .admitted());
      for (auto& batch : core_.dispatch()) {
        core_.complete(batch.id, outcome(attempt_outcome_kind::ok, latency), {ok_outcome(1.0)});
      }
    }
    core_.take_finished();
  }

  /// For `seconds` seconds, dispatches and answers what goes each second; the first three
  /// letters of each batch's first item, in the order they went.
  std::vector<std::string> answer_for(int seconds) {
    std::vector<std::string> order;
    for (int s = 0; s < seconds; ++s) {
      for (auto& batch : core_.dispatch()) {
        order.push_back(batch.items[0]->solution_str.substr(0, 3));
        ok(batch, 0.5);
      }
      clock_.advance(1s);
      core_.on_timer();
    }
    return order;
  }

  std::string metrics_text() {
    return metrics_.registry.render();
  }

  /// A source paced to 60,000 tokens a minute, all of them at once (then 1,000 a second),
  /// that has answered 4 short judge items (about 70 tokens each).
  void add_token_paced_source_after_short_items() {
    auto spec = endpoint("a", 0, 60s);
    spec.rate_limit->tokens_per_minute = 60000;
    core_.add_source(std::move(spec));
    ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(4, "short ")).admitted());
    for (auto& batch : core_.dispatch()) {
      ok(batch, 0.5);
    }
    core_.take_finished();
  }

  config::scheduler_config cfg_;
  manual_time_source clock_;
  metrics_fixture metrics_;
  scheduler_core core_;
};

class RemoteRoutingWithHedges : public RemoteRouting {
protected:
  static config::routing_config with_hedges() {
    auto r = routing();
    r.hedge = true;
    r.hedge_min_delay = 50ms;
    r.hedge_budget_ratio = 0.5;
    return r;
  }
  RemoteRoutingWithHedges() : RemoteRouting(with_hedges()) {
  }
};

/// One retry per 10 s window, whatever the traffic.
class RemoteRoutingOnARetryBudget : public RemoteRouting {
protected:
  static config::routing_config on_a_budget() {
    auto r = routing();
    r.retry_budget_ratio = 0.0;
    r.retry_budget_min = 1;
    return r;
  }
  RemoteRoutingOnARetryBudget() : RemoteRouting(on_a_budget()) {
  }
};

} // namespace

TEST_F(RemoteRouting, ASourceServingChatAndEmbedBatchesEmbedItemsAndSendsOnePromptACall) {
  // helper-53: a source serving both got max_batch_items 1 from its chat, and sent 300
  // embedding items in 300 calls (38 times slower than an embed-only source's 23).
  auto spec = endpoint("both");
  spec.capabilities = {"chat", "embed", "chat@model:judge-8b"};
  spec.max_batch_items = 32;
  spec.single_item = {"chat", "generate"};
  spec.rate_limit.reset();
  core_.add_source(spec);
  std::vector<score_item> items;
  for (int i = 0; i < 20; ++i) {
    items.push_back(embedding_item("text " + std::to_string(i)));
  }
  auto judged = judge_items(3);
  judged[2].capability = "chat@model:judge-8b";
  items.insert(items.end(), judged.begin(), judged.end());
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, std::move(items)).admitted());
  std::map<std::string, std::vector<size_t>> sizes;
  for (auto& batch : core_.dispatch()) {
    sizes[batch.items.front()->capability].push_back(batch.items.size());
  }
  EXPECT_EQ(sizes["embed"], std::vector<size_t>{20});
  EXPECT_EQ(sizes["chat"], (std::vector<size_t>{1, 1}));
  EXPECT_EQ(sizes["chat@model:judge-8b"], std::vector<size_t>{1});
}

TEST_F(RemoteRouting, AnAbandonedRequestSendsNothingMoreAndACallCarryingOnlyItIsCancelled) {
  auto spec = endpoint("a");
  spec.max_inflight = 2;
  core_.add_source(std::move(spec));
  // Request 1: four distinct items; two go out, two wait. Request 2's item is the same as
  // request 1's first, so it follows that call (coalesced) rather than making its own.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(4, "p")).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 2u);
  ASSERT_EQ(sent[0].items.at(0)->solution_str, "p0");
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1, "p")).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "follows request 1's call in flight";
  // A third request, unrelated, waits behind request 1's queued items.
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, judge_items(1, "other")).admitted());

  core_.cancel(1, "the client hung up");
  core_.cancel(1, "again"); // finished: ignored
  core_.cancel(99, "unknown"); // ignored

  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::failed);
    EXPECT_EQ(r.code, errc::client_closed);
    EXPECT_EQ(r.error, "the client hung up");
  }
  // The call carrying only its items is given up, like a hedge that lost; the call request 2
  // follows goes on for request 2, which the provider is already working on.
  auto cancelled = core_.take_cancelled();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].id, sent[1].id);
  // What is sent next: request 3's item; none of request 1's, and no second call for p0.
  auto next = core_.dispatch();
  ASSERT_EQ(next.size(), 1u);
  ASSERT_EQ(next[0].items.size(), 1u);
  EXPECT_EQ(next[0].items[0]->solution_str, "other0");
  ok(next[0], 0.5);
  ok(sent[0], 0.9); // answers request 2
  ok(sent[1], 0.9); // the cancelled call's late answer changes nothing
  auto rest = core_.take_finished();
  ASSERT_EQ(rest.size(), 2u);
  for (const auto& f : rest) {
    EXPECT_EQ(f.results.at(0).status, item_status::ok);
    EXPECT_EQ(f.results.at(0).score, f.id == 2 ? 0.9 : 0.5) << f.id;
  }
  EXPECT_TRUE(core_.idle());
  EXPECT_NE(metrics_text().find("arbiter_item_failures_total{reason=\"client_closed\"} 4"),
            std::string::npos)
    << metrics_text();
}

TEST_F(RemoteRouting, AGraphGivenUpTakesItsQueuedModelCallsWithItBeforeAnyIsSent) {
  // A judge item runs as a graph (capability "graph"); its model calls are an internal
  // request whose caller is the graph's batch. The endpoint takes one call at a time.
  auto graph = endpoint("reward-graph");
  graph.capabilities = {"graph"};
  graph.remote = false;
  core_.add_source(std::move(graph));
  auto spec = endpoint("a");
  spec.max_inflight = 1;
  core_.add_source(std::move(spec));
  auto judge = judge_item("the answer");
  judge.capability = "graph";
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, std::vector<score_item>{judge}).admitted());
  auto graphs = core_.dispatch();
  ASSERT_EQ(graphs.size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 9s, judge_items(4, "call"), true).admitted());
  core_.follow_caller(2, graphs[0].id);
  auto calls = core_.dispatch();
  ASSERT_EQ(calls.size(), 1u) << "one call at a time";

  core_.cancel(1, "the client hung up");
  // The graph and its call in flight are given up together; the three queued calls are
  // never sent, although the endpoint's slot is free again.
  auto cancelled = core_.take_cancelled();
  std::set<batch_id> ids;
  for (const auto& c : cancelled) {
    ids.insert(c.id);
  }
  EXPECT_EQ(ids, (std::set<batch_id>{graphs[0].id, calls[0].id}));
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  for (const auto& f : done) {
    for (const auto& r : f.results) {
      EXPECT_EQ(r.code, errc::client_closed);
    }
  }
  EXPECT_TRUE(core_.idle());
  // The graph's own word comes later, for a request already ended: ignored.
  core_.cancel(2, "the graph gave up its calls");
  EXPECT_TRUE(core_.take_finished().empty());
}

TEST_F(RemoteRouting, CallsSentAgainAfterAHangUpGoBackToTheirPlaceInTheQueue) {
  auto spec = endpoint("a");
  spec.max_inflight = 1;
  core_.add_source(std::move(spec));
  // Request 1 is first: one call goes out, two wait. Request 2 arrives behind them.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(3, "mine")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  clock_.advance(1s);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, judge_items(3, "theirs")).admitted());
  // Request 1's client times out, hangs up, and 2 s later sends the same items again.
  clock_.advance(1s);
  core_.cancel(1, "the client hung up");
  ASSERT_EQ(core_.take_cancelled().size(), 1u);
  clock_.advance(2s);
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 60s, judge_items(3, "mine")).admitted());
  std::vector<std::string> order;
  for (int round = 0; round < 6; ++round) {
    auto sent = core_.dispatch();
    ASSERT_EQ(sent.size(), 1u) << "round " << round;
    order.push_back(sent[0].items.at(0)->solution_str);
    ok(sent[0], 0.5);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"mine0", "mine1", "mine2", "theirs0", "theirs1",
                                             "theirs2"}))
    << "request 3 holds request 1's places, ahead of request 2";
  // A minute later, a place is no longer held.
  ASSERT_TRUE(core_.submit(4, 1, clock_.now() + 60s, judge_items(2, "late")).admitted());
  auto late = core_.dispatch();
  ASSERT_EQ(late.size(), 1u);
  clock_.advance(1s);
  ASSERT_TRUE(core_.submit(5, 1, clock_.now() + 60s, judge_items(1, "next")).admitted());
  core_.cancel(4, "the client hung up");
  clock_.advance(61s);
  ASSERT_TRUE(core_.submit(6, 1, clock_.now() + 120s, judge_items(2, "late")).admitted());
  order.clear();
  for (int round = 0; round < 3; ++round) {
    auto sent = core_.dispatch();
    ASSERT_EQ(sent.size(), 1u) << "round " << round;
    order.push_back(sent[0].items.at(0)->solution_str);
    ok(sent[0], 0.5);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"next0", "late0", "late1"}));
}

TEST_F(RemoteRouting, AnAbandonedMemberLeavesItsGroupSoThatItsRetryCountsOnce) {
  core_.add_source(endpoint("a"));
  auto grouped = [](const std::string& text) {
    auto items = judge_items(1, text);
    items[0].group = "uid-7";
    return items;
  };
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, grouped("r")).admitted());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, grouped("s")).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 2u);
  core_.cancel(1, "the client hung up");
  ASSERT_EQ(core_.take_finished().size(), 1u);
  // The trainer sends the same rollout again; it follows nothing (its call was given up).
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, grouped("r")).admitted());
  auto again = core_.dispatch();
  ASSERT_EQ(again.size(), 1u);
  for (const auto& b : sent) {
    ok(b, 0.0);
  }
  ok(again[0], 1.0);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  const auto& last = done.back();
  EXPECT_EQ(last.id, 3u);
  ASSERT_EQ(last.groups.size(), 1u);
  EXPECT_EQ(last.groups[0].scored, 2u) << "request 2's member and the retry";
  EXPECT_EQ(last.groups[0].failed, 0u) << "the abandoned member is not a failure of the group";
  EXPECT_EQ(last.groups[0].pending, 0u);
  EXPECT_DOUBLE_EQ(last.groups[0].mean, 0.5);
  EXPECT_NE(metrics_text().find("arbiter_group_completion_seconds_count 1"), std::string::npos)
    << "the group completed once, by its retry\n" << metrics_text();
}

TEST_F(RemoteRouting, ACallThatAlsoCarriesAnotherRequestsItemGoesOnWhenOneRequestIsAbandoned) {
  auto spec = endpoint("a");
  spec.max_batch_items = 4;
  core_.add_source(std::move(spec));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(2, "a")).admitted());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(2, "b")).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].items.size(), 4u);
  core_.cancel(1, "the client hung up");
  EXPECT_TRUE(core_.take_cancelled().empty()) << "request 2 still waits for this call";
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1u);
  ok(sent[0], 0.25);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 2u);
  EXPECT_EQ(done[0].results.at(1).score, 0.25);
}

TEST_F(RemoteRouting, A5xxIsRetriedElsewhereAndTheItemSaysWhere) {
  auto a = core_.add_source(endpoint("a"));
  auto b = core_.add_source(endpoint("b"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  auto failed_at = first[0].source;
  fail(first[0], attempt_outcome_kind::server_error);
  auto second = core_.dispatch();
  ASSERT_EQ(second.size(), 1u) << "retried at once, elsewhere";
  EXPECT_NE(second[0].source, failed_at);
  EXPECT_TRUE(second[0].source == a || second[0].source == b);
  ok(second[0], 0.7);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.status, item_status::ok);
  EXPECT_EQ(r.attempts, 2u);
  EXPECT_EQ(r.source, second[0].source == a ? "a" : "b");
  EXPECT_NE(metrics_text().find("decision=\"retry_elsewhere\""), std::string::npos);
}

namespace {

score_item embedding_item(std::string text, size_t references) {
  score_item item;
  item.reward = "embedding";
  item.kind = "embedding";
  item.capability = "embed";
  item.solution_str = std::move(text);
  for (size_t r = 0; r < references; ++r) {
    item.ground_truth.push_back("reference " + std::to_string(r));
  }
  return item;
}

source_spec tei(std::string name, uint32_t max_inputs) {
  auto s = endpoint(std::move(name));
  s.capabilities = {"embed"};
  s.max_batch_items = max_inputs;
  s.max_batch_inputs = max_inputs;
  return s;
}

} // namespace

TEST_F(RemoteRouting, AnEmbeddingCallCarriesNoMoreTextsThanTheSourceTakes) {
  // TEI takes 32 inputs a call by default, and an embedding item sends 1 + its references:
  // 17 items of one reference each were 34 texts, refused whole.
  core_.add_source(tei("tei", 8));
  std::vector<score_item> items;
  for (size_t i = 0; i < 5; ++i) {
    items.push_back(embedding_item("answer " + std::to_string(i), 3));  // 4 texts each
  }
  items.push_back(embedding_item("many references", 12));  // 13 texts: more than a call takes
  items.push_back(embedding_item("last", 1));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, std::move(items)).admitted());
  std::vector<size_t> sizes;
  for (int round = 0; round < 10; ++round) {
    auto sent = core_.dispatch();
    if (sent.empty()) {
      break;
    }
    for (const auto& b : sent) {
      sizes.push_back(b.items.size());
      ok(b, 0.5);
    }
  }
  // 4+4, 4+4, 4 (the next would be 17), 13 alone (it cannot be split), 2.
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 1, 1, 1}));
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results.size(), 7u);
}

TEST_F(RemoteRouting, ARefusedCallOfSeveralItemsSendsEachAgainAloneAndOnlyTheCulpritFails) {
  // One empty rollout among ten: TEI refuses the call ("inputs cannot be empty"), and the
  // other nine items were failed with it.
  core_.add_source(tei("tei", 32));
  std::vector<score_item> items;
  for (size_t i = 0; i < 4; ++i) {
    items.push_back(embedding_item(i == 2 ? "" : "answer " + std::to_string(i), 1));
  }
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, std::move(items)).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].items.size(), 4u);
  attempt_report refused = outcome(attempt_outcome_kind::bad_request);
  refused.detail = "HTTP 400: Input validation error: `inputs` cannot be empty";
  core_.complete(sent[0].id, refused, {});
  std::vector<dispatch_batch> alone;
  for (int round = 0; round < 10 && alone.size() < 4; ++round) {
    for (auto& b : core_.dispatch()) {
      alone.push_back(b);
    }
  }
  ASSERT_EQ(alone.size(), 4u) << "each item again, alone";
  for (const auto& b : alone) {
    ASSERT_EQ(b.items.size(), 1u);
    if (b.items[0]->solution_str.empty()) {
      core_.complete(b.id, refused, {});
    } else {
      ok(b, 0.5);
    }
  }
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& results = done[0].results;
  for (size_t i = 0; i < 4; ++i) {
    if (i == 2) {
      EXPECT_EQ(results[i].code, errc::upstream_rejected);
      EXPECT_NE(results[i].error.find("cannot be empty"), std::string::npos) << results[i].error;
      EXPECT_EQ(results[i].attempts, 2u);
    } else {
      EXPECT_EQ(results[i].status, item_status::ok) << i << ": " << results[i].error;
    }
  }
}

TEST_F(RemoteRouting, ACallTheEndpointRefusedGivesItsTokensBack) {
  // One judge call past the whole tokens-per-minute limit waits for a full bucket and then
  // overdraws it; the provider answers "Request too large" and ran nothing. Its charge used
  // to stay taken: no call went for a minute and more after it.
  auto spec = endpoint("a");
  spec.rate_limit->tokens_per_minute = 6000;  // 100 a second
  core_.add_source(std::move(spec));
  ASSERT_TRUE(
    core_.submit(1, 1, clock_.now() + 300s, {judge_item(std::string(60000, 'x'))}).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u);
  attempt_report too_large = outcome(attempt_outcome_kind::bad_request);
  too_large.detail = "HTTP 429: Request too large for gpt-4o on tokens per min (TPM)";
  core_.complete(sent[0].id, too_large, {});
  ASSERT_EQ(core_.take_finished().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 300s, judge_items(1)).admitted());
  EXPECT_EQ(core_.dispatch().size(), 1u) << "the next call goes at once";
}

TEST_F(RemoteRouting, A429ForACallLargerThanTheBurstFailsItAloneAndBlocksNobody) {
  // helper-35: a judge item of ~12.5k tokens against a 60k TPM endpoint enforcing a 10 s
  // burst got 429 with Retry-After 60. The endpoint was blocked for a minute for every item,
  // the same item went first again when the block lifted, and a short item waited 180 s.
  auto spec = endpoint("a");
  spec.rate_limit->tokens_per_minute = 60000;
  spec.rate_limit->burst = 10s;  // 10,000 tokens at once
  core_.add_source(std::move(spec));
  ASSERT_TRUE(
    core_.submit(1, 1, clock_.now() + 300s, {judge_item(std::string(60000, 'x'))}).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u) << "paced on the rate: the endpoint's bucket may be a minute";
  attempt_report limited = outcome(attempt_outcome_kind::rate_limited);
  limited.retry_after = 60s;
  limited.detail = "HTTP 429: Rate limit reached for tokens; try again in 1m0s";
  core_.complete(sent[0].id, limited, {});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "failed now, not retried after a minute";
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.status, item_status::failed);
  EXPECT_NE(r.error.find("tokens exceed the 10000 that source 'a' takes at once (HTTP 429"),
            std::string::npos)
    << r.error;
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 300s, judge_items(1)).admitted());
  EXPECT_EQ(core_.dispatch().size(), 1u) << "the endpoint is not blocked: a short item goes now";
}

TEST_F(RemoteRouting, WithOneSourceA5xxIsRetriedThereAfterABackoff) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  fail(core_.dispatch().at(0), attempt_outcome_kind::server_error);
  EXPECT_TRUE(core_.dispatch().empty()) << "backing off";
  ASSERT_TRUE(core_.next_wakeup().has_value());
  EXPECT_LE(*core_.next_wakeup(), clock_.now() + 100ms);
  clock_.advance(100ms);
  auto again = core_.dispatch();
  ASSERT_EQ(again.size(), 1u);
  ok(again[0], 0.5);
  EXPECT_EQ(core_.take_finished().at(0).results[0].attempts, 2u);
}

TEST_F(RemoteRouting, ABadRequestIsNotRetried) {
  core_.add_source(endpoint("a"));
  core_.add_source(endpoint("b"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  fail(core_.dispatch().at(0), attempt_outcome_kind::bad_request);
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.code, errc::upstream_rejected);
  EXPECT_EQ(r.attempts, 1u);
  EXPECT_NE(r.error.find("bad_request"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("refused the request itself"), std::string::npos) << r.error;
}

TEST_F(RemoteRouting, AttemptsRunOutWithAnExplicitFailure) {
  core_.add_source(endpoint("a"));
  core_.add_source(endpoint("b"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto batches = core_.dispatch();
    ASSERT_EQ(batches.size(), 1u) << "attempt " << attempt;
    fail(batches[0], attempt_outcome_kind::timeout);
  }
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].code, errc::upstream_failed);
  EXPECT_EQ(done[0].results[0].attempts, 3u);
  EXPECT_NE(done[0].results[0].error.find("no attempts left"), std::string::npos);
}

TEST_F(RemoteRouting, WhenEverySourceIsDownItemsFailByTheirDeadline) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 2s, judge_items(4)).admitted());
  // Five failures in a row open the breaker: nothing more is sent.
  for (int round = 0; round < 10 && !core_.idle(); ++round) {
    for (auto& b : core_.dispatch()) {
      fail(b, attempt_outcome_kind::connect_failure);
    }
    clock_.advance(200ms);
    core_.on_timer();
  }
  clock_.advance(2s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::failed);
    EXPECT_TRUE(r.code == errc::upstream_failed || r.code == errc::deadline_exceeded)
      << to_string(r.code);
  }
  EXPECT_TRUE(core_.idle());
}

TEST_F(RemoteRouting, PacingSpreadsAStepOverTimeWithoutOverdrawing) {
  // 60 RPM, one-second burst: one call per second at most.
  core_.add_source(endpoint("a", 60));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(5)).admitted());
  int sent = 0;
  for (int second = 0; second < 5; ++second) {
    auto batches = core_.dispatch();
    EXPECT_EQ(batches.size(), 1u) << "second " << second;
    for (auto& b : batches) {
      ok(b, 1.0);
      ++sent;
    }
    auto wake = core_.next_wakeup();
    if (sent < 5) {
      ASSERT_TRUE(wake.has_value());
      EXPECT_LE(*wake, clock_.now() + 1s) << "the scheduler wakes when the bucket refills";
    }
    clock_.advance(1s);
  }
  EXPECT_EQ(sent, 5);
  EXPECT_NE(metrics_text().find("arbiter_source_pacing_waits_total{capability=\"chat\","
                                "reason=\"requests\"}"),
            std::string::npos);
}

TEST_F(RemoteRouting, A429WithRetryAfterMovesWorkToTheOtherSource) {
  auto a = core_.add_source(endpoint("a"));
  auto b = core_.add_source(endpoint("b"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(1)).admitted());
  auto first = core_.dispatch().at(0);
  auto report = outcome(attempt_outcome_kind::rate_limited);
  report.retry_after = 5s;
  core_.complete(first.id, report, {});
  auto other = first.source == a ? b : a;
  auto second = core_.dispatch();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].source, other);
  // New work also avoids the rate-limited endpoint until its Retry-After has passed.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, judge_items(3, "new ")).admitted());
  for (auto& batch : core_.dispatch()) {
    EXPECT_EQ(batch.source, other);
  }
  EXPECT_NE(metrics_text().find("arbiter_source_rate_limited_total"), std::string::npos);
}

TEST_F(RemoteRouting, IdenticalItemsInFlightAreSentOnce) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1, "same")).admitted());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1, "same")).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u) << "the second item follows the first";
  ok(batches[0], 0.25);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    EXPECT_DOUBLE_EQ(d.results[0].score, 0.25);
    EXPECT_EQ(d.results[0].source, "a");
    // The follower ran nothing: its step counts it a cache hit, its log record says so.
    EXPECT_EQ(d.results[0].coalesced, d.id == 2u) << d.id;
    EXPECT_FALSE(d.results[0].cached);
  }
  EXPECT_NE(metrics_text().find("arbiter_coalesced_items_total 1"), std::string::npos);
}

TEST_F(RemoteRouting, AnItemDoesNotFollowAnIdenticalOneQueuedInALowerClass) {
  // Two jobs on one dataset: a high class's item identical to one still queued in a low
  // class's flood waited in the flood's place, and missed its deadline.
  core_.add_source(endpoint("a", 60)); // one call a second
  auto flood = judge_items(5, "flood");
  flood.push_back(judge_item("same0"));
  ASSERT_TRUE(core_.submit(1, 2, clock_.now() + 600s, std::move(flood)).admitted());
  ASSERT_EQ(core_.dispatch().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 0, clock_.now() + 600s, judge_items(1, "same")).admitted());
  clock_.advance(1s);
  core_.on_timer();
  auto next = core_.dispatch();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].items[0]->solution_str, "same0");
  ok(next[0], 0.5);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 2u);
  EXPECT_FALSE(done[0].results[0].coalesced);
  // In its own class an identical item still follows one in flight (flood0) or queued ahead
  // of it (flood1).
  ASSERT_TRUE(core_.submit(3, 2, clock_.now() + 600s, judge_items(2, "flood")).admitted());
  EXPECT_NE(metrics_text().find("arbiter_coalesced_items_total 2"), std::string::npos)
    << metrics_text();
}

TEST_F(RemoteRouting, AFollowerTakesOverWhenTheLeadersRequestTimesOut) {
  core_.add_source(endpoint("a", 60));
  // The bucket holds one call: the first request's item waits behind an unrelated one.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1, "other")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  // Its next call goes in 1 s, just in time for request 2 (admitted), which is held past it.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 1s, judge_items(1, "same")).admitted());
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, judge_items(1, "same")).admitted());
  clock_.advance(1s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 2u);
  EXPECT_EQ(done[0].results[0].code, errc::deadline_exceeded);
  clock_.advance(1s);
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u) << "request 3's item leads now and is sent";
  EXPECT_EQ(batches[0].items[0]->solution_str, "same0");
  ok(batches[0], 0.5);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 3u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
}

TEST_F(RemoteRouting, CachedResultsAnswerAtOnce) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1, "x")).admitted());
  ok(core_.dispatch().at(0), 0.9);
  core_.take_finished();
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1, "x")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].results[0].cached);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.9);
  EXPECT_EQ(done[0].results[0].source, "a");
  EXPECT_NE(metrics_text().find("arbiter_cache_lookups_total{result=\"hit\"} 1"),
            std::string::npos);
}

TEST_F(RemoteRouting, FailuresAreNotCached) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1, "x")).admitted());
  fail(core_.dispatch().at(0), attempt_outcome_kind::bad_request);
  core_.take_finished();
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1, "x")).admitted());
  EXPECT_EQ(core_.dispatch().size(), 1u);
}

TEST(RemoteRoutingCache, EntriesExpireAfterTheTtl) {
  config::scheduler_config cfg;
  manual_time_source clock;
  metrics_fixture metrics{cfg};
  auto r = routing();
  r.cache_ttl = 1s;
  scheduler_core core{cfg, clock, metrics.metrics, r};
  core.add_source(endpoint("a"));
  ASSERT_TRUE(core.submit(1, 1, clock.now() + 10s, judge_items(1, "x")).admitted());
  auto b = core.dispatch().at(0);
  core.complete(b.id, outcome(attempt_outcome_kind::ok), {ok_outcome(0.3)});
  clock.advance(2s);
  ASSERT_TRUE(core.submit(2, 1, clock.now() + 10s, judge_items(1, "x")).admitted());
  EXPECT_EQ(core.dispatch().size(), 1u) << "expired: asked again";
}

TEST_F(RemoteRoutingWithHedges, AStragglerIsHedgedAndTheLoserCancelled) {
  auto a = core_.add_source(endpoint("a"));
  auto b = core_.add_source(endpoint("b"));
  // Teach both sources their latency: 20 quick calls each.
  warm_up(40, 100ms);
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1, "slow")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(first[0].hedge);
  ASSERT_TRUE(core_.next_wakeup().has_value());
  EXPECT_LE(*core_.next_wakeup(), clock_.now() + 100ms) << "wakes to hedge at the p95";
  clock_.advance(100ms);
  core_.on_timer();
  auto hedge = core_.dispatch();
  ASSERT_EQ(hedge.size(), 1u);
  EXPECT_TRUE(hedge[0].hedge);
  EXPECT_NE(hedge[0].source, first[0].source);
  EXPECT_TRUE(hedge[0].source == a || hedge[0].source == b);
  ok(hedge[0], 0.4);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].attempts, 2u);
  auto cancelled = core_.take_cancelled();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].id, first[0].id);
  // The loser's late answer changes nothing.
  ok(first[0], 0.9);
  EXPECT_TRUE(core_.take_finished().empty());
  EXPECT_NE(metrics_text().find("arbiter_source_hedges_total"), std::string::npos);
}

TEST_F(RemoteRoutingWithHedges, AHedgeThatCouldOnlyAnswerAfterTheDeadlineIsNotSent) {
  core_.add_source(endpoint("a"));
  core_.add_source(endpoint("b"));
  warm_up(60, 100ms); // each source: 20 answers or more, none in less than 100 ms
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 160ms, judge_items(1, "slow")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  clock_.advance(100ms);
  core_.on_timer();
  EXPECT_TRUE(core_.dispatch().empty())
    << "past the p95, but 60 ms are left and neither source answers in less than 100";
  ok(first[0], 0.4);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_EQ(done[0].results[0].attempts, 1u);
  EXPECT_EQ(metrics_text().find("arbiter_source_hedges_total{"), std::string::npos);
}

TEST_F(RemoteRoutingWithHedges, AGroupsStragglersAreHedgedOnceMostOfTheGroupIsAnswered) {
  core_.add_source(endpoint("a"));
  core_.add_source(endpoint("b"));
  warm_up(40, 100ms);
  // One rollout per request, as trainers send them: the group is the tail's measure, not the
  // request (of one item, always "mostly answered").
  std::vector<dispatch_batch> first;
  for (int i = 0; i < 4; ++i) {
    auto items = judge_items(1, "rollout" + std::to_string(i) + "-");
    items[0].group = "prompt-7";
    ASSERT_TRUE(core_.submit(1 + static_cast<request_id>(i), 1, clock_.now() + 10s,
                             std::move(items))
                  .admitted());
    for (auto& b : core_.dispatch()) {
      first.push_back(b);
    }
  }
  ASSERT_EQ(first.size(), 4u);
  clock_.advance(100ms);
  core_.on_timer();
  EXPECT_TRUE(core_.dispatch().empty()) << "past the p95, but none of the group answered";
  ok(first[0], 0.5);
  EXPECT_TRUE(core_.dispatch().empty()) << "1 of 4 answered: not the group's tail yet";
  ok(first[1], 0.5);
  // 2 of 4 answered, and each straggler would be the third: 3 of 4 reaches 0.75.
  auto hedges = core_.dispatch();
  ASSERT_EQ(hedges.size(), 2u);
  for (const auto& h : hedges) {
    EXPECT_TRUE(h.hedge);
  }
  EXPECT_NE(hedges[0].source, first[2].source);
  EXPECT_NE(hedges[1].source, first[3].source);
}

TEST_F(RemoteRoutingWithHedges, AFailedOriginalLeavesTheHedgeToAnswer) {
  core_.add_source(endpoint("a"));
  core_.add_source(endpoint("b"));
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(core_.submit(100 + static_cast<request_id>(i), 1, clock_.now() + 10s,
                             judge_items(1, "warm" + std::to_string(i) + "-"))
                  .admitted());
    for (auto& batch : core_.dispatch()) {
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok, 100ms), {ok_outcome(1.0)});
    }
  }
  core_.take_finished();
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1, "slow")).admitted());
  auto first = core_.dispatch().at(0);
  clock_.advance(100ms);
  core_.on_timer();
  auto hedge = core_.dispatch().at(0);
  fail(first, attempt_outcome_kind::server_error);
  EXPECT_TRUE(core_.dispatch().empty()) << "no retry while the hedge is out";
  EXPECT_TRUE(core_.take_finished().empty());
  ok(hedge, 0.6);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.6);
}

// ---- fallbacks, model calls and reward graphs -------------------------------------------

namespace {

/// An item whose reward falls back to `lexical`.
score_item falling_back(std::string text) {
  auto item = judge_item(std::move(text));
  item.fallback = "lexical";
  return item;
}

/// A fallback that scores every item 0.25 and remembers what it was asked.
struct recording_fallback {
  std::vector<std::string> asked;
  scheduler::fallback_fn fn() {
    return [this](const score_item& item) {
      asked.push_back(item.solution_str + "->" + item.fallback);
      return ok_outcome(0.25);
    };
  }
};

score_item nli_call(std::string premise) {
  score_item item;
  item.reward = "info_gain/nli";
  item.kind = "nli";
  item.capability = "chat"; // the test endpoints serve "chat"
  model_call call;
  call.prompt = std::move(premise);
  call.hypothesis = "h";
  item.call = std::make_shared<const model_call>(std::move(call));
  return item;
}

} // namespace

TEST_F(RemoteRouting, AnItemWhoseSourcesFailFallsBackFlaggedWithTheReason) {
  recording_fallback fallback;
  core_.set_fallback(fallback.fn());
  core_.add_source(endpoint("a"));
  std::vector<score_item> items{falling_back("x"), judge_item("y")};
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, std::move(items)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 2u);
  // A 401 is fatal: both items end at once, one of them by its fallback.
  for (const auto& b : batches) {
    core_.complete(b.id, outcome(attempt_outcome_kind::unauthorized), {});
  }
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& fell = done[0].results[0];
  EXPECT_EQ(fell.status, item_status::fallback);
  EXPECT_DOUBLE_EQ(fell.score, 0.25);
  EXPECT_EQ(fell.source, "lexical");
  EXPECT_EQ(fell.code, errc::none);
  EXPECT_NE(fell.fallback_reason.find("upstream_rejected"), std::string::npos)
    << fell.fallback_reason;
  EXPECT_EQ(done[0].results[1].status, item_status::failed) << "no fallback configured";
  EXPECT_EQ(fallback.asked, std::vector<std::string>{"x->lexical"});
  EXPECT_NE(metrics_text().find(R"(arbiter_items_total{reward="judge",status="fallback"} 1)"),
            std::string::npos)
    << metrics_text();
}

TEST_F(RemoteRouting, AnItemPastItsDeadlineFallsBackAtTheDeadline) {
  recording_fallback fallback;
  core_.set_fallback(fallback.fn());
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, {falling_back("slow")}).admitted());
  ASSERT_EQ(core_.dispatch().size(), 1u);
  clock_.advance(1s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::fallback);
  EXPECT_NE(done[0].results[0].fallback_reason.find("deadline_exceeded"), std::string::npos);
}

TEST_F(RemoteRouting, AFallbackThatFailsLeavesTheItemFailedWithBothReasons) {
  core_.set_fallback([](const score_item&) {
    item_outcome o;
    o.code = errc::reward_failed;
    o.error = "too long";
    return o;
  });
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, {falling_back("x")}).admitted());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "no source serves chat: the item ends at once";
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.status, item_status::failed);
  EXPECT_EQ(r.code, errc::no_eligible_source);
  EXPECT_NE(r.error.find("the fallback 'lexical' failed too: too long"), std::string::npos)
    << r.error;
}

TEST_F(RemoteRouting, ItemsFailingForTheirOwnReasonDoNotFallBack) {
  recording_fallback fallback;
  core_.set_fallback(fallback.fn());
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {falling_back("x")}).admitted());
  auto batches = core_.dispatch();
  item_outcome bad;
  bad.code = errc::reward_failed;
  bad.error = "judge reply has no REWARD score";
  core_.complete(batches[0].id, outcome(attempt_outcome_kind::ok), {bad});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::failed);
  EXPECT_TRUE(fallback.asked.empty());
}

TEST_F(RemoteRouting, InternalRequestsAreAdmittedWhileDraining) {
  core_.add_source(endpoint("a"));
  core_.begin_drain(clock_.now() + 5s);
  EXPECT_FALSE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  EXPECT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1), /*internal=*/true)
                .admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].priority, 1u);
  EXPECT_EQ(batches[0].deadline, clock_.now() + 10s);
}

TEST_F(RemoteRouting, ModelOutputsReachCoalescedFollowersAndTheCache) {
  core_.add_source(endpoint("a"));
  std::vector<score_item> items{nli_call("p"), nli_call("p"), nli_call("q")};
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, std::move(items)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 2u) << "the identical pair is sent once";
  for (const auto& b : batches) {
    auto output = std::make_shared<model_output>();
    output->entailment = b.items[0]->call->prompt == "p" ? 0.9 : 0.1;
    item_outcome o;
    o.output = output;
    core_.complete(b.id, outcome(attempt_outcome_kind::ok), {o});
  }
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].results[1].output);
  EXPECT_DOUBLE_EQ(done[0].results[0].output->entailment, 0.9);
  EXPECT_DOUBLE_EQ(done[0].results[1].output->entailment, 0.9);
  EXPECT_DOUBLE_EQ(done[0].results[2].output->entailment, 0.1);
  // Asked again: answered from the cache, output included.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, {nli_call("p")}).admitted());
  auto again = core_.take_finished();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].results[0].cached);
  ASSERT_TRUE(again[0].results[0].output);
  EXPECT_DOUBLE_EQ(again[0].results[0].output->entailment, 0.9);
  // A different hypothesis is a different call.
  auto other = nli_call("p");
  auto changed = *other.call;
  changed.hypothesis = "other";
  other.call = std::make_shared<const model_call>(changed);
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, {other}).admitted());
  EXPECT_TRUE(core_.take_finished().empty());
  EXPECT_EQ(core_.dispatch().size(), 1u);
}

TEST_F(RemoteRouting, AGraphOutcomeCarriesItsCallsProvenance) {
  source_spec graph;
  graph.name = "reward-graph";
  graph.capabilities = {"judge"};
  graph.max_batch_items = 16;
  graph.max_inflight = 100;
  graph.feeds["judge"] = {"chat"};
  core_.add_source(graph);
  auto item = judge_item("x");
  item.capability = "judge";
  item.step = "7";
  auto shared = item;
  shared.solution_str = "y";
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {item, shared}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  item_outcome o = ok_outcome(0.5);
  o.sources = {"judge-a"};
  o.attempts = 3;
  o.cached = true;
  o.run_ms = 100.0;
  o.queue_ms = 40.0; // its calls waited in their queues
  item_outcome followed = ok_outcome(0.25); // its calls followed another job's in flight
  followed.sources = {"judge-a"};
  followed.coalesced = true;
  core_.complete(batches[0].id, {o, followed});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.source, "judge-a") << "one source: named as the source";
  EXPECT_EQ(r.sources, std::vector<std::string>{"judge-a"});
  EXPECT_EQ(r.attempts, 3u);
  EXPECT_TRUE(r.cached);
  EXPECT_TRUE(done[0].results[1].coalesced);
  EXPECT_DOUBLE_EQ(r.queue_ms, 40.0) << "its calls' waits are its queue time";
  EXPECT_DOUBLE_EQ(r.run_ms, 60.0);
  // Its dispatch to the graph is not a queue wait of its own (its calls' are): the histogram
  // counted each judge item and each of its calls, half of them near 0.
  EXPECT_NE(metrics_text().find(R"(arbiter_queue_wait_seconds_count{priority="normal"} 0)"),
            std::string::npos)
    << metrics_text();
  auto account = core_.steps().find("7");
  ASSERT_TRUE(account);
  EXPECT_EQ(account->cache_hits, 2u) << "the cached item and the one whose calls were shared";
}

namespace {

source_spec embedder(nanoseconds batch_wait) {
  auto s = endpoint("emb");
  s.capabilities = {"embed"};
  s.max_batch_items = 4;
  s.batch_wait = batch_wait;
  return s;
}

std::vector<score_item> embed_items(size_t n, const std::string& prefix) {
  auto items = judge_items(n, prefix);
  for (auto& item : items) {
    item.kind = "embedding";
    item.capability = "embed";
  }
  return items;
}

} // namespace

TEST_F(RemoteRouting, AnIdleSourceGetsAPartialBatchAtOnce) {
  core_.add_source(embedder(5ms));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, embed_items(1, "a")).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].items.size(), 1u);
}

TEST_F(RemoteRouting, ASourceThatWaitsWhenIdleGathersConcurrentRequestsIntoOneCall) {
  // A local generator: its calls decode together, so the first of four concurrent one-call
  // requests must not start alone.
  auto spec = embedder(5ms);
  spec.wait_when_idle = true;
  core_.add_source(spec);
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, embed_items(1, "a")).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "idle, yet it waits for company";
  ASSERT_TRUE(core_.next_wakeup().has_value());
  EXPECT_EQ(*core_.next_wakeup(), clock_.now() + 5ms);
  clock_.advance(2ms);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, embed_items(1, "b")).admitted());
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, embed_items(1, "c")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  clock_.advance(3ms);
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].items.size(), 3u) << "the three requests share one call";
  // A full batch goes at once, window or not.
  ok(batches[0], 0.5);
  ASSERT_EQ(core_.take_finished().size(), 3u);
  ASSERT_TRUE(core_.submit(4, 1, clock_.now() + 10s, embed_items(4, "d")).admitted());
  auto full = core_.dispatch();
  ASSERT_EQ(full.size(), 1u);
  EXPECT_EQ(full[0].items.size(), 4u);
}

TEST_F(RemoteRouting, ABusySourceCollectsItemsThatTrickleInUntilTheWindowEnds) {
  core_.add_source(embedder(5ms));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, embed_items(1, "a")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  // Two single-item requests arrive 1 ms apart while the first call is out.
  clock_.advance(1ms);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, embed_items(1, "b")).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "waits for company";
  ASSERT_TRUE(core_.next_wakeup().has_value());
  EXPECT_EQ(*core_.next_wakeup(), clock_.now() + 5ms) << "the oldest item's window";
  clock_.advance(1ms);
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, embed_items(1, "c")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  clock_.advance(4ms);
  auto second = core_.dispatch();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].items.size(), 2u) << "both late items share one call";
  ok(first[0], 0.5);
  ok(second[0], 0.5);
  EXPECT_EQ(core_.take_finished().size(), 3u);
}

TEST_F(RemoteRouting, AFullBatchDoesNotWaitForTheWindow) {
  core_.add_source(embedder(5ms));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, embed_items(1, "a")).admitted());
  ASSERT_EQ(core_.dispatch().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, embed_items(5, "b")).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u) << "the full batch goes; the fifth item waits";
  EXPECT_EQ(batches[0].items.size(), 4u);
}

TEST_F(RemoteRouting, WithoutAWindowABusySourceGetsEveryItemAtOnce) {
  core_.add_source(embedder(0ms));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, embed_items(1, "a")).admitted());
  ASSERT_EQ(core_.dispatch().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, embed_items(1, "b")).admitted());
  EXPECT_EQ(core_.dispatch().size(), 1u);
}

TEST_F(RemoteRouting, ItemsFailAtOnceWhenEverySourceIsEjectedPastTheirDeadline) {
  core_.add_source(endpoint("a"));
  // Five failed calls in a row open a's breaker for 5 s.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(5, "x")).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 5u);
  for (auto& b : batches) {
    fail(b, attempt_outcome_kind::connect_failure);
  }
  EXPECT_TRUE(core_.dispatch().empty()) << "ejected";
  // A new item whose deadline comes before the breaker's half-open time fails now...
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 2s, judge_items(1, "short")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 2u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.code, errc::upstream_failed);
  EXPECT_NE(r.error.find("ejected (circuit breaker open)"), std::string::npos) << r.error;
  // It never got an attempt of its own, so it says why the source was ejected, as /info does.
  EXPECT_NE(r.error.find("; ejected: 'a' (" + core_.snapshot().sources.at(0).breaker_reason
                         + ")"),
            std::string::npos)
    << r.error;
  EXPECT_FALSE(core_.snapshot().sources.at(0).breaker_reason.empty());
  // ...while one that can outlive the ejection waits for the probe.
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 20s, judge_items(1, "long")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  for (const auto& d : core_.take_finished()) {
    EXPECT_NE(d.id, 3u);
  }
  clock_.advance(6s);
  core_.on_timer();
  auto probe = core_.dispatch();
  ASSERT_FALSE(probe.empty()) << "half-open: a probe goes out";
}

TEST_F(RemoteRouting, TheBreakerGaugeTurnsHalfOpenWhenTheEjectionEndsWithNoCallToSaySo) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 2s, judge_items(5, "x")).admitted());
  for (auto& b : core_.dispatch()) {
    fail(b, attempt_outcome_kind::connect_failure);
  }
  const std::string gauge = "arbiter_source_breaker_state{source=\"a\"} ";
  EXPECT_NE(metrics_text().find(gauge + "2"), std::string::npos) << metrics_text();
  core_.take_finished();
  // Idle (the items ended at their deadline): nothing is sent, yet the scheduler wakes when
  // the ejection ends, 5 s after it began, and says so.
  const auto opened = clock_.now();
  for (int wakeups = 0; wakeups < 100 && core_.next_wakeup(); ++wakeups) {
    clock_.advance(*core_.next_wakeup() - clock_.now());
    core_.on_timer();
    core_.dispatch(); // nothing: the items ended at their deadline
  }
  EXPECT_FALSE(core_.next_wakeup().has_value());
  EXPECT_EQ(clock_.now() - opened, 5s);
  EXPECT_NE(metrics_text().find(gauge + "1"), std::string::npos) << metrics_text();
}

TEST_F(RemoteRouting, ASourceThatGoesTakesItsSeriesWithItAndComesBackFromZero) {
  // Cluster nodes come and go under new names (pods): each name's series used to stay in
  // /metrics for good, the gauges frozen at their last values.
  auto node = core_.add_source(endpoint("pod-1/judge"));
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(4, "x")).admitted());
  for (auto& b : core_.dispatch()) {
    ok(b, 1.0);
  }
  core_.take_finished();
  EXPECT_NE(metrics_text().find("source=\"pod-1/judge\""), std::string::npos) << metrics_text();
  core_.remove_source(node, "node 'pod-1' left");
  const auto text = metrics_text();
  EXPECT_EQ(text.find("pod-1"), std::string::npos) << text;
  EXPECT_NE(text.find("arbiter_source_breaker_state{source=\"a\"}"), std::string::npos) << text;
  // Back under the same name: its series begin again.
  core_.add_source(endpoint("pod-1/judge"));
  EXPECT_NE(metrics_text().find("arbiter_source_concurrency_limit{source=\"pod-1/judge\"}"),
            std::string::npos);
}

TEST_F(RemoteRouting, ItemsQueuedBehindARetryAfterPastTheirDeadlineFailAtOnce) {
  // A limit nobody configured: the only source answers 429 with Retry-After 60 s, and the
  // request's deadline is 30 s away. Waiting cannot help any of its items.
  auto spec = endpoint("a");
  spec.max_inflight = 1;
  core_.add_source(std::move(spec));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 30s, judge_items(5, "x")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  auto limited = outcome(attempt_outcome_kind::rate_limited);
  limited.retry_after = 60s;
  core_.complete(first[0].id, limited, {});
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "all five end now, not at the deadline";
  for (size_t i = 1; i < 5; ++i) {
    const auto& r = done[0].results[i];
    EXPECT_EQ(r.code, errc::upstream_failed) << i;
    EXPECT_NE(r.error.find("is rate-limited (a 429's Retry-After, or the backoff after 429s) "
                           "for another"),
              std::string::npos) << r.error;
    // When a retry may succeed: the block's end (a pass-through route's Retry-After).
    EXPECT_EQ(r.retry_after_ms, 60000) << i;
  }
  // A request whose deadline outlives the Retry-After waits for it.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 90s, judge_items(1, "late")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  EXPECT_TRUE(core_.take_finished().empty());
}

TEST_F(RemoteRouting, AnItemPacedPastItsDeadlineFailsAtOnceSayingWhenToTryAgain) {
  // A provider that takes one call a minute (its headers said so, or its configuration): the
  // second item, due in 10 s, was held to its deadline to fail there as deadline_exceeded.
  core_.add_source(endpoint("a", 1, 60s));
  // Admitted while the bucket holds its one call, which a high-class item then takes.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1, "second")).admitted());
  ASSERT_TRUE(core_.submit(1, 0, clock_.now() + 30s, judge_items(1, "first")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].items[0]->solution_str, "first0");
  // While the first call is out, its answer's rate-limit headers may fill the bucket: the
  // second is not failed, but the pace of a call a minute cannot start it in time, and it had
  // not begun: it is refused, as admission refuses, to be sent again after the wait
  // (`refuse_doomed`).
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "it ends now, not at its deadline";
  EXPECT_TRUE(done[0].refused);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.code, errc::overloaded);
  EXPECT_NE(r.error.find("after its deadline"), std::string::npos) << r.error;
  EXPECT_GE(done[0].retry_after_s, 50);
  EXPECT_LE(done[0].retry_after_s, 60);
  core_.complete(first[0].id, outcome(attempt_outcome_kind::ok), {});
  ASSERT_EQ(core_.take_finished().size(), 1u);
  // With no call out and the bucket empty for a minute, one due sooner at the head of the
  // queue fails at once, saying when to try again (`fail_ejected`): a reward graph's call
  // (admission lets it in; the queue was looked at for refusals less than 100 ms ago).
  ASSERT_TRUE(core_.submit(4, 1, clock_.now() + 10s, judge_items(1, "fourth"), true).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].refused);
  const auto& failed = done[0].results[0];
  EXPECT_EQ(failed.code, errc::upstream_failed);
  EXPECT_NE(failed.error.find("is rate-limited (paced to its requests per minute) for another"),
            std::string::npos) << failed.error;
  EXPECT_GT(failed.retry_after_ms, 50000);
  EXPECT_LE(failed.retry_after_ms, 60000);
  // One whose deadline outlives the wait waits for its turn.
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 90s, judge_items(1, "third")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  EXPECT_TRUE(core_.take_finished().empty());
  clock_.advance(60s);
  EXPECT_EQ(core_.dispatch().size(), 1u);
}

TEST_F(RemoteRouting, ABusySourceBesideAnEjectedOneKeepsItemsWaiting) {
  core_.add_source(endpoint("down"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(1, "a")).admitted());
  fail(core_.dispatch().at(0), attempt_outcome_kind::unauthorized); // ejected for minutes
  ASSERT_EQ(core_.take_finished().size(), 1u);
  auto spec = endpoint("busy");
  spec.max_inflight = 1;
  core_.add_source(spec);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, judge_items(1, "b")).admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 1s, judge_items(1, "c")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  EXPECT_TRUE(core_.take_finished().empty()) << "the busy source will free a slot: item 3 waits";
  ok(running[0], 1.0);
  auto next = core_.dispatch();
  ASSERT_EQ(next.size(), 1u) << "item 3 runs on the freed slot";
}

TEST_F(RemoteRouting, RetriesFailAtOnceWhenTheEjectionOutlastsTheirDeadline) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 3s, judge_items(5, "x")).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 5u);
  for (auto& b : batches) {
    fail(b, attempt_outcome_kind::connect_failure); // the fifth opens the breaker for 5 s
  }
  clock_.advance(200ms); // past the retry backoff
  core_.on_timer();
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "answered well before the 3 s deadline";
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.code, errc::upstream_failed);
    EXPECT_NE(r.error.find("ejected (circuit breaker open)"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("last attempt"), std::string::npos) << r.error;
  }
}

TEST_F(RemoteRouting, TheOnlySourceDownIsProbedEveryFirstEjectionAndAWaitingItemIsScoredWhenBack) {
  // The only judge source down for 60 s: its failed probes doubled its ejection (5, 10, 20,
  // 40 s), and scoring came back 15.7 s after the provider did (bench/provider_outage.py).
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 2s, judge_items(5, "x")).admitted());
  for (auto& b : core_.dispatch()) {
    fail(b, attempt_outcome_kind::server_error); // the fifth opens a's breaker for 5 s
  }
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, judge_items(1, "waiting")).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "ejected";
  clock_.advance(5s);
  core_.on_timer();
  auto probe = core_.dispatch();
  ASSERT_EQ(probe.size(), 1u);
  fail(probe[0], attempt_outcome_kind::server_error); // still down, heard
  EXPECT_EQ(core_.snapshot().sources.at(0).breaker, breaker_state::open);
  clock_.advance(4900ms);
  core_.on_timer();
  EXPECT_TRUE(core_.dispatch().empty()) << "ejected again for 5 s";
  clock_.advance(100ms);
  core_.on_timer();
  probe = core_.dispatch();
  ASSERT_EQ(probe.size(), 1u) << "probed 5 s after the failed probe, not 10 s";
  ok(probe[0], 0.5);
  bool scored = false;
  for (const auto& d : core_.take_finished()) {
    if (d.id == 2) {
      ASSERT_EQ(d.results.size(), 1u);
      EXPECT_EQ(d.results[0].status, item_status::ok) << d.results[0].error;
      scored = true;
    }
  }
  EXPECT_TRUE(scored) << "the item that waited out the outage is scored once a is back";
  EXPECT_EQ(core_.snapshot().sources.at(0).breaker, breaker_state::closed);
}

// ---- issue 15: what trainers send, limits nobody configured, who is to blame ----------------

TEST_F(RemoteRouting, RateLimitsNeverUseUpAttemptsAndEndAnItemOnlyAtItsDeadline) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  // Five 429s in a row (max_attempts is 3): the item goes back to its queue each time.
  for (int i = 0; i < 5; ++i) {
    auto batches = core_.dispatch();
    ASSERT_EQ(batches.size(), 1u) << "429 number " << i;
    auto report = outcome(attempt_outcome_kind::rate_limited);
    report.retry_after = 1s;
    report.detail = "HTTP 429: slow down";
    core_.complete(batches[0].id, report, {});
    EXPECT_TRUE(core_.take_finished().empty()) << "not ended by 429 number " << i;
    EXPECT_TRUE(core_.dispatch().empty()) << "the endpoint is blocked for its Retry-After";
    clock_.advance(1s);
    core_.on_timer();
  }
  // The deadline ends it, saying why.
  clock_.advance(10s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.code, errc::deadline_exceeded);
  EXPECT_EQ(r.attempts, 5u);
  EXPECT_NE(r.error.find("held back by rate limits"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("HTTP 429: slow down"), std::string::npos) << r.error;
}

TEST_F(RemoteRouting, ARateLimitedItemKeepsItsPlaceInTheQueue) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(1, "first")).admitted());
  auto first = core_.dispatch().at(0);
  clock_.advance(10ms);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, judge_items(1, "second")).admitted());
  auto second = core_.dispatch().at(0);
  auto report = outcome(attempt_outcome_kind::rate_limited);
  report.retry_after = 1s;
  core_.complete(first.id, report, {});
  core_.complete(second.id, report, {});
  clock_.advance(1s);
  auto next = core_.dispatch();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].items[0]->solution_str, "first0") << "the earlier item goes first again";
}

TEST_F(RemoteRouting, ARetryAfterPastTheDeadlineEndsTheItemAtOnceSayingSo) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 5s, judge_items(1)).admitted());
  auto report = outcome(attempt_outcome_kind::rate_limited);
  report.retry_after = 30s;
  core_.complete(core_.dispatch().at(0).id, report, {});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].code, errc::upstream_failed);
  EXPECT_NE(done[0].results[0].error.find("rate limited until after the deadline"),
            std::string::npos)
    << done[0].results[0].error;
  EXPECT_EQ(done[0].results[0].retry_after_ms, 30000) << "a trainer route said Retry-After 1";
}

TEST_F(RemoteRouting, AnItemOutOfAttemptsSaysWhenTheProviderAskedToComeBack) {
  // helper-43: a provider's 503 with Retry-After: 2 reached the client as Retry-After: 1.
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(1)).admitted());
  auto report = outcome(attempt_outcome_kind::server_error);
  report.retry_after = 2s;
  auto done = core_.take_finished();
  for (int step = 0; step < 40 && done.empty(); ++step) {
    auto sent = core_.dispatch();
    if (sent.empty()) {
      clock_.advance(250ms);
      core_.on_timer();
    } else {
      core_.complete(sent.at(0).id, report, {});
    }
    done = core_.take_finished();
  }
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.code, errc::upstream_failed);
  EXPECT_NE(r.error.find("no attempts left"), std::string::npos) << r.error;
  EXPECT_GT(r.retry_after_ms, 1000);
  EXPECT_LE(r.retry_after_ms, 2000);
}

TEST_F(RemoteRouting, AnAuthFailureSendsTheItemToAnotherSource) {
  auto a = core_.add_source(endpoint("a"));
  auto b = core_.add_source(endpoint("b"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(2)).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 2u);
  for (auto& batch : first) {
    if (batch.source == a) {
      auto report = outcome(attempt_outcome_kind::unauthorized);
      report.detail = "HTTP 401: incorrect API key provided";
      core_.complete(batch.id, report, {});
    } else {
      ok(batch, 0.5);
    }
  }
  auto retried = core_.dispatch();
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_EQ(retried[0].source, b);
  ok(retried[0], 0.7);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::ok) << r.error;
    EXPECT_EQ(r.source, "b");
  }
  // The source with the wrong key is ejected, with the reason, for everyone.
  auto snap = core_.snapshot();
  EXPECT_EQ(snap.sources[0].breaker, breaker_state::open);
  EXPECT_NE(snap.sources[0].breaker_reason.find("401"), std::string::npos);
}

TEST_F(RemoteRouting, AnAuthFailureOnTheOnlySourceIsRejectedAtOnce) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(1)).admitted());
  fail(core_.dispatch().at(0), attempt_outcome_kind::unauthorized);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].code, errc::upstream_rejected);
  EXPECT_NE(done[0].results[0].error.find("no other source serves"), std::string::npos);
}

TEST_F(RemoteRouting, AReplyThatDoesNotFitTheRequestBlamesNeitherTheSourceNorTheItem) {
  auto a = core_.add_source(endpoint("a"));
  auto b = core_.add_source(endpoint("b"));
  // `a` answers every n = 2 call with one completion: its breaker stays closed, and the items
  // go to `b`.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, judge_items(8)).admitted());
  size_t answered_by_b = 0;
  for (int round = 0; round < 10 && !core_.idle(); ++round) {
    for (auto& batch : core_.dispatch()) {
      if (batch.source == a) {
        auto report = outcome(attempt_outcome_kind::unsupported);
        report.detail = "chat reply has 1 choices for n = 2";
        core_.complete(batch.id, report, {});
      } else {
        ok(batch, 0.5);
        ++answered_by_b;
      }
    }
  }
  EXPECT_EQ(answered_by_b, 8u);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::ok);
  }
  auto snap = core_.snapshot();
  EXPECT_EQ(snap.sources[0].breaker, breaker_state::closed) << "the source is healthy for other requests";
  (void)b;
  // With no other source the item is rejected with the reason, not retried.
  config::scheduler_config cfg;
  manual_time_source clock;
  metrics_fixture metrics{cfg};
  scheduler_core alone{cfg, clock, metrics.metrics, routing()};
  alone.add_source(endpoint("a"));
  ASSERT_TRUE(alone.submit(1, 1, clock.now() + 10s, judge_items(1)).admitted());
  auto report = outcome(attempt_outcome_kind::unsupported);
  report.detail = "chat reply has 1 choices for n = 2";
  alone.complete(alone.dispatch().at(0).id, report, {});
  auto rejected = alone.take_finished();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].results[0].code, errc::upstream_rejected);
  EXPECT_NE(rejected[0].results[0].error.find("1 choices for n = 2"), std::string::npos);
}

TEST_F(RemoteRouting, ACallThatNeverAnswersIsGivenUpAfterTheStragglerTimeout) {
  auto a = core_.add_source(endpoint("a"));
  auto b = core_.add_source(endpoint("b"));
  // Teach both sources a 100 ms p95 (five good answers each are enough).
  warm_up(10, 100ms);
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(1, "stuck")).admitted());
  auto stuck = core_.dispatch().at(0);
  // 4 × 100 ms is below the 2 s minimum: the timer is set for 2 s, not the source's 60 s.
  ASSERT_TRUE(core_.next_wakeup().has_value());
  EXPECT_EQ(*core_.next_wakeup(), clock_.now() + 2s);
  clock_.advance(2s);
  core_.on_timer();
  auto cancelled = core_.take_cancelled();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].id, stuck.id);
  auto retry = core_.dispatch();
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_NE(retry[0].source, stuck.source) << "retried elsewhere at once";
  EXPECT_TRUE(retry[0].source == a || retry[0].source == b);
  ok(retry[0], 0.3);
  // The abandoned call's late answer changes nothing.
  ok(stuck, 0.9);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.3);
  EXPECT_EQ(done[0].results[0].attempts, 2u);
  EXPECT_NE(metrics_text().find("outcome=\"timeout\""), std::string::npos);
}

TEST_F(RemoteRouting, TokenPacingCountsTheCallsPromptAndMaxTokensAndLearnsFromUsage) {
  // 60,000 TPM over one second: a 1,000-token bucket.
  auto spec = endpoint("a");
  spec.rate_limit->tokens_per_minute = 60000;
  spec.completion_tokens = 512;
  core_.add_source(spec);
  auto call_item = [](const std::string& prompt, uint32_t max_tokens) {
    score_item item;
    item.reward = "judge/chat";
    item.kind = "chat";
    item.capability = "chat";
    auto call = std::make_shared<model_call>();
    call->prompt = prompt;
    call->max_tokens = max_tokens;
    item.call = call;
    return item;
  };
  // 600 bytes of prompt ≈ 200 tokens estimated (+8 for the message) + 100 max_tokens = 308:
  // three fit the bucket, the fourth waits.
  std::vector<score_item> items;
  for (int i = 0; i < 4; ++i) {
    items.push_back(call_item(std::string(600, static_cast<char>('a' + i)), 100));
  }
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, std::move(items)).admitted());
  auto first = core_.dispatch();
  EXPECT_EQ(first.size(), 3u);
  // The provider reports 50 prompt tokens for each: a quarter of the estimate.
  for (auto& batch : first) {
    auto output = std::make_shared<model_output>();
    output->prompt_tokens = 50;
    item_outcome o = ok_outcome(0.5);
    o.output = output;
    core_.complete(batch.id, outcome(attempt_outcome_kind::ok), {o});
  }
  auto info = core_.snapshot().sources.at(0);
  EXPECT_NEAR(info.prompt_token_ratio, 0.24, 0.01); // 50 / 208
  EXPECT_EQ(info.tokens_per_minute, 60000.0);
  // The three answers settled their charges (208 each where the provider counted 50): the
  // bucket got 474 back, and the fourth call (now 50 + 100) goes at once, not after 74 ms.
  EXPECT_EQ(core_.dispatch().size(), 1u);
}

TEST_F(RemoteRouting, EmbeddingRewardItemsLearnTheirOwnPromptTokenRatio) {
  // One source serving chat and embeddings, paced by tokens. An embedding reward item's
  // estimate carries room for an instruction its /v1/embeddings call may not send, and the
  // call sends a batch's repeated texts once: its reported count (a part of the call's, from
  // the codec) teaches a ratio of its own. Shared with the chat calls, it would pull their
  // charge far below what the provider counts.
  auto spec = endpoint("a");
  spec.capabilities = {"chat", "embed"};
  spec.max_batch_items = 8;
  spec.rate_limit->tokens_per_minute = 600000;
  spec.completion_tokens = 16;
  core_.add_source(spec);
  std::vector<score_item> items;
  uint64_t estimated = 0;
  for (int i = 0; i < 4; ++i) {
    auto item = embedding_item("rollout " + std::to_string(i));
    estimated += estimate_prompt_tokens(item);
    items.push_back(std::move(item));
  }
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, std::move(items)).admitted());
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u);
  std::vector<item_outcome> outcomes;
  for (size_t i = 0; i < sent[0].items.size(); ++i) {
    auto output = std::make_shared<model_output>();
    output->prompt_tokens = 7;
    item_outcome o = ok_outcome(0.5);
    o.output = output;
    outcomes.push_back(o);
  }
  core_.complete(sent[0].id, outcome(attempt_outcome_kind::ok), outcomes);
  auto info = core_.snapshot().sources.at(0);
  EXPECT_DOUBLE_EQ(info.prompt_token_ratio, 1.0) << "the chat calls' ratio is untouched";
  EXPECT_NEAR(info.embedding_token_ratio, 28.0 / static_cast<double>(estimated), 1e-9);
  EXPECT_LT(info.embedding_token_ratio, 0.5);
  EXPECT_NE(metrics_text().find("arbiter_source_tokens_total{kind=\"prompt\",source=\"a\"} 28"),
            std::string::npos)
    << "the tokens are counted";
  EXPECT_EQ(estimate_of(*sent[0].items[0]), prompt_estimate::embedding_reward);
}

TEST_F(RemoteRouting, ACallThatCouldOnlyAnswerAfterItsDeadlineIsNotSent) {
  // A provider blocked its endpoint until the items' deadline; when it opened, 32 calls went
  // out in the last 80 ms, paid for, and none could answer in time.
  auto a = core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 600s, judge_items(20, "warm")).admitted());
  for (int round = 0; round < 100 && !core_.idle(); ++round) {
    for (auto& batch : core_.dispatch()) {
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok, 2s + batch.id * 1ms),
                     {ok_outcome(1.0)});
    }
  }
  ASSERT_TRUE(core_.idle());
  ASSERT_EQ(core_.take_finished().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(2, "late")).admitted());
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 30s, judge_items(1, "in time")).admitted());
  auto limited = outcome(attempt_outcome_kind::rate_limited);
  limited.retry_after = 8500ms; // the endpoint is blocked until 1.5 s before the deadline
  for (auto& batch : core_.dispatch()) {
    core_.complete(batch.id, limited, {});
  }
  EXPECT_TRUE(core_.dispatch().empty());
  clock_.advance(8500ms);
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u) << "only the item that can still be answered";
  EXPECT_EQ(sent[0].source, a);
  EXPECT_EQ(sent[0].items[0]->solution_str, "in time0");
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].results.size(), 2u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.code, errc::deadline_exceeded);
    EXPECT_EQ(r.attempts, 1u) << "the 429 only";
    EXPECT_NE(r.error.find("not sent: 1500 ms were left"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("in less than 2001 ms"), std::string::npos) << r.error;
  }
  EXPECT_NE(metrics_text().find("arbiter_hopeless_items_total 2"), std::string::npos);
}

TEST_F(RemoteRouting, ARetryThatCouldOnlyAnswerAfterItsDeadlineIsNotSent) {
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 600s, judge_items(20, "warm")).admitted());
  for (int round = 0; round < 100 && !core_.idle(); ++round) {
    for (auto& batch : core_.dispatch()) {
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok, 2s), {ok_outcome(1.0)});
    }
  }
  ASSERT_EQ(core_.take_finished().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, judge_items(1, "late")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  clock_.advance(9s); // the provider answers a 500 after 9 s: 1 s is left, its calls take 2
  fail(first[0], attempt_outcome_kind::server_error);
  clock_.advance(200ms);
  core_.on_timer();
  EXPECT_TRUE(core_.dispatch().empty());
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results[0];
  EXPECT_EQ(r.code, errc::deadline_exceeded);
  EXPECT_EQ(r.attempts, 1u);
  EXPECT_NE(r.error.find("not sent: 800 ms were left"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("; last attempt: "), std::string::npos) << r.error;
}

TEST_F(RemoteRouting, TheTailOfAQueueWaitsForAFastSourceRatherThanASlowOne) {
  auto fast = core_.add_source(endpoint("fast", 60));   // one a second, a burst of one
  auto slow = core_.add_source(endpoint("slow", 6000)); // 100 a second, but slow
  // Teach them their latencies with a long queue (which both serve): fast 100 ms, slow 5 s.
  ASSERT_TRUE(core_.submit(100, 1, clock_.now() + 600s, judge_items(60, "warm")).admitted());
  for (int round = 0; round < 1000 && !core_.idle(); ++round) {
    for (auto& batch : core_.dispatch()) {
      auto latency = batch.source == fast ? 100ms : 5000ms;
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok, latency), {ok_outcome(1.0)});
    }
    clock_.advance(100ms);
    core_.on_timer();
  }
  ASSERT_TRUE(core_.idle());
  core_.take_finished();
  clock_.advance(10s); // full buckets
  // Three items: the fast source answers them all within about 2.1 s (one now, then one a
  // second), sooner than the slow one would answer one: the slow one gets none.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(3, "tail")).admitted());
  size_t to_slow = 0;
  for (int round = 0; round < 100 && !core_.idle(); ++round) {
    for (auto& batch : core_.dispatch()) {
      to_slow += batch.source == slow ? 1 : 0;
      ok(batch, 0.5);
    }
    clock_.advance(50ms);
    core_.on_timer();
  }
  EXPECT_TRUE(core_.idle());
  EXPECT_EQ(to_slow, 0u);
  // A long queue uses both.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 600s, judge_items(200, "bulk")).admitted());
  to_slow = 0;
  for (auto& batch : core_.dispatch()) {
    to_slow += batch.source == slow ? 1 : 0;
  }
  EXPECT_GT(to_slow, 0u);
}

TEST_F(RemoteRouting, LowPriorityIsServedBesideAHighBacklogAndUrgentItemsGoFirst) {
  core_.add_source(endpoint("a", 60)); // one call a second, one at a time in the bucket
  ASSERT_TRUE(core_.submit(1, 0, clock_.now() + 600s, judge_items(40, "high")).admitted());
  ASSERT_TRUE(core_.submit(2, 2, clock_.now() + 600s, judge_items(2, "low")).admitted());
  auto order = answer_for(40);
  // high's weight is 16 to low's 1: low's first item goes within the first 17 calls.
  auto first_low = std::find(order.begin(), order.end(), "low") - order.begin();
  EXPECT_LE(first_low, 17) << "low is not starved";
  EXPECT_GE(first_low, 1) << "high goes first";
  // An item about to miss its deadline goes before the whole high backlog.
  ASSERT_TRUE(core_.submit(3, 0, clock_.now() + 600s, judge_items(20, "more")).admitted());
  clock_.advance(1s);
  ASSERT_TRUE(core_.submit(4, 2, clock_.now() + 150ms, judge_items(1, "urgent")).admitted());
  auto next = core_.dispatch();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].items[0]->solution_str, "urgent0");
}

TEST_F(RemoteRouting, ClassesShareASourceByTheirWeightsWhenTheirItemsAreOfOtherCapabilities) {
  // One provider serving two jobs: one scores with embeddings, the other with a judge. The
  // first capability listed took every call while it had work, whatever the weights: here
  // high's, so low waited out high's whole backlog (and with the weights the other way round,
  // the heavier class waited).
  auto spec = endpoint("a", 60); // one call a second, one at a time in the bucket
  spec.capabilities = {"chat", "embed"};
  core_.add_source(std::move(spec));
  auto embed = judge_items(40, "emb");
  for (auto& item : embed) {
    item.capability = "embed";
  }
  ASSERT_TRUE(core_.submit(1, 0, clock_.now() + 600s, std::move(embed)).admitted());
  ASSERT_TRUE(core_.submit(2, 2, clock_.now() + 600s, judge_items(40, "jud")).admitted());
  auto order = answer_for(34);
  ASSERT_EQ(order.size(), 34u);
  // high's weight is 16 to low's 1: low gets one call in 17, not none.
  EXPECT_EQ(std::count(order.begin(), order.end(), "jud"), 2) << ::testing::PrintToString(order);
  EXPECT_EQ(order.front(), "emb") << "high goes first";
}

namespace {

/// The reward graph as a source: judge items, run as chat calls.
source_spec judge_graph() {
  source_spec graph;
  graph.name = "reward-graph";
  graph.capabilities = {"judge"};
  graph.max_inflight = 1u << 16;
  graph.feeds["judge"] = {"chat"};
  return graph;
}

/// A judge reward's item (the graph's capability), as the trainer sends it.
score_item judge_reward_item(std::string text) {
  score_item judge;
  judge.reward = "judge";
  judge.kind = "judge";
  judge.capability = "judge";
  judge.solution_str = std::move(text);
  judge.ground_truth = {"y"};
  return judge;
}

} // namespace

TEST_F(RemoteRouting, AdmissionCountsTheCapacityOfTheSourcesUnderARewardGraph) {
  // Two chat endpoints of 60 calls a minute (1 a second) under a judge graph.
  core_.add_source(endpoint("a", 60));
  core_.add_source(endpoint("b", 60));
  core_.add_source(judge_graph());
  // 20 chat calls queued (what 20 judge items become): 10 s of work at 2 a second.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 600s, judge_items(20, "queued"), true)
                .admitted());
  core_.dispatch();
  auto judge = judge_reward_item("x");
  auto r = core_.submit(2, 1, clock_.now() + 5s, {judge});
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
  EXPECT_GE(r.retry_after, 4s);
  EXPECT_LE(r.retry_after, 6s);
  EXPECT_TRUE(core_.submit(3, 1, clock_.now() + 15s, {judge}).admitted());
}

TEST_F(RemoteRouting, AdmissionCountsGraphItemsWhoseCallsAreNotQueuedYet) {
  // helper-35: 60 single-item judge requests at once, 30 s deadlines, a chat endpoint of
  // about 0.6 calls a second: none was refused and 41 failed at their deadline. Each saw no
  // chat call waiting: the judge items admitted just before had not made theirs yet.
  core_.add_source(endpoint("a", 60));  // 1 call a second
  core_.add_source(judge_graph());
  size_t admitted = 0;
  size_t refused = 0;
  for (uint64_t id = 1; id <= 30; ++id) {
    auto r = core_.submit(id, 1, clock_.now() + 10s, {judge_reward_item("x" + std::to_string(id))});
    if (r.admitted()) {
      ++admitted;
      core_.dispatch();  // to the graph, which has not called yet
    } else {
      EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
      ++refused;
    }
  }
  // About 10 s of calls at 1 a second fit the deadline.
  EXPECT_GE(admitted, 8u);
  EXPECT_LE(admitted, 11u);
  EXPECT_EQ(admitted + refused, 30u);
}

TEST_F(RemoteRouting, AGraphItemIsAdmittedOnlyWhenItsCallCanEndBeforeTheCallsDeadline) {
  // helper-46: single-item judge requests at once against a paced endpoint: one more was
  // admitted than fit, its call's turn just before the item's deadline but after the call's
  // own (graph_call_margin earlier), and it failed unsent.
  core_.add_source(endpoint("a", 60)); // one call in the bucket, then one a second
  core_.add_source(judge_graph());
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 10s, {judge_reward_item("x" + std::to_string(id))})
                  .admitted());
    core_.dispatch();
  }
  // The fourth call's turn is 3 s away: the call would have to end 50 ms before 3.04 s.
  auto r = core_.submit(4, 1, clock_.now() + 3040ms, {judge_reward_item("boundary")});
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
  EXPECT_TRUE(core_.submit(5, 1, clock_.now() + 3100ms, {judge_reward_item("fits")}).admitted());
}

TEST_F(RemoteRouting, AShortDeadlinesGraphItemCountsAsMuchMarginAsItsCallsGet) {
  // The margin is a tenth of the time left when that is less (helper-50: a flat 50 ms refused
  // a judge item due in 30 ms as too large, though its call took 40 ms less than that).
  core_.add_source(endpoint("a", 6000));
  core_.add_source(judge_graph());
  EXPECT_TRUE(core_.submit(1, 1, clock_.now() + 30ms, {judge_reward_item("quick")}).admitted());
}

TEST_F(RemoteRouting, AGraphBatchWhoseFirstItemHasCalledStillCountsTheOthersAhead) {
  // helper-39: 200 single-item judge requests in one instant against a 120-call bucket: the
  // graph takes them in batches, and once a batch's first item had sent its calls the rest of
  // the batch counted for nothing, so more were admitted than the bucket and its refill hold.
  core_.add_source(endpoint("a", 60)); // one call in the bucket, then one a second
  auto graph = judge_graph();
  graph.max_batch_items = 16;
  core_.add_source(graph);
  for (uint64_t id = 1; id <= 5; ++id) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 10s, {judge_reward_item("x" + std::to_string(id))})
                  .admitted());
  }
  auto to_graph = core_.dispatch();
  ASSERT_EQ(to_graph.size(), 1u);
  ASSERT_EQ(to_graph[0].items.size(), 5u);
  // The first item's chat call arrives; the other four have yet to send theirs.
  ASSERT_TRUE(core_.submit(100, 1, clock_.now() + 10s, judge_items(1, "call"), true).admitted());
  core_.follow_caller(100, to_graph[0].id);
  // Six calls before this one's ends: about 5 s at one a second.
  auto r = core_.submit(6, 1, clock_.now() + 3s, {judge_reward_item("late")});
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
  EXPECT_TRUE(core_.submit(7, 1, clock_.now() + 6s, {judge_reward_item("in time")}).admitted());
}

TEST_F(RemoteRouting, AdmissionCountsARequestsTokensAtTheirOwnSize) {
  // helper-40: after short judge items, 60 of 2,000 words due in 10 s were admitted on the
  // short ones' cost per item (a minute's bucket held "300 items") and 30 failed at their
  // deadline; after long ones, 100 short items due in 10 s were refused 413 "no retry fits",
  // though they took 0.8 s.
  add_token_paced_source_after_short_items();
  // Each long one charged at its own size, about 2,070 tokens (a short one, about 70): 29 fit
  // the bucket at once, then one each 2 s, so 60 take about a minute.
  auto r = core_.submit(2, 1, clock_.now() + 10s, long_judge_items(60));
  EXPECT_EQ(r.decision, admission_decision::reject_too_large) << r.reason;
  r = core_.submit(3, 1, clock_.now() + 10s, long_judge_items(25));
  EXPECT_TRUE(r.admitted()) << r.reason;
  for (auto& batch : core_.dispatch()) {
    ok(batch, 0.5);
  }
  core_.take_finished();
  // Short ones after long ones: about 8,000 tokens are left, and these need about 14,000.
  r = core_.submit(4, 1, clock_.now() + 10s, judge_items(200, "short "));
  EXPECT_TRUE(r.admitted()) << r.reason;
}

TEST_F(RemoteRouting, AdmissionCountsTheQueuedItemsAheadAtTheirOwnSize) {
  // helper-40: single-item requests after a switch from short prompts to long ones. The long
  // items queued ahead were counted at what the short calls had cost, so 35 of 53 admitted
  // long items failed at their deadline.
  add_token_paced_source_after_short_items();
  // 40 long ones queued, about 2,070 tokens each: 60,000 at once, the other 22,800 at 1,000 a
  // second.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, long_judge_items(40, "a")).admitted());
  auto r = core_.submit(3, 1, clock_.now() + 10s, long_judge_items(1, "b"));
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
  EXPECT_GE(r.retry_after, 14s) << "about 24.9 s away against a 10 s deadline";
  EXPECT_LE(r.retry_after, 16s);
  // A short one is as far behind them.
  r = core_.submit(4, 1, clock_.now() + 10s, judge_items(1, "late "));
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
  // Once they are sent, the bucket's overdraft is what is left to wait for.
  for (auto& batch : core_.dispatch()) {
    ok(batch, 0.5);
  }
  core_.take_finished();
  clock_.advance(20s);
  r = core_.submit(5, 1, clock_.now() + 10s, long_judge_items(1, "c"));
  EXPECT_TRUE(r.admitted()) << r.reason;
}

TEST_F(RemoteRouting, AHerdRefusedInOneInstantIsToldToComeBackOneAfterAnother) {
  // helper-40: 64 single-item judge requests at once on a source of about one item a second,
  // each due in 8 s. Every refused one was told Retry-After: 1, and 9 in 10 of the retries
  // were refused again (the Python client gives up after 5).
  core_.add_source(endpoint("a", 60)); // one a second
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(1, "warm")).admitted());
  for (auto& batch : core_.dispatch()) {
    ok(batch, 0.5);
  }
  core_.take_finished();
  std::vector<std::chrono::seconds> told;
  request_id id = 10;
  for (int i = 0; i < 20; ++i) {
    auto r = core_.submit(id++, 1, clock_.now() + 3s, judge_items(1, "herd" + std::to_string(i)));
    if (!r.admitted()) {
      EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
      told.push_back(r.retry_after);
    }
  }
  ASSERT_GE(told.size(), 15u);
  for (size_t i = 1; i < told.size(); ++i) {
    EXPECT_GE(told[i], told[i - 1]) << i;
  }
  EXPECT_GE(told.back() - told.front(), std::chrono::seconds{told.size() - 2})
    << "one a second, as the source takes them";
  // Each comes back when told: the first ones fit then.
  clock_.advance(told.front());
  for (auto& batch : core_.dispatch()) {
    ok(batch, 0.5);
  }
  core_.take_finished();
  auto r = core_.submit(id++, 1, clock_.now() + 3s, judge_items(1, "back"));
  EXPECT_TRUE(r.admitted()) << r.reason;
}

TEST_F(RemoteRouting, ARequestRefusedOnThePaceOfCallsNotFullGoesAsAProbeWhenNothingWaits) {
  // helper-63's bl63.py: a source of 16 items a call, 1 s a call, answered single items only,
  // so admission counted 1 s an item, and 16-item requests due in 4 s were refused on an
  // idle server for as long as single items kept coming (and kept the source from going
  // stale), though one call takes 16.
  auto spec = endpoint("emb");
  spec.capabilities = {"embed"};
  spec.max_batch_items = 16;
  spec.max_inflight = 2;
  core_.add_source(spec);
  request_id id = 1;
  auto trickle = [&] {
    ASSERT_TRUE(core_.submit(id++, 1, clock_.now() + 30s, embed_items(1, "t")).admitted());
    for (auto& batch : core_.dispatch()) {
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok, 1s), {ok_outcome(1.0)});
    }
    core_.take_finished();
  };
  for (int i = 0; i < 3; ++i) {
    trickle();
  }
  // Two single items of the trickle are out, in both slots: they do not hold the probe back.
  std::vector<dispatch_batch> singles;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(core_.submit(id++, 1, clock_.now() + 30s,
                             embed_items(1, "out" + std::to_string(i) + "-"))
                  .admitted());
    auto out = core_.dispatch();
    ASSERT_EQ(out.size(), 1u);
    singles.push_back(out[0]);
  }
  auto probe = core_.submit(id++, 1, clock_.now() + 4s, embed_items(16, "probe"));
  ASSERT_TRUE(probe.admitted()) << probe.reason;
  // One at a time: another is refused while the first is queued, and while its call is out.
  EXPECT_FALSE(core_.submit(id++, 1, clock_.now() + 4s, embed_items(16, "queued")).admitted());
  core_.complete(singles[0].id, outcome(attempt_outcome_kind::ok, 1s), {ok_outcome(1.0)});
  auto calls = core_.dispatch();
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].items.size(), 16u);
  EXPECT_FALSE(core_.submit(id++, 1, clock_.now() + 4s, embed_items(16, "out")).admitted());
  // Its full call teaches the pace: 16 items in a second, two calls at once.
  core_.complete(singles[1].id, outcome(attempt_outcome_kind::ok, 1s), {ok_outcome(1.0)});
  std::vector<item_outcome> scores(16, ok_outcome(1.0));
  core_.complete(calls[0].id, outcome(attempt_outcome_kind::ok, 1s), scores);
  core_.take_finished();
  trickle();
  auto known = core_.submit(id++, 1, clock_.now() + 4s, embed_items(48, "known"));
  EXPECT_TRUE(known.admitted()) << known.reason;
  EXPECT_FALSE(core_.submit(id++, 1, clock_.now() + 4s, embed_items(160, "many")).admitted())
    << "past what the pace allows";
}

TEST_F(RemoteRouting, AGraphRequestThatWillTeachTheFullPaceHoldsProbesBack) {
  // A reward graph whose calls go to a batching NLI endpoint that answered single items only:
  // a graph request admitted on the cautious pace teaches the full one, so one refused on it
  // meanwhile waits rather than going as a second probe (the teacher mark asked the graph's
  // own capability, not the one under it).
  auto nli = endpoint("nli");
  nli.capabilities = {"nli"};
  nli.max_batch_items = 16;
  nli.max_inflight = 2;
  core_.add_source(nli);
  source_spec graph;
  graph.name = "reward-graph";
  graph.capabilities = {"ig"};
  graph.max_batch_items = 16;
  graph.max_inflight = 100;
  graph.feeds["ig"] = {"nli"};
  core_.add_source(graph);
  request_id id = 1;
  for (int i = 0; i < 3; ++i) {
    auto single = judge_items(1, "t" + std::to_string(i));
    single[0].capability = "nli";
    ASSERT_TRUE(core_.submit(id++, 1, clock_.now() + 30s, single).admitted());
    for (auto& batch : core_.dispatch()) {
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok, 1s), {ok_outcome(1.0)});
    }
    core_.take_finished();
  }
  auto graph_items = [](size_t n, const std::string& prefix) {
    auto items = judge_items(n, prefix);
    for (auto& item : items) {
      item.capability = "ig";
    }
    return items;
  };
  auto teacher = core_.submit(id++, 1, clock_.now() + 60s, graph_items(16, "teacher"));
  ASSERT_TRUE(teacher.admitted()) << teacher.reason;
  ASSERT_EQ(core_.dispatch().size(), 1u) << "the graph runs it, its calls not yet sent";
  EXPECT_FALSE(core_.submit(id++, 1, clock_.now() + 4s, graph_items(16, "probe")).admitted());
}

TEST_F(RemoteRouting, AnItemNoCallWentForAtItsDeadlineSaysItsSourceWasEjected) {
  // helper-41: with the only judge source ejected or being probed, items failed at their
  // deadline saying only that it had passed.
  core_.add_source(endpoint("a"));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 600s, judge_items(5, "fail")).admitted());
  for (int i = 0; i < 5; ++i) {
    for (auto& batch : core_.dispatch()) {
      fail(batch, attempt_outcome_kind::server_error);
    }
  }
  core_.take_finished();
  // Ejected for 5 s: an item due in 7 s waits for the probe, which a first item takes.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 7s, judge_items(1, "probe")).admitted());
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 7s, judge_items(1, "behind")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  clock_.advance(5s);
  auto probe = core_.dispatch();
  ASSERT_EQ(probe.size(), 1u);
  clock_.advance(2s);
  core_.on_timer();
  bool seen = false;
  for (const auto& done : core_.take_finished()) {
    for (const auto& r : done.results) {
      if (r.attempts == 0) {
        seen = true;
        EXPECT_EQ(r.code, errc::deadline_exceeded);
        EXPECT_NE(r.error.find("no call was sent: source 'a' was being probed after an "
                               "ejection (5 consecutive failures"),
                  std::string::npos)
          << r.error;
      }
    }
  }
  EXPECT_TRUE(seen) << "the item behind the probe";
}

TEST_F(RemoteRouting, ARequestTooSlowForItsDeadlineKeepsTheWholeGroupsThatFit) {
  // helper-58: 3,000 long texts too slow for their deadline all took the lexical fallback,
  // though 800 could have been embedded in time. Grouped items keep the groups that fit, in
  // the order they first appear, never a part of one; the others fall back.
  recording_fallback fallback;
  core_.set_fallback(fallback.fn());
  core_.add_source(endpoint("a", 60)); // one call at once, then one a second
  auto items = judge_items(10, "i");
  const char* groups[] = {"p0", "p0", "p1", "p0", "p1", "p1", "p2", "p1", "p2", "p3"};
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].fallback = "lexical";
    items[i].group = groups[i];
  }
  // 10 items take 9 s; 6 start within 5.4 s (6 s, a tenth to spare): p0 (3), not p1 (4 more),
  // p2 (2), p3 (1).
  auto r = core_.submit(1, 1, clock_.now() + 6s, items);
  ASSERT_TRUE(r.admitted()) << r.reason;
  EXPECT_EQ(fallback.asked,
            (std::vector<std::string>{"i2->lexical", "i4->lexical", "i5->lexical", "i7->lexical"}));
  std::vector<std::string> sent;
  for (int s = 0; s < 6; ++s) {
    for (auto& batch : core_.dispatch()) {
      sent.push_back(batch.items[0]->solution_str);
      core_.complete(batch.id, outcome(attempt_outcome_kind::ok), {ok_outcome(1.0)});
    }
    clock_.advance(1s);
  }
  EXPECT_EQ(sent, (std::vector<std::string>{"i0", "i1", "i3", "i6", "i8", "i9"}));
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& result = done[0].results[i];
    EXPECT_EQ(result.status, items[i].group == "p1" ? item_status::fallback : item_status::ok)
      << i;
  }
  EXPECT_NE(done[0].results[2].fallback_reason.find("groups that fit in time were kept"),
            std::string::npos)
    << done[0].results[2].fallback_reason;
  // Items without a group cannot be kept whole by group: all of them fall back, as before.
  fallback.asked.clear();
  auto loose = judge_items(10, "loose");
  for (auto& item : loose) {
    item.fallback = "lexical";
  }
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 5s, loose).admitted());
  EXPECT_EQ(fallback.asked.size(), 10u);
  EXPECT_TRUE(core_.dispatch().empty());
}

TEST_F(RemoteRouting, AdmissionCountsWhatTheBucketHoldsNow) {
  // helper-38: 600 requests a minute with a minute's burst, idle. 25 judge items due in 1.5 s
  // were refused ("expected 2402 ms", 10 a second) though the bucket sends them all at once;
  // 40 items with a fallback took it at admission (lexical scores instead of the judge's).
  core_.add_source(endpoint("a", 600, 60s));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1500ms, judge_items(25, "now")).admitted());
  // 600 in the bucket, then 10 a second: 725 items in 12.5 s.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 13s, judge_items(700, "bulk")).admitted());
  auto r = core_.submit(3, 1, clock_.now() + 5s, judge_items(1, "late"));
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable) << r.reason;
  EXPECT_EQ(r.retry_after, 8s) << "12.6 s away against a 5 s deadline, rounded up";
}

TEST_F(RemoteRouting, ItemsTooSlowForTheDeadlineTakeTheirFallbackInsteadOfRefusingTheRequest) {
  recording_fallback fallback;
  core_.set_fallback(fallback.fn());
  core_.add_source(endpoint("a", 60));
  core_.add_source("cpu", {"cpu"});
  core_.add_source(judge_graph());
  // 20 chat calls queued at 1 a second: a judge item is 20 s away.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 600s, judge_items(20, "queued"), true)
                .admitted());
  core_.dispatch();
  auto judge = judge_reward_item("x");
  judge.fallback = "lexical";
  score_item cpu;
  cpu.reward = "lexical";
  cpu.kind = "lexical";
  cpu.capability = "cpu";
  cpu.solution_str = "c";
  cpu.ground_truth = {"c"};
  // The judge falls back at once; the CPU item, in time, is queued as usual.
  auto r = core_.submit(2, 1, clock_.now() + 5s, {judge, cpu});
  ASSERT_TRUE(r.admitted()) << r.reason;
  EXPECT_EQ(fallback.asked, std::vector<std::string>{"x->lexical"});
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].items.size(), 1u);
  EXPECT_EQ(batches[0].items[0]->solution_str, "c");
  core_.complete(batches[0].id, outcome(attempt_outcome_kind::ok), {ok_outcome(1.0)});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& fell = done[0].results[0];
  EXPECT_EQ(fell.status, item_status::fallback);
  EXPECT_NE(fell.fallback_reason.find("overloaded: expected to be answered in"),
            std::string::npos)
    << fell.fallback_reason;
  EXPECT_EQ(done[0].results[1].status, item_status::ok);
  // Without a fallback on every such item, the request is refused as before.
  judge.fallback.clear();
  EXPECT_EQ(core_.submit(3, 1, clock_.now() + 5s, {judge, cpu}).decision,
            admission_decision::reject_deadline_unmeetable);
}

TEST_F(RemoteRoutingOnARetryBudget, RetriesPastTheBudgetYieldToFreshWorkAndGoWhenNoneWaits) {
  // A trainer sending one sample a request waits for its items before it sends more: holding
  // their retries for the budget's window while nothing else wanted the source cut an only
  // provider failing 40 % of calls to a few items a second (bench/flaky_source.py).
  auto spec = endpoint("a");
  spec.max_inflight = 3;
  core_.add_source(std::move(spec));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, judge_items(3, "old ")).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 3u);
  for (const auto& b : first) {
    fail(b, attempt_outcome_kind::server_error); // the budget takes one retry of the three
  }
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, judge_items(3, "new ")).admitted());
  // What goes now, answered at once: the first three letters of each call's item.
  auto answer_what_goes = [&] {
    std::multiset<std::string> sent;
    for (auto& b : core_.dispatch()) {
      sent.insert(b.items[0]->solution_str.substr(0, 3));
      ok(b, 0.5);
    }
    return sent;
  };
  clock_.advance(100ms); // the backoff
  core_.on_timer();
  EXPECT_EQ(answer_what_goes(), (std::multiset<std::string>{"old", "new", "new"}))
    << "fresh work waits: the retries past the budget wait for room";
  EXPECT_EQ(answer_what_goes(), (std::multiset<std::string>{"new"}));
  clock_.advance(1s); // a slice of the window: the budget is still spent
  core_.on_timer();
  EXPECT_EQ(answer_what_goes(), (std::multiset<std::string>{"old", "old"}))
    << "nothing else wants the source: the retries go, not 10 s later";
  size_t ok_items = 0;
  for (const auto& f : core_.take_finished()) {
    for (const auto& r : f.results) {
      ok_items += r.status == item_status::ok ? 1 : 0;
    }
  }
  EXPECT_EQ(ok_items, 6u);
}
