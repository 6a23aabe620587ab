#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/metrics.hpp"

namespace arbiter::scheduler {

/// Every metric the scheduler records, declared once. docs/metrics.md lists them; a test
/// checks that it does.
struct scheduler_metrics {
  scheduler_metrics(metrics_registry& registry, const std::vector<std::string>& priorities);

  /// arbiter_queue_depth{priority}: items waiting, by priority class.
  prometheus::Family<prometheus::Gauge>& queue_depth;
  /// arbiter_queue_wait_seconds{priority}: time from admission to dispatch, per item.
  prometheus::Family<prometheus::Histogram>& queue_wait;
  /// arbiter_items_total{reward,status}: items answered, by reward and final status.
  prometheus::Family<prometheus::Counter>& items;
  /// arbiter_item_failures_total{reason}: failed items, by errc name.
  prometheus::Family<prometheus::Counter>& failures;
  /// arbiter_stage_duration_seconds{stage}: latency by stage ("parse", "schedule", "run",
  /// "request").
  prometheus::Family<prometheus::Histogram>& stage_duration;
  /// arbiter_dispatch_batch_items: items per batch sent to a source.
  prometheus::Histogram& dispatch_batch_items;
  /// arbiter_source_inflight_batches{source}: batches in flight per source.
  prometheus::Family<prometheus::Gauge>& source_inflight;
  /// arbiter_requests_pending: admitted requests not yet answered.
  prometheus::Gauge& requests_pending;
  /// arbiter_source_attempts_total{source,outcome}: attempts (batches) ended, by how
  /// ("ok", "rate_limited", "server_error", "timeout", "connect_failure", "bad_response",
  /// "bad_request", "unauthorized", "not_found", "cancelled").
  prometheus::Family<prometheus::Counter>& source_attempts;
  /// arbiter_source_rate_limited_total{source}: 429 answers.
  prometheus::Family<prometheus::Counter>& source_rate_limited;
  /// arbiter_source_retries_total{source,decision,reason}: what followed a failed attempt
  /// ("retry_here", "retry_elsewhere", "no_retry"), with the outcome or the reason not to.
  prometheus::Family<prometheus::Counter>& source_retries;
  /// arbiter_source_latency_seconds{source}: time per attempt, dispatch to answer.
  prometheus::Family<prometheus::Histogram>& source_latency;
  /// arbiter_source_concurrency_limit{source}: batches the source may have in flight now.
  prometheus::Family<prometheus::Gauge>& source_limit;
  /// arbiter_source_breaker_state{source}: 0 closed, 1 half-open, 2 open (ejected).
  prometheus::Family<prometheus::Gauge>& source_breaker;
  /// arbiter_source_pacing_waits_total{capability,reason}: times work waited because every
  /// eligible source was paced ("requests", "tokens"), backing off after a 429 ("backoff")
  /// or ejected ("breaker").
  prometheus::Family<prometheus::Counter>& source_pacing_waits;
  /// arbiter_source_hedges_total{source}: hedge attempts sent to a source.
  prometheus::Family<prometheus::Counter>& source_hedges;
  /// arbiter_source_tokens_total{source,kind}: tokens the source reported in its answers'
  /// usage, "prompt" or "completion".
  prometheus::Family<prometheus::Counter>& source_tokens;
  /// arbiter_source_cost_total{source}: what they cost at the source's configured prices.
  prometheus::Family<prometheus::Counter>& source_cost;
  /// arbiter_item_latency_seconds{reward}: an item the trainer sent, from admission to its
  /// answer (a reward graph's model calls are not items).
  prometheus::Family<prometheus::Histogram>& item_latency;
  /// arbiter_group_completion_seconds: for a GRPO group, from its first member's arrival to
  /// the end of its last pending member (observed each time nothing of it is left pending).
  prometheus::Histogram& group_completion;
  /// arbiter_cache_lookups_total{result}: result-cache lookups, "hit" or "miss".
  prometheus::Family<prometheus::Counter>& cache_lookups;
  /// arbiter_coalesced_items_total: items answered by an identical item's call in flight.
  prometheus::Counter& coalesced_items;
  /// arbiter_hopeless_items_total: items failed unsent, their deadline nearer than their
  /// source's fastest recent answer.
  prometheus::Counter& hopeless_items;

  prometheus::Gauge& depth_of(const std::string& priority);
  prometheus::Histogram& wait_of(const std::string& priority);
  prometheus::Histogram& stage(const std::string& name);

  /// `family`'s series for `source` (with `labels` besides; `args`: a histogram's buckets),
  /// remembered so that it goes when no scheduler shard has a source of that name any more.
  template <typename T, typename... Args>
  T& of_source(prometheus::Family<T>& family, const std::string& source,
               prometheus::Labels labels = {}, Args&&... args) {
    labels.emplace("source", source);
    T& series = family.Add(labels, std::forward<Args>(args)...);
    remember(source, &series, [&family, &series] { family.Remove(&series); });
    return series;
  }
  /// A shard added a source of this name.
  void source_added(const std::string& source);
  /// A shard removed one (a node that left): with the last of that name go its series, so a
  /// cluster whose nodes come and go under new names (pods) keeps /metrics bounded. A source
  /// that comes back starts its counters from zero.
  void source_removed(const std::string& source);

private:
  void remember(const std::string& source, const void* series, std::function<void()> remove);

  struct source_series {
    /// Sources of the name in the shards.
    size_t live = 0;
    std::vector<std::pair<const void*, std::function<void()>>> series;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, source_series> by_source_;
};

} // namespace arbiter::scheduler
