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

/// A Retry-After past the requests refused before that come back no later than it.
struct past_refused {
  std::chrono::seconds retry_after{1};
  /// What those take at the sources' pace.
  double ahead_ms = 0.0;
};

/// The Retry-After of a request that would fit again after `own_ms`: the refused requests
/// told to come back by then come back ahead of it, and each one counted may move it past
/// more (a fixed point, at most `refusal_backlog::max_seconds` of them). Those told to come
/// back later come after it: counted too, requests refused and never sent again held later
/// ones back by up to a minute on an idle server (helper-63).
past_refused after_the_refused(double own_ms, const admission_input& in) {
  past_refused out{whole_seconds(own_ms), 0.0};
  if (in.refused_rate <= 0.0) {
    return out;
  }
  for (;;) {
    double items = 0.0;
    for (const auto& [due, count] : in.refused) {
      if (due > static_cast<double>(out.retry_after.count())) {
        break;
      }
      items += count;
    }
    double ahead = std::min(items / in.refused_rate, refusal_backlog::max_seconds) * 1000.0;
    if (ahead <= out.ahead_ms) {
      return out;
    }
    out.ahead_ms = ahead;
    out.retry_after = whole_seconds(own_ms + ahead);
  }
}

/// What a Retry-After adds for the requests refused before: a reason's tail.
std::string after_refused(const past_refused& past) {
  if (past.ahead_ms < 1.0) {
    return {};
  }
  return "; the requests refused before it come back first, for about "
         + std::to_string(static_cast<int64_t>(past.ahead_ms)) + " ms";
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

std::vector<std::pair<double, double>> refusal_backlog::pending(const std::string& capability,
                                                               size_t cls, time_point now) {
  std::vector<std::pair<double, double>> out;
  auto it = entries_.lower_bound({capability, 0});
  while (it != entries_.end() && it->first.first == capability && it->first.second <= cls) {
    if (prune(it->second, now)) {
      for (const auto& [due, items] : it->second.due) {
        out.emplace_back(std::chrono::duration<double>(due - now).count(), items);
      }
      ++it;
    } else {
      it = entries_.erase(it);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
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
    auto past = after_the_refused(rate > 0.0 ? missing / rate * 1000.0 : 0.0, in);
    result.retry_after = past.retry_after;
    result.reason = "priority class '" + in.priority + "' has room for "
                    + std::to_string(in.free_capacity) + " more items, the request has "
                    + std::to_string(in.items) + after_refused(past);
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
    auto past = after_the_refused(std::min(soonest_ms, wait_ms) - left_ms, in);
    result.retry_after = past.retry_after;
    result.reason = "expected to be answered in " + std::to_string(static_cast<int64_t>(wait_ms))
                    + " ms, after its deadline (" + std::to_string(static_cast<int64_t>(left_ms))
                    + " ms left), at the pace its sources allow" + after_refused(past);
    return result;
  }
  return result;
}

} // namespace arbiter::scheduler
