#include "scheduler/admission.hpp"

#include <algorithm>
#include <cmath>

namespace arbiter::scheduler {

namespace {

/// Rounds a wait in milliseconds up to whole seconds, at least one.
std::chrono::seconds whole_seconds(double ms) {
  auto s = std::ceil(std::max(ms, 0.0) / 1000.0);
  return std::chrono::seconds{std::max<int64_t>(1, static_cast<int64_t>(s))};
}

} // namespace

const char* to_string(admission_decision d) noexcept {
  switch (d) {
    case admission_decision::admit:
      return "admitted";
    case admission_decision::reject_queue_full:
      return "queue_full";
    case admission_decision::reject_deadline_unmeetable:
      return "deadline_unmeetable";
    default:
      return "draining";
  }
}

void service_estimator::record(double item_ms) noexcept {
  if (!(item_ms >= 0.0) || !std::isfinite(item_ms)) {
    return;
  }
  average_ms_ = samples_ == 0 ? item_ms : average_ms_ + weight_ * (item_ms - average_ms_);
  ++samples_;
}

admission_result decide_admission(const admission_input& in) {
  admission_result result;
  auto parallel = static_cast<double>(std::max<size_t>(in.parallel_sources, 1));
  bool estimated = in.estimate != nullptr && in.estimate->has_samples();
  double item_ms = estimated ? in.estimate->item_ms() : 0.0;
  if (in.draining) {
    result.decision = admission_decision::reject_draining;
    result.retry_after = std::chrono::seconds{1};
    result.reason = "the server is shutting down";
    return result;
  }
  if (in.items > in.free_capacity) {
    result.decision = admission_decision::reject_queue_full;
    // Room for the missing items appears as queued items are served.
    auto missing = static_cast<double>(in.items - in.free_capacity);
    result.retry_after = whole_seconds(missing * item_ms / parallel);
    result.reason = "priority class '" + in.priority + "' has room for "
                    + std::to_string(in.free_capacity) + " more items, the request has "
                    + std::to_string(in.items);
    return result;
  }
  if (estimated) {
    double wait_ms = static_cast<double>(in.items_ahead) * item_ms / parallel;
    double left_ms = std::chrono::duration<double, std::milli>(in.time_left).count();
    if (wait_ms > left_ms) {
      result.decision = admission_decision::reject_deadline_unmeetable;
      result.retry_after = whole_seconds(wait_ms - left_ms);
      result.reason = "expected queue wait " + std::to_string(static_cast<int64_t>(wait_ms))
                      + " ms exceeds the deadline ("
                      + std::to_string(static_cast<int64_t>(left_ms)) + " ms left)";
      return result;
    }
  }
  return result;
}

} // namespace arbiter::scheduler
