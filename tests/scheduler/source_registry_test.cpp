#include "scheduler/source_registry.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

source_spec local(std::string name, std::vector<std::string> caps, uint32_t max_inflight) {
  source_spec s;
  s.name = std::move(name);
  s.capabilities = std::move(caps);
  s.max_inflight = max_inflight;
  return s;
}

source_spec paced(std::string name, uint32_t rpm, nanoseconds burst) {
  source_spec s = local(std::move(name), {"chat"}, 64);
  s.remote = true;
  rate_limit_config rl;
  rl.requests_per_minute = rpm;
  rl.burst = burst;
  s.rate_limit = rl;
  s.breaker = circuit_breaker_config{};
  return s;
}

attempt_report ok_after(nanoseconds latency) {
  attempt_report r;
  r.latency = latency;
  return r;
}

attempt_report failed(attempt_outcome_kind kind, std::string detail = {}) {
  attempt_report r;
  r.kind = kind;
  r.latency = 10ms;
  r.detail = std::move(detail);
  return r;
}

} // namespace

TEST(SourceRegistry, PicksTheLeastLoadedSourceWithTheCapability) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(local("a", {"cpu"}, 2));
  auto b = reg.add(local("b", {"cpu"}, 2));
  reg.add(local("e", {"embed"}, 2));
  reg.acquire(a, 0, 1);
  EXPECT_EQ(reg.pick("cpu", {}).source, b);
  reg.acquire(b, 0, 1);
  reg.acquire(b, 0, 1);
  EXPECT_EQ(reg.pick("cpu", {}).source, a);
  reg.acquire(a, 0, 1);
  auto none = reg.pick("cpu", {});
  EXPECT_FALSE(none.source.has_value()) << "every cpu source is at its limit";
  EXPECT_FALSE(none.retry_at.has_value()) << "busy sources free up on completion, not a timer";
  reg.release(b, ok_after(0ms), 1s);
  EXPECT_EQ(reg.pick("cpu", {}).source, b);
}

TEST(SourceRegistry, BreaksTiesByFewestDispatches) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(local("a", {"cpu"}, 1));
  auto b = reg.add(local("b", {"cpu"}, 1));
  EXPECT_EQ(reg.pick("cpu", {}).source, a);
  reg.acquire(a, 0, 1);
  reg.release(a, ok_after(0ms), 1s);
  EXPECT_EQ(reg.pick("cpu", {}).source, b);
}

TEST(SourceRegistry, KnowsWhatIsServed) {
  manual_time_source clock;
  source_registry reg{clock};
  EXPECT_FALSE(reg.serves("cpu"));
  auto a = reg.add(local("a", {"cpu", "embed"}, 1));
  EXPECT_TRUE(reg.serves("embed"));
  EXPECT_EQ(reg.count("cpu"), 1u);
  EXPECT_FALSE(reg.pick("nli", {}).source.has_value());
  EXPECT_TRUE(reg.remove(a));
  EXPECT_FALSE(reg.remove(a));
  EXPECT_FALSE(reg.serves("cpu"));
}

TEST(SourceRegistry, RoutesToTheSourceExpectedToFinishFirst) {
  manual_time_source clock;
  source_registry reg{clock};
  auto slow = reg.add(local("slow", {"chat"}, 8));
  auto fast = reg.add(local("fast", {"chat"}, 8));
  reg.acquire(slow, 0, 1);
  reg.release(slow, ok_after(800ms), 1s);
  reg.acquire(fast, 0, 1);
  reg.release(fast, ok_after(100ms), 1s);
  EXPECT_EQ(reg.pick("chat", {}).source, fast);
  // Load counts: with 7 of 8 slots busy, the fast one is expected at 100 × (1 + 7/8) ms,
  // still sooner than the idle slow one.
  for (int i = 0; i < 7; ++i) {
    reg.acquire(fast, 0, 1);
  }
  EXPECT_EQ(reg.pick("chat", {}).source, fast);
  reg.acquire(fast, 0, 1);
  EXPECT_EQ(reg.pick("chat", {}).source, slow) << "the fast source is full";
}

TEST(SourceRegistry, PacesBeforeTheProviderSays429) {
  manual_time_source clock;
  source_registry reg{clock};
  // 60 RPM with a one-second burst: one request now, then one per second.
  auto a = reg.add(paced("a", 60, 1s));
  EXPECT_EQ(reg.pick("chat", {}).source, a);
  reg.acquire(a, 0, 1);
  auto wait = reg.pick("chat", {});
  EXPECT_FALSE(wait.source.has_value());
  ASSERT_TRUE(wait.retry_at.has_value());
  EXPECT_EQ(wait.waiting_on, wait_cause::requests);
  EXPECT_EQ(*wait.retry_at, clock.now() + 1s);
  clock.advance(1s);
  EXPECT_EQ(reg.pick("chat", {}).source, a);
}

TEST(SourceRegistry, HonoursRetryAfterAsOneBackoffForTheEndpoint) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 6000, 60s));
  reg.acquire(a, 0, 1);
  auto limited = failed(attempt_outcome_kind::rate_limited);
  limited.retry_after = 3s;
  reg.release(a, limited, 1s);
  auto wait = reg.pick("chat", {});
  EXPECT_FALSE(wait.source.has_value()) << "every caller waits out the same Retry-After";
  EXPECT_EQ(wait.waiting_on, wait_cause::backoff);
  EXPECT_EQ(*wait.retry_at, clock.now() + 3s);
  clock.advance(3s);
  EXPECT_EQ(reg.pick("chat", {}).source, a);
}

TEST(SourceRegistry, ARefusalPastACapOnCallsInFlightLowersTheLimitAndHoldsNothing) {
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 0, 60s);
  spec.adaptive = true;
  spec.concurrency.initial_limit = 2;
  spec.concurrency.slow_start = true;
  auto a = reg.add(spec);
  reg.acquire(a, 0, 1);
  auto answer = ok_after(300ms);
  answer.headers.limit_requests = 3000;
  answer.headers.remaining_requests = 40;
  reg.release(a, answer, 1s);
  ASSERT_EQ(reg.describe(a).max_inflight, 64u) << "its headers said its rate: slow start ends";
  for (int i = 0; i < 10; ++i) {
    reg.acquire(a, 0, 1);
  }
  // The endpoint takes 4 at once: the six past it come back 429 with room in its buckets.
  auto refused = failed(attempt_outcome_kind::rate_limited, "HTTP 429: too many concurrent");
  refused.retry_after = 1s;
  refused.headers.limit_requests = 3000;
  refused.headers.remaining_requests = 38;
  for (int i = 0; i < 6; ++i) {
    reg.release(a, refused, 1s);
    EXPECT_EQ(reg.describe(a).max_inflight, static_cast<uint32_t>(9 - i))
      << "each refusal: at most what is still out";
  }
  EXPECT_EQ(reg.describe(a).max_inflight, 4u);
  EXPECT_FALSE(reg.pick("chat", {}).source.has_value()) << "4 out, limit 4";
  reg.release(a, ok_after(300ms), 1s);
  EXPECT_EQ(reg.pick("chat", {}).source, a)
    << "a slot freed: no Retry-After holds the endpoint for a refusal past its cap";
}

TEST(SourceRegistry, A429WithoutRoomOrWithNothingElseOutHoldsTheEndpoint) {
  // 0: no requests left; 1: too few tokens; 2: nothing else out; 3: a call whose tokens were
  // not estimated (its limit unknown when sent: the first 429 of a tokens-per-minute limit,
  // helper-56); 4: a Retry-After of a minute (a daily quota's, per-minute room left).
  for (int which_case = 0; which_case < 5; ++which_case) {
    manual_time_source clock;
    source_registry reg{clock};
    auto spec = paced("a", 0, 60s);
    spec.adaptive = true;
    spec.concurrency.initial_limit = 8;
    auto a = reg.add(spec);
    reg.acquire(a, 0, 1);
    if (which_case != 2) {
      reg.acquire(a, 0, 1); // another call out
    }
    auto refused = failed(attempt_outcome_kind::rate_limited);
    refused.retry_after = which_case == 4 ? 60s : 2s;
    refused.headers.limit_requests = 600;
    refused.headers.limit_tokens = 100000;
    refused.headers.remaining_requests = which_case == 0 ? 0 : 5;
    refused.headers.remaining_tokens = which_case == 1 ? 1 : 50000;
    reg.release(a, refused, 1s, 1, 0, which_case == 3 ? 0 : 1000);
    auto wait = reg.pick("chat", {});
    EXPECT_FALSE(wait.source.has_value()) << "case " << which_case;
    EXPECT_EQ(wait.waiting_on, wait_cause::backoff) << "case " << which_case;
    EXPECT_GT(reg.describe(a).max_inflight, 1u) << "case " << which_case;
  }
}

TEST(SourceRegistry, CorrectsPacingFromRateLimitHeaders) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 600, 60s));
  reg.acquire(a, 0, 1);
  auto r = ok_after(50ms);
  r.headers.remaining_requests = 0;
  reg.release(a, r, 1s);
  EXPECT_FALSE(reg.pick("chat", {}).source.has_value())
    << "the provider says none are left, whatever our bucket thought";
  clock.advance(100ms); // 600 RPM refills one request per 100 ms.
  EXPECT_EQ(reg.pick("chat", {}).source, a);
}

TEST(SourceRegistry, EjectsOnUnauthorizedAndSaysWhy) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 0, 60s));
  auto b = reg.add(paced("b", 0, 60s));
  reg.acquire(a, 0, 1);
  reg.release(a, failed(attempt_outcome_kind::unauthorized, "HTTP 401: bad key"), 30s);
  EXPECT_EQ(reg.describe(a).breaker, breaker_state::open);
  EXPECT_EQ(reg.describe(a).breaker_reason, "HTTP 401: bad key");
  for (int i = 0; i < 3; ++i) {
    auto p = reg.pick("chat", {});
    ASSERT_TRUE(p.source.has_value());
    EXPECT_EQ(*p.source, b);
    reg.acquire(b, 0, 1);
  }
  EXPECT_FALSE(reg.has_alternative("chat", b));
  clock.advance(30s);
  EXPECT_EQ(reg.describe(a).breaker, breaker_state::half_open) << "the ejection is timed";
  EXPECT_TRUE(reg.has_alternative("chat", b));
  // Closed again, it says no reason (/info kept the old one, helper-33).
  reg.acquire(a, 0, 1);
  reg.release(a, ok_after(10ms), 30s);
  EXPECT_EQ(reg.describe(a).breaker, breaker_state::closed);
  EXPECT_EQ(reg.describe(a).breaker_reason, "");
}

TEST(SourceRegistry, BreakerOpensAfterConsecutiveFailuresAndClosesOnAProbeSuccess) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 0, 60s));
  for (int i = 0; i < 5; ++i) {
    reg.acquire(a, 0, 1);
    reg.release(a, failed(attempt_outcome_kind::server_error), 1s);
  }
  auto p = reg.pick("chat", {});
  EXPECT_FALSE(p.source.has_value());
  EXPECT_EQ(p.waiting_on, wait_cause::breaker);
  clock.advance(5s);
  EXPECT_EQ(reg.pick("chat", {}).source, a) << "half-open: one probe";
  reg.acquire(a, 0, 1);
  EXPECT_FALSE(reg.pick("chat", {}).source.has_value()) << "the probe slot is taken";
  reg.release(a, ok_after(20ms), 1s);
  EXPECT_EQ(reg.describe(a).breaker, breaker_state::closed);
}

TEST(SourceRegistry, TheOnlySourceOfACapabilityIsHeldToALongerStreak) {
  // Ejecting the last source of a capability stops all of its work: a streak of 5 after a
  // window of good answers is a degraded provider, not a failed one (helper-53).
  auto run = [](bool with_alternative) {
    manual_time_source clock;
    source_registry reg{clock};
    auto a = reg.add(paced("a", 0, 60s));
    if (with_alternative) {
      reg.add(paced("b", 0, 60s));
    }
    for (int i = 0; i < 40; ++i) {
      reg.acquire(a, 0, 1);
      reg.release(a, ok_after(20ms), 1s);
    }
    for (int i = 0; i < 5; ++i) {
      reg.acquire(a, 0, 1);
      reg.release(a, failed(attempt_outcome_kind::server_error, "HTTP 500"), 1s);
    }
    return reg.describe(a).breaker;
  };
  EXPECT_EQ(run(true), breaker_state::open) << "b takes a's work";
  EXPECT_EQ(run(false), breaker_state::closed) << "nobody else serves chat";
}

TEST(SourceRegistry, TheCallsOfASourceGoingAwayTeachNothingOfItsHealth) {
  // A node leaving cleanly failed the five calls its worker held: its source was logged as
  // ejected for "5 consecutive failures, the last: the worker stopped" (helper-67).
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 0, 60s));
  for (int i = 0; i < 5; ++i) {
    reg.acquire(a, 0, 1);
  }
  reg.retire(a);
  for (int i = 0; i < 5; ++i) {
    reg.release(a, failed(attempt_outcome_kind::connect_failure, "the worker stopped"), 1s);
  }
  EXPECT_EQ(reg.describe(a).breaker, breaker_state::closed);
  EXPECT_EQ(reg.describe(a).inflight, 0u) << "its slots are freed";
}

TEST(SourceRegistry, AvoidsTheSourceThatJustFailedWhenAnotherCanServe) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(local("a", {"chat"}, 4));
  auto b = reg.add(local("b", {"chat"}, 4));
  EXPECT_EQ(reg.pick("chat", {}, a).source, b);
  EXPECT_EQ(reg.pick("chat", {}, b).source, a);
  reg.remove(b);
  EXPECT_EQ(reg.pick("chat", {}, a).source, a) << "no one else serves it: the same source";
}

TEST(SourceRegistry, AdaptiveLimitShrinksOnOverload) {
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 0, 60s);
  spec.max_inflight = 10;
  spec.adaptive = true;
  spec.concurrency.initial_limit = 10;
  auto a = reg.add(spec);
  EXPECT_EQ(reg.describe(a).max_inflight, 10u);
  reg.acquire(a, 0, 1);
  clock.advance(20ms);
  reg.release(a, failed(attempt_outcome_kind::timeout), 1s);
  EXPECT_EQ(reg.describe(a).max_inflight, 7u) << "AIMD: × 0.7 on overload";
}

TEST(SourceRegistry, StragglerThresholdIsTheRecentP95) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(local("a", {"chat"}, 4));
  EXPECT_FALSE(reg.straggler_after(a).has_value());
  // The quantile is computed at the 20th sample, then refreshed every 8: at 28, 36, 44.
  for (int i = 1; i <= 44; ++i) {
    reg.acquire(a, 0, 1);
    reg.release(a, ok_after(std::chrono::milliseconds{i * 10}), 1s);
  }
  ASSERT_TRUE(reg.straggler_after(a).has_value());
  EXPECT_GE(*reg.straggler_after(a), 410ms);
  EXPECT_LE(*reg.straggler_after(a), 440ms);
}

TEST(SourceRegistry, AnItemLargerThanOneBurstGoesWhereABurstHoldsIt) {
  manual_time_source clock;
  source_registry reg{clock};
  auto small_spec = paced("small", 0, 1s);
  small_spec.rate_limit->tokens_per_minute = 6000; // 100 tokens a second
  auto big_spec = paced("big", 0, 1s);
  big_spec.rate_limit->tokens_per_minute = 60000; // 1,000 a second
  auto small = reg.add(small_spec);
  auto big = reg.add(big_spec);
  // The small source is less loaded and would win a tie, but 300 tokens never fit its bucket.
  reg.acquire(big, 0, 1);
  EXPECT_EQ(reg.pick("chat", {300}).source, big);
  EXPECT_EQ(reg.pick("chat", {50}).source, small);
  // With only the small source left, the large item is paced on the rate: it waits for a full
  // bucket and is sent then.
  reg.remove(big);
  reg.acquire(small, 60, 1);
  auto wait = reg.pick("chat", {300});
  ASSERT_FALSE(wait.source.has_value());
  EXPECT_EQ(wait.waiting_on, wait_cause::tokens);
  EXPECT_EQ(*wait.retry_at, clock.now() + 600ms);
  clock.advance(600ms);
  EXPECT_EQ(reg.pick("chat", {300}).source, small);
}

TEST(SourceRegistry, TokenDemandsAreScaledByWhatUsageTaught) {
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 0, 1s);
  spec.rate_limit->tokens_per_minute = 60000;
  spec.completion_tokens = 100;
  auto a = reg.add(spec);
  EXPECT_EQ(reg.tokens_for(a, {400}), 500u) << "prompt estimate + the source's max_tokens";
  score_item item;
  auto call = std::make_shared<model_call>();
  call->max_tokens = 10;
  call->n = 3;
  item.call = call;
  EXPECT_EQ(reg.tokens_for(a, {400, &item}), 430u) << "the call's own max_tokens × n";
  reg.observe_usage(a, 400, 100);
  EXPECT_EQ(reg.tokens_for(a, {400}), 200u) << "the provider counts a quarter of the estimate";
  EXPECT_DOUBLE_EQ(reg.describe(a).prompt_token_ratio, 0.25);
  // Sources that do not pace by tokens ask nothing.
  auto b = reg.add(paced("b", 600, 1s));
  EXPECT_EQ(reg.tokens_for(b, {400}), 0u);
}

TEST(SourceRegistry, ThePromptRatioWeighsEachCallByItsSize) {
  // Mixed traffic: long English prompts the estimate gets right, short LaTeX ones it counts
  // at half. The provider counts 1.1 times the estimate in all; the average of the per-call
  // ratios was 1.5, and charged a third more than the provider counted.
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 0, 1s);
  spec.rate_limit->tokens_per_minute = 600000;
  auto a = reg.add(spec);
  for (int i = 0; i < 50; ++i) {
    reg.observe_usage(a, 9000, 9000);
    reg.observe_usage(a, 1000, 2000);
  }
  EXPECT_NEAR(reg.describe(a).prompt_token_ratio, 1.1, 0.02);
}

TEST(SourceRegistry, AnAnswersUsageSettlesWhatItsCallWasCharged) {
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 0, 60s);
  spec.rate_limit->tokens_per_minute = 6000; // 100 a second, 6000 held
  spec.completion_tokens = 0;
  auto a = reg.add(spec);
  auto charged = reg.prompt_tokens_for(a, 4000);
  EXPECT_EQ(charged, 4000u);
  reg.acquire(a, charged, 1);
  EXPECT_DOUBLE_EQ(reg.token_allowance(a), 2000.0);
  reg.release(a, ok_after(500ms), 1s, 1, charged);
  reg.observe_usage(a, 4000, 1000, charged);
  EXPECT_DOUBLE_EQ(reg.token_allowance(a), 5000.0) << "the 3000 charged beyond the count";
  EXPECT_EQ(reg.prompt_tokens_for(a, 4000), 1000u) << "and later calls scaled by the count";
  reg.observe_usage(a, 1000, 900); // no charge named: learns, settles nothing
  EXPECT_DOUBLE_EQ(reg.token_allowance(a), 5000.0);
}

TEST(SourceRegistry, CapacityIsTheLeastOfConcurrencyAndPacing) {
  manual_time_source clock;
  source_registry reg{clock};
  auto one_per_call = [](source_spec s) {
    s.max_batch_items = 1;
    return s;
  };
  auto a = reg.add(one_per_call(paced("a", 600, 1s))); // 10 calls a second, one item each
  auto b = reg.add(one_per_call(paced("b", 0, 1s)));   // not paced
  EXPECT_EQ(reg.capacity("chat"), 10.0) << "b is not bounded by anything known yet";
  reg.acquire(b, 0, 1);
  reg.release(b, ok_after(500ms), 1s); // 64 slots at 0.5 s each: 128 a second
  EXPECT_DOUBLE_EQ(*reg.capacity("chat"), 10.0 + 128.0);
  EXPECT_FALSE(reg.capacity("embed").has_value());
  reg.acquire(a, 0, 1);
  reg.release(a, failed(attempt_outcome_kind::unauthorized, "HTTP 401"), 30s);
  EXPECT_DOUBLE_EQ(*reg.capacity("chat"), 128.0) << "an ejected source adds nothing";
}

TEST(SourceRegistry, AFullQueueDrainsAtTheTimePerItemOfFullCalls) {
  // A local model batching 64 items a call, one slot: a single item takes 25 ms, a full call
  // 200 ms (3 ms an item). A herd refused on a fresh server was told to come back at the
  // single item's pace, 8 times too late (helper-58: 1,500 one-item requests, 24 s against 4).
  manual_time_source clock;
  source_registry reg{clock};
  auto model = local("m", {"embed"}, 1);
  model.max_batch_items = 64;
  auto m = reg.add(model);
  reg.acquire(m, 0, 1);
  reg.release(m, ok_after(25ms), 1s, 1);
  EXPECT_DOUBLE_EQ(*reg.capacity("embed"), 40.0) << "what its calls have carried";
  EXPECT_DOUBLE_EQ(*reg.capacity("embed", /*full_calls=*/true), 32 * 40.0)
    << "no full call yet: half a batch in the single item's time, not its pace per item";
  reg.acquire(m, 0, 64);
  reg.release(m, ok_after(200ms), 1s, 64);
  EXPECT_DOUBLE_EQ(*reg.capacity("embed", true), 320.0) << "64 items in 200 ms";
  EXPECT_LT(*reg.capacity("embed"), 60.0) << "a mix of both calls, as before";

  // Calls of 10 items that drained the queue (a trickle) say nothing of a full call's pace;
  // calls cut by a limit while items waited (a TEI endpoint's input cap) do.
  source_registry reg2{clock};
  auto capped = reg2.add(model);
  for (int i = 0; i < 20; ++i) {
    reg2.acquire(capped, 0, 10);
    reg2.release(capped, ok_after(100ms), 1s, 10);
  }
  EXPECT_DOUBLE_EQ(*reg2.capacity("embed", true), 320.0) << "still at the soonest";
  reg2.acquire(capped, 0, 10);
  reg2.release(capped, ok_after(100ms), 1s, 10, 0, 0, 0, /*full=*/true);
  EXPECT_DOUBLE_EQ(*reg2.capacity("embed", true), 100.0) << "10 items in 100 ms";
}

TEST(SourceRegistry, AQueueWaitingForABatchingSourceStartsAtTheFullCallsPace) {
  // A remote TEI endpoint, two calls at once, 32 texts a call in 1 s whatever their number:
  // 16 items (a candidate and a reference each). On a fresh server a herd's first item went
  // alone: 200 items queued behind it were expected to start at its pace, 2 a second
  // (100 s), and the requests coming back were refused for their deadline with a
  // Retry-After of a minute (helper-60: 216 s against 31 s at the source's pace).
  manual_time_source clock;
  source_registry reg{clock};
  auto tei = local("tei", {"embed"}, 2);
  tei.max_batch_items = 32;
  auto t = reg.add(tei);
  reg.acquire(t, 0, 1);
  reg.release(t, ok_after(1s), 1s, 1);
  reg.acquire(t, 0, 32);
  reg.acquire(t, 0, 32); // both slots busy
  EXPECT_NEAR(*reg.seconds_to_start("embed", 200, false, nullptr, /*soonest=*/true), 200.0 / 32,
              1e-9)
    << "at the soonest: half a batch a call, each as long as the single item's";
  EXPECT_NEAR(*reg.seconds_to_start("embed", 200), 100.0, 1e-9)
    << "to admit work: at the single item's pace until a full call tells";
  EXPECT_NEAR(*reg.seconds_to_start("embed", 4), 2.0, 1e-9)
    << "a few items go in calls as small as lately: at 1 s an item";
  reg.release(t, ok_after(1s), 1s, 32);
  reg.release(t, ok_after(1s), 1s, 32);
  const double carried = 1.0 + 0.1 * 31 + 0.1 * (32 - 4.1); // items per call, smoothed
  EXPECT_NEAR(*reg.seconds_to_start("embed", 200), (200.0 - 2 * carried) / 64, 1e-9)
    << "learned from calls of 32 items: what the free slots take at once, then 64 a second";

  // Calls that never hold half a batch, cut by an input cap of 8 texts while items waited
  // (1 s each): their pace is the source's, 8 a second on two slots.
  source_registry capped{clock};
  auto c = capped.add(tei);
  capped.acquire(c, 0, 8);
  capped.release(c, ok_after(1s), 1s, 8, 0, 0, 0, /*full=*/true);
  capped.acquire(c, 0, 8);
  capped.acquire(c, 0, 8);
  EXPECT_NEAR(*capped.seconds_to_start("embed", 200), 200.0 / 16, 1e-9);
}

TEST(SourceRegistry, AtTheSoonestACallCappedInTextsHoldsWhatTheCapTakes) {
  // TEI takes 32 texts a call, and an item of 7 references sends 8: a call holds 4 of them.
  // Counted as half a batch (16), a probe of 32 such items was expected in 1 s, admitted,
  // and 4 of them failed at their deadline (bl63 row d: 8 calls, two at once, 4 s).
  manual_time_source clock;
  source_registry reg{clock};
  auto tei = local("tei", {"embed"}, 2);
  tei.max_batch_items = 32;
  tei.max_batch_inputs = 32;
  auto t = reg.add(tei);
  reg.acquire(t, 0, 1, 0, 8);
  reg.release(t, ok_after(1s), 1s, 1);
  EXPECT_NEAR(*reg.seconds_to_start("embed", 32, /*idle=*/true, nullptr, /*soonest=*/true),
              (32.0 - 2) / (2 * 4), 1e-9)
    << "two at once, then 4 items a call of 1 s on each slot";
  source_registry plain{clock};
  auto p = plain.add(tei);
  plain.acquire(p, 0, 1, 0, 2);
  plain.release(p, ok_after(1s), 1s, 1);
  EXPECT_NEAR(*plain.seconds_to_start("embed", 64, true, nullptr, true), (64.0 - 2) / (2 * 16),
              1e-9)
    << "items of one reference: half a batch, as before";
}

TEST(SourceRegistry, AFreeSlotTakesARequestsItemsInOneCall) {
  // A remote TEI endpoint, four calls at once, whose calls carried single items (a trickle):
  // 16 items of one request were counted one a call, three free slots taking 3 at once and
  // the rest at 1 s an item, and refused for a 4 s deadline though one call of 1 s took them.
  manual_time_source clock;
  source_registry reg{clock};
  auto tei = local("tei", {"embed"}, 4);
  tei.remote = true;
  tei.max_batch_items = 32;
  auto t = reg.add(tei);
  for (int i = 0; i < 3; ++i) {
    reg.acquire(t, 0, 1);
    reg.release(t, ok_after(1s), 1s, 1);
  }
  reg.acquire(t, 0, 1); // one single out
  source_registry::own_items own;
  own.count = 16;
  EXPECT_EQ(*reg.seconds_to_start("embed", 16, false, &own), 0.0) << "a free slot takes all 16";
  own.queued = 80; // queued ahead of it, in the queue at once too
  EXPECT_EQ(*reg.seconds_to_start("embed", 96, false, &own), 0.0)
    << "three free slots take three calls of 32 at once";
  own.queued = 104;
  EXPECT_GT(*reg.seconds_to_start("embed", 120, false, &own), 0.0) << "not four";
  // A local model's slots feed one worker, which runs its batches one after another.
  source_registry local_reg{clock};
  auto model = local("m", {"embed"}, 2);
  model.max_batch_items = 32;
  auto m = local_reg.add(model);
  local_reg.acquire(m, 0, 1);
  local_reg.release(m, ok_after(1s), 1s, 1);
  source_registry::own_items mine;
  mine.count = 16;
  EXPECT_GT(*local_reg.seconds_to_start("embed", 16, false, &mine), 0.0);
}

TEST(SourceRegistry, ARequestTheBucketHoldsTakesARequestsItemsInOneCall) {
  // An embeddings endpoint allowed 6 calls a minute, one at once, whose calls carried single
  // items (a trickle): the bucket's one call was counted one item, and 16 items of a request
  // 4.7 s away (15 more at 32 items a call, a call each 10 s), though that call takes them.
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("tei", 6, 10s);
  spec.capabilities = {"embed"};
  spec.max_batch_items = 32;
  auto t = reg.add(spec);
  reg.acquire(t, 0, 1);
  reg.release(t, ok_after(100ms), 1s, 1);
  clock.advance(10s); // the bucket holds one call again
  source_registry::own_items own;
  own.count = 16;
  EXPECT_EQ(*reg.seconds_to_start("embed", 16, false, &own), 0.0) << "one call takes 16";
  own.queued = 16; // queued ahead of it, in the queue at once too
  EXPECT_EQ(*reg.seconds_to_start("embed", 32, false, &own), 0.0) << "a call of 32";
  own.queued = 17;
  EXPECT_NEAR(*reg.seconds_to_start("embed", 33, false, &own), 1.0 / 3.2, 1e-9)
    << "the 33rd at the refill's 32 items a call";
  EXPECT_NEAR(*reg.seconds_to_start("embed", 16), 15.0 / 3.2, 1e-9)
    << "items of no request counted: as many as calls carried";
  reg.acquire(t, 0, 1);
  EXPECT_GT(*reg.seconds_to_start("embed", 16, false, &own), 0.0) << "an empty bucket holds none";
}

TEST(SourceRegistry, AModelThatWeighsWorkIsNeverTakenAtTheSoonestGuess) {
  // A CPU embedder's call takes time in proportion to its work: a guess of 32 items in the
  // time of one admitted a 256-item request to fail whole (helper-63). Its fitted line counts
  // at the soonest too.
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = local("cpu", {"embed"}, 1);
  spec.max_batch_items = 64;
  spec.max_input_tokens = 256;
  auto m = reg.add(spec);
  reg.acquire(m, 0, 1, 1000);
  reg.release(m, ok_after(50ms), 1s, 1, 0, 0, 1000);
  source_registry::own_items own;
  own.count = 64;
  own.work = 64 * 1000;
  auto cautious = reg.seconds_to_start("embed", 64, false, &own);
  auto soonest = reg.seconds_to_start("embed", 64, false, &own, /*soonest=*/true);
  ASSERT_TRUE(cautious && soonest);
  EXPECT_NEAR(*soonest, *cautious, 1e-9);
  EXPECT_NEAR(*cautious, 63 * 0.05, 1e-9) << "the first at once, then 50 ms each";
}

TEST(SourceRegistry, OneCallFarSlowerThanTheRestMovesThePaceLittle) {
  // A local model answering in 10 ms a call, then one call of 1 s (a text whose tokenizing
  // took most of it): taken whole, the pace fell 11 times; at most 4 times the pace learned,
  // it falls by 1.3 times, and a source that did slow down is learned call by call.
  manual_time_source clock;
  source_registry reg{clock};
  auto model = local("m", {"embed"}, 1);
  model.max_batch_items = 1;
  auto m = reg.add(model);
  reg.acquire(m, 0, 1);
  reg.release(m, ok_after(10ms), 1s, 1);
  EXPECT_DOUBLE_EQ(*reg.capacity("embed"), 100.0);
  reg.acquire(m, 0, 1);
  reg.release(m, ok_after(1s), 1s, 1);
  EXPECT_NEAR(*reg.capacity("embed"), 100.0 / 1.3, 1e-6);
  for (int i = 0; i < 20; ++i) {
    reg.acquire(m, 0, 1);
    reg.release(m, ok_after(1s), 1s, 1);
  }
  EXPECT_LT(*reg.capacity("embed"), 1.5) << "slow every time: learned";
}

TEST(SourceRegistry, SecondsToStartSpendWhatTheBucketHoldsThenThePace) {
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 60, 10s); // ten calls at once, then one a second
  spec.max_batch_items = 1;
  auto a = reg.add(spec);
  EXPECT_EQ(reg.seconds_to_start("chat", 10), 0.0) << "the burst goes at once";
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("chat", 15), 5.0);
  EXPECT_DOUBLE_EQ(*reg.capacity("chat"), 1.0) << "what it sustains is unchanged";
  // A 429 blocks it for 3 s and empties the bucket, which refills meanwhile.
  reg.acquire(a, 0, 1);
  auto limited = failed(attempt_outcome_kind::rate_limited);
  limited.retry_after = 3s;
  reg.release(a, limited, 1s);
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("chat", 1), 3.0);
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("chat", 5), 5.0) << "3 at the block's end, then 1/s";
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("chat", 15, /*idle=*/true), 5.0)
    << "a later try finds no block and a full bucket";
  // Slots: two workers at 1 s an item, both busy: the next starts as one frees.
  auto c = reg.add(local("c", {"nli"}, 2));
  reg.acquire(c, 0, 1);
  reg.release(c, ok_after(1s), 1s);
  EXPECT_EQ(reg.seconds_to_start("nli", 2), 0.0) << "both slots free";
  reg.acquire(c, 0, 1);
  reg.acquire(c, 0, 1);
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("nli", 1), 0.5);
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("nli", 4), 2.0);
  EXPECT_FALSE(reg.seconds_to_start("embed", 1).has_value()) << "nothing serves it";
  // A batching source's bucket holds as many items as its calls have lately carried: one a
  // call while items came one at a time (a herd of single-item requests), 32 once full.
  auto emb = paced("emb", 60, 10s); // ten calls at once, then one a second
  emb.capabilities = {"embed"};
  emb.max_batch_items = 32;
  auto e = reg.add(emb);
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("embed", 10), 0.0);
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("embed", 42), 1.0) << "then 32 items a second";
  for (int i = 0; i < 50; ++i) {
    reg.acquire(e, 0, 32);
    reg.release(e, ok_after(100ms), 1s, 32);
  }
  clock.advance(60s); // the bucket fills again
  EXPECT_DOUBLE_EQ(*reg.seconds_to_start("embed", 320), 0.0);
}

TEST(SourceRegistry, AModelsCallsAreFittedAsAFixedPartAndAPacePerUnitOfWork) {
  // A GPU embeds 64 short texts about as fast as 64 long ones: most of a small call is fixed.
  // Through zero, calls of 16 times the work were expected to take 16 times as long.
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = local("gpu", {"embed"}, 1);
  spec.max_batch_items = 64;
  spec.max_input_tokens = 256;
  auto g = reg.add(spec);
  auto call = [&](uint64_t work, nanoseconds took) {
    reg.acquire(g, 0, 64, work);
    reg.release(g, ok_after(took), 1s, 64, 0, 0, work);
  };
  auto latency_ms = [&](uint64_t work_each) {
    source_registry::own_items own;
    own.count = 64;
    own.work = 64 * work_each;
    return std::chrono::duration<double, std::milli>(reg.latency("embed", 64, &own)).count();
  };
  for (int i = 0; i < 5; ++i) {
    call(64 * 1000, 100ms);
  }
  EXPECT_NEAR(latency_ms(1000), 100.0, 1e-6);
  EXPECT_NEAR(latency_ms(500), 50.0, 1e-6) << "calls alike: the line goes through zero";
  for (int i = 0; i < 5; ++i) {
    call(64 * 16000, 400ms);
    call(64 * 1000, 100ms);
  }
  EXPECT_NEAR(latency_ms(1000), 100.0, 1e-6);
  EXPECT_NEAR(latency_ms(16000), 400.0, 1e-6) << "not 1,600 ms";
  EXPECT_NEAR(latency_ms(4000), 160.0, 1e-6) << "80 ms fixed, 20 ms per 64,000 units";
  // The time per item counts the fixed part once per call of as many items as calls carry.
  source_registry::own_items own;
  own.count = 640;
  own.work = 640 * 16000;
  EXPECT_NEAR(*reg.seconds_to_start("embed", 640, /*idle=*/true, &own), 9 * 0.4, 1e-6)
    << "the first call at once, nine more at 400 ms each";
}

TEST(SourceRegistry, SecondsToStartFollowsTheSlowerLinePastWhereTheyMeet) {
  // Slots turning over fast while the bucket runs dry: the slots bind until the lines meet,
  // then the bucket's refill. A rounding error at the meeting point took the slots' rate on
  // (a herd of 200 judge requests against a 120-call bucket had 13 % admitted in vain).
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 600, 60s); // 600 calls at once, then 10 a second
  spec.remote = false;              // no slow start: 64 slots
  spec.max_batch_items = 1;
  auto a = reg.add(spec);
  reg.acquire(a, 0, 1);
  reg.release(a, ok_after(100ms), 1s); // 64 slots at 0.1 s: 640 starts a second
  for (int i = 0; i < 64; ++i) {
    reg.acquire(a, 0, 1); // every slot busy; 535 calls left in the bucket
  }
  // Slots: 640 t; bucket: 535 + 10 t. They meet at 535 / 630 s; 545 items start at 1 s.
  EXPECT_NEAR(*reg.seconds_to_start("chat", 545), 1.0, 1e-9);
  EXPECT_NEAR(*reg.seconds_to_start("chat", 320), 0.5, 1e-9);
  // Wherever the meeting point falls (the bucket refilling), no answer is short of the count.
  for (int ms = 1; ms <= 400; ++ms) {
    clock.advance(1ms);
    double level = 535 + 0.01 * ms;
    double n = level + 1 + ms % 13;
    auto t = *reg.seconds_to_start("chat", n);
    ASSERT_GE(std::min(level + 10 * t, 640 * t), n - 1e-6) << ms << " ms later, " << n;
  }
}

TEST(SourceRegistry, AnEndpointThatSaysItsLimitsLeavesSlowStart) {
  manual_time_source clock;
  source_registry reg{clock};
  auto spec = paced("a", 0, 60s);
  spec.adaptive = true;
  spec.concurrency.initial_limit = 1;
  spec.concurrency.slow_start = true;
  auto a = reg.add(spec);
  EXPECT_EQ(reg.describe(a).max_inflight, 1u);
  EXPECT_TRUE(reg.describe(a).slow_start);
  reg.acquire(a, 0, 1);
  auto report = ok_after(100ms);
  report.headers.limit_requests = 600;
  report.headers.remaining_requests = 9;
  report.headers.reset_requests = 100ms;
  reg.release(a, report, 1s);
  auto info = reg.describe(a);
  EXPECT_FALSE(info.slow_start);
  EXPECT_EQ(info.max_inflight, 64u) << "pacing holds it to the limits it stated";
  EXPECT_DOUBLE_EQ(info.requests_per_minute, 600.0);
  EXPECT_DOUBLE_EQ(info.request_burst, 10.0);
}
