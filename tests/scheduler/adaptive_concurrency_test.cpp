#include "scheduler/adaptive_concurrency.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

adaptive_concurrency_config small_config() {
  adaptive_concurrency_config c;
  c.initial_limit = 4;
  c.min_limit = 2;
  c.max_limit = 8;
  c.backoff_ratio = 0.7;
  c.growth_tolerance = 1.5;
  c.blowup_tolerance = 3.0;
  return c;
}

/// Feeds `n` ok samples of `latency`, each ending `latency` after the last.
void feed_ok(adaptive_concurrency& ac, manual_time_source& clock, int n, nanoseconds latency) {
  for (int i = 0; i < n; ++i) {
    clock.advance(latency);
    ac.on_sample(latency, sample_kind::ok, clock.now());
  }
}

} // namespace

TEST(AdaptiveConcurrency, StartsAtTheInitialLimit) {
  adaptive_concurrency ac(small_config());
  EXPECT_EQ(ac.limit(), 4u);
  EXPECT_EQ(ac.baseline(), 0ns);
}

TEST(AdaptiveConcurrency, GrowsByOnePerWindowUnderGoodLatency) {
  manual_time_source clock;
  adaptive_concurrency ac(small_config());
  // The window is the current limit: 4 good samples for 4 → 5.
  feed_ok(ac, clock, 3, 100ms);
  EXPECT_EQ(ac.limit(), 4u);
  clock.advance(100ms);
  EXPECT_EQ(ac.on_sample(100ms, sample_kind::ok, clock.now()), limit_change::increased);
  EXPECT_EQ(ac.limit(), 5u);
  // Then 5 for 5 → 6.
  feed_ok(ac, clock, 4, 120ms);
  EXPECT_EQ(ac.limit(), 5u);
  feed_ok(ac, clock, 1, 140ms); // 1.4 × the 100 ms minimum: still good
  EXPECT_EQ(ac.limit(), 6u);
  EXPECT_EQ(ac.min_latency(), 100ms);
  EXPECT_EQ(ac.increases(), 2u);
}

TEST(AdaptiveConcurrency, FixedGrowthWindow) {
  manual_time_source clock;
  auto c = small_config();
  c.growth_window = 2;
  adaptive_concurrency ac(c);
  feed_ok(ac, clock, 6, 100ms);
  EXPECT_EQ(ac.limit(), 7u);
}

TEST(AdaptiveConcurrency, DoesNotGrowOnSlowLatency) {
  manual_time_source clock;
  adaptive_concurrency ac(small_config());
  feed_ok(ac, clock, 1, 100ms);
  // 200 ms is over 1.5 × 100 ms but under the 3× blow-up: hold.
  feed_ok(ac, clock, 50, 200ms);
  EXPECT_EQ(ac.limit(), 4u);
  EXPECT_EQ(ac.decreases(), 0u);
}

TEST(AdaptiveConcurrency, SlowSampleRestartsTheGrowthWindow) {
  manual_time_source clock;
  adaptive_concurrency ac(small_config());
  feed_ok(ac, clock, 3, 100ms);
  feed_ok(ac, clock, 1, 200ms);
  feed_ok(ac, clock, 3, 100ms);
  EXPECT_EQ(ac.limit(), 4u);
  feed_ok(ac, clock, 1, 100ms);
  EXPECT_EQ(ac.limit(), 5u);
}

TEST(AdaptiveConcurrency, CutsOnOverload) {
  manual_time_source clock;
  auto c = small_config();
  c.initial_limit = 8;
  adaptive_concurrency ac(c);
  clock.advance(1s);
  EXPECT_EQ(ac.on_sample(50ms, sample_kind::overloaded, clock.now()), limit_change::decreased);
  EXPECT_EQ(ac.limit(), 5u); // floor(8 × 0.7)
  EXPECT_EQ(ac.decreases(), 1u);
}

TEST(AdaptiveConcurrency, BurstOfOverloadsFromOneRoundCutsOnce) {
  manual_time_source clock;
  auto c = small_config();
  c.initial_limit = 8;
  adaptive_concurrency ac(c);
  clock.advance(1s);
  ac.on_sample(100ms, sample_kind::overloaded, clock.now());
  // These were sent before the cut (now − latency < the cut), under the old limit.
  clock.advance(10ms);
  EXPECT_EQ(ac.on_sample(100ms, sample_kind::overloaded, clock.now()), limit_change::unchanged);
  EXPECT_EQ(ac.on_sample(100ms, sample_kind::overloaded, clock.now()), limit_change::unchanged);
  EXPECT_EQ(ac.limit(), 5u);
  // One sent after the cut cuts again.
  clock.advance(200ms);
  EXPECT_EQ(ac.on_sample(100ms, sample_kind::overloaded, clock.now()), limit_change::decreased);
  EXPECT_EQ(ac.limit(), 3u); // floor(5 × 0.7)
}

TEST(AdaptiveConcurrency, TheStepBackToTheLimitLastCutTakesLonger) {
  // A provider that holds 4 calls in flight and answers the fifth 429 (Retry-After 1 s,
  // which holds the whole endpoint): probing 5 every round kept it at half its capacity.
  manual_time_source clock;
  auto c = small_config();
  c.initial_limit = 5;
  adaptive_concurrency ac(c);
  clock.advance(1s);
  ASSERT_EQ(ac.on_sample(50ms, sample_kind::overloaded, clock.now()), limit_change::decreased);
  ASSERT_EQ(ac.limit(), 3u);
  auto good_until_change = [&] {
    int samples = 0;
    while (ac.on_sample(50ms, sample_kind::ok, clock.now()) != limit_change::increased) {
      ++samples;
    }
    return samples + 1;
  };
  EXPECT_EQ(good_until_change(), 3) << "3 to 4: one window, as ever";
  EXPECT_EQ(ac.limit(), 4u);
  EXPECT_EQ(good_until_change(), 4 * 8) << "4 to 5, where it was refused: 8 windows";
  EXPECT_EQ(ac.limit(), 5u);
  EXPECT_EQ(good_until_change(), 5) << "past it (the provider took more): one window again";
  EXPECT_EQ(ac.limit(), 6u);
}

TEST(AdaptiveConcurrency, CutsOnLatencyBlowUp) {
  manual_time_source clock;
  auto c = small_config();
  c.initial_limit = 8;
  adaptive_concurrency ac(c);
  feed_ok(ac, clock, 1, 100ms);
  clock.advance(1s);
  EXPECT_EQ(ac.on_sample(301ms, sample_kind::ok, clock.now()), limit_change::decreased);
  EXPECT_EQ(ac.limit(), 5u);
}

TEST(AdaptiveConcurrency, ConfiguredTargetIsTheBaseline) {
  manual_time_source clock;
  auto c = small_config();
  c.target_latency = 1s;
  c.growth_window = 1;
  adaptive_concurrency ac(c);
  feed_ok(ac, clock, 1, 10ms); // far under the target: counts as good, no blow-up later
  EXPECT_EQ(ac.baseline(), 1s);
  EXPECT_EQ(ac.limit(), 5u);
  feed_ok(ac, clock, 1, 1400ms); // ≤ 1.5 s
  EXPECT_EQ(ac.limit(), 6u);
  feed_ok(ac, clock, 1, 3100ms); // > 3 s
  EXPECT_EQ(ac.limit(), 4u);
}

TEST(AdaptiveConcurrency, FailuresLeaveTheLimitAlone) {
  manual_time_source clock;
  adaptive_concurrency ac(small_config());
  for (int i = 0; i < 20; ++i) {
    clock.advance(1s);
    EXPECT_EQ(ac.on_sample(10s, sample_kind::failed, clock.now()), limit_change::unchanged);
  }
  EXPECT_EQ(ac.limit(), 4u);
  EXPECT_EQ(ac.min_latency(), 0ns);
}

TEST(AdaptiveConcurrency, StaysWithinBounds) {
  manual_time_source clock;
  adaptive_concurrency ac(small_config()); // [2, 8]
  feed_ok(ac, clock, 1000, 100ms);
  EXPECT_EQ(ac.limit(), 8u);
  for (int i = 0; i < 20; ++i) {
    clock.advance(1s);
    ac.on_sample(1ms, sample_kind::overloaded, clock.now());
  }
  EXPECT_EQ(ac.limit(), 2u);
  clock.advance(1s);
  EXPECT_EQ(ac.on_sample(1ms, sample_kind::overloaded, clock.now()), limit_change::unchanged);
  EXPECT_EQ(ac.limit(), 2u);
}

TEST(AdaptiveConcurrency, ResetBaselineRelearnsTheMinimum) {
  manual_time_source clock;
  adaptive_concurrency ac(small_config());
  feed_ok(ac, clock, 1, 100ms);
  ac.reset_baseline();
  feed_ok(ac, clock, 1, 500ms); // would be a blow-up against 100 ms
  EXPECT_EQ(ac.min_latency(), 500ms);
  EXPECT_EQ(ac.limit(), 4u);
  EXPECT_EQ(ac.decreases(), 0u);
}

TEST(AdaptiveConcurrency, OddConfigIsBroughtIntoRange) {
  adaptive_concurrency_config c;
  c.min_limit = 0;
  c.max_limit = 0;
  c.initial_limit = 10;
  c.backoff_ratio = 1.5;
  adaptive_concurrency ac(c);
  EXPECT_EQ(ac.config().min_limit, 1u);
  EXPECT_EQ(ac.config().max_limit, 1u);
  EXPECT_EQ(ac.limit(), 1u);
  EXPECT_LT(ac.config().backoff_ratio, 1.0);
  EXPECT_STREQ(to_string(sample_kind::overloaded), "overloaded");
}

TEST(AdaptiveConcurrency, SlowStartDoublesPerRoundUntilTheFirstCut) {
  adaptive_concurrency_config cfg;
  cfg.initial_limit = 1;
  cfg.max_limit = 64;
  cfg.slow_start = true;
  adaptive_concurrency limit{cfg};
  time_point now{std::chrono::hours{1}};
  // A round of good answers is `limit` of them: each adds one, so the limit doubles.
  for (uint32_t expected : {2u, 4u, 8u, 16u}) {
    auto round = limit.limit();
    for (uint32_t i = 0; i < round; ++i) {
      limit.on_sample(100ms, sample_kind::ok, now);
    }
    EXPECT_EQ(limit.limit(), expected);
  }
  EXPECT_TRUE(limit.in_slow_start());
  now += 1s;
  limit.on_sample(100ms, sample_kind::overloaded, now);
  EXPECT_EQ(limit.limit(), 11u); // 16 × 0.7
  EXPECT_FALSE(limit.in_slow_start());
  // Then one per round.
  for (uint32_t i = 0; i < 11; ++i) {
    limit.on_sample(100ms, sample_kind::ok, now);
  }
  EXPECT_EQ(limit.limit(), 12u);
}

TEST(AdaptiveConcurrency, OpeningUpEndsSlowStartAtTheMaximum) {
  adaptive_concurrency_config cfg;
  cfg.initial_limit = 1;
  cfg.max_limit = 64;
  cfg.slow_start = true;
  adaptive_concurrency limit{cfg};
  limit.open_up();
  EXPECT_EQ(limit.limit(), 64u);
  EXPECT_FALSE(limit.in_slow_start());
  // Only slow start opens up: a limit that was cut stays where AIMD put it.
  limit.on_sample(100ms, sample_kind::overloaded, time_point{std::chrono::hours{1}});
  limit.open_up();
  EXPECT_EQ(limit.limit(), 44u);
}

TEST(AdaptiveConcurrency, ACapDropsTheLimitAtOnceAndProbesAboveItRarely) {
  adaptive_concurrency_config cfg;
  cfg.initial_limit = 2;
  cfg.max_limit = 64;
  cfg.slow_start = true;
  cfg.regrowth_rounds = 8;
  adaptive_concurrency limit{cfg};
  limit.open_up();
  time_point now{std::chrono::hours{1}};
  // A burst past a cap of 4: each refusal finds fewer out, all within one round.
  for (uint32_t out : {63u, 40u, 4u, 9u}) {
    limit.cap_at(out, now);
  }
  EXPECT_EQ(limit.limit(), 4u) << "a later refusal with more out does not raise it";
  EXPECT_FALSE(limit.in_slow_start());
  EXPECT_EQ(limit.cap_at(0, now), limit_change::decreased);
  EXPECT_EQ(limit.limit(), cfg.min_limit) << "never below the minimum";
  limit = adaptive_concurrency{cfg};
  limit.open_up();
  limit.cap_at(4, now);
  // The step past the cap takes 8 rounds of 4 good answers, not one.
  int answers = 0;
  while (limit.limit() == 4u && answers < 100) {
    limit.on_sample(100ms, sample_kind::ok, now);
    ++answers;
  }
  EXPECT_EQ(answers, 32);
  EXPECT_EQ(limit.limit(), 5u);
}
