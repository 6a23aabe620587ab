#pragma once

// A worker node's HTTP port (`arbiter worker --status-port P`): `GET /health` for probes and
// `GET /metrics` for Prometheus (the node's model workers, docs/metrics.md). Nothing else:
// trainers talk to the coordinator.

#include <functional>
#include <string>

#include "common/gpu_monitor.hpp"
#include "common/metrics.hpp"
#include "net/http_metrics.hpp"
#include "net/routes.hpp"

namespace arbiter::net {

/// What /health reports.
struct node_status {
  /// The node's name and the coordinator it joins.
  std::string name;
  std::string coordinator;
  /// Whether it is joined now (registered its workers, and the connection is up).
  bool joined = false;
};

class node_status_routes : public request_handler {
public:
  /// `gpus`, when the node has GPUs, is read for each `GET /metrics`.
  node_status_routes(std::function<node_status()> status, metrics_registry& registry,
                     http_metrics& metrics, gpu_monitor* gpus = nullptr);

  /// `GET /health`: 200 `{"status": "ok", ...}` while joined, 503 `{"status": "joining", ...}`
  /// while not (starting, or the coordinator is away). `GET /metrics` (the node's model
  /// workers, and its GPUs). 404 or 405 otherwise.
  void handle(http_request req, reply_fn reply, defer_fn defer) override;

  void count_protocol_error(const std::string& reason, unsigned status) override;

private:
  std::function<node_status()> status_;
  metrics_registry& registry_;
  http_metrics& metrics_;
  gpu_monitor* gpus_;
};

} // namespace arbiter::net
