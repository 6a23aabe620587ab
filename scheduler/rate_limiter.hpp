#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "common/time_source.hpp"
#include "scheduler/backoff.hpp"

namespace arbiter::scheduler {

/// The limits of one remote endpoint, from configuration.
struct rate_limit_config {
  /// Requests per minute; 0 means the endpoint is not paced by requests.
  uint32_t requests_per_minute = 0;
  /// Tokens per minute (prompt plus `max_tokens`, as the provider counts them); 0 means the
  /// endpoint is not paced by tokens.
  uint64_t tokens_per_minute = 0;
  /// How much of a minute's allowance may be spent at once: the buckets hold limit × burst /
  /// 1 min (at least one request). Providers often enforce per-minute limits over shorter
  /// windows (OpenAI: 60,000 RPM may be enforced as 1,000 per second); one minute is OpenAI's
  /// stated semantics.
  nanoseconds burst = std::chrono::minutes{1};
  /// The longest Retry-After the endpoint is allowed to impose (longer values are cut to this).
  nanoseconds max_retry_after = std::chrono::seconds{60};
  /// The pause after the first 429 that carries no Retry-After; it doubles with each
  /// consecutive 429 up to `backoff_cap`.
  nanoseconds backoff_base = std::chrono::milliseconds{500};
  nanoseconds backoff_cap = std::chrono::seconds{8};
};

/// What the provider reported in `x-ratelimit-*` headers; absent fields were missing or
/// unreadable. Counts are requests or tokens; resets are the time until the provider's bucket
/// is full again (not a wait-before-retry).
struct rate_limit_headers {
  std::optional<uint64_t> limit_requests;
  std::optional<uint64_t> limit_tokens;
  std::optional<uint64_t> remaining_requests;
  std::optional<uint64_t> remaining_tokens;
  std::optional<nanoseconds> reset_requests;
  std::optional<nanoseconds> reset_tokens;
};

/// Looks up a response header by its lower-case name; nullopt when absent. Matching the name
/// case-insensitively is the lookup's job. The returned view must stay valid until the
/// parse function that called the lookup returns.
using header_lookup = std::function<std::optional<std::string_view>(std::string_view name)>;

/// Parses a Go-style duration as OpenAI sends in `x-ratelimit-reset-*`: one or more
/// number-unit pairs, numbers with an optional fraction, units h, m, s, ms, us (or µs), ns,
/// e.g. "1s", "6m0s", "20ms", "0.5s", "1h2m3.5s". A bare number is taken as seconds. Returns
/// nullopt for anything else (empty, negative, unknown unit, trailing text).
std::optional<nanoseconds> parse_reset_duration(std::string_view text);

/// Reads the six `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers. Counts that
/// are not non-negative integers (Azure sometimes sends -1) are left absent.
rate_limit_headers parse_rate_limit_headers(const header_lookup& lookup);

/// An HTTP-date (RFC 9110 section 5.6.7) in any of its three forms: IMF-fixdate ("Sun, 06 Nov
/// 1994 08:49:37 GMT"), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT") or asctime ("Sun Nov  6
/// 08:49:37 1994"); nullopt for anything else or an impossible date.
std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text);

/// Parses one Retry-After style header. `header_name` says the unit: "retry-after-ms" holds
/// milliseconds, "retry-after" holds seconds (RFC 9110 delay-seconds), both possibly with a
/// fraction, or an HTTP-date, which gives the time from `now` to it (zero when it is past).
/// Negative or unreadable values and other names give nullopt (the caller then backs off on
/// its own).
std::optional<nanoseconds> parse_retry_after(std::string_view value, std::string_view header_name,
                                             std::chrono::system_clock::time_point now);
/// The same, against the wall clock now.
std::optional<nanoseconds> parse_retry_after(std::string_view value, std::string_view header_name);

/// The server's requested wait from a response: `retry-after-ms` when present and readable
/// (it is the more precise, and takes precedence in the OpenAI and Anthropic SDKs), else
/// `retry-after`.
std::optional<nanoseconds> retry_after_from_headers(const header_lookup& lookup);

/// Why a request may not be sent yet.
enum class rate_limit_wait_reason {
  /// Sent now.
  none,
  /// The endpoint answered 429 and is in its shared backoff.
  backoff,
  /// The request bucket is empty.
  requests,
  /// The token bucket holds fewer tokens than the request needs.
  tokens,
};

/// The metric label of a wait reason: "none", "backoff", "requests", "tokens".
const char* to_string(rate_limit_wait_reason r) noexcept;

/// What `rate_limiter::try_acquire` decided.
enum class acquire_decision_kind {
  /// Send the request now; its request and tokens were taken from the buckets.
  admit,
  /// Do not send before `until`; nothing was taken.
  wait,
  /// The request needs more tokens than the token bucket can ever hold; it can never be sent
  /// to this endpoint. Nothing was taken.
  reject_too_large,
};

/// The metric label of a decision: "admit", "wait", "too_large".
const char* to_string(acquire_decision_kind k) noexcept;

struct acquire_decision {
  acquire_decision_kind kind = acquire_decision_kind::admit;
  /// For `wait`: the earliest time at which the same request would be admitted, if nothing
  /// else is admitted or reported meanwhile.
  time_point until{};
  /// For `wait`, what it waits on (the one that ends last); `none` otherwise.
  rate_limit_wait_reason reason = rate_limit_wait_reason::none;

  bool admitted() const noexcept {
    return kind == acquire_decision_kind::admit;
  }
};

/// Paces one remote endpoint before it answers 429, OpenAI style: a request bucket and a token
/// bucket, each holding up to its per-minute limit and refilling continuously at limit/60 s,
/// both full at construction. A limit of 0 turns its bucket off. Provider headers correct the
/// buckets; a 429 blocks the whole endpoint (one shared backoff, not one per caller) until the
/// server's Retry-After, or an exponential backoff over consecutive 429s when it sends none.
///
/// Not thread-safe: owned by the one actor that routes to the endpoint. Reads time from
/// `clock`, which the caller owns and which must outlive the limiter.
class rate_limiter {
public:
  rate_limiter(const rate_limit_config& cfg, const time_source& clock);

  /// Takes one request and `tokens` tokens when the endpoint is not blocked and both buckets
  /// hold enough, and answers `admit`. Otherwise takes nothing and answers when to ask again
  /// (`wait`), or `reject_too_large` when `tokens` exceeds the token limit.
  acquire_decision try_acquire(uint64_t tokens = 0);
  /// Takes one request and `tokens` tokens whatever the buckets hold; a level may go below
  /// zero, which delays later requests until the refill has paid it back. For a batch
  /// admitted on a peek at its first item.
  void take(uint64_t tokens);
  /// Gives `tokens` taken for a call back to the token bucket (up to a full bucket): the
  /// endpoint refused the call before running it (a 429, a 400), so it counted none of them.
  void give_back(uint64_t tokens);
  /// Settles a call's prompt tokens once its answer says how many the endpoint counted: the
  /// bucket was charged `charged` (an estimate) when it was sent. What was charged beyond
  /// `counted` goes back (up to a full bucket); what was charged short is taken as well (the
  /// level may go below zero). Without this an estimate's error, however well learned later,
  /// stayed in the bucket for as long as work kept it from filling up.
  void settle(uint64_t charged, uint64_t counted);
  /// What `try_acquire(tokens)` would answer now, taking nothing.
  acquire_decision peek(uint64_t tokens = 0);

  /// When `tokens` could be sent, pacing a request larger than the token bucket on the rate:
  /// such a request waits for a full bucket (and its cost, taken by `take`, overdraws it).
  /// Never answers `reject_too_large`; takes nothing.
  acquire_decision peek_paced(uint64_t tokens);

  /// Corrects the buckets from a response's `x-ratelimit-*` headers (those of a 429 too). A
  /// reported limit replaces the configured one when lower (never raises above it), and a
  /// limit learned from headers follows them up and down (a provider that raised its limit
  /// mid-run); a reported remaining count, or a reset time later than the bucket's own
  /// refill would allow, lowers the bucket's level. Headers never raise a level: in-flight requests the
  /// provider had not counted yet would make that optimistic. A bucket turned off by
  /// configuration adopts a limit the endpoint reports (and its remaining count), so an
  /// endpoint whose limits nobody configured is paced from its own headers.
  ///
  /// The burst the endpoint really enforces is learned too: for a token bucket, what remains
  /// plus what refills until the reset (remaining + limit/60 s × reset) is what the bucket
  /// holds when full. A per-minute limit is often enforced over a second (600 RPM as 10 per
  /// second): the largest such capacity seen since the limit last changed becomes the
  /// bucket's size when it is smaller than the configured burst.
  void on_headers(const rate_limit_headers& headers);

  /// Records a 429 from the endpoint and blocks it: until now + `retry_after` (cut to
  /// `max_retry_after`) when the server sent a positive one, else for the exponential backoff
  /// of this run of consecutive 429s. A later block never shortens an earlier one. A 429 for
  /// a call `sent` before the last 429 arrived belongs to the same burst (calls that were in
  /// flight together): it blocks again from now, but does not lengthen the backoff; unknown
  /// (nullopt), it counts. A bucket whose remaining count the endpoint has never reported
  /// drops to zero if above it: the endpoint had less room than it held.
  void on_rate_limited(std::optional<nanoseconds> retry_after,
                       std::optional<time_point> sent = std::nullopt);

  /// Records a response that was not a 429: the next header-less 429 starts the exponential
  /// backoff from `backoff_base` again.
  void on_success() noexcept;

  /// Until when the endpoint is blocked by a 429 (a past time when it is not).
  time_point blocked_until() const noexcept {
    return blocked_until_;
  }

  /// 429s received since the last success.
  uint32_t consecutive_rate_limited() const noexcept {
    return consecutive_rate_limited_;
  }

  /// What the buckets hold now, after refill (+infinity for a bucket that is off).
  double available_requests();
  double available_tokens();

  /// The most each bucket holds (its burst; +infinity for a bucket that is off).
  double request_capacity() const noexcept;
  double token_capacity() const noexcept;

  /// The per-minute limits in force, configured or learned (0 for a bucket that is off).
  double requests_per_minute() const noexcept {
    return requests_.per_minute;
  }
  double tokens_per_minute() const noexcept {
    return tokens_.per_minute;
  }

private:
  /// One continuously refilling bucket. `capacity` 0 means off (always enough).
  struct bucket {
    /// The per-minute limit in force; sets the refill rate.
    double per_minute = 0.0;
    /// What the configuration allows; a header can lower `per_minute` below it. Or, when
    /// `learned`, the limit the endpoint's headers last reported.
    double configured = 0.0;
    /// `configured` came from the endpoint's headers, not the configuration: the next
    /// reported limit replaces it, up or down.
    bool learned = false;
    /// The share of a minute's allowance the bucket holds (burst / 1 min, at most 1).
    double burst_fraction = 1.0;
    /// The most the bucket holds: per_minute × burst_fraction (at least `floor`).
    double capacity = 0.0;
    double floor = 0.0;
    double level = 0.0;
    /// The largest full-bucket size the endpoint's headers implied since the limit in force
    /// last changed (0: none seen yet).
    double observed_capacity = 0.0;
    /// The endpoint has said what remains in this bucket (`x-ratelimit-remaining-*`).
    bool says_remaining = false;

    bool limited() const noexcept {
      return configured > 0.0;
    }
    /// Units added per nanosecond.
    double rate_per_ns() const noexcept;
    void refill(nanoseconds elapsed) noexcept;
    void set_limit(double limit) noexcept;
    /// Time until the level reaches `amount` (0 when it already has).
    nanoseconds time_to(double amount) const noexcept;
    void correct(std::optional<uint64_t> limit, std::optional<uint64_t> remaining,
                 std::optional<nanoseconds> reset) noexcept;
  };

  void refill();
  /// The decision for `tokens` now, without taking anything.
  acquire_decision decide(uint64_t tokens);

  const time_source& clock_;
  nanoseconds max_retry_after_;
  /// Its ceilings (no jitter) are the header-less 429 pauses: one deadline shared by every
  /// caller needs no spreading, the buckets pace the callers once it ends.
  jittered_backoff backoff_;
  bucket requests_;
  bucket tokens_;
  time_point last_refill_;
  time_point blocked_until_{};
  uint32_t consecutive_rate_limited_ = 0;
  /// When the last 429 that lengthened the backoff arrived.
  time_point last_rate_limited_{};
};

} // namespace arbiter::scheduler
