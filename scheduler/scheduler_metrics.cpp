#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::scheduler {

scheduler_metrics::scheduler_metrics(metrics_registry& registry,
                                     const std::vector<std::string>& priorities)
  : queue_depth(registry.gauge("arbiter_queue_depth",
                               "Items waiting in the scheduler's queues, by priority class")),
    queue_wait(registry.histogram(
        "arbiter_queue_wait_seconds",
        "Time an item waited between admission and dispatch, by priority class")),
    items(registry.counter("arbiter_items_total",
                           "Items answered, by reward and final status (ok, fallback, failed)")),
    failures(registry.counter("arbiter_item_failures_total", "Items that failed, by reason")),
    stage_duration(
        registry.histogram("arbiter_stage_duration_seconds",
                           "Latency by stage: parse, schedule (admission to answer, per request), "
                           "run (per item on a source), request (whole HTTP request)")),
    dispatch_batch_items(
        registry.histogram("arbiter_dispatch_batch_items", "Items per batch dispatched to a source")
            .Add({}, size_buckets())),
    source_inflight(
        registry.gauge("arbiter_source_inflight_batches", "Batches in flight, by source")),
    requests_pending(
        registry.gauge("arbiter_requests_pending", "Admitted requests not yet answered").Add({})),
    source_attempts(registry.counter("arbiter_source_attempts_total",
                                     "Attempts at a source ended, by source and outcome")),
    source_rate_limited(
        registry.counter("arbiter_source_rate_limited_total", "429 answers, by source")),
    source_retries(registry.counter("arbiter_source_retries_total",
                                    "Decisions after a failed attempt, by source, decision "
                                    "(retry_here, retry_elsewhere, no_retry) and reason")),
    source_latency(registry.histogram("arbiter_source_latency_seconds",
                                      "Time per attempt at a source, from dispatch to answer")),
    source_limit(registry.gauge("arbiter_source_concurrency_limit",
                                "Batches a source may have in flight now (adaptive or fixed)")),
    source_breaker(registry.gauge("arbiter_source_breaker_state",
                                  "Circuit breaker per source: 0 closed, 1 half-open, 2 open")),
    source_pacing_waits(
        registry.counter("arbiter_source_pacing_waits_total",
                         "Times work waited because every eligible source was paced, backing off "
                         "or ejected, by capability and reason")),
    source_hedges(registry.counter("arbiter_source_hedges_total",
                                   "Hedge attempts sent, by the source they went to")),
    source_tokens(registry.counter("arbiter_source_tokens_total",
                                   "Tokens sources reported in their answers' usage, by source and "
                                   "kind (prompt, completion)")),
    source_cost(
        registry.counter("arbiter_source_cost_total",
                         "What the tokens sources reported cost at their configured prices")),
    item_latency(
        registry.histogram("arbiter_item_latency_seconds",
                           "Items the trainer sent, from admission to the answer, by reward")),
    group_completion(registry.histogram("arbiter_group_completion_seconds",
                                        "GRPO groups: from the first member's arrival to the end "
                                        "of the last pending member")
                       .Add({}, latency_buckets())),
    cache_lookups(registry.counter("arbiter_cache_lookups_total",
                                   "Result-cache lookups, by result (hit, miss)")),
    coalesced_items(registry
                        .counter("arbiter_coalesced_items_total",
                                 "Items answered by an identical item's call already in flight")
                        .Add({})),
    hopeless_items(registry
                     .counter("arbiter_hopeless_items_total",
                              "Items failed unsent (deadline_exceeded): their deadline was nearer "
                              "than their remote source's fastest recent answer")
                     .Add({})) {
  for (const auto& p : priorities) {
    depth_of(p);
    wait_of(p);
  }
  for (const auto* s : {"parse", "schedule", "run", "request"}) {
    stage(s);
  }
}

prometheus::Gauge& scheduler_metrics::depth_of(const std::string& priority) {
  return queue_depth.Add({{"priority", priority}});
}

prometheus::Histogram& scheduler_metrics::wait_of(const std::string& priority) {
  return queue_wait.Add({{"priority", priority}}, latency_buckets());
}

prometheus::Histogram& scheduler_metrics::stage(const std::string& name) {
  return stage_duration.Add({{"stage", name}}, latency_buckets());
}

void scheduler_metrics::source_added(const std::string& source) {
  std::lock_guard lock{mutex_};
  by_source_[source].live += 1;
}

void scheduler_metrics::source_removed(const std::string& source) {
  std::vector<std::pair<const void*, std::function<void()>>> gone;
  {
    std::lock_guard lock{mutex_};
    auto found = by_source_.find(source);
    if (found == by_source_.end() || found->second.live == 0 || --found->second.live > 0) {
      return;
    }
    gone = std::move(found->second.series);
    by_source_.erase(found);
  }
  for (auto& [series, remove] : gone) {
    remove();
  }
}

void scheduler_metrics::remember(const std::string& source, const void* series,
                                 std::function<void()> remove) {
  std::lock_guard lock{mutex_};
  auto& known = by_source_[source].series;
  for (const auto& entry : known) {
    if (entry.first == series) {
      return;
    }
  }
  known.emplace_back(series, std::move(remove));
}

} // namespace arbiter::scheduler
