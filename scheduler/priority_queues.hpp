#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/time_source.hpp"
#include "config/config.hpp"
#include "scheduler/ids.hpp"

namespace arbiter::scheduler {

/// A task waiting in a queue: one item of one request.
struct queued_task {
  task_id id = 0;
  request_id request = 0;
  /// The item's position in its request.
  uint32_t index = 0;
  time_point deadline;
  time_point enqueued;
  /// When set, the time the task is ordered by instead of its own (`enqueued` in a FIFO
  /// class, `deadline` in an EDF one): its GRPO group's, so that the group leaves together.
  std::optional<time_point> order_at;
  /// Its prompt tokens as estimated at submission (unscaled; 0 where none is kept), summed by
  /// `waiting_tokens` for admission's token pacing.
  uint64_t tokens = 0;
  /// Its work for a local model that weighs items so (`estimate_model_work`; 0 where none is
  /// kept), summed by `waiting_work` for admission.
  uint64_t work = 0;
};

/// Bounded queues, one per priority class, each split by the capability its tasks need so that
/// a busy capability never blocks another. Inside a class, tasks leave in FIFO (by the time
/// they were first enqueued, so a task queued again keeps its place) or
/// earliest-deadline-first order, as configured; a task with an `order_at` is ordered by that
/// time instead (its group's first arrival or earliest deadline), ties in arrival order.
class priority_queues {
public:
  explicit priority_queues(const std::vector<config::priority_class>& classes);

  size_t class_count() const noexcept {
    return classes_.size();
  }

  const std::string& class_name(size_t cls) const {
    return classes_.at(cls).config.name;
  }

  /// The index of the class called `name`, if any.
  std::optional<size_t> find_class(std::string_view name) const;

  /// Tasks queued in `cls`.
  size_t depth(size_t cls) const {
    return classes_.at(cls).size;
  }

  /// Tasks queued in every class.
  size_t total_depth() const noexcept {
    return index_.size();
  }

  /// How many more tasks `cls` may hold.
  size_t free_capacity(size_t cls) const;

  /// How many tasks `cls` may hold in all (its `capacity`).
  size_t capacity(size_t cls) const {
    return classes_.at(cls).config.capacity;
  }

  /// Queues `task` in `cls` under `capability`. Returns false, queueing nothing, when the class
  /// is full, unless `beyond_capacity` (work an admitted item has already been let in for).
  [[nodiscard]] bool push(size_t cls, const std::string& capability, const queued_task& task,
                          bool beyond_capacity = false);

  /// Removes and returns the next task of `cls` needing `capability`.
  std::optional<queued_task> pop(size_t cls, const std::string& capability);

  /// Tasks of `cls` waiting for `capability`.
  size_t waiting(size_t cls, const std::string& capability) const;

  /// The estimated prompt tokens (`queued_task::tokens`) of the tasks of `cls` waiting for
  /// `capability`, summed.
  uint64_t waiting_tokens(size_t cls, const std::string& capability) const;

  /// The work (`queued_task::work`) of the tasks of `cls` waiting for `capability`, summed.
  uint64_t waiting_work(size_t cls, const std::string& capability) const;

  /// Every capability with tasks waiting in some class.
  std::vector<std::string> waiting_capabilities() const;

  /// The task `pop(cls, capability)` would return, left in place; nullptr when none waits.
  const queued_task* peek(size_t cls, const std::string& capability) const;
  /// The last `n` tasks `pop(cls, capability)` would return, the last first (copies).
  std::vector<queued_task> last(size_t cls, const std::string& capability, size_t n) const;
  /// Removes the task `id` wherever it waits. Returns false when it is not queued.
  bool remove(task_id id);

private:
  using key = std::pair<int64_t, task_id>;

  struct entry {
    size_t cls;
    std::string capability;
    key order_key;
    queued_task task;
  };

  struct queue_class {
    config::priority_class config;
    size_t size = 0;
    std::map<std::string, std::set<key>, std::less<>> by_capability;
    /// Per capability, its waiting tasks' tokens and work, summed.
    struct sums {
      uint64_t tokens = 0;
      uint64_t work = 0;
    };
    std::map<std::string, sums, std::less<>> sums_by_capability;
  };

  /// Takes a task leaving `c` out of its capability's sums.
  static void forget(queue_class& c, const std::string& capability, const queued_task& task);

  std::vector<queue_class> classes_;
  std::unordered_map<task_id, entry> index_;
};

} // namespace arbiter::scheduler
