#include "scheduler/adaptive_concurrency.hpp"

#include <algorithm>
#include <cmath>

#include "common/enum_names.hpp"

namespace arbiter::scheduler {

namespace {

adaptive_concurrency_config normalized(adaptive_concurrency_config c) {
  c.min_limit = std::max<uint32_t>(c.min_limit, 1);
  c.max_limit = std::max(c.max_limit, c.min_limit);
  c.initial_limit = std::clamp(c.initial_limit, c.min_limit, c.max_limit);
  if (!(c.backoff_ratio > 0.0 && c.backoff_ratio < 1.0)) {
    c.backoff_ratio = 0.7;
  }
  c.target_latency = std::max(c.target_latency, nanoseconds{0});
  if (!(c.growth_tolerance >= 1.0) || !std::isfinite(c.growth_tolerance)) {
    c.growth_tolerance = 1.0;
  }
  if (!(c.blowup_tolerance >= c.growth_tolerance) || !std::isfinite(c.blowup_tolerance)) {
    c.blowup_tolerance = c.growth_tolerance;
  }
  return c;
}

/// `base` × `factor`, in nanoseconds.
double scaled(nanoseconds base, double factor) noexcept {
  return static_cast<double>(base.count()) * factor;
}

} // namespace

constexpr auto sample_kind_names = names_of<sample_kind::failed>("ok", "overloaded", "failed");

const char* to_string(sample_kind k) noexcept {
  return sample_kind_names[k];
}

adaptive_concurrency::adaptive_concurrency(adaptive_concurrency_config config)
  : config_(normalized(config)), limit_(config_.initial_limit), slow_start_(config_.slow_start) {
}

nanoseconds adaptive_concurrency::baseline() const noexcept {
  if (config_.target_latency > nanoseconds{0}) {
    return config_.target_latency;
  }
  return min_latency_;
}

void adaptive_concurrency::reset_baseline() noexcept {
  has_min_ = false;
  min_latency_ = nanoseconds{0};
  good_samples_ = 0;
}

limit_change adaptive_concurrency::on_sample(nanoseconds latency, sample_kind kind,
                                             time_point now) {
  latency = std::max(latency, nanoseconds{0});
  if (kind == sample_kind::failed) {
    return limit_change::unchanged;
  }
  if (kind == sample_kind::overloaded) {
    return decrease(latency, now);
  }
  if (!has_min_ || latency < min_latency_) {
    min_latency_ = latency;
    has_min_ = true;
  }
  auto base = baseline();
  if (base <= nanoseconds{0}) {
    // A zero baseline (instant answers) gives nothing to judge latency against.
    return increase_step();
  }
  auto observed = static_cast<double>(latency.count());
  if (observed > scaled(base, config_.blowup_tolerance)) {
    return decrease(latency, now);
  }
  if (observed > scaled(base, config_.growth_tolerance)) {
    // Slower than good, not yet a blow-up: hold, and start the window again.
    good_samples_ = 0;
    return limit_change::unchanged;
  }
  return increase_step();
}

void adaptive_concurrency::open_up() noexcept {
  if (!slow_start_) {
    return;
  }
  slow_start_ = false;
  good_samples_ = 0;
  if (limit_ < config_.max_limit) {
    limit_ = config_.max_limit;
    ++increases_;
  }
}

limit_change adaptive_concurrency::cap_at(uint32_t in_flight, time_point now) {
  good_samples_ = 0;
  slow_start_ = false;
  has_cut_ = true;
  last_cut_ = now;
  auto cap = std::clamp(in_flight, config_.min_limit, config_.max_limit);
  if (cap >= limit_) {
    return limit_change::unchanged;
  }
  cut_from_ = cap + 1; // one past the cap: the step up to it waits `regrowth_rounds` windows
  limit_ = cap;
  ++decreases_;
  return limit_change::decreased;
}

limit_change adaptive_concurrency::increase_step() {
  if (limit_ >= config_.max_limit) {
    good_samples_ = 0;
    return limit_change::unchanged;
  }
  ++good_samples_;
  uint32_t window = slow_start_ ? 1 : config_.growth_window > 0 ? config_.growth_window : limit_;
  if (!slow_start_ && limit_ + 1 == cut_from_) {
    // Back to where the endpoint refused: hold below it a while before trying again.
    window *= std::max<uint32_t>(config_.regrowth_rounds, 1);
  }
  if (good_samples_ < window) {
    return limit_change::unchanged;
  }
  good_samples_ = 0;
  ++limit_;
  ++increases_;
  return limit_change::increased;
}

limit_change adaptive_concurrency::decrease(nanoseconds latency, time_point now) {
  good_samples_ = 0;
  if (has_cut_ && now - latency < last_cut_) {
    // Sent before the last cut, under the old limit: that cut already answered it.
    return limit_change::unchanged;
  }
  has_cut_ = true;
  last_cut_ = now;
  slow_start_ = false;
  auto cut = static_cast<uint32_t>(std::floor(static_cast<double>(limit_) * config_.backoff_ratio));
  cut = std::max(cut, config_.min_limit);
  if (cut >= limit_) {
    return limit_change::unchanged;
  }
  cut_from_ = limit_;
  limit_ = cut;
  ++decreases_;
  return limit_change::decreased;
}

} // namespace arbiter::scheduler
