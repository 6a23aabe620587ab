#pragma once

#include <string>
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

  prometheus::Gauge& depth_of(const std::string& priority);
  prometheus::Histogram& wait_of(const std::string& priority);
  prometheus::Histogram& stage(const std::string& name);
};

} // namespace arbiter::scheduler
