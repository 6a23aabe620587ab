#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "common/time_source.hpp"
#include "scheduler/backoff.hpp"

namespace arbiter::scheduler {

/// How one attempt at a remote or local source ended.
enum class attempt_outcome_kind {
  /// A usable answer.
  ok,
  /// 429: the source is rate limiting us.
  rate_limited,
  /// 5xx (and 409, which the OpenAI SDK also retries): the source failed; another try may
  /// succeed.
  server_error,
  /// No answer within the attempt's timeout (or 408 from the server).
  timeout,
  /// The connection could not be made or broke before an answer.
  connect_failure,
  /// An answer that could not be used: an unreadable body, or a status outside 2xx-5xx.
  bad_response,
  /// 400, 413, 422 and other 4xx: the request itself is wrong; any source refuses it alike.
  bad_request,
  /// 401 / 403: our credentials for this source are wrong.
  unauthorized,
  /// 404: the source does not serve what its configuration says (model or path missing).
  not_found,
  /// A good answer that does not fit what was asked (fewer completions than `n`, a missing
  /// vector): this source cannot serve this request as asked. Says nothing about its health.
  unsupported,
};

/// The metric label of an outcome, e.g. "rate_limited".
const char* to_string(attempt_outcome_kind k) noexcept;

/// The outcome an HTTP status stands for (200-299 are `ok`).
attempt_outcome_kind classify_http_status(int status) noexcept;

/// Whether another attempt at the same request could succeed somewhere: false for `ok` and
/// `bad_request` (any source refuses it alike). `unauthorized`, `not_found` and `unsupported`
/// are about this source only: another source may serve the request.
bool is_retryable(attempt_outcome_kind k) noexcept;

/// Whether the outcome shows the source itself is misconfigured (`unauthorized`,
/// `not_found`): the caller ejects it from routing until an operator fixes it.
bool ejects_source(attempt_outcome_kind k) noexcept;

/// Whether the outcome counts against the source's health (its breaker): failures that show
/// it unhealthy (5xx, timeouts, broken connections, unusable bodies), not what the request
/// caused (`bad_request`, `unsupported`) nor "not now" (`rate_limited`).
bool counts_against_source(attempt_outcome_kind k) noexcept;

/// Whether the outcome uses up one of an item's `max_attempts`: failures that may repeat
/// (5xx, timeouts, unusable bodies). A 429, a refused connection, a misconfigured source and
/// a reply the source cannot shape never end an item while its deadline allows another source
/// or a later try.
bool counts_as_attempt(attempt_outcome_kind k) noexcept;

/// What to do with a request after a failed attempt.
enum class retry_decision_kind {
  /// Answer the request with the failure.
  no_retry,
  /// Try the same source again after `delay`.
  retry_here,
  /// Send it to another source serving the capability, now.
  retry_elsewhere,
};

/// The metric label of a decision: "no_retry", "retry_here", "retry_elsewhere".
const char* to_string(retry_decision_kind k) noexcept;

struct retry_decision {
  retry_decision_kind kind = retry_decision_kind::no_retry;
  /// How long to wait before the retry (0 for `retry_elsewhere` and `no_retry`, unless the
  /// retry waits for the budget).
  nanoseconds delay{0};
  /// A metric label. For `no_retry`: "ok", "fatal_status", "max_attempts", "deadline" or
  /// "budget_exhausted". For a retry: the outcome's name, e.g. "server_error", or
  /// "budget_wait".
  std::string reason;
  /// The retry was not charged to the budget, which had no room: when it is due (after
  /// `delay`, its usual backoff), the caller sends it once `retry_budget::can_retry()` or
  /// when no fresh work waits for its capability (then `on_retry()`), else waits again.
  bool awaits_budget = false;
};

struct retry_budget_config {
  /// Retries may be at most this share of the requests of the window (0.2: 20 %).
  double retry_ratio = 0.2;
  /// Retries always allowed per window, however few requests there were.
  uint32_t min_retries = 10;
  /// The sliding window, tracked in `slots` equal slices (a slice leaves as a whole).
  nanoseconds window = std::chrono::seconds{10};
  uint32_t slots = 10;
};

/// Caps retries at a share of recent traffic, so that a failing backend sees at most
/// (1 + ratio) × its normal load instead of max_attempts × it. The scheduler holds a retry
/// past it only while fresh work waits for the capability (`scheduler_core::dispatch_retries`).
/// The window slides over time read from `clock`, which the caller owns and which must outlive
/// the budget. Not thread-safe: one per scheduler actor.
class retry_budget {
public:
  retry_budget(const retry_budget_config& cfg, const time_source& clock);

  /// Records `count` new requests (first attempts; retries are not requests).
  void on_request(uint64_t count = 1);

  /// Whether one more retry fits: retries in the window stay below
  /// max(min_retries, retry_ratio × requests in the window).
  bool can_retry() const;

  /// Records a retry spent.
  void on_retry();

  uint64_t requests_in_window() const;
  uint64_t retries_in_window() const;

  /// One slice of the window: how often room can appear.
  nanoseconds slice() const noexcept {
    return slot_length_;
  }

private:
  struct slot {
    int64_t index = 0;
    uint64_t requests = 0;
    uint64_t retries = 0;
  };

  /// The slice `now` falls in.
  int64_t slot_index(time_point now) const noexcept;
  /// Drops slices that left the window; returns the current one.
  slot& current();
  /// Sums over the slices still in the window.
  slot totals() const;

  const time_source& clock_;
  double retry_ratio_;
  uint32_t min_retries_;
  nanoseconds slot_length_;
  int64_t slots_;
  std::deque<slot> window_;
};

struct retry_policy_config {
  /// Attempts per request, the first included (3: up to two retries).
  uint32_t max_attempts = 3;
  /// Full-jitter backoff before retrying on the same source (OpenAI SDK: 0.5 s doubling to
  /// 8 s).
  nanoseconds backoff_base = std::chrono::milliseconds{500};
  nanoseconds backoff_cap = std::chrono::seconds{8};
  /// The longest server Retry-After waited for on the same source.
  nanoseconds max_retry_after = std::chrono::seconds{60};
};

/// Whether another source could take a retry.
enum class other_sources {
  none,
  available,
};

/// Decides, after each failed attempt, whether and where a request is tried again. Counts
/// nothing itself except the retries it grants, which it charges to `budget`. Holds
/// references to `budget` and `random`, which the caller owns and which must outlive it.
class retry_policy {
public:
  retry_policy(const retry_policy_config& cfg, retry_budget& budget, random_source& random);

  /// The decision after an attempt ended with `outcome`, the item having used
  /// `failures_so_far` of its attempts (those that `counts_as_attempt`, this one included),
  /// with `time_left` until the request's deadline. In order:
  /// - `ok` → no_retry ("ok"); `bad_request` → no_retry ("fatal_status");
  /// - `unauthorized`, `not_found`, `unsupported`: retry_elsewhere with another source
  ///   available, else no_retry ("fatal_status");
  /// - `failures_so_far` ≥ max_attempts → no_retry ("max_attempts") — never after a 429 or a
  ///   refused connection, which use up no attempt;
  /// - with another source available → retry_elsewhere now;
  /// - else retry_here after the server's `retry_after` (cut to max_retry_after) when given,
  ///   or a jittered backoff;
  /// - a wait (or a server Retry-After) not shorter than `time_left` → no_retry ("deadline");
  /// - no room in the budget: the retry waits (at least a slice of the budget's window) for
  ///   room rather than ending the item ("budget_wait", `awaits_budget`), unless that passes
  ///   the deadline → no_retry ("budget_exhausted").
  /// A retry decision is charged to the budget, except after `rate_limited` (the endpoint's
  /// shared backoff holds it), `connect_failure` (the backend never saw the request) and the
  /// outcomes about one source only, which neither spend nor need budget.
  retry_decision decide(attempt_outcome_kind outcome, uint32_t failures_so_far,
                        nanoseconds time_left, other_sources others,
                        std::optional<nanoseconds> retry_after);

private:
  uint32_t max_attempts_;
  nanoseconds max_retry_after_;
  jittered_backoff backoff_;
  retry_budget& budget_;
  random_source& random_;
};

} // namespace arbiter::scheduler
