#include "scheduler/step_ledger.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;

namespace {

item_result ended(item_status status, errc code = errc::none, bool cached = false) {
  item_result r;
  r.status = status;
  r.code = code;
  r.cached = cached;
  r.queue_ms = 2.0;
  r.run_ms = 3.0;
  return r;
}

} // namespace

TEST(StepLedger, CountsItemsCallsTokensAndTroublesPerStepAndSource) {
  step_ledger ledger;
  ledger.call("s1", "a", false);
  ledger.call("s1", "a", true);
  ledger.call_ended("s1", "a", true, true, 10.0);
  ledger.retry("s1", "a");
  ledger.call_ended("s1", "a", false, false, 20.0);
  ledger.usage("s1", "a", 100, 7, 0.5);
  ledger.item_ended("s1", ended(item_status::ok));
  ledger.item_ended("s1", ended(item_status::ok, errc::none, true));
  ledger.item_ended("s1", ended(item_status::fallback));
  ledger.item_ended("s1", ended(item_status::failed, errc::deadline_exceeded));
  ledger.item_ended("s2", ended(item_status::ok));

  auto s1 = ledger.find("s1");
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->items(), 4u);
  EXPECT_EQ(s1->items_ok, 2u);
  EXPECT_EQ(s1->items_fallback, 1u);
  EXPECT_EQ(s1->items_failed, 1u);
  EXPECT_EQ(s1->cache_hits, 1u);
  EXPECT_EQ(s1->failures.at("deadline_exceeded"), 1u);
  EXPECT_DOUBLE_EQ(s1->queue_ms, 8.0);
  EXPECT_DOUBLE_EQ(s1->run_ms, 12.0);
  const auto& a = s1->sources.at("a");
  EXPECT_EQ(a.calls, 2u);
  EXPECT_EQ(a.hedges, 1u);
  EXPECT_EQ(a.rate_limited, 1u);
  EXPECT_EQ(a.failed_calls, 1u);
  EXPECT_EQ(a.retries, 1u);
  EXPECT_EQ(a.prompt_tokens, 100u);
  EXPECT_EQ(a.completion_tokens, 7u);
  EXPECT_DOUBLE_EQ(a.cost, 0.5);
  EXPECT_DOUBLE_EQ(a.run_ms, 30.0);
  EXPECT_EQ(ledger.find("s2")->items_ok, 1u);
  EXPECT_FALSE(ledger.find("s3"));
}

TEST(StepLedger, AnItemAnsweredByAnIdenticalOneInFlightIsACacheHitOfItsOwnStep) {
  // Step t's item followed step s's call: s counts the call, t the hit (before, t showed
  // nothing at all).
  step_ledger ledger;
  ledger.call("s", "a", false);
  ledger.call_ended("s", "a", false, false, 5.0);
  ledger.item_ended("s", ended(item_status::ok));
  auto follower = ended(item_status::ok);
  follower.coalesced = true;
  ledger.item_ended("t", follower);
  EXPECT_EQ(ledger.find("s")->cache_hits, 0u);
  EXPECT_EQ(ledger.find("t")->cache_hits, 1u);
  EXPECT_EQ(ledger.find("t")->items_ok, 1u);
  EXPECT_TRUE(ledger.find("t")->sources.empty());
}

TEST(StepLedger, KeepsTheMostRecentStepsInTheOrderTheyStarted) {
  step_ledger ledger{3};
  for (const char* step : {"1", "2", "3", "4"}) {
    ledger.item_ended(step, ended(item_status::ok));
  }
  ledger.item_ended("2", ended(item_status::ok)); // an old step's late item: no reordering
  auto recent = ledger.recent();
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].step, "2");
  EXPECT_EQ(recent[1].step, "3");
  EXPECT_EQ(recent[2].step, "4");
  EXPECT_FALSE(ledger.find("1")) << "the oldest is dropped";
  EXPECT_EQ(ledger.find("2")->items_ok, 2u);
}

TEST(StepLedger, AStepStillInUseIsKeptHoweverManyBeganAfterIt) {
  // helper-62: a long "eval" step was dropped after 256 newer steps began while its items
  // still came, and began again from zero (5 calls counted, 10 at the provider).
  step_ledger ledger{3};
  ledger.call("eval", "a", false);
  for (int i = 0; i < 10; ++i) {
    ledger.item_ended(std::to_string(i), ended(item_status::ok));
    ledger.call("eval", "a", false);
  }
  ASSERT_TRUE(ledger.find("eval"));
  EXPECT_EQ(ledger.find("eval")->sources.at("a").calls, 11u);
  auto recent = ledger.recent();
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].step, "eval") << "listed where it began";
  EXPECT_EQ(recent[1].step, "8");
  EXPECT_EQ(recent[2].step, "9");
}
