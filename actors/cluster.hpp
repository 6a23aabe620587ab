#pragma once

// The cluster (issue 7), first slice: the coordinator (`arbiter serve --cluster-port P`)
// publishes its scheduler through CAF's middleman; a worker node (`arbiter worker --join
// HOST:PORT`) spawns CPU workers and registers them with it, and the scheduler routes to them
// like local workers. A node that dies is seen through its workers' down messages (and by
// heartbeat when it freezes), and what it held is retried on the other sources.
//
// A node that loses the coordinator (a restart) joins again with backoff. Not yet:
// authentication (the cluster port must stay on a private address), model workers and
// remote-API clients on nodes, /info nodes.

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

namespace arbiter::actors {

/// Middleman settings of coordinator and nodes alike.
struct cluster_settings {
  /// How often peers send a heartbeat, and how long a silent connection lives.
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds connection_timeout{3000};
};

/// Loads the middleman into `cfg`, registers the work messages (actors/wire.hpp) and turns on
/// heartbeats and connection timeouts (both off by default in CAF 0.17).
void configure_cluster(caf::actor_system_config& cfg, const cluster_settings& settings);

/// What `arbiter worker` was asked for.
struct worker_node_options {
  std::string host;
  uint16_t port = 0;
  /// The source name the node's workers get (default: "node-" + the process id).
  std::string name;
  /// CPU workers to run (0: one per core).
  uint32_t cpu_workers = 0;
  cluster_settings settings;
};

/// Runs a worker node until SIGINT/SIGTERM: joins the coordinator, and when it cannot be
/// reached or is lost (a restart), joins again after a wait that doubles from 250 ms to 8 s.
/// Returns the process exit code, 0.
int run_worker_node(const worker_node_options& options);

} // namespace arbiter::actors
