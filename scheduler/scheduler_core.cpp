#include "scheduler/scheduler_core.hpp"

#include <algorithm>

namespace arbiter::scheduler {

namespace {

double seconds_between(time_point from, time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

} // namespace

scheduler_core::scheduler_core(const config::scheduler_config& cfg, const time_source& clock,
                               scheduler_metrics& metrics)
  : cfg_(cfg), clock_(clock), metrics_(metrics), queues_(cfg.priorities) {
  for (size_t i = 0; i < queues_.class_count(); ++i) {
    depth_gauges_.push_back(&metrics_.depth_of(queues_.class_name(i)));
    wait_histograms_.push_back(&metrics_.wait_of(queues_.class_name(i)));
  }
  run_histogram_ = &metrics_.stage("run");
  schedule_histogram_ = &metrics_.stage("schedule");
}

source_id scheduler_core::add_source(std::string name, std::vector<std::string> capabilities) {
  auto id = sources_.add(name, std::move(capabilities), cfg_.max_inflight_batches_per_source);
  inflight_gauges_[id] = &metrics_.source_inflight.Add({{"source", name}});
  return id;
}

void scheduler_core::remove_source(source_id id, const std::string& reason) {
  std::vector<batch_id> lost;
  for (const auto& [bid, batch] : batches_) {
    if (batch.source == id) {
      lost.push_back(bid);
    }
  }
  for (auto bid : lost) {
    fail_batch(bid, errc::worker_failed, reason);
  }
  sources_.remove(id);
  inflight_gauges_.erase(id);
}

admission_result scheduler_core::submit(request_id id, size_t priority, time_point deadline,
                                        std::vector<score_item> items) {
  auto now = clock_.now();
  std::string capability = items.empty() ? std::string{} : items.front().capability;
  auto estimate = estimates_.find(capability);
  admission_input in;
  in.draining = draining_;
  in.items = items.size();
  in.priority = queues_.class_name(priority);
  in.free_capacity = queues_.free_capacity(priority);
  in.items_ahead = queues_.depth_at_or_above(priority);
  in.parallel_sources = sources_.count(capability);
  in.estimate = estimate == estimates_.end() ? nullptr : &estimate->second;
  in.time_left = deadline - now;
  auto decision = decide_admission(in);
  if (!decision.admitted()) {
    return decision;
  }
  auto& req = requests_[id];
  req.priority = priority;
  req.deadline = deadline;
  req.admitted = now;
  req.items.reserve(items.size());
  for (auto& item : items) {
    req.items.push_back(std::make_shared<const score_item>(std::move(item)));
  }
  auto n = req.items.size();
  req.results.resize(n);
  req.states.assign(n, item_state::queued);
  req.tasks.assign(n, 0);
  req.enqueued.assign(n, now);
  req.remaining = n;
  deadlines_.emplace(deadline, id);
  metrics_.requests_pending.Increment();
  for (uint32_t i = 0; i < n; ++i) {
    const auto& item = *req.items[i];
    if (!sources_.serves(item.capability)) {
      item_result r;
      r.code = errc::no_eligible_source;
      r.error = "no source serves '" + item.capability + "' (needed by reward '" + item.reward
                + "')";
      end_item(id, req, i, std::move(r));
      continue;
    }
    queued_task task{next_task_++, id, i, deadline, now};
    req.tasks[i] = task.id;
    // Admission checked the capacity, so the push cannot fail.
    if (!queues_.push(priority, item.capability, task)) {
      item_result r;
      r.code = errc::overloaded;
      r.error = "priority class '" + queues_.class_name(priority) + "' is full";
      end_item(id, req, i, std::move(r));
    }
  }
  depth_gauges_[priority]->Set(static_cast<double>(queues_.depth(priority)));
  if (req.remaining == 0) {
    finish(id);
  }
  return decision;
}

std::vector<dispatch_batch> scheduler_core::dispatch() {
  std::vector<dispatch_batch> out;
  auto now = clock_.now();
  for (size_t cls = 0; cls < queues_.class_count(); ++cls) {
    if (queues_.depth(cls) == 0) {
      continue;
    }
    queues_.for_each_waiting(cls, [&](const std::string& capability) {
      while (auto source = sources_.pick(capability)) {
        dispatch_batch batch;
        inflight_batch record;
        while (batch.items.size() < cfg_.dispatch_batch_items) {
          auto task = queues_.pop(cls, capability);
          if (!task) {
            break;
          }
          auto& req = requests_.at(task->request);
          req.states[task->index] = item_state::running;
          req.results[task->index].queue_ms = ms_between(task->enqueued, now);
          req.results[task->index].attempts += 1;
          wait_histograms_[cls]->Observe(seconds_between(task->enqueued, now));
          batch.items.push_back(req.items[task->index]);
          record.items.emplace_back(task->request, task->index);
        }
        if (batch.items.empty()) {
          break;
        }
        batch.id = next_batch_++;
        batch.source = *source;
        const auto* info = sources_.find(*source);
        record.source = *source;
        record.source_name = info->name;
        record.dispatched = now;
        sources_.on_dispatch(*source);
        inflight_gauges_.at(*source)->Increment();
        metrics_.dispatch_batch_items.Observe(static_cast<double>(batch.items.size()));
        batches_.emplace(batch.id, std::move(record));
        out.push_back(std::move(batch));
      }
    });
    depth_gauges_[cls]->Set(static_cast<double>(queues_.depth(cls)));
  }
  return out;
}

void scheduler_core::release_batch(const inflight_batch& batch) {
  sources_.on_complete(batch.source);
  if (auto gauge = inflight_gauges_.find(batch.source); gauge != inflight_gauges_.end()) {
    gauge->second->Decrement();
  }
}

template <class Fill>
void scheduler_core::settle(batch_id id, Fill&& fill) {
  auto found = batches_.find(id);
  if (found == batches_.end()) {
    return;
  }
  auto batch = std::move(found->second);
  batches_.erase(found);
  release_batch(batch);
  std::vector<request_id> done;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    auto [rid, index] = batch.items[i];
    auto req = requests_.find(rid);
    if (req == requests_.end() || req->second.states[index] != item_state::running) {
      continue; // The item already ended (deadline, drain): a late answer.
    }
    item_result r = req->second.results[index];
    r.source = batch.source_name;
    fill(r, i, *req->second.items[index]);
    if (end_item(rid, req->second, index, std::move(r))) {
      done.push_back(rid);
    }
  }
  for (auto rid : done) {
    finish(rid);
  }
}

void scheduler_core::complete(batch_id id, const std::vector<item_outcome>& outcomes) {
  settle(id, [&](item_result& r, size_t i, const score_item& item) {
    if (i >= outcomes.size()) {
      r.code = errc::internal;
      r.error = "the source answered " + std::to_string(outcomes.size())
                + " outcomes for a larger batch";
      return;
    }
    const auto& o = outcomes[i];
    r.run_ms = o.run_ms;
    run_histogram_->Observe(o.run_ms / 1000.0);
    estimates_[item.capability].record(o.run_ms);
    if (o.code == errc::none) {
      r.score = o.score;
      r.status = item_status::ok;
    } else {
      r.code = o.code;
      r.error = o.error;
    }
  });
}

void scheduler_core::fail_batch(batch_id id, errc code, const std::string& reason) {
  settle(id, [&](item_result& r, size_t, const score_item&) {
    r.code = code;
    r.error = reason;
  });
}

void scheduler_core::on_timer() {
  auto now = clock_.now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto [deadline, id] = *deadlines_.begin();
    const auto& req = requests_.at(id);
    auto budget_ms = static_cast<int64_t>(ms_between(req.admitted, deadline));
    fail_remaining(id, errc::deadline_exceeded,
                   "the request's deadline (" + std::to_string(budget_ms)
                     + " ms after admission) passed before this item was scored");
  }
  if (draining_ && now >= drain_deadline_) {
    std::vector<request_id> ids;
    for (const auto& entry : requests_) {
      ids.push_back(entry.first);
    }
    for (auto id : ids) {
      fail_remaining(id, errc::shutting_down,
                     "the server shut down before this item was scored (drain deadline)");
    }
  }
}

std::optional<time_point> scheduler_core::next_wakeup() const {
  std::optional<time_point> next;
  if (!deadlines_.empty()) {
    next = deadlines_.begin()->first;
  }
  if (draining_ && !requests_.empty()) {
    next = next ? std::min(*next, drain_deadline_) : drain_deadline_;
  }
  return next;
}

void scheduler_core::begin_drain(time_point drain_deadline) {
  draining_ = true;
  drain_deadline_ = drain_deadline;
}

std::vector<finished_request> scheduler_core::take_finished() {
  std::vector<finished_request> out;
  out.swap(finished_);
  return out;
}

scheduler_snapshot scheduler_core::snapshot() const {
  scheduler_snapshot snap;
  for (size_t i = 0; i < queues_.class_count(); ++i) {
    snap.queues.push_back({queues_.class_name(i), queues_.depth(i), cfg_.priorities[i].capacity});
  }
  snap.sources = sources_.sources();
  snap.pending_requests = requests_.size();
  snap.draining = draining_;
  return snap;
}

bool scheduler_core::end_item(request_id, pending_request& req, uint32_t index,
                              item_result result) {
  if (result.code != errc::none) {
    result.status = item_status::failed;
    failure_counter(result.code).Increment();
  }
  items_counter(req.items[index]->reward, result.status).Increment();
  req.results[index] = std::move(result);
  req.states[index] = item_state::done;
  --req.remaining;
  return req.remaining == 0;
}

void scheduler_core::fail_remaining(request_id id, errc code, const std::string& reason) {
  auto found = requests_.find(id);
  if (found == requests_.end()) {
    return;
  }
  auto& req = found->second;
  auto now = clock_.now();
  for (uint32_t i = 0; i < req.states.size(); ++i) {
    if (req.states[i] == item_state::done) {
      continue;
    }
    item_result r = req.results[i];
    if (req.states[i] == item_state::queued) {
      queues_.remove(req.tasks[i]);
      r.queue_ms = ms_between(req.enqueued[i], now);
    }
    r.code = code;
    r.error = reason;
    end_item(id, req, i, std::move(r));
  }
  depth_gauges_[req.priority]->Set(static_cast<double>(queues_.depth(req.priority)));
  finish(id);
}

void scheduler_core::finish(request_id id) {
  auto found = requests_.find(id);
  if (found == requests_.end()) {
    return;
  }
  schedule_histogram_->Observe(seconds_between(found->second.admitted, clock_.now()));
  deadlines_.erase({found->second.deadline, id});
  finished_.push_back({id, std::move(found->second.results)});
  requests_.erase(found);
  metrics_.requests_pending.Decrement();
}

prometheus::Counter& scheduler_core::items_counter(const std::string& reward,
                                                   item_status status) {
  auto key = std::make_pair(reward, status);
  auto found = item_counters_.find(key);
  if (found == item_counters_.end()) {
    auto& c = metrics_.items.Add({{"reward", reward}, {"status", to_string(status)}});
    found = item_counters_.emplace(key, &c).first;
  }
  return *found->second;
}

prometheus::Counter& scheduler_core::failure_counter(errc code) {
  auto found = failure_counters_.find(code);
  if (found == failure_counters_.end()) {
    auto& c = metrics_.failures.Add({{"reason", std::string{to_string(code)}}});
    found = failure_counters_.emplace(code, &c).first;
  }
  return *found->second;
}

} // namespace arbiter::scheduler
