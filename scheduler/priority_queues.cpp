#include "scheduler/priority_queues.hpp"

#include <algorithm>

namespace arbiter::scheduler {

priority_queues::priority_queues(const std::vector<config::priority_class>& classes) {
  classes_.reserve(classes.size());
  for (const auto& c : classes) {
    classes_.push_back(queue_class{c, 0, {}, {}});
  }
}

std::optional<size_t> priority_queues::find_class(std::string_view name) const {
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i].config.name == name) {
      return i;
    }
  }
  return std::nullopt;
}

size_t priority_queues::free_capacity(size_t cls) const {
  const auto& c = classes_.at(cls);
  return c.size >= c.config.capacity ? 0 : c.config.capacity - c.size;
}

bool priority_queues::push(size_t cls, const std::string& capability, const queued_task& task,
                           bool beyond_capacity) {
  auto& c = classes_.at(cls);
  if (c.size >= c.config.capacity && !beyond_capacity) {
    return false;
  }
  auto own = c.config.order == config::queue_order::edf ? task.deadline : task.enqueued;
  int64_t primary = task.order_at.value_or(own).time_since_epoch().count();
  key k{primary, task.id};
  c.by_capability[capability].insert(k);
  if (task.tokens > 0 || task.work > 0) {
    auto& sums = c.sums_by_capability[capability];
    sums.tokens += task.tokens;
    sums.work += task.work;
  }
  ++c.size;
  index_.emplace(task.id, entry{cls, capability, k, task});
  return true;
}

std::optional<queued_task> priority_queues::pop(size_t cls, const std::string& capability) {
  auto& c = classes_.at(cls);
  auto q = c.by_capability.find(capability);
  if (q == c.by_capability.end() || q->second.empty()) {
    return std::nullopt;
  }
  auto id = q->second.begin()->second;
  q->second.erase(q->second.begin());
  --c.size;
  auto e = index_.find(id);
  auto task = e->second.task;
  forget(c, capability, task);
  index_.erase(e);
  return task;
}

void priority_queues::forget(queue_class& c, const std::string& capability,
                             const queued_task& task) {
  if (task.tokens == 0 && task.work == 0) {
    return;
  }
  auto sums = c.sums_by_capability.find(capability);
  if (sums != c.sums_by_capability.end()) {
    auto& s = sums->second;
    s.tokens -= std::min(s.tokens, task.tokens);
    s.work -= std::min(s.work, task.work);
    if (s.tokens == 0 && s.work == 0) {
      c.sums_by_capability.erase(sums);
    }
  }
}

size_t priority_queues::waiting(size_t cls, const std::string& capability) const {
  const auto& by = classes_.at(cls).by_capability;
  auto found = by.find(capability);
  return found == by.end() ? 0 : found->second.size();
}

uint64_t priority_queues::waiting_tokens(size_t cls, const std::string& capability) const {
  const auto& sums = classes_.at(cls).sums_by_capability;
  auto found = sums.find(capability);
  return found == sums.end() ? 0 : found->second.tokens;
}

uint64_t priority_queues::waiting_work(size_t cls, const std::string& capability) const {
  const auto& sums = classes_.at(cls).sums_by_capability;
  auto found = sums.find(capability);
  return found == sums.end() ? 0 : found->second.work;
}

std::vector<std::string> priority_queues::waiting_capabilities() const {
  std::vector<std::string> out;
  for (const auto& c : classes_) {
    for (const auto& [capability, tasks] : c.by_capability) {
      if (!tasks.empty() && std::find(out.begin(), out.end(), capability) == out.end()) {
        out.push_back(capability);
      }
    }
  }
  return out;
}

const queued_task* priority_queues::peek(size_t cls, const std::string& capability) const {
  const auto& c = classes_.at(cls);
  auto q = c.by_capability.find(capability);
  if (q == c.by_capability.end() || q->second.empty()) {
    return nullptr;
  }
  return &index_.at(q->second.begin()->second).task;
}

std::vector<queued_task> priority_queues::last(size_t cls, const std::string& capability,
                                               size_t n) const {
  std::vector<queued_task> out;
  const auto& c = classes_.at(cls);
  auto q = c.by_capability.find(capability);
  if (q == c.by_capability.end()) {
    return out;
  }
  for (auto it = q->second.rbegin(); it != q->second.rend() && out.size() < n; ++it) {
    out.push_back(index_.at(it->second).task);
  }
  return out;
}

bool priority_queues::remove(task_id id) {
  auto e = index_.find(id);
  if (e == index_.end()) {
    return false;
  }
  auto& c = classes_[e->second.cls];
  auto q = c.by_capability.find(e->second.capability);
  q->second.erase(e->second.order_key);
  forget(c, e->second.capability, e->second.task);
  --c.size;
  index_.erase(e);
  return true;
}

} // namespace arbiter::scheduler
