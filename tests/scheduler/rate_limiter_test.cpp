#include "scheduler/rate_limiter.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <string>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

rate_limit_config limits(uint32_t rpm, uint64_t tpm) {
  rate_limit_config cfg;
  cfg.requests_per_minute = rpm;
  cfg.tokens_per_minute = tpm;
  cfg.max_retry_after = 60s;
  cfg.backoff_base = 500ms;
  cfg.backoff_cap = 8s;
  return cfg;
}

/// A header lookup over a map of lower-case names.
header_lookup lookup_in(const std::map<std::string, std::string>& headers) {
  return [&headers](std::string_view name) -> std::optional<std::string_view> {
    auto it = headers.find(std::string{name});
    if (it == headers.end()) {
      return std::nullopt;
    }
    return std::string_view{it->second};
  };
}

/// Admits until the limiter says wait; returns how many were admitted.
int drain(rate_limiter& limiter, uint64_t tokens = 0) {
  int admitted = 0;
  while (limiter.try_acquire(tokens).admitted()) {
    ++admitted;
    if (admitted > 1'000'000) {
      break;
    }
  }
  return admitted;
}

} // namespace

TEST(RateLimiter, RefillsContinuouslyOverTime) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock}; // one request per second
  EXPECT_EQ(drain(limiter), 60);

  auto d = limiter.try_acquire();
  EXPECT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::requests);
  EXPECT_EQ(d.until, clock.now() + 1s);

  clock.advance(500ms);
  d = limiter.try_acquire();
  EXPECT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.until, clock.now() + 500ms);
  EXPECT_NEAR(limiter.available_requests(), 0.5, 1e-9);

  clock.advance(500ms);
  EXPECT_TRUE(limiter.try_acquire().admitted());
  EXPECT_FALSE(limiter.try_acquire().admitted());

  clock.advance(5s);
  EXPECT_EQ(drain(limiter), 5);
}

TEST(RateLimiter, RefillStopsAtTheLimit) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  EXPECT_EQ(drain(limiter), 60);
  clock.advance(10min);
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 60.0);
  EXPECT_EQ(drain(limiter), 60);
}

TEST(RateLimiter, TokenBucketBlocksBigRequestsWithoutTakingAnything) {
  manual_time_source clock;
  rate_limiter limiter{limits(0, 6000), clock}; // 100 tokens per second
  EXPECT_TRUE(limiter.try_acquire(5000).admitted());

  auto d = limiter.try_acquire(2000);
  EXPECT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::tokens);
  EXPECT_EQ(d.until, clock.now() + 10s); // 1000 missing at 100/s
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), 1000.0);

  // A smaller request still fits now.
  EXPECT_TRUE(limiter.try_acquire(1000).admitted());
  EXPECT_FALSE(limiter.try_acquire(1).admitted());

  clock.advance(20s);
  EXPECT_TRUE(limiter.try_acquire(2000).admitted());
}

TEST(RateLimiter, TokensGivenBackForARefusedCallCanBeSpentAgainUpToAFullBucket) {
  manual_time_source clock;
  rate_limiter limiter{limits(0, 6000), clock}; // 100 tokens per second, 6000 held
  limiter.take(10000);                            // a call past the whole limit overdraws
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), -4000.0);
  EXPECT_FALSE(limiter.try_acquire(100).admitted()) << "100 s of nothing after it";
  limiter.give_back(10000);                       // the endpoint refused it: it used none
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), 6000.0) << "not past a full bucket";
  EXPECT_TRUE(limiter.try_acquire(100).admitted());
}

TEST(RateLimiter, ACallsChargeIsSettledAgainstWhatTheEndpointCounted) {
  manual_time_source clock;
  rate_limiter limiter{limits(0, 6000), clock}; // 100 tokens per second, 6000 held
  EXPECT_TRUE(limiter.try_acquire(5000).admitted());
  limiter.settle(5000, 3000); // charged 5000, the answer's usage says 3000
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), 3000.0);
  limiter.settle(1000, 6000); // charged short: the rest is taken, below zero if need be
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), -2000.0);
  EXPECT_FALSE(limiter.try_acquire(1).admitted());
  limiter.settle(20000, 0);
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), 6000.0) << "not past a full bucket";
}

TEST(RateLimiter, A429EmptiesTheBucketsThatThoughtTheyHadRoom) {
  // An endpoint that sends no headers: settled to its exact counts, the buckets ran a fraction
  // of a token ahead of it, and every call was refused once.
  manual_time_source clock;
  rate_limiter limiter{limits(600, 6000), clock};
  EXPECT_TRUE(limiter.try_acquire(300).admitted());
  limiter.give_back(300); // refused: it counted none of it
  limiter.on_rate_limited(100ms);
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), 0.0);
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 0.0);
  clock.advance(100ms); // the Retry-After has passed, but the tokens take 3 s to come
  EXPECT_FALSE(limiter.try_acquire(300).admitted());
  clock.advance(2900ms);
  EXPECT_TRUE(limiter.try_acquire(300).admitted());
  // An endpoint that says what remains is believed instead: its 429 leaves the level to them.
  rate_limiter told{limits(600, 6000), clock};
  std::map<std::string, std::string> headers{{"x-ratelimit-remaining-tokens", "5000"}};
  told.on_headers(parse_rate_limit_headers(lookup_in(headers)));
  told.on_rate_limited(100ms);
  EXPECT_DOUBLE_EQ(told.available_tokens(), 5000.0);
  EXPECT_DOUBLE_EQ(told.available_requests(), 0.0) << "requests remaining were never said";
}

TEST(RateLimiter, RequestsLargerThanTheTokenLimitAreRejected) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 6000), clock};
  auto d = limiter.try_acquire(6001);
  EXPECT_EQ(d.kind, acquire_decision_kind::reject_too_large);
  EXPECT_FALSE(d.admitted());
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 60.0);
  EXPECT_TRUE(limiter.try_acquire(6000).admitted());
}

TEST(RateLimiter, WaitsForTheLaterOfBothBuckets) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 600), clock}; // 1 request/s, 10 tokens/s
  EXPECT_TRUE(limiter.try_acquire(600).admitted());
  EXPECT_EQ(drain(limiter), 59);
  auto d = limiter.try_acquire(50);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::tokens);
  EXPECT_EQ(d.until, clock.now() + 5s);
  d = limiter.try_acquire(5);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::requests);
  EXPECT_EQ(d.until, clock.now() + 1s);
}

TEST(RateLimiter, HeaderCorrectionLowersRemaining) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 6000), clock};
  rate_limit_headers h;
  h.remaining_requests = 0;
  h.remaining_tokens = 3000;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.available_tokens(), 3000.0);
  auto d = limiter.try_acquire(10);
  EXPECT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::requests);
  EXPECT_EQ(d.until, clock.now() + 1s);
}

TEST(RateLimiter, HeadersNeverRaiseTheLevel) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(limiter.try_acquire().admitted());
  }
  rate_limit_headers h;
  h.remaining_requests = 59;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 10.0);
}

TEST(RateLimiter, ResetLaterThanOurRefillLowersTheLevel) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  rate_limit_headers h;
  h.reset_requests = 30s; // full again in 30 s: 30 requests are used up
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 30.0);
  h.reset_requests = 6min; // a window longer than ours: empty
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 0.0);
}

TEST(RateLimiter, ReportedLimitLowersButNeverRaisesTheCapacity) {
  manual_time_source clock;
  rate_limiter limiter{limits(600, 0), clock};
  rate_limit_headers h;
  h.limit_requests = 60;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.available_requests(), 60.0);
  clock.advance(10min);
  EXPECT_EQ(drain(limiter), 60);

  h.limit_requests = 6000;
  limiter.on_headers(h);
  clock.advance(10min);
  EXPECT_EQ(drain(limiter), 600);
}

TEST(RateLimiter, ParsesRateLimitHeaders) {
  std::map<std::string, std::string> headers{
    {"x-ratelimit-limit-requests", "60"},
    {"x-ratelimit-limit-tokens", "150000"},
    {"x-ratelimit-remaining-requests", "59"},
    {"x-ratelimit-remaining-tokens", "-1"}, // Azure
    {"x-ratelimit-reset-requests", "1s"},
    {"x-ratelimit-reset-tokens", "6m0s"},
  };
  auto h = parse_rate_limit_headers(lookup_in(headers));
  EXPECT_EQ(h.limit_requests, std::optional<uint64_t>{60});
  EXPECT_EQ(h.limit_tokens, std::optional<uint64_t>{150000});
  EXPECT_EQ(h.remaining_requests, std::optional<uint64_t>{59});
  EXPECT_FALSE(h.remaining_tokens.has_value());
  EXPECT_EQ(h.reset_requests, std::optional<nanoseconds>{1s});
  EXPECT_EQ(h.reset_tokens, std::optional<nanoseconds>{6min});

  auto none = parse_rate_limit_headers(lookup_in({}));
  EXPECT_FALSE(none.limit_requests || none.limit_tokens || none.remaining_requests
               || none.remaining_tokens || none.reset_requests || none.reset_tokens);
}

TEST(RateLimiter, ParsesResetDurations) {
  struct row {
    const char* text;
    std::optional<nanoseconds> expected;
  };
  const row table[] = {
    {"1s", 1s},
    {"6m0s", 6min},
    {"20ms", 20ms},
    {"0.5s", 500ms},
    {"1h2m3.5s", 1h + 2min + 3500ms},
    {"12ms", 12ms},
    {"1.5m", 90s},
    {"250us", 250us},
    {"250\xC2\xB5s", 250us},
    {"100ns", 100ns},
    {"2", 2s},
    {" 3s ", 3s},
    {"0s", 0s},
    {"", std::nullopt},
    {"s", std::nullopt},
    {"-1s", std::nullopt},
    {"5x", std::nullopt},
    {"1s2", std::nullopt},
    {"1.2.3s", std::nullopt},
    {"abc", std::nullopt},
  };
  for (const auto& r : table) {
    EXPECT_EQ(parse_reset_duration(r.text), r.expected) << "'" << r.text << "'";
  }
}

TEST(RateLimiter, ParsesRetryAfter) {
  EXPECT_EQ(parse_retry_after("5", "retry-after"), std::optional<nanoseconds>{5s});
  EXPECT_EQ(parse_retry_after("0.5", "Retry-After"), std::optional<nanoseconds>{500ms});
  EXPECT_EQ(parse_retry_after("1500", "retry-after-ms"), std::optional<nanoseconds>{1500ms});
  EXPECT_EQ(parse_retry_after("20.5", "Retry-After-Ms"), std::optional<nanoseconds>{20500us});
  EXPECT_EQ(parse_retry_after("-1", "retry-after"), std::nullopt);
  EXPECT_EQ(parse_retry_after("", "retry-after"), std::nullopt);
  EXPECT_EQ(parse_retry_after("5", "x-retry"), std::nullopt);
}

TEST(RateLimiter, ReadsRetryAfterAsAnHttpDateInEachOfItsThreeForms) {
  using clock = std::chrono::system_clock;
  const auto at = [](int year, int month, int day, std::chrono::seconds time) {
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    return std::optional{clock::from_time_t(timegm(&tm)) + time};
  };
  const auto nov6 = at(1994, 11, 6, 8h + 49min + 37s);
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), nov6);
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), nov6);
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994"), nov6);
  EXPECT_EQ(parse_http_date("Thursday, 26-Nov-26 23:30:00 GMT"), at(2026, 11, 26, 23h + 30min));
  EXPECT_EQ(parse_http_date("Tue, 29 Feb 2028 00:00:00 GMT"), at(2028, 2, 29, 0s));
  for (const char* bad :
       {"", "GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 29 Feb 2026 08:49:37 GMT", "Sun, 06 Xyz 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49 GMT", "Sun Nov  6 08:49:37 94",
        "Sun, 06 Nov 1994 08:49:37 GMT trailing", "Sun,06 Nov 1994 08:49:37 GMT"}) {
    EXPECT_EQ(parse_http_date(bad), std::nullopt) << "'" << bad << "'";
  }

  // Retry-After as a date: the time left until it, against the clock given; none left if past.
  const auto now = *at(2015, 10, 21, 7h + 27min + 30s);
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", "retry-after", now),
            std::optional<nanoseconds>{30s});
  EXPECT_EQ(parse_retry_after(" Wed, 21 Oct 2015 07:27:00 GMT ", "Retry-After", now),
            std::optional<nanoseconds>{0s});
  // retry-after-ms holds milliseconds only.
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", "retry-after-ms", now),
            std::nullopt);
  // Against the wall clock: a date two minutes ahead (as a server's strftime writes it in the
  // C locale) waits about that long.
  const std::time_t ahead = clock::to_time_t(clock::now()) + 120;
  std::tm tm{};
  gmtime_r(&ahead, &tm);
  char text[64];
  ASSERT_GT(std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm), 0u);
  auto wait = parse_retry_after(text, "retry-after");
  ASSERT_TRUE(wait) << text;
  EXPECT_GT(*wait, 100s) << text;
  EXPECT_LE(*wait, 120s) << text;
}

TEST(RateLimiter, RetryAfterMsTakesPrecedence) {
  std::map<std::string, std::string> both{{"retry-after", "2"}, {"retry-after-ms", "1500"}};
  EXPECT_EQ(retry_after_from_headers(lookup_in(both)), std::optional<nanoseconds>{1500ms});
  std::map<std::string, std::string> bad_ms{{"retry-after", "2"}, {"retry-after-ms", "soon"}};
  EXPECT_EQ(retry_after_from_headers(lookup_in(bad_ms)), std::optional<nanoseconds>{2s});
  EXPECT_EQ(retry_after_from_headers(lookup_in({})), std::nullopt);
}

TEST(RateLimiter, HonoursRetryAfterOnceThenBacksOff) {
  manual_time_source clock;
  rate_limiter limiter{limits(0, 0), clock};
  limiter.on_rate_limited(5s);
  EXPECT_EQ(limiter.blocked_until(), clock.now() + 5s);
  clock.advance(4s);
  auto d = limiter.try_acquire();
  EXPECT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::backoff);
  EXPECT_EQ(d.until, clock.now() + 1s);
  clock.advance(1s);
  EXPECT_TRUE(limiter.try_acquire().admitted());

  // The next 429 carries no header: the endpoint's own backoff, second in the run.
  limiter.on_rate_limited(std::nullopt);
  EXPECT_EQ(limiter.consecutive_rate_limited(), 2u);
  EXPECT_EQ(limiter.blocked_until(), clock.now() + 1s);
}

TEST(RateLimiter, RetryAfterIsCappedAtTheMaximum) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  limiter.on_rate_limited(1h);
  EXPECT_EQ(limiter.blocked_until(), clock.now() + 60s);
  clock.advance(60s);
  EXPECT_TRUE(limiter.try_acquire().admitted());
}

TEST(RateLimiter, ShorterLaterRetryAfterDoesNotShortenTheBlock) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  limiter.on_rate_limited(10s);
  auto until = limiter.blocked_until();
  limiter.on_rate_limited(2s);
  EXPECT_EQ(limiter.blocked_until(), until);
}

TEST(RateLimiter, RateLimitsWithoutHeaderBackOffExponentiallyAndResetAfterSuccess) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  const nanoseconds expected[] = {500ms, 1s, 2s, 4s, 8s, 8s};
  for (auto pause : expected) {
    limiter.on_rate_limited(std::nullopt);
    EXPECT_EQ(limiter.blocked_until(), clock.now() + pause);
    clock.advance(pause);
  }
  EXPECT_EQ(limiter.consecutive_rate_limited(), 6u);

  limiter.on_success();
  EXPECT_EQ(limiter.consecutive_rate_limited(), 0u);
  limiter.on_rate_limited(std::nullopt);
  EXPECT_EQ(limiter.blocked_until(), clock.now() + 500ms);
}

TEST(RateLimiter, A429BurstOfCallsInFlightTogetherLengthensTheBackoffOnce) {
  // 40 calls sent together, all answered 429 without Retry-After: one round over the limit,
  // not 40. Each used to double the backoff, to its 8 s cap at the fifth.
  manual_time_source clock;
  rate_limiter limiter{limits(0, 0), clock};
  const auto sent = clock.now();
  clock.advance(300ms);
  for (int i = 0; i < 40; ++i) {
    limiter.on_rate_limited(std::nullopt, sent);
    clock.advance(1ms);
  }
  EXPECT_EQ(limiter.consecutive_rate_limited(), 1u);
  EXPECT_EQ(limiter.blocked_until(), clock.now() - 1ms + 500ms) << "blocked from the last";
  // A call sent after that burst and refused too: the next round, twice as long.
  clock.advance(600ms);
  const auto resent = clock.now();
  clock.advance(300ms);
  limiter.on_rate_limited(std::nullopt, resent);
  EXPECT_EQ(limiter.consecutive_rate_limited(), 2u);
  EXPECT_EQ(limiter.blocked_until(), clock.now() + 1s);
}

TEST(RateLimiter, ZeroRetryAfterFallsBackToBackoff) {
  manual_time_source clock;
  rate_limiter limiter{limits(60, 0), clock};
  limiter.on_rate_limited(0s);
  EXPECT_EQ(limiter.blocked_until(), clock.now() + 500ms);
}

TEST(RateLimiter, AdoptsALimitTheEndpointReportsWhenNoneIsConfigured) {
  manual_time_source clock;
  rate_limiter limiter{limits(0, 0), clock};
  rate_limit_headers h;
  h.limit_requests = 600;
  h.remaining_requests = 1;
  limiter.on_headers(h);
  EXPECT_TRUE(limiter.try_acquire().admitted());
  auto d = limiter.try_acquire();
  ASSERT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.reason, rate_limit_wait_reason::requests);
  EXPECT_EQ(d.until, clock.now() + 100ms) << "600 per minute: one per 100 ms";
  EXPECT_TRUE(std::isinf(limiter.available_tokens())) << "no token limit reported";
}

TEST(RateLimiter, UnlimitedWhenLimitsAreZero) {
  manual_time_source clock;
  rate_limiter limiter{limits(0, 0), clock};
  rate_limit_headers h;
  h.remaining_requests = 0;
  h.remaining_tokens = 0;
  limiter.on_headers(h); // no limit reported: nothing to adopt
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(limiter.try_acquire(1'000'000'000).admitted()) << i;
  }
  EXPECT_TRUE(std::isinf(limiter.available_requests()));
  EXPECT_TRUE(std::isinf(limiter.available_tokens()));
}

TEST(RateLimiter, LearnsTheBurstAPerMinuteLimitIsEnforcedOver) {
  // 600 RPM stated, enforced as 10 a second: 4 remain, full again in 0.6 s → 4 + 10 × 0.6.
  manual_time_source clock;
  rate_limiter limiter{limits(0, 0), clock};
  rate_limit_headers h;
  h.limit_requests = 600;
  h.remaining_requests = 4;
  h.reset_requests = 600ms;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.requests_per_minute(), 600.0);
  EXPECT_DOUBLE_EQ(limiter.request_capacity(), 10.0);
  // After a quiet minute the bucket holds 10, not the 600 a full minute would.
  clock.advance(60s);
  EXPECT_EQ(drain(limiter), 10);
  // A smaller implied size later (the floor of `remaining`) does not shrink it again.
  h.remaining_requests = 0;
  h.reset_requests = 950ms;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.request_capacity(), 10.0);
}

TEST(RateLimiter, ALimitLearnedFromHeadersFollowsThemUpAndDownAConfiguredOneIsACap) {
  // The first limit a header reported used to become a cap for good: a provider that raised
  // 600 RPM to 6000 was still paced at 10 a second an hour later.
  manual_time_source clock;
  rate_limiter learned{limits(0, 0), clock};
  rate_limiter capped{limits(1200, 0), clock};
  rate_limit_headers h;
  h.limit_requests = 600;
  learned.on_headers(h);
  capped.on_headers(h);
  EXPECT_DOUBLE_EQ(learned.requests_per_minute(), 600.0);
  EXPECT_DOUBLE_EQ(capped.requests_per_minute(), 600.0);
  h.limit_requests = 6000;
  learned.on_headers(h);
  capped.on_headers(h);
  EXPECT_DOUBLE_EQ(learned.requests_per_minute(), 6000.0);
  EXPECT_DOUBLE_EQ(capped.requests_per_minute(), 1200.0) << "the configuration's cap";
  h.limit_requests = 300;
  learned.on_headers(h);
  EXPECT_DOUBLE_EQ(learned.requests_per_minute(), 300.0);
}

TEST(RateLimiter, ABurstLearnedUnderALooserLimitDoesNotOutliveIt) {
  // 6000 RPM enforced per second (a 100-request bucket), then 600 RPM per second: the bucket
  // holds 10, not the 100 it learned before, so a quiet spell does not end in 90 429s.
  manual_time_source clock;
  rate_limiter limiter{limits(0, 0), clock};
  rate_limit_headers h;
  h.limit_requests = 6000;
  h.remaining_requests = 99;
  h.reset_requests = 10ms;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.request_capacity(), 100.0);
  h.limit_requests = 600;
  h.remaining_requests = 9;
  h.reset_requests = 100ms;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.requests_per_minute(), 600.0);
  EXPECT_DOUBLE_EQ(limiter.request_capacity(), 10.0);
  clock.advance(60s);
  EXPECT_EQ(drain(limiter), 10);
}

TEST(RateLimiter, TheLearnedBurstLowersAConfiguredOneOnly) {
  manual_time_source clock;
  auto cfg = limits(600, 0); // a full minute's burst: 600
  rate_limiter limiter{cfg, clock};
  EXPECT_DOUBLE_EQ(limiter.request_capacity(), 600.0);
  rate_limit_headers h;
  h.limit_requests = 600;
  h.remaining_requests = 9;
  h.reset_requests = 100ms;
  limiter.on_headers(h);
  EXPECT_DOUBLE_EQ(limiter.request_capacity(), 10.0);
  // A bucket bigger than the configured burst is never adopted.
  cfg.burst = 1s;
  rate_limiter small{cfg, clock};
  h.remaining_requests = 500;
  h.reset_requests = 10s;
  small.on_headers(h);
  EXPECT_DOUBLE_EQ(small.request_capacity(), 10.0);
}

TEST(RateLimiter, ARequestLargerThanTheBurstIsPacedOnTheRate) {
  manual_time_source clock;
  auto cfg = limits(0, 30000); // 500 tokens a second
  cfg.burst = 1s;
  rate_limiter limiter{cfg, clock};
  EXPECT_EQ(limiter.peek(800).kind, acquire_decision_kind::reject_too_large);
  // Paced: it goes when the bucket is full, and its cost overdraws it.
  EXPECT_TRUE(limiter.peek_paced(800).admitted());
  limiter.take(800);
  auto d = limiter.peek_paced(800);
  ASSERT_EQ(d.kind, acquire_decision_kind::wait);
  EXPECT_EQ(d.until, clock.now() + 1600ms) << "300 tokens of debt, then a full 500";
}
