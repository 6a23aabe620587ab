#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// Where a circuit breaker stands.
enum class breaker_state {
  /// Requests flow; outcomes are counted.
  closed,
  /// The source is ejected until `open_until()`; nothing is sent to it.
  open,
  /// The ejection has ended; a limited number of probe requests test the source.
  half_open,
};

/// What a circuit breaker says about sending one more request.
enum class breaker_decision {
  /// Closed: send it.
  allow,
  /// Half-open: send it as a probe; its outcome closes or re-opens the breaker.
  allow_probe,
  /// Open: the source is ejected.
  reject_open,
  /// Half-open, but every probe slot is taken.
  reject_probes_busy,
};

/// The metric label of a state: "closed", "open", "half_open".
const char* to_string(breaker_state s) noexcept;

/// The metric label of a decision: "allow", "allow_probe", "reject_open",
/// "reject_probes_busy".
const char* to_string(breaker_decision d) noexcept;

/// Whether a decision lets the request go to the source.
inline bool admits(breaker_decision d) noexcept {
  return d == breaker_decision::allow || d == breaker_decision::allow_probe;
}

/// When a breaker opens and for how long.
struct circuit_breaker_config {
  /// Opens after this many failures in a row (0: never on a streak).
  uint32_t consecutive_failures = 5;
  /// Opens when failures ÷ calls in the window reach this share (0, or above 1: never on a
  /// ratio)...
  double failure_ratio = 0.5;
  /// ...once the window holds at least this many calls.
  uint32_t minimum_volume = 20;
  /// The sliding window the ratio is measured over.
  nanoseconds window = std::chrono::seconds{10};
  /// The window is kept as this many buckets; older buckets drop out whole (at least 1).
  uint32_t window_buckets = 10;
  /// The first ejection's length.
  nanoseconds base_ejection = std::chrono::seconds{5};
  /// Each further ejection in a row lasts this many times longer than the one before...
  double ejection_multiplier = 2.0;
  /// ...but never longer than this.
  nanoseconds max_ejection = std::chrono::minutes{5};
  /// Requests let through at once while half-open (at least 1).
  uint32_t half_open_probes = 1;
};

/// A circuit breaker for one source (one remote endpoint or worker). Closed, it counts
/// outcomes; it opens after `consecutive_failures` failures in a row or when the failure ratio
/// in the sliding window reaches `failure_ratio` over at least `minimum_volume` calls. Open, it
/// refuses requests until the ejection ends; each ejection in a row lasts `ejection_multiplier`
/// times longer than the last, capped at `max_ejection`. Then it is half-open and lets up to
/// `half_open_probes` requests through at once: a success closes it (and resets the growth),
/// a failure opens it again for a longer ejection. `eject` opens it for a given time and
/// reason (e.g. an endpoint answering 401).
///
/// Time is passed in by the caller; the breaker keeps no clock. In half-open it cannot tell a
/// probe's outcome from that of a request sent before it opened, so the first outcome reported
/// decides. Not thread-safe: one owner (the scheduler actor) calls it.
class circuit_breaker {
public:
  /// Odd settings are brought into range (at least one bucket and one probe, a positive
  /// window, a multiplier of at least 1, a cap no shorter than the base ejection).
  explicit circuit_breaker(circuit_breaker_config config = {});

  /// Whether to send one more request now. An `allow_probe` takes a probe slot, which the
  /// request's `on_success`, `on_failure` or `on_cancelled` gives back.
  breaker_decision allows(time_point now);

  /// Records a request that succeeded.
  void on_success(time_point now);

  /// Records a request that failed in a way that counts against the source (timeouts, 5xx,
  /// connection errors; not the caller's bad input). `in_a_row` false: it counts towards the
  /// failure ratio only, not the consecutive streak (stragglers the caller gave up on, which
  /// expire together and say nothing about the calls around them).
  /// `cause` (the failure's detail, e.g. "HTTP 500: ...") ends the reason the breaker gives
  /// when this failure trips it, as "5 consecutive failures, the last: CAUSE".
  /// `unheard`: the request never reached the source (no connection could be made). A probe
  /// that failed so re-opens the breaker for the first ejection's length, not a longer one:
  /// trying again costs a source that is not listening nothing, and a provider restarted
  /// after a long outage is then used again within that length of coming back.
  /// `sole`: no other source can take this source's work now (the last one serving a
  /// capability that is not ejected). Ejecting it stops that work rather than moving it, and
  /// retries still score most items of a provider failing half its calls, so it is ejected
  /// only when it fails most calls: its failure ratio counts once the window holds twice
  /// `minimum_volume` calls and must reach halfway from `failure_ratio` to 1 (0.75 for 0.5),
  /// and from then on a streak opens the breaker only once it is three times
  /// `consecutive_failures` long (a provider that stopped answering). A failed probe of such
  /// a source re-opens the breaker for the first ejection's length, as an unheard one does.
  void on_failure(time_point now, bool in_a_row = true, std::string_view cause = {},
                  bool unheard = false, bool sole = false);

  /// Gives back a probe slot whose request ended without an outcome (cancelled, e.g. a hedge
  /// that lost). Does nothing outside half-open.
  void on_cancelled(time_point now);

  /// Opens the breaker now for `duration` and says why, e.g. "401 Unauthorized". An ejection
  /// already running longer is kept (the reason is replaced). Explicit ejections do not grow
  /// the automatic ejection length.
  void eject(time_point now, std::string reason, nanoseconds duration);

  /// The state at `now` (open turns half-open once `open_until()` has passed).
  breaker_state state(time_point now) const noexcept;

  /// When the current (or last) ejection ends; the epoch when it was never opened.
  time_point open_until() const noexcept {
    return open_until_;
  }

  /// Why the breaker last opened, e.g. "5 consecutive failures", or after a failed probe "a
  /// probe failed (ITS CAUSE) after: WHY IT FIRST OPENED"; kept after it closes, empty when it
  /// never opened.
  const std::string& reason() const noexcept {
    return reason_;
  }

  /// Automatic ejections in a row without a probe success since; sets the next ejection's
  /// length (base × multiplier^(n-1), capped).
  uint32_t consecutive_ejections() const noexcept {
    return consecutive_ejections_;
  }

  /// Probes failed in a row since the breaker last closed (heard or not).
  uint32_t failed_probes() const noexcept {
    return failed_probes_;
  }

  /// Times the breaker opened, automatically or by `eject`.
  uint64_t ejections() const noexcept {
    return ejections_;
  }

  /// Failures in a row while closed.
  uint32_t consecutive_failures() const noexcept {
    return consecutive_failures_;
  }

  /// Probe requests out now (half-open only).
  uint32_t probes_in_flight() const noexcept {
    return probes_in_flight_;
  }

  const circuit_breaker_config& config() const noexcept {
    return config_;
  }

private:
  struct bucket {
    /// Which bucket-width slice of time since the epoch this bucket counts (lowest: unused).
    int64_t slice = std::numeric_limits<int64_t>::min();
    uint32_t successes = 0;
    uint32_t failures = 0;
  };

  /// Moves open to half-open once the ejection has ended.
  void advance(time_point now);
  /// Counts an outcome in the window's bucket for `now`.
  void record(time_point now, bool failed);
  /// Calls and failures in the window ending at `now`.
  void window_totals(time_point now, uint64_t& calls, uint64_t& failures) const;
  int64_t slice_of(time_point now) const noexcept;
  void clear_window();
  /// Opens for the next automatic ejection length (`grow` false: for the first ejection's
  /// length, the next automatic one's unchanged).
  void trip(time_point now, std::string reason, bool grow = true);
  void close();
  nanoseconds next_ejection() const noexcept;

  circuit_breaker_config config_;
  nanoseconds bucket_width_;
  std::vector<bucket> buckets_;
  breaker_state state_ = breaker_state::closed;
  time_point open_until_{};
  std::string reason_;
  /// Why the ejections of the current streak began (before any probe failed).
  std::string origin_;
  uint32_t consecutive_failures_ = 0;
  uint32_t consecutive_ejections_ = 0;
  uint32_t failed_probes_ = 0;
  uint32_t probes_in_flight_ = 0;
  uint64_t ejections_ = 0;
};

} // namespace arbiter::scheduler
