#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "common/metrics.hpp"

namespace arbiter::net {

/// Every metric the HTTP ingress records, declared once.
struct http_metrics {
  explicit http_metrics(metrics_registry& registry);

  /// arbiter_http_requests_total{route,code}: HTTP requests answered.
  prometheus::Family<prometheus::Counter>& requests;
  /// arbiter_rejections_total{reason}: requests refused before scoring (bad_request,
  /// payload_too_large, not_found, method_not_allowed, queue_full, too_large, deadline_unmeetable,
  /// draining, timeout).
  prometheus::Family<prometheus::Counter>& rejections;
  /// arbiter_request_items: items per /v1/score request.
  prometheus::Histogram& request_items;
  /// arbiter_http_connections: open client connections.
  prometheus::Gauge& connections;
  /// arbiter_abandoned_requests_total: scoring requests whose client closed its connection
  /// before the answer.
  prometheus::Counter& abandoned;
  /// arbiter_held_refusals_total{outcome}: the trainer routes' refusals held for their
  /// Retry-After, by what ended the hold: the request sent again (`sent_again`), or the
  /// refusal answered (`answered`: its deadline came, the drain began or its client hung up).
  prometheus::Family<prometheus::Counter>& held;
  prometheus::Counter& held_sent_again;
  prometheus::Counter& held_answered;
  /// arbiter_held_requests: the trainer routes' requests held for a refusal's Retry-After now.
  prometheus::Gauge& held_now;

  void count(const std::string& route, unsigned code);
  void reject(const std::string& reason);

private:
  std::mutex cache_mutex_;
  std::map<std::pair<std::string, unsigned>, prometheus::Counter*> request_counters_;
};

} // namespace arbiter::net
