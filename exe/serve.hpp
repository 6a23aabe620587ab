#pragma once

#include <optional>
#include <string>

#include "common/log.hpp"

namespace arbiter::exe {

/// What `arbiter serve` was asked for on its command line.
struct serve_options {
  std::optional<std::string> config_file;
  std::optional<std::string> host;
  std::optional<int> port;
  /// Publish the scheduler for worker nodes (`arbiter worker --join`) on this address and
  /// port (the cluster, issue 7; no authentication yet, so keep it on a private address).
  std::string cluster_host = "127.0.0.1";
  std::optional<int> cluster_port;
};

/// Runs the server until SIGINT or SIGTERM, then drains. Returns the process exit code: 0
/// after a clean drain, 2 for a configuration problem, 1 for other start-up failures.
int serve(const serve_options& options);

/// Validates a configuration file; prints "FIELD: REASON" per problem. Returns 0 or 1.
int check_config(const std::string& path);

} // namespace arbiter::exe
