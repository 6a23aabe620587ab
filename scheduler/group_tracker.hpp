#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// What is known of one GRPO group (the rollouts of one prompt) at a moment: its members'
/// scores so far. A GRPO advantage needs the whole group, and a group whose scores are all
/// equal teaches nothing (`zero_std`).
struct group_summary {
  std::string group;
  /// Members scored (by their reward or its fallback), failed, and admitted but not ended.
  uint32_t scored = 0;
  uint32_t failed = 0;
  uint32_t pending = 0;
  /// Over the scored members: the mean and the standard deviation with Bessel's correction,
  /// as `torch.std` gives it to GRPO's advantage (0 for fewer than two).
  double mean = 0.0;
  double std = 0.0;
  /// Every scored member has the same score (and at least one was scored).
  bool zero_std = false;
};

/// The groups the scheduler has seen: when each began (its first member's arrival) and its
/// earliest deadline, which order its members in the queues so that a group's remaining members
/// go ahead of later groups' first ones, and the running statistics of its members' scores.
///
/// A group is forgotten once nothing of it is pending and it has been idle for `memory`, so a
/// group name a trainer uses again in a later step starts afresh; and when more than
/// `max_groups` are known, the groups idle longest go first, so a client naming a fresh group
/// per item cannot grow the tracker without bound (a group with members pending stays). Not
/// thread-safe: one owner (the scheduler core).
class group_tracker {
public:
  explicit group_tracker(nanoseconds memory, size_t max_groups = 100000)
    : memory_(memory), max_groups_(std::max<size_t>(max_groups, 1)),
      next_trim_(max_groups_) {}

  /// The times a group's members are ordered by: its first member's arrival (FIFO classes) and
  /// the earliest deadline of its members so far (EDF classes).
  struct order {
    time_point first_arrival;
    time_point earliest_deadline;
  };

  /// Notes a member of `group` arriving at `now` with `deadline` and returns the group's order
  /// times, this member included. `scored_member`: an item whose score counts in the group's
  /// statistics (false for a reward graph's model calls, which only share the group's order).
  order admit(const std::string& group, time_point now, time_point deadline,
              bool scored_member);

  /// When `group`'s first member arrived, if the group is known at `now` (not forgotten, nor
  /// due to be: a name used again past the memory is a new group).
  std::optional<time_point> first_arrival(const std::string& group, time_point now) const;

  /// Notes that a scored member of `group` ended at `now`: with `score`, or failed (null).
  /// Returns the time since the group's first arrival when this left nothing of it pending.
  std::optional<nanoseconds> ended(const std::string& group, time_point now,
                                   const double* score);

  /// Notes that a scored member of `group` was withdrawn at `now` before it ended (its client
  /// hung up): it leaves the pending members without counting as scored or failed, so that a
  /// trainer retrying it counts it once, and the group is not complete by it.
  void withdrawn(const std::string& group, time_point now);

  /// The group's statistics now (all zero for a group not known).
  group_summary summary(const std::string& group) const;

  /// Forgets the groups with nothing pending that have been idle for longer than the memory.
  /// Cheap to call often: it scans at most once per eighth of the memory.
  void prune(time_point now);

  size_t size() const noexcept {
    return groups_.size();
  }

private:
  struct state {
    time_point first_arrival;
    time_point earliest_deadline;
    time_point last_active;
    uint32_t pending = 0;
    uint32_t scored = 0;
    uint32_t failed = 0;
    /// Welford's running mean and sum of squared deviations, and the extremes.
    double mean = 0.0;
    double m2 = 0.0;
    double min = 0.0;
    double max = 0.0;
  };

  /// Nothing of it pending and idle for longer than the memory: forgotten, though `prune` may
  /// not have erased it yet.
  bool expired(const state& g, time_point now) const noexcept {
    return g.pending == 0 && now - g.last_active > memory_;
  }

  /// Forgets the idle groups idle longest until at most three quarters of `max_groups_` are
  /// known (fewer only if enough are idle), then waits for a quarter more before the next
  /// pass: amortized O(1) per new group.
  void trim();

  nanoseconds memory_;
  size_t max_groups_;
  size_t next_trim_;
  std::unordered_map<std::string, state> groups_;
  time_point last_prune_{};
};

} // namespace arbiter::scheduler
