#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// How long before their item's deadline a reward graph's model calls must end (at most a
/// tenth of the time left), so that the graph can still score their answers: admission counts
/// it (so capped) in a graph item's expected wait.
inline constexpr nanoseconds graph_call_margin = std::chrono::milliseconds{50};

/// What admission control decided for a request.
enum class admission_decision {
  /// Queue the request.
  admit,
  /// Its priority class cannot hold all of its items now.
  reject_queue_full,
  /// The expected queue wait already exceeds its deadline.
  reject_deadline_unmeetable,
  /// The server is draining.
  reject_draining,
  /// It has more items than its priority class holds even when empty: it never fits, so it
  /// is not worth a retry as it is (answered 413 naming `items`).
  reject_too_large,
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
/// "draining", "too_large".
const char* to_string(admission_decision d) noexcept;

/// Everything admission control looks at.
struct admission_input {
  bool draining = false;
  /// Items in the request.
  size_t items = 0;
  /// The priority class, for messages.
  std::string priority;
  /// How many more items the request's priority class can hold, and how many it holds in all.
  size_t free_capacity = 0;
  size_t capacity = 0;
  /// The expected time until the request's last item is answered: the work ahead of it and
  /// its own over the capacity of the sources that serve it (see
  /// `scheduler_core::expected_wait`). Unset while that capacity is not known.
  std::optional<nanoseconds> expected_wait;
  /// The same on an idle server (nothing ahead, the whole capacity): past twice the time
  /// left, no retry would fit either. Unset: not computed (the request fits) or unknown.
  std::optional<nanoseconds> alone_wait;
  /// `expected_wait` at the soonest (a batching source's full calls at the least they can
  /// cost while not known yet), for the `Retry-After` of a request refused for its deadline:
  /// when it might fit. Unset: `expected_wait`.
  std::optional<nanoseconds> soonest_wait;
  /// Items per second its sources take, for the Retry-After of a full class (unset: unknown).
  std::optional<double> items_per_second;
  /// Time until the request's deadline.
  nanoseconds time_left{0};
  /// The items of the requests refused before it that are not back yet (`refusal_backlog`):
  /// (seconds until they were told to come back, items), soonest first. Those told to come
  /// back no later than it would be come back ahead of it, so its Retry-After counts them at
  /// `refused_rate` items a second; those told later come after it.
  std::vector<std::pair<double, double>> refused;
  double refused_rate = 0.0;
};

/// Decides whether a request is queued. Requests are queued while their deadline allows: a
/// request is refused only when its class is full, or when it is expected to be answered only
/// after its deadline. Refusals carry a Retry-After: when the queue will have drained enough
/// for the same request to fit.
admission_result decide_admission(const admission_input& in);

/// The items of requests refused with a Retry-After, per priority class and capability, that
/// will come back: those told to come back no later than a request of their class or a lower
/// one refused after them come back ahead of it, so its Retry-After counts them too (a herd
/// of single-item requests refused in one instant was told one Retry-After, and 9 in 10 of
/// its retries were refused again), at most `max_seconds` of them. They count until the time
/// they were told to come back: then they are back (queued, or refused again and counted
/// anew: counted on after their time, a herd told to come back in 1 s was counted twice and
/// told half a minute more than the queue needed, helper-61).
class refusal_backlog {
public:
  static constexpr double max_seconds = 60.0;

  /// Whether items refused for `capability` may still be coming back.
  bool holds(const std::string& capability) const;

  /// The items refused in class `cls` and those above it, not back yet at `now`: (seconds
  /// until they were told to come back, items), soonest first.
  std::vector<std::pair<double, double>> pending(const std::string& capability, size_t cls,
                                                 time_point now);

  /// Notes `items` of class `cls` refused at `now` and told to come back at `due`.
  void add(const std::string& capability, size_t cls, double items, time_point due,
           time_point now);

private:
  struct entry {
    /// Items by when they were told to come back.
    std::map<time_point, double> due;
    double items = 0.0;
  };
  /// Forgets what is back by `now`; false when nothing is left.
  static bool prune(entry& e, time_point now);

  std::map<std::pair<std::string, size_t>, entry> entries_;
};

} // namespace arbiter::scheduler
