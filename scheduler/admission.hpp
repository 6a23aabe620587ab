#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// What admission control decided for a request.
enum class admission_decision {
  /// Queue the request.
  admit,
  /// Its priority class cannot hold all of its items.
  reject_queue_full,
  /// The expected queue wait already exceeds its deadline.
  reject_deadline_unmeetable,
  /// The server is draining.
  reject_draining,
};

/// The decision with what the client needs to act on it.
struct admission_result {
  admission_decision decision = admission_decision::admit;
  /// When a rejected client should try again (whole seconds, at least 1 s).
  std::chrono::seconds retry_after{0};
  /// A sentence for the error body, e.g. "priority class 'low' has room for 10 of 64 items".
  std::string reason;

  bool admitted() const noexcept {
    return decision == admission_decision::admit;
  }
};

/// The metric label of a decision: "admitted", "queue_full", "deadline_unmeetable",
/// "draining".
const char* to_string(admission_decision d) noexcept;

/// An exponentially weighted moving average of the time one item takes on one source.
class service_estimator {
public:
  /// `weight` is the share of each new sample in the average.
  explicit service_estimator(double weight = 0.05) : weight_(weight) {
  }

  /// Adds the time one item took, in milliseconds.
  void record(double item_ms) noexcept;

  bool has_samples() const noexcept {
    return samples_ > 0;
  }

  /// The current estimate, in milliseconds per item (0 without samples).
  double item_ms() const noexcept {
    return average_ms_;
  }

private:
  double weight_;
  double average_ms_ = 0.0;
  uint64_t samples_ = 0;
};

/// Everything admission control looks at.
struct admission_input {
  bool draining = false;
  /// Items in the request.
  size_t items = 0;
  /// The priority class, for messages.
  std::string priority;
  /// How many more items the request's priority class can hold.
  size_t free_capacity = 0;
  /// Items queued at the request's priority or above (what it would wait behind).
  size_t items_ahead = 0;
  /// Sources that can work in parallel on these items.
  size_t parallel_sources = 1;
  /// The service-time estimate for these items.
  const service_estimator* estimate = nullptr;
  /// Time until the request's deadline.
  nanoseconds time_left{0};
};

/// Decides whether a request is queued. Requests are queued while their deadline allows: a
/// request is refused only when its class is full, or when the expected wait (items ahead ×
/// time per item ÷ parallel sources, known once items have been served) is already longer than
/// its deadline. Refusals carry a Retry-After estimate of when the queue will have room.
admission_result decide_admission(const admission_input& in);

} // namespace arbiter::scheduler
