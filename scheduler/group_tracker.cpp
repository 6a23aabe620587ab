#include "scheduler/group_tracker.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace arbiter::scheduler {

group_tracker::order group_tracker::admit(const std::string& group, time_point now,
                                          time_point deadline, bool scored_member) {
  auto [found, fresh] = groups_.try_emplace(group);
  auto& g = found->second;
  if (!fresh && expired(g, now)) {
    // The name is used again after the group was forgotten (a later step): a new group.
    g = state{};
    fresh = true;
  }
  if (fresh) {
    g.first_arrival = now;
    g.earliest_deadline = deadline;
  } else {
    g.earliest_deadline = std::min(g.earliest_deadline, deadline);
  }
  g.last_active = now;
  if (scored_member) {
    ++g.pending;
  }
  const order out{g.first_arrival, g.earliest_deadline};
  if (fresh && groups_.size() > next_trim_) {
    trim();
  }
  return out;
}

void group_tracker::trim() {
  // Erasing one element of an unordered_map leaves the other iterators valid.
  std::vector<std::pair<time_point, decltype(groups_)::iterator>> idle;
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (it->second.pending == 0) {
      idle.emplace_back(it->second.last_active, it);
    }
  }
  const size_t keep = max_groups_ - max_groups_ / 4;
  const size_t drop = std::min(idle.size(), groups_.size() > keep ? groups_.size() - keep : 0);
  const auto oldest_end = idle.begin() + static_cast<std::ptrdiff_t>(drop);
  std::nth_element(idle.begin(), oldest_end, idle.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto it = idle.begin(); it != oldest_end; ++it) {
    groups_.erase(it->second);
  }
  next_trim_ = std::max(max_groups_, groups_.size() + max_groups_ / 4);
}

std::optional<nanoseconds> group_tracker::ended(const std::string& group, time_point now,
                                                const double* score) {
  auto found = groups_.find(group);
  if (found == groups_.end()) {
    return std::nullopt;
  }
  auto& g = found->second;
  g.last_active = now;
  std::optional<nanoseconds> complete;
  if (g.pending > 0 && --g.pending == 0) {
    complete = now - g.first_arrival;
  }
  if (score == nullptr) {
    ++g.failed;
    return complete;
  }
  double x = *score;
  ++g.scored;
  if (g.scored == 1) {
    g.min = x;
    g.max = x;
  } else {
    g.min = std::min(g.min, x);
    g.max = std::max(g.max, x);
  }
  double delta = x - g.mean;
  g.mean += delta / g.scored;
  g.m2 += delta * (x - g.mean);
  return complete;
}

std::optional<time_point> group_tracker::first_arrival(const std::string& group,
                                                       time_point now) const {
  auto found = groups_.find(group);
  if (found == groups_.end() || expired(found->second, now)) {
    return std::nullopt;
  }
  return found->second.first_arrival;
}

void group_tracker::withdrawn(const std::string& group, time_point now) {
  auto found = groups_.find(group);
  if (found == groups_.end()) {
    return;
  }
  found->second.last_active = now;
  if (found->second.pending > 0) {
    --found->second.pending;
  }
}

group_summary group_tracker::summary(const std::string& group) const {
  group_summary out;
  out.group = group;
  auto found = groups_.find(group);
  if (found == groups_.end()) {
    return out;
  }
  const auto& g = found->second;
  out.scored = g.scored;
  out.failed = g.failed;
  out.pending = g.pending;
  out.mean = g.mean;
  out.std = g.scored > 1 ? std::sqrt(std::max(0.0, g.m2) / (g.scored - 1)) : 0.0;
  out.zero_std = g.scored > 0 && g.min == g.max;
  return out;
}

void group_tracker::prune(time_point now) {
  if (now - last_prune_ < memory_ / 8) {
    return;
  }
  last_prune_ = now;
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (expired(it->second, now)) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace arbiter::scheduler
