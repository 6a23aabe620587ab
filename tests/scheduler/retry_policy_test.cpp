#include "scheduler/retry_policy.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

/// Always draws the same value.
class fixed_random final : public random_source {
public:
  explicit fixed_random(double value) : value_(value) {
  }

  double uniform() override {
    return value_;
  }

private:
  double value_;
};

/// 20 % of the requests of a 10 s window (10 slices of 1 s), at least `min_retries`.
retry_budget_config budget_of_at_least(uint32_t min_retries) {
  retry_budget_config cfg;
  cfg.retry_ratio = 0.2;
  cfg.min_retries = min_retries;
  cfg.window = 10s;
  cfg.slots = 10;
  return cfg;
}

retry_policy_config three_attempts() {
  retry_policy_config cfg;
  cfg.max_attempts = 3;
  cfg.backoff_base = 500ms;
  cfg.backoff_cap = 8s;
  cfg.max_retry_after = 60s;
  return cfg;
}

/// A policy with a clock, a budget and a random source that always draws 0.5.
struct fixture {
  explicit fixture(retry_budget_config budget_cfg = budget_of_at_least(1000),
                   retry_policy_config policy_cfg = three_attempts())
    : budget(budget_cfg, clock), policy(policy_cfg, budget, random) {
  }

  manual_time_source clock;
  fixed_random random{0.5};
  retry_budget budget;
  retry_policy policy;
};

} // namespace

TEST(RetryPolicy, ClassifiesHttpStatuses) {
  struct row {
    int status;
    attempt_outcome_kind kind;
  };
  const row table[] = {
    {200, attempt_outcome_kind::ok},
    {204, attempt_outcome_kind::ok},
    {400, attempt_outcome_kind::bad_request},
    {413, attempt_outcome_kind::bad_request},
    {422, attempt_outcome_kind::bad_request},
    {401, attempt_outcome_kind::unauthorized},
    {403, attempt_outcome_kind::unauthorized},
    {404, attempt_outcome_kind::not_found},
    {408, attempt_outcome_kind::timeout},
    {409, attempt_outcome_kind::server_error},
    {424, attempt_outcome_kind::server_error},  // TEI: its backend failed
    {429, attempt_outcome_kind::rate_limited},
    {500, attempt_outcome_kind::server_error},
    {502, attempt_outcome_kind::server_error},
    {503, attempt_outcome_kind::server_error},
    {504, attempt_outcome_kind::server_error},
    {101, attempt_outcome_kind::bad_response},
    {302, attempt_outcome_kind::bad_response},
    {0, attempt_outcome_kind::bad_response},
    {600, attempt_outcome_kind::bad_response},
  };
  for (const auto& r : table) {
    EXPECT_EQ(classify_http_status(r.status), r.kind)
      << r.status << " gave " << to_string(classify_http_status(r.status));
  }
}

TEST(RetryPolicy, OnlyMisconfiguredSourcesAreEjected) {
  EXPECT_TRUE(ejects_source(attempt_outcome_kind::unauthorized));
  EXPECT_TRUE(ejects_source(attempt_outcome_kind::not_found));
  EXPECT_FALSE(ejects_source(attempt_outcome_kind::bad_request));
  EXPECT_FALSE(ejects_source(attempt_outcome_kind::rate_limited));
  EXPECT_FALSE(ejects_source(attempt_outcome_kind::server_error));
  EXPECT_FALSE(ejects_source(attempt_outcome_kind::ok));
}

TEST(RetryPolicy, SuccessIsNotRetried) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::ok, 1, 10s, other_sources::available,
                           std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "ok");
}

TEST(RetryPolicy, BadRequestsAreNeverRetriedAndSpendNoBudget) {
  fixture f;
  for (int status : {400, 413, 422}) {
    auto d = f.policy.decide(classify_http_status(status), 1, 10s, other_sources::available,
                             std::nullopt);
    EXPECT_EQ(d.kind, retry_decision_kind::no_retry) << status;
    EXPECT_EQ(d.reason, "fatal_status") << status;
    EXPECT_EQ(d.delay, 0ns) << status;
  }
  EXPECT_EQ(f.budget.retries_in_window(), 0u);
}

TEST(RetryPolicy, WhatConcernsOneSourceGoesToAnotherAndSpendsNothing) {
  fixture f;
  for (int status : {401, 403, 404}) {
    auto d = f.policy.decide(classify_http_status(status), 0, 10s, other_sources::available,
                             std::nullopt);
    EXPECT_EQ(d.kind, retry_decision_kind::retry_elsewhere) << status;
    EXPECT_EQ(d.delay, 0ns) << status;
    d = f.policy.decide(classify_http_status(status), 0, 10s, other_sources::none, std::nullopt);
    EXPECT_EQ(d.kind, retry_decision_kind::no_retry) << "no one else serves it: " << status;
    EXPECT_EQ(d.reason, "fatal_status") << status;
  }
  auto d = f.policy.decide(attempt_outcome_kind::unsupported, 0, 10s, other_sources::available,
                           std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_elsewhere);
  EXPECT_EQ(d.reason, "unsupported");
  EXPECT_EQ(f.policy.decide(attempt_outcome_kind::unsupported, 0, 10s, other_sources::none,
                            std::nullopt).kind,
            retry_decision_kind::no_retry);
  EXPECT_EQ(f.budget.retries_in_window(), 0u);
}

TEST(RetryPolicy, RateLimitsAndRefusedConnectionsNeverUseUpAttempts) {
  fixture f;
  EXPECT_FALSE(counts_as_attempt(attempt_outcome_kind::rate_limited));
  EXPECT_FALSE(counts_as_attempt(attempt_outcome_kind::connect_failure));
  EXPECT_FALSE(counts_as_attempt(attempt_outcome_kind::unauthorized));
  EXPECT_FALSE(counts_as_attempt(attempt_outcome_kind::unsupported));
  EXPECT_TRUE(counts_as_attempt(attempt_outcome_kind::server_error));
  EXPECT_TRUE(counts_as_attempt(attempt_outcome_kind::timeout));
  EXPECT_TRUE(counts_as_attempt(attempt_outcome_kind::bad_response));
  // Three failures that may repeat end an item; a 429 after them still does not, while the
  // deadline allows another try.
  auto d = f.policy.decide(attempt_outcome_kind::rate_limited, 3, 10s, other_sources::none, 2s);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  EXPECT_EQ(d.delay, 2s);
  d = f.policy.decide(attempt_outcome_kind::connect_failure, 3, 10s, other_sources::none,
                      std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  d = f.policy.decide(attempt_outcome_kind::server_error, 3, 10s, other_sources::none,
                      std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "max_attempts");
  // Only the deadline ends a rate-limited item.
  d = f.policy.decide(attempt_outcome_kind::rate_limited, 0, 1s, other_sources::none, 2s);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "deadline");
}

TEST(RetryPolicy, OnlyUnhealthySourcesCountAgainstTheirBreaker) {
  EXPECT_TRUE(counts_against_source(attempt_outcome_kind::server_error));
  EXPECT_TRUE(counts_against_source(attempt_outcome_kind::timeout));
  EXPECT_TRUE(counts_against_source(attempt_outcome_kind::connect_failure));
  EXPECT_TRUE(counts_against_source(attempt_outcome_kind::bad_response));
  EXPECT_FALSE(counts_against_source(attempt_outcome_kind::bad_request));
  EXPECT_FALSE(counts_against_source(attempt_outcome_kind::unsupported));
  EXPECT_FALSE(counts_against_source(attempt_outcome_kind::rate_limited));
  EXPECT_FALSE(counts_against_source(attempt_outcome_kind::ok));
}

TEST(RetryPolicy, RateLimitedGoesElsewhereWhenAnotherSourceExists) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::rate_limited, 1, 10s, other_sources::available,
                           5s);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_elsewhere);
  EXPECT_EQ(d.delay, 0ns);
  EXPECT_EQ(d.reason, "rate_limited");
  EXPECT_EQ(f.budget.retries_in_window(), 0u) << "a 429 waits; it does not spend the budget";
}

TEST(RetryPolicy, OnlyFailuresTheBackendWorkedForSpendTheBudget) {
  fixture f;
  for (int i = 0; i < 100; ++i) {
    auto d = f.policy.decide(attempt_outcome_kind::connect_failure, 1, 10s,
                             other_sources::available, std::nullopt);
    EXPECT_EQ(d.kind, retry_decision_kind::retry_elsewhere);
  }
  EXPECT_EQ(f.budget.retries_in_window(), 0u);
  f.policy.decide(attempt_outcome_kind::server_error, 1, 10s, other_sources::available,
                  std::nullopt);
  EXPECT_EQ(f.budget.retries_in_window(), 1u);
}

TEST(RetryPolicy, RateLimitedWaitsForRetryAfterOnTheOnlySource) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::rate_limited, 1, 10s, other_sources::none, 5s);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  EXPECT_EQ(d.delay, 5s);
  EXPECT_EQ(d.reason, "rate_limited");
}

TEST(RetryPolicy, RetryAfterIsCutToTheMaximum) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::rate_limited, 1, 10min, other_sources::none,
                           2min);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  EXPECT_EQ(d.delay, 60s);
}

TEST(RetryPolicy, RetryAfterBeyondTheDeadlineIsNotWaitedFor) {
  fixture f;
  // Cut to 60 s it would fit in 90 s, but the server said no sooner than 2 min.
  auto d = f.policy.decide(attempt_outcome_kind::rate_limited, 1, 90s, other_sources::none,
                           2min);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "deadline");
  EXPECT_EQ(f.budget.retries_in_window(), 0u);
  // Another source does not have to wait.
  d = f.policy.decide(attempt_outcome_kind::rate_limited, 1, 90s, other_sources::available,
                      2min);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_elsewhere);
}

TEST(RetryPolicy, RateLimitedWithoutRetryAfterBacksOff) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::rate_limited, 1, 10s, other_sources::none,
                           std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  EXPECT_EQ(d.delay, 250ms); // 0.5 × 500 ms
}

TEST(RetryPolicy, TransientFailuresGoElsewhereOrBackOffWithJitter) {
  for (auto outcome : {attempt_outcome_kind::server_error, attempt_outcome_kind::timeout,
                       attempt_outcome_kind::connect_failure,
                       attempt_outcome_kind::bad_response}) {
    fixture f;
    auto elsewhere = f.policy.decide(outcome, 1, 10s, other_sources::available, std::nullopt);
    EXPECT_EQ(elsewhere.kind, retry_decision_kind::retry_elsewhere) << to_string(outcome);
    EXPECT_EQ(elsewhere.delay, 0ns);
    EXPECT_EQ(elsewhere.reason, to_string(outcome));

    auto first = f.policy.decide(outcome, 1, 10s, other_sources::none, std::nullopt);
    EXPECT_EQ(first.kind, retry_decision_kind::retry_here) << to_string(outcome);
    EXPECT_EQ(first.delay, 250ms); // 0.5 × 500 ms
    auto second = f.policy.decide(outcome, 2, 10s, other_sources::none, std::nullopt);
    EXPECT_EQ(second.kind, retry_decision_kind::retry_here);
    EXPECT_EQ(second.delay, 500ms); // 0.5 × 1 s
  }
}

TEST(RetryPolicy, ServerErrorHonoursItsRetryAfterOnTheOnlySource) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::server_error, 1, 10s, other_sources::none, 3s);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  EXPECT_EQ(d.delay, 3s);
}

TEST(RetryPolicy, BackoffLongerThanTheTimeLeftIsNotRetried) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::timeout, 1, 200ms, other_sources::none,
                           std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "deadline");
  d = f.policy.decide(attempt_outcome_kind::timeout, 1, 300ms, other_sources::none,
                      std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::retry_here);
  EXPECT_EQ(d.delay, 250ms);
}

TEST(RetryPolicy, NoTimeLeftMeansNoRetryEvenElsewhere) {
  fixture f;
  auto d = f.policy.decide(attempt_outcome_kind::server_error, 1, 0ns, other_sources::available,
                           std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "deadline");
}

TEST(RetryPolicy, StopsAtMaxAttempts) {
  fixture f;
  EXPECT_EQ(f.policy.decide(attempt_outcome_kind::server_error, 1, 10s, other_sources::available,
                            std::nullopt).kind,
            retry_decision_kind::retry_elsewhere);
  EXPECT_EQ(f.policy.decide(attempt_outcome_kind::server_error, 2, 10s, other_sources::available,
                            std::nullopt).kind,
            retry_decision_kind::retry_elsewhere);
  auto d = f.policy.decide(attempt_outcome_kind::server_error, 3, 10s, other_sources::available,
                           std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "max_attempts");
  EXPECT_EQ(f.budget.retries_in_window(), 2u);
}

TEST(RetryPolicy, BudgetExhaustionStopsRetriesUntilTheWindowSlides) {
  fixture f{budget_of_at_least(2)};
  for (int i = 0; i < 10; ++i) {
    f.budget.on_request();
  }
  // 20 % of 10 requests is 2, the same as the minimum.
  auto retry = [&] {
    return f.policy.decide(attempt_outcome_kind::server_error, 1, 10s, other_sources::available,
                           std::nullopt);
  };
  EXPECT_EQ(retry().kind, retry_decision_kind::retry_elsewhere);
  EXPECT_EQ(retry().kind, retry_decision_kind::retry_elsewhere);
  // No room: the retry waits a slice of the window for room instead of ending the item...
  auto d = retry();
  EXPECT_EQ(d.kind, retry_decision_kind::retry_elsewhere);
  EXPECT_EQ(d.reason, "budget_wait");
  EXPECT_TRUE(d.awaits_budget);
  EXPECT_EQ(d.delay, 0s) << "due at once elsewhere: the caller holds it while fresh work waits";
  EXPECT_EQ(f.budget.retries_in_window(), 2u) << "not charged";
  // ...unless that wait passes the deadline.
  d = f.policy.decide(attempt_outcome_kind::server_error, 1, 1s, other_sources::available,
                      std::nullopt);
  EXPECT_EQ(d.kind, retry_decision_kind::no_retry);
  EXPECT_EQ(d.reason, "budget_exhausted");

  // Half a window later the spent retries still count.
  f.clock.advance(5s);
  EXPECT_EQ(retry().reason, "budget_wait");

  // Once they left the window, the minimum allowance is back.
  f.clock.advance(5s);
  EXPECT_EQ(f.budget.retries_in_window(), 0u);
  EXPECT_EQ(f.budget.requests_in_window(), 0u);
  EXPECT_EQ(retry().kind, retry_decision_kind::retry_elsewhere);
}

TEST(RetryPolicy, BudgetGrowsWithTraffic) {
  fixture f{budget_of_at_least(2)};
  for (int i = 0; i < 100; ++i) {
    f.budget.on_request();
  }
  int granted = 0;
  while (!f.policy.decide(attempt_outcome_kind::timeout, 1, 10s, other_sources::available,
                          std::nullopt)
            .awaits_budget) {
    ++granted;
    ASSERT_LT(granted, 1000);
  }
  EXPECT_EQ(granted, 20); // 20 % of 100
  EXPECT_FALSE(f.budget.can_retry());
}

TEST(RetryBudget, ABatchCountsAsItsItems) {
  // The scheduler records a dispatched batch at once: the same allowance as item by item.
  fixture f{budget_of_at_least(2)};
  f.budget.on_request(100);
  EXPECT_EQ(f.budget.requests_in_window(), 100u);
  int granted = 0;
  while (f.budget.can_retry()) {
    f.budget.on_retry();
    ++granted;
    ASSERT_LT(granted, 1000);
  }
  EXPECT_EQ(granted, 20); // 20 % of 100
  f.budget.on_request(0);
  EXPECT_EQ(f.budget.requests_in_window(), 100u);
}

TEST(RetryBudget, WindowSlidesSliceBySlice) {
  manual_time_source clock;
  retry_budget budget{budget_of_at_least(2), clock}; // 10 slices of 1 s
  budget.on_request();
  clock.advance(3s);
  budget.on_request();
  budget.on_retry();
  EXPECT_EQ(budget.requests_in_window(), 2u);
  clock.advance(7s); // the first request's slice left
  EXPECT_EQ(budget.requests_in_window(), 1u);
  EXPECT_EQ(budget.retries_in_window(), 1u);
  clock.advance(3s);
  EXPECT_EQ(budget.requests_in_window(), 0u);
  EXPECT_EQ(budget.retries_in_window(), 0u);
  EXPECT_TRUE(budget.can_retry());
}

TEST(AttemptOutcome, EveryOutcomeHasItsFourTraits) {
  struct expected {
    attempt_outcome_kind kind;
    bool retryable, ejects, against_source, uses_attempt;
  };
  using k = attempt_outcome_kind;
  const expected table[] = {
    {k::ok, false, false, false, false},
    {k::rate_limited, true, false, false, false},
    {k::server_error, true, false, true, true},
    {k::timeout, true, false, true, true},
    {k::connect_failure, true, false, true, false},
    {k::bad_response, true, false, true, true},
    {k::bad_request, false, false, false, false},
    {k::unauthorized, true, true, false, false},
    {k::not_found, true, true, false, false},
    {k::unsupported, true, false, false, false},
  };
  ASSERT_EQ(std::size(table), static_cast<size_t>(k::unsupported) + 1);
  for (const auto& e : table) {
    SCOPED_TRACE(to_string(e.kind));
    EXPECT_EQ(is_retryable(e.kind), e.retryable);
    EXPECT_EQ(ejects_source(e.kind), e.ejects);
    EXPECT_EQ(counts_against_source(e.kind), e.against_source);
    EXPECT_EQ(counts_as_attempt(e.kind), e.uses_attempt);
  }
}

TEST(AttemptOutcome, AValueOutsideTheEnumCountsAsAnUnusableAnswer) {
  auto corrupt = static_cast<attempt_outcome_kind>(200);
  EXPECT_EQ(is_retryable(corrupt), is_retryable(attempt_outcome_kind::bad_response));
  EXPECT_EQ(counts_against_source(corrupt), true);
  EXPECT_EQ(counts_as_attempt(corrupt), true);
  EXPECT_FALSE(ejects_source(corrupt));
  EXPECT_STREQ(to_string(corrupt), "unknown");
}
