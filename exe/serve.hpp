#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"

namespace arbiter::exe {

/// What `arbiter serve` was asked for on its command line.
struct serve_options {
  std::optional<std::string> config_file;
  std::optional<std::string> host;
  std::optional<int> port;
  /// Override `[cluster]`: a port turns the cluster on (docs/deployment.md).
  std::optional<std::string> cluster_host;
  std::optional<int> cluster_port;
};

/// Runs the server until SIGINT or SIGTERM, then drains. Returns the process exit code: 0
/// after a clean drain, 2 for a configuration problem, 1 for other start-up failures.
int serve(const serve_options& options);

/// What `arbiter worker` was asked for on its command line.
struct worker_options {
  std::optional<std::string> config_file;
  /// The coordinator's cluster address.
  std::string host;
  uint16_t port = 0;
  /// Prefix of this node's source names (default: the host name and process id).
  std::string name;
  /// Override cpu.workers (0: one per core).
  std::optional<uint32_t> cpu_workers;
  /// Serve GET /health and GET /metrics on this port (0 picks one); the host overrides
  /// server.host.
  std::optional<int> status_port;
  std::optional<std::string> status_host;
};

/// Runs a worker node (docs/deployment.md) until SIGINT or SIGTERM: spawns the workers its
/// configuration asks for (`[cpu]`, `[[models]]`, `[[sources]]`) and registers them with the
/// coordinator, joining again with backoff when the coordinator goes away. Returns 0, or 2
/// for a configuration problem or a model that cannot be loaded.
int worker(const worker_options& options);

/// Validates a configuration file; prints "FIELD: REASON" per problem. Returns 0 or 1.
int check_config(const std::string& path);

/// What `arbiter replay` was asked for.
struct replay_options {
  /// Replay logs, in any order (each record stands alone).
  std::vector<std::string> files;
  /// The server's configuration (its rewards and `[cpu]` limits); default as `serve` finds it.
  std::optional<std::string> config_file;
  /// Only the items of this training step.
  std::optional<std::string> step;
  /// A JSON summary on stdout instead of the table.
  bool json = false;
};

/// Recomputes every reward item of the logs from what they recorded, prints each one whose
/// score differs ("DIFF FILE:LINE ...") and a table per reward kind. Returns 0 when none
/// differs, 1 when one does or a line cannot be read, 2 when a file or the configuration
/// cannot be.
int replay_logs(const replay_options& options);

} // namespace arbiter::exe
