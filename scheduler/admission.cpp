#include "scheduler/admission.hpp"

#include <algorithm>
#include <cmath>

#include "common/enum_names.hpp"

namespace arbiter::scheduler {

namespace {

/// Rounds a wait in milliseconds up to whole seconds, at least one.
std::chrono::seconds whole_seconds(double ms) {
  auto s = std::ceil(std::max(ms, 0.0) / 1000.0);
  return std::chrono::seconds{std::max<int64_t>(1, static_cast<int64_t>(s))};
}

double milliseconds_of(nanoseconds d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

/// What a Retry-After adds for the requests refused before: a reason's tail.
std::string after_refused(nanoseconds ahead) {
  if (ahead < std::chrono::milliseconds{1}) {
    return {};
  }
  return "; the requests refused before it come back first, for about "
         + std::to_string(static_cast<int64_t>(milliseconds_of(ahead))) + " ms";
}

} // namespace

bool refusal_backlog::holds(const std::string& capability) const {
  auto it = entries_.lower_bound({capability, 0});
  return it != entries_.end() && it->first.first == capability;
}

bool refusal_backlog::prune(entry& e, time_point now) {
  while (!e.due.empty() && e.due.begin()->first <= now) {
    e.items -= e.due.begin()->second;
    e.due.erase(e.due.begin());
  }
  if (e.due.empty()) {
    e.items = 0.0;
  }
  return e.items > 0.0;
}

double refusal_backlog::seconds(const std::string& capability, size_t cls, double rate,
                                time_point now) {
  if (rate <= 0.0) {
    return 0.0;
  }
  double items = 0.0;
  auto it = entries_.lower_bound({capability, 0});
  while (it != entries_.end() && it->first.first == capability && it->first.second <= cls) {
    if (prune(it->second, now)) {
      items += it->second.items;
      ++it;
    } else {
      it = entries_.erase(it);
    }
  }
  return std::min(items / rate, max_seconds);
}

void refusal_backlog::add(const std::string& capability, size_t cls, double items,
                          time_point due, time_point now) {
  if (items <= 0.0 || due <= now) {
    return;
  }
  auto& e = entries_[{capability, cls}];
  prune(e, now);
  e.due[due] += items;
  e.items += items;
}

constexpr auto admission_decision_names = names_of<admission_decision::reject_too_large>(
    "admitted", "queue_full", "deadline_unmeetable", "draining", "too_large");

const char* to_string(admission_decision d) noexcept {
  return admission_decision_names[d];
}

admission_result decide_admission(const admission_input& in) {
  admission_result result;
  if (in.draining) {
    result.decision = admission_decision::reject_draining;
    result.retry_after = std::chrono::seconds{1};
    result.reason = "the server is shutting down";
    return result;
  }
  if (in.items > in.capacity && in.capacity > 0) {
    result.decision = admission_decision::reject_too_large;
    result.reason = "priority class '" + in.priority + "' holds at most "
                    + std::to_string(in.capacity) + " items (its capacity), the request has "
                    + std::to_string(in.items) + ": send it in smaller requests";
    return result;
  }
  if (in.items > in.free_capacity) {
    result.decision = admission_decision::reject_queue_full;
    // Room for the missing items appears as queued items are served.
    auto missing = static_cast<double>(in.items - in.free_capacity);
    double rate = in.items_per_second.value_or(0.0);
    result.retry_after = whole_seconds((rate > 0.0 ? missing / rate * 1000.0 : 0.0)
                                       + milliseconds_of(in.refused_ahead));
    result.reason = "priority class '" + in.priority + "' has room for "
                    + std::to_string(in.free_capacity) + " more items, the request has "
                    + std::to_string(in.items) + after_refused(in.refused_ahead);
    return result;
  }
  if (in.alone_wait && *in.alone_wait > 2 * in.time_left) {
    // Even alone it would end far past its deadline: a Retry-After would only bring it back
    // to the same answer (and SDKs retry a 429 on their own). The margin leaves room for
    // the capacity estimate, which grows as sources prove faster.
    double alone_ms = std::chrono::duration<double, std::milli>(*in.alone_wait).count();
    double left_ms = std::chrono::duration<double, std::milli>(in.time_left).count();
    result.decision = admission_decision::reject_too_large;
    // One item cannot be split: only a longer deadline helps it.
    const bool one = in.items == 1;
    result.reason = (one ? std::string{"its item alone takes about "}
                         : "its " + std::to_string(in.items) + " items alone take about ")
                    + std::to_string(static_cast<int64_t>(alone_ms))
                    + " ms at the pace its sources allow, more than twice its deadline ("
                    + std::to_string(static_cast<int64_t>(left_ms))
                    + " ms left), so no retry fits: "
                    + (one ? "send it with a longer deadline_ms"
                           : "send them in smaller requests, or with a longer deadline_ms");
    return result;
  }
  if (in.expected_wait && *in.expected_wait > in.time_left) {
    double wait_ms = std::chrono::duration<double, std::milli>(*in.expected_wait).count();
    double left_ms = std::chrono::duration<double, std::milli>(in.time_left).count();
    result.decision = admission_decision::reject_deadline_unmeetable;
    // The work ahead drains at the sources' pace: after this long, the same request with the
    // same deadline would fit (at the soonest: a fresh server's herd was told a minute, at
    // the pace of its first single-item calls).
    double soonest_ms = in.soonest_wait
                          ? std::chrono::duration<double, std::milli>(*in.soonest_wait).count()
                          : wait_ms;
    result.retry_after = whole_seconds(std::min(soonest_ms, wait_ms) - left_ms
                                       + milliseconds_of(in.refused_ahead));
    result.reason = "expected to be answered in " + std::to_string(static_cast<int64_t>(wait_ms))
                    + " ms, after its deadline (" + std::to_string(static_cast<int64_t>(left_ms))
                    + " ms left), at the pace its sources allow" + after_refused(in.refused_ahead);
    return result;
  }
  return result;
}

} // namespace arbiter::scheduler
