#pragma once

#include <cstddef>
#include <set>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// The wake-ups a scheduler actor has asked its clock for. A delayed message cannot be taken
/// back, so one asked for earlier stays coming after a later need replaced it; this keeps every
/// one until it comes, and asks for a new one only when none already coming is at or before the
/// time needed. (Forgetting the others when any came, as the actor once did, asked for one more
/// on each: under steady load the wake-ups in flight, and the clock thread's work, grew without
/// bound.) Not thread-safe: one owner.
class wakeup_timers {
public:
  /// Whether a wake-up at `at` must be asked for; it is noted as coming when so.
  bool arm(time_point at) {
    if (!coming_.empty() && *coming_.begin() <= at) {
      return false;
    }
    coming_.insert(at);
    return true;
  }

  /// The wake-up asked for `at` came.
  void fired(time_point at) {
    if (auto found = coming_.find(at); found != coming_.end()) {
      coming_.erase(found);
    }
  }

  /// Wake-ups asked for that have not come yet.
  size_t coming() const noexcept {
    return coming_.size();
  }

private:
  std::multiset<time_point> coming_;
};

} // namespace arbiter::scheduler
