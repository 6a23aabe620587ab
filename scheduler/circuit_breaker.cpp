#include "scheduler/circuit_breaker.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/enum_names.hpp"

namespace arbiter::scheduler {

namespace {

circuit_breaker_config normalized(circuit_breaker_config c) {
  c.window_buckets = std::max<uint32_t>(c.window_buckets, 1);
  c.half_open_probes = std::max<uint32_t>(c.half_open_probes, 1);
  if (c.window < nanoseconds{c.window_buckets}) {
    c.window = nanoseconds{c.window_buckets};
  }
  if (!(c.ejection_multiplier >= 1.0)) {
    c.ejection_multiplier = 1.0;
  }
  c.base_ejection = std::max(c.base_ejection, nanoseconds{0});
  c.max_ejection = std::max(c.max_ejection, c.base_ejection);
  return c;
}

/// Rounds towards negative infinity (time points before the clock's epoch stay ordered).
int64_t floor_div(int64_t a, int64_t b) noexcept {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  return q;
}

} // namespace

constexpr auto breaker_state_names = names_of<breaker_state::half_open>("closed", "open",
                                                                        "half_open");

const char* to_string(breaker_state s) noexcept {
  return breaker_state_names[s];
}

constexpr auto breaker_decision_names = names_of<breaker_decision::reject_probes_busy>(
    "allow", "allow_probe", "reject_open", "reject_probes_busy");

const char* to_string(breaker_decision d) noexcept {
  return breaker_decision_names[d];
}

circuit_breaker::circuit_breaker(circuit_breaker_config config)
  : config_(normalized(config)),
    bucket_width_(config_.window / config_.window_buckets),
    buckets_(config_.window_buckets) {
}

breaker_decision circuit_breaker::allows(time_point now) {
  advance(now);
  switch (state_) {
    case breaker_state::closed:
      return breaker_decision::allow;
    case breaker_state::open:
      return breaker_decision::reject_open;
    default:
      break;
  }
  if (probes_in_flight_ >= config_.half_open_probes) {
    return breaker_decision::reject_probes_busy;
  }
  ++probes_in_flight_;
  return breaker_decision::allow_probe;
}

void circuit_breaker::on_success(time_point now) {
  advance(now);
  if (state_ == breaker_state::half_open) {
    close();
    return;
  }
  if (state_ == breaker_state::closed) {
    consecutive_failures_ = 0;
    record(now, false);
  }
  // Open: a late answer to a request sent before the ejection changes nothing.
}

void circuit_breaker::on_failure(time_point now, bool in_a_row, std::string_view cause,
                                 bool unheard, bool sole) {
  const std::string last = cause.empty() ? std::string{} : ", the last: " + std::string{cause};
  advance(now);
  if (state_ == breaker_state::half_open) {
    // The probe's own cause, and the first one of the streak ("a probe failed
    // (connect_failed: ...) after: 401 Unauthorized"): helper-41 saw a dead provider's
    // probes say only what had first ejected it.
    auto origin = origin_;
    ++failed_probes_;
    // The last source standing is probed again after the first ejection's length, not a
    // doubled one: ejecting it stopped its work, one call per ejection costs a down provider
    // nothing, and doubling kept it ejected up to 300 s after the provider was back (a 60 s
    // outage of the only judge source: scoring came back 15.7 s after the provider did;
    // bench/provider_outage.py).
    trip(now,
         "a probe failed" + (cause.empty() ? std::string{} : " (" + std::string{cause} + ")")
           + " after: " + origin,
         !unheard && !sole);
    origin_ = std::move(origin);
    return;
  }
  if (state_ == breaker_state::open) {
    return;
  }
  if (in_a_row) {
    ++consecutive_failures_;
  }
  record(now, true);
  const bool judges_ratio = config_.failure_ratio > 0.0 && config_.failure_ratio <= 1.0;
  uint64_t calls = 0;
  uint64_t failures = 0;
  window_totals(now, calls, failures);
  // The last source standing is ejected only when it fails most calls: ejecting it stops its
  // work rather than moving it, while retries still score most items of a provider failing
  // half its calls. Its ratio counts over twice the volume (at 30 % failures, 20 calls reach
  // 0.5 about once in 20 windows) and must reach halfway from the threshold to 1; a streak
  // counts at its usual length only while its window is too thin to judge, and three times as
  // long (a provider that stopped answering) after.
  const uint64_t volume = (sole ? 2 : 1) * static_cast<uint64_t>(config_.minimum_volume);
  const bool thin = calls == 0 || calls < volume;
  const uint64_t streak = sole && judges_ratio && !thin
                            ? 3 * static_cast<uint64_t>(config_.consecutive_failures)
                            : config_.consecutive_failures;
  if (in_a_row && config_.consecutive_failures > 0 && consecutive_failures_ >= streak) {
    trip(now, std::to_string(consecutive_failures_) + " consecutive failures" + last);
    return;
  }
  if (!judges_ratio || thin) {
    return;
  }
  const double threshold = sole ? (1.0 + config_.failure_ratio) / 2.0 : config_.failure_ratio;
  double ratio = static_cast<double>(failures) / static_cast<double>(calls);
  if (ratio >= threshold) {
    char text[128];
    std::snprintf(text, sizeof text, "failure ratio %.2f over %llu calls (threshold %.2f)", ratio,
                  static_cast<unsigned long long>(calls), threshold);
    trip(now, text + last);
  }
}

void circuit_breaker::on_cancelled(time_point now) {
  advance(now);
  if (state_ == breaker_state::half_open && probes_in_flight_ > 0) {
    --probes_in_flight_;
  }
}

void circuit_breaker::eject(time_point now, std::string reason, nanoseconds duration) {
  duration = std::max(duration, nanoseconds{0});
  advance(now);
  time_point until = now + duration;
  if (state_ != breaker_state::open || until > open_until_) {
    open_until_ = until;
  }
  if (state_ != breaker_state::open) {
    ++ejections_;
  }
  state_ = breaker_state::open;
  reason_ = std::move(reason);
  origin_ = reason_;
  probes_in_flight_ = 0;
  consecutive_failures_ = 0;
  clear_window();
}

breaker_state circuit_breaker::state(time_point now) const noexcept {
  if (state_ == breaker_state::open && now >= open_until_) {
    return breaker_state::half_open;
  }
  return state_;
}

void circuit_breaker::advance(time_point now) {
  if (state_ == breaker_state::open && now >= open_until_) {
    state_ = breaker_state::half_open;
    probes_in_flight_ = 0;
  }
}

int64_t circuit_breaker::slice_of(time_point now) const noexcept {
  return floor_div(now.time_since_epoch().count(), bucket_width_.count());
}

void circuit_breaker::record(time_point now, bool failed) {
  int64_t slice = slice_of(now);
  auto n = static_cast<int64_t>(buckets_.size());
  auto& b = buckets_[static_cast<size_t>(((slice % n) + n) % n)];
  if (b.slice != slice) {
    b = bucket{};
    b.slice = slice;
  }
  if (failed) {
    ++b.failures;
  } else {
    ++b.successes;
  }
}

void circuit_breaker::window_totals(time_point now, uint64_t& calls, uint64_t& failures) const {
  int64_t slice = slice_of(now);
  auto n = static_cast<int64_t>(buckets_.size());
  calls = 0;
  failures = 0;
  for (const auto& b : buckets_) {
    if (b.slice > slice - n && b.slice <= slice) {
      calls += b.successes + b.failures;
      failures += b.failures;
    }
  }
}

void circuit_breaker::clear_window() {
  for (auto& b : buckets_) {
    b = bucket{};
  }
}

nanoseconds circuit_breaker::next_ejection() const noexcept {
  // Ejection number consecutive_ejections_ (1-based) lasts base × multiplier^(n-1).
  double length = static_cast<double>(config_.base_ejection.count());
  auto cap = static_cast<double>(config_.max_ejection.count());
  for (uint32_t i = 1; i < consecutive_ejections_ && length < cap; ++i) {
    length *= config_.ejection_multiplier;
  }
  if (length >= cap) {
    return config_.max_ejection;
  }
  return nanoseconds{static_cast<int64_t>(length)};
}

void circuit_breaker::trip(time_point now, std::string reason, bool grow) {
  if (grow) {
    ++consecutive_ejections_;
  }
  ++ejections_;
  state_ = breaker_state::open;
  open_until_ = now + (grow ? next_ejection() : config_.base_ejection);
  reason_ = std::move(reason);
  origin_ = reason_;
  probes_in_flight_ = 0;
  consecutive_failures_ = 0;
  clear_window();
}

void circuit_breaker::close() {
  state_ = breaker_state::closed;
  consecutive_ejections_ = 0;
  failed_probes_ = 0;
  consecutive_failures_ = 0;
  probes_in_flight_ = 0;
  clear_window();
}

} // namespace arbiter::scheduler
