#pragma once

#include <chrono>
#include <cstdint>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// What one finished request says about a source's capacity.
enum class sample_kind {
  /// It succeeded; its latency is judged against the baseline.
  ok,
  /// The source pushed back: 429, 503, a timeout, "overloaded". Cuts the limit.
  overloaded,
  /// It failed for a reason that says nothing about load (bad input, 4xx other than 429, a
  /// parse error). Leaves the limit alone.
  failed,
};

/// What one sample did to the limit.
enum class limit_change {
  /// The limit stayed where it was.
  unchanged,
  /// A window of good samples raised it by one.
  increased,
  /// Overload or a latency blow-up cut it.
  decreased,
};

/// The metric label of a kind: "ok", "overloaded", "failed".
const char* to_string(sample_kind k) noexcept;

/// How an adaptive limit moves.
struct adaptive_concurrency_config {
  uint32_t initial_limit = 4;
  /// Bounds (min at least 1; initial is brought inside them).
  uint32_t min_limit = 1;
  uint32_t max_limit = 64;
  /// An `overloaded` sample or a blow-up multiplies the limit by this (in (0, 1)).
  double backoff_ratio = 0.7;
  /// Latency the source is judged against. Zero: the lowest latency observed on `ok` samples.
  nanoseconds target_latency{0};
  /// An `ok` sample counts towards growth when its latency is at most this × the baseline...
  double growth_tolerance = 1.5;
  /// ...and cuts the limit when it is over this × the baseline (at least `growth_tolerance`).
  double blowup_tolerance = 3.0;
  /// Good samples needed for +1. Zero: the current limit (about one increase per round of
  /// requests, as in TCP congestion avoidance).
  uint32_t growth_window = 0;
  /// Start in slow start, as TCP does: every good sample adds one (the limit doubles per
  /// round) until the first cut, then the window above applies. For endpoints whose limits
  /// nobody configured: they start small and ramp up instead of taking a blast.
  bool slow_start = false;
  /// After a cut, the step back up to the limit that was cut takes this many windows instead
  /// of one. A provider that caps its calls in flight answers the call past its cap with a
  /// 429 whose Retry-After holds the whole endpoint back; probing it every round kept it at
  /// half its capacity. 1: no such plateau.
  uint32_t regrowth_rounds = 8;
};

/// An AIMD concurrency limit for one source: how many requests may be out to it at once.
/// It starts at `initial_limit` (with `slow_start`, every good sample adds one until the first
/// cut); each window of `ok` samples whose latency stays within
/// `growth_tolerance` × the baseline adds one; an `overloaded` sample, or an `ok` one slower
/// than `blowup_tolerance` × the baseline, multiplies it by `backoff_ratio` (rounded down). It
/// stays within [min_limit, max_limit]. Growing back to the limit last cut takes
/// `regrowth_rounds` windows.
///
/// One cut per round: a sample whose request started (now − latency) before the last cut was
/// sent under the old limit and does not cut again, so a burst of 429s from one round costs
/// one decrease, not one per request. Time is passed in by the caller. Not thread-safe: one
/// owner (the scheduler actor) calls it.
class adaptive_concurrency {
public:
  /// Odd settings are brought into range (see `adaptive_concurrency_config`).
  explicit adaptive_concurrency(adaptive_concurrency_config config = {});

  /// The requests that may be out to the source at once now.
  uint32_t limit() const noexcept {
    return limit_;
  }

  /// Records one finished request that took `latency` and ended at `now`.
  limit_change on_sample(nanoseconds latency, sample_kind kind, time_point now);

  /// The latency `ok` samples are judged against: the target, else the lowest observed
  /// (zero before the first `ok` sample).
  nanoseconds baseline() const noexcept;

  /// The lowest latency seen on an `ok` sample (zero before the first).
  nanoseconds min_latency() const noexcept {
    return min_latency_;
  }

  /// Forgets the lowest observed latency (e.g. after the endpoint's model changed), so the
  /// next `ok` sample sets it again.
  void reset_baseline() noexcept;

  uint64_t increases() const noexcept {
    return increases_;
  }

  uint64_t decreases() const noexcept {
    return decreases_;
  }

  /// Whether the limit still doubles per round (slow start, until the first cut).
  bool in_slow_start() const noexcept {
    return slow_start_;
  }

  /// Ends slow start at the maximum: what slow start guarded against is now known (the
  /// endpoint's rate limits, which pacing then keeps to).
  void open_up() noexcept;

  /// The endpoint refused a call past a cap on its calls in flight while `in_flight` calls
  /// were still out to it (a 429 although its rate-limit headers showed room). The cap is at
  /// most that: the limit drops to it at once (not × `backoff_ratio` a round, each round a
  /// burst of refusals), slow start ends, and the step back above it takes
  /// `regrowth_rounds` windows. Refusals of one burst each lower it to what is still out.
  limit_change cap_at(uint32_t in_flight, time_point now);

  const adaptive_concurrency_config& config() const noexcept {
    return config_;
  }

private:
  limit_change increase_step();
  limit_change decrease(nanoseconds latency, time_point now);

  adaptive_concurrency_config config_;
  uint32_t limit_;
  /// Good samples since the last change.
  uint32_t good_samples_ = 0;
  nanoseconds min_latency_{0};
  bool has_min_ = false;
  /// When the limit was last cut (meaningful once `has_cut_`).
  time_point last_cut_{};
  bool has_cut_ = false;
  /// The limit the last cut was made from (0: none yet).
  uint32_t cut_from_ = 0;
  bool slow_start_ = false;
  uint64_t increases_ = 0;
  uint64_t decreases_ = 0;
};

} // namespace arbiter::scheduler
