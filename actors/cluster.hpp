#pragma once

// The cluster (docs/deployment.md): the coordinator (`arbiter serve` with `[cluster]` enabled)
// publishes a gateway actor through CAF's middleman; a worker node (`arbiter worker --join
// HOST:PORT`) introduces itself to the gateway and registers its workers (CPU workers, local
// model workers, remote-API clients), which the scheduler then routes to like local sources.
//
// - A node that dies is seen through its workers' down messages, and one that freezes by the
//   middleman's heartbeat and connection timeout; what it held is retried on the other sources
//   (scheduler_core::remove_source).
// - A node that loses the coordinator (a restart) joins again with backoff.
// - With certificates set, every connection is mutual TLS through CAF's OpenSSL module: both
//   ends present a certificate signed by the cluster's CA, or the handshake fails. Without
//   them the cluster port may only bind a loopback address (config validation).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "actors/messages.hpp"
#include "common/capability.hpp"
#include "common/metrics.hpp"
#include "config/config.hpp"

namespace arbiter::actors {

/// Middleman settings of coordinator and nodes alike.
struct cluster_settings {
  /// How often peers send a heartbeat, and how long a silent connection lives.
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds connection_timeout{3000};
  /// Mutual TLS: this process's certificate chain, its key and the cluster CA (PEM files).
  /// All empty: plain TCP.
  std::string certificate;
  std::string key;
  std::string ca;

  bool tls() const { return !certificate.empty(); }

  static cluster_settings from(const config::cluster_config& cfg);
};

/// Loads the middleman (and, with certificates, CAF's OpenSSL module) into `cfg`, registers
/// the messages that cross nodes (actors/wire.hpp) and turns on heartbeats and connection
/// timeouts (both off by default in CAF 0.17).
void configure_cluster(caf::actor_system_config& cfg, const cluster_settings& settings);

/// Publishes `whom` on host:port, over TLS when the settings have certificates. Returns the
/// bound port.
caf::expected<uint16_t> publish_cluster(caf::actor_system& sys, const caf::actor& whom,
                                        const std::string& host, uint16_t port,
                                        const cluster_settings& settings);

/// Connects to the actor published at host:port, over TLS when the settings have
/// certificates.
caf::expected<caf::actor> join_cluster(caf::actor_system& sys, const std::string& host,
                                       uint16_t port, const cluster_settings& settings);

/// What a worker node tells the coordinator about itself when it joins.
struct node_hello {
  /// Unique among the nodes that are up; its sources are named "NAME/SOURCE".
  std::string name;
  /// The node's host name and process id, for people reading /info.
  std::string host;
  uint32_t pid = 0;
  std::string version;
  /// How often the node sends a heartbeat (its `cluster.heartbeat_ms`): the coordinator
  /// refuses a node that would go silent longer than its own `cluster.timeout_ms`.
  int64_t heartbeat_ms = 0;
  /// How long the node waits in silence before it takes the coordinator for lost (its
  /// `cluster.timeout_ms`; 0: unknown): the coordinator refuses a node whose wait its own
  /// heartbeat would outlast (the node would leave and join again, over and over).
  int64_t timeout_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_hello& x) {
  return f(caf::meta::type_name("node_hello"), x.name, x.host, x.pid, x.version,
           x.heartbeat_ms, x.timeout_ms);
}

/// One node as the coordinator's `/info` shows it.
struct node_info {
  std::string name;
  std::string host;
  uint32_t pid = 0;
  std::string version;
  /// "up", or "lost" (its connection closed or timed out; shown until the name joins again).
  std::string state;
  /// Why it was lost, e.g. "remote link unreachable".
  std::string reason;
  /// Milliseconds since it joined, and since its last heartbeat message.
  int64_t joined_ms_ago = 0;
  int64_t last_seen_ms_ago = 0;
  /// Its sources as the scheduler names them ("NAME/cpu", "NAME/MODEL", ...).
  std::vector<std::string> sources;
};

/// The gateway's metrics (docs/metrics.md, "Cluster").
struct cluster_metrics {
  explicit cluster_metrics(metrics_registry& registry);
  /// arbiter_cluster_nodes{state="up"|"lost"}: nodes the coordinator knows.
  prometheus::Family<prometheus::Gauge>& nodes;
  /// arbiter_cluster_node_events_total{event="joined"|"lost"|"refused"}.
  prometheus::Family<prometheus::Counter>& events;
};

/// The models worker nodes' sources answer to on the pass-through routes (`GET /v1/models`,
/// `/v1/chat/completions`, `/v1/embeddings`), beside the coordinator's own. The gateway
/// writes it as nodes' sources register and as nodes are lost; the ingress's I/O threads read
/// it.
class node_models {
public:
  struct entry {
    std::string model;
    capability cap = capability::chat;
    /// "NODE/SOURCE".
    std::string source;
    /// Empty while its node is up; for a lost node's model, why it is away ("node 'N' was
    /// lost: REASON"): a request for a model only such nodes serve is told to come back
    /// (503), not that the model does not exist (404, which no client retries).
    std::string away;

    bool operator==(const entry& other) const {
      return model == other.model && cap == other.cap && source == other.source
             && away == other.away;
    }
  };

  /// What the nodes serve (a lost one's models marked `away`), and a number that grows with
  /// each change.
  struct snapshot {
    std::shared_ptr<const std::vector<entry>> entries;
    uint64_t version = 0;
  };

  snapshot get() const {
    std::lock_guard<std::mutex> lock{mutex_};
    return {entries_, version_};
  }

  void set(std::vector<entry> entries) {
    auto next = std::make_shared<const std::vector<entry>>(std::move(entries));
    std::lock_guard<std::mutex> lock{mutex_};
    entries_ = std::move(next);
    ++version_;
  }

private:
  mutable std::mutex mutex_;
  std::shared_ptr<const std::vector<entry>> entries_ = std::make_shared<std::vector<entry>>();
  uint64_t version_ = 0;
};

/// How long a lost node's models answer 503 `model_unavailable` before they are forgotten.
inline constexpr std::chrono::milliseconds lost_models_away_for = std::chrono::minutes{10};

/// The coordinator's gateway, the actor worker nodes connect to. It takes
///   (node_join_atom, node_hello, node actor)                -> ok, or an error (name taken)
///   (add_source_atom, node name, source_spec, worker actor) -> the source id
///   (node_beat_atom, node name)                             -> no answer; updates last seen
///   (node_leave_atom, node name), from the node's actor     -> ok; the node shows as lost
///   (info_atom)                                             -> std::vector<node_info>
/// and passes sources on to the scheduler under the name "NODE/SOURCE". It watches each
/// node's actor: when that goes (the connection is lost) the node shows as lost; the
/// scheduler watches the workers themselves. `models`, when given, is kept to the models the
/// up nodes' sources serve, and those of the nodes lost less than `away_for` ago, marked
/// away (a restarting node's callers get 503 and retry); a node lost longer is taken for
/// gone, and its models for unknown (404), until its name joins again.
/// `heartbeat` is the coordinator's own (`cluster.heartbeat_ms`; 0: not checked against the
/// nodes' timeouts).
caf::actor spawn_cluster_gateway(caf::actor_system& sys, caf::actor scheduler,
                                 cluster_metrics& metrics, std::chrono::milliseconds timeout,
                                 node_models* models = nullptr,
                                 std::chrono::milliseconds away_for = lost_models_away_for,
                                 std::chrono::milliseconds heartbeat = {});

/// A worker actor and the spec it is registered under (serve registers its own, a node passes
/// its to the gateway).
struct spawned_source {
  /// The spec as built where it was spawned (named as in the config: "cpu", the model or
  /// source name; the gateway prefixes a node's with "NODE/").
  scheduler::source_spec spec;
  caf::actor worker;
};

/// Runs a worker node until SIGINT/SIGTERM/SIGHUP: joins the coordinator at host:port,
/// registers `sources`, and sends a heartbeat message every `settings.heartbeat`. When the
/// coordinator cannot be reached or is lost (a restart) it joins again after a wait that
/// doubles from 250 ms to 8 s. The workers stay up across rejoins; on a signal while joined
/// they are stopped and the coordinator told the node left (`left`, when given, says so, and
/// how many workers were still busy with a batch after 3 s). Returns the process exit code,
/// 0. `joined`, when given, is true while the node is joined (for its /health).
struct node_leaving {
  bool left = false;
  size_t busy = 0;
};
int run_worker_node(caf::actor_system& sys, const std::string& host, uint16_t port,
                    const node_hello& hello, const std::vector<spawned_source>& sources,
                    const cluster_settings& settings, std::atomic<bool>* joined = nullptr,
                    node_leaving* left = nullptr);

} // namespace arbiter::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<arbiter::actors::node_info>)
