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
  EXPECT_EQ(reg.pick("cpu", 0).source, b);
  reg.acquire(b, 0, 1);
  reg.acquire(b, 0, 1);
  EXPECT_EQ(reg.pick("cpu", 0).source, a);
  reg.acquire(a, 0, 1);
  auto none = reg.pick("cpu", 0);
  EXPECT_FALSE(none.source.has_value()) << "every cpu source is at its limit";
  EXPECT_FALSE(none.retry_at.has_value()) << "busy sources free up on completion, not a timer";
  reg.release(b, ok_after(0ms), 1s);
  EXPECT_EQ(reg.pick("cpu", 0).source, b);
}

TEST(SourceRegistry, BreaksTiesByFewestDispatches) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(local("a", {"cpu"}, 1));
  auto b = reg.add(local("b", {"cpu"}, 1));
  EXPECT_EQ(reg.pick("cpu", 0).source, a);
  reg.acquire(a, 0, 1);
  reg.release(a, ok_after(0ms), 1s);
  EXPECT_EQ(reg.pick("cpu", 0).source, b);
}

TEST(SourceRegistry, KnowsWhatIsServed) {
  manual_time_source clock;
  source_registry reg{clock};
  EXPECT_FALSE(reg.serves("cpu"));
  auto a = reg.add(local("a", {"cpu", "embed"}, 1));
  EXPECT_TRUE(reg.serves("embed"));
  EXPECT_EQ(reg.count("cpu"), 1u);
  EXPECT_FALSE(reg.pick("nli", 0).source.has_value());
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
  EXPECT_EQ(reg.pick("chat", 0).source, fast);
  // Load counts: with 7 of 8 slots busy, the fast one is expected at 100 × (1 + 7/8) ms,
  // still sooner than the idle slow one.
  for (int i = 0; i < 7; ++i) {
    reg.acquire(fast, 0, 1);
  }
  EXPECT_EQ(reg.pick("chat", 0).source, fast);
  reg.acquire(fast, 0, 1);
  EXPECT_EQ(reg.pick("chat", 0).source, slow) << "the fast source is full";
}

TEST(SourceRegistry, PacesBeforeTheProviderSays429) {
  manual_time_source clock;
  source_registry reg{clock};
  // 60 RPM with a one-second burst: one request now, then one per second.
  auto a = reg.add(paced("a", 60, 1s));
  EXPECT_EQ(reg.pick("chat", 0).source, a);
  reg.acquire(a, 0, 1);
  auto wait = reg.pick("chat", 0);
  EXPECT_FALSE(wait.source.has_value());
  ASSERT_TRUE(wait.retry_at.has_value());
  EXPECT_EQ(wait.waiting_on, "requests");
  EXPECT_EQ(*wait.retry_at, clock.now() + 1s);
  clock.advance(1s);
  EXPECT_EQ(reg.pick("chat", 0).source, a);
}

TEST(SourceRegistry, HonoursRetryAfterAsOneBackoffForTheEndpoint) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 6000, 60s));
  reg.acquire(a, 0, 1);
  auto limited = failed(attempt_outcome_kind::rate_limited);
  limited.retry_after = 3s;
  reg.release(a, limited, 1s);
  auto wait = reg.pick("chat", 0);
  EXPECT_FALSE(wait.source.has_value()) << "every caller waits out the same Retry-After";
  EXPECT_EQ(wait.waiting_on, "backoff");
  EXPECT_EQ(*wait.retry_at, clock.now() + 3s);
  clock.advance(3s);
  EXPECT_EQ(reg.pick("chat", 0).source, a);
}

TEST(SourceRegistry, CorrectsPacingFromRateLimitHeaders) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 600, 60s));
  reg.acquire(a, 0, 1);
  auto r = ok_after(50ms);
  r.headers.remaining_requests = 0;
  reg.release(a, r, 1s);
  EXPECT_FALSE(reg.pick("chat", 0).source.has_value())
    << "the provider says none are left, whatever our bucket thought";
  clock.advance(100ms); // 600 RPM refills one request per 100 ms.
  EXPECT_EQ(reg.pick("chat", 0).source, a);
}

TEST(SourceRegistry, EjectsOnUnauthorizedAndSaysWhy) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 0, 60s));
  auto b = reg.add(paced("b", 0, 60s));
  reg.acquire(a, 0, 1);
  reg.release(a, failed(attempt_outcome_kind::unauthorized, "HTTP 401: bad key"), 30s);
  EXPECT_EQ(reg.describe(a).breaker, "open");
  EXPECT_EQ(reg.describe(a).breaker_reason, "HTTP 401: bad key");
  for (int i = 0; i < 3; ++i) {
    auto p = reg.pick("chat", 0);
    ASSERT_TRUE(p.source.has_value());
    EXPECT_EQ(*p.source, b);
    reg.acquire(b, 0, 1);
  }
  EXPECT_FALSE(reg.has_alternative("chat", b));
  clock.advance(30s);
  EXPECT_EQ(reg.describe(a).breaker, "half_open") << "the ejection is timed";
  EXPECT_TRUE(reg.has_alternative("chat", b));
}

TEST(SourceRegistry, BreakerOpensAfterConsecutiveFailuresAndClosesOnAProbeSuccess) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(paced("a", 0, 60s));
  for (int i = 0; i < 5; ++i) {
    reg.acquire(a, 0, 1);
    reg.release(a, failed(attempt_outcome_kind::server_error), 1s);
  }
  auto p = reg.pick("chat", 0);
  EXPECT_FALSE(p.source.has_value());
  EXPECT_EQ(p.waiting_on, "breaker");
  clock.advance(5s);
  EXPECT_EQ(reg.pick("chat", 0).source, a) << "half-open: one probe";
  reg.acquire(a, 0, 1);
  EXPECT_FALSE(reg.pick("chat", 0).source.has_value()) << "the probe slot is taken";
  reg.release(a, ok_after(20ms), 1s);
  EXPECT_EQ(reg.describe(a).breaker, "closed");
}

TEST(SourceRegistry, AvoidsTheSourceThatJustFailedWhenAnotherCanServe) {
  manual_time_source clock;
  source_registry reg{clock};
  auto a = reg.add(local("a", {"chat"}, 4));
  auto b = reg.add(local("b", {"chat"}, 4));
  EXPECT_EQ(reg.pick("chat", 0, a).source, b);
  EXPECT_EQ(reg.pick("chat", 0, b).source, a);
  reg.remove(b);
  EXPECT_EQ(reg.pick("chat", 0, a).source, a) << "no one else serves it: the same source";
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
