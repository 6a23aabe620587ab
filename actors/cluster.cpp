#include "actors/cluster.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <map>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/all.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/source_capabilities.hpp"
#include "arbiter/version.hpp"
#include "common/log.hpp"

namespace arbiter::actors {

cluster_settings cluster_settings::from(const config::cluster_config& cfg) {
  return {cfg.heartbeat, cfg.timeout, cfg.certificate, cfg.key, cfg.ca};
}

cluster_metrics::cluster_metrics(metrics_registry& registry)
  : nodes(registry.gauge("arbiter_cluster_nodes",
                         "Worker nodes the coordinator knows, by state (up, lost)")),
    events(registry.counter("arbiter_cluster_node_events_total",
                            "Worker nodes that joined, were lost or were refused")) {
}

void configure_cluster(caf::actor_system_config& cfg, const cluster_settings& settings) {
  cfg.load<caf::io::middleman>();
  if (settings.tls()) {
    // CAF's OpenSSL module requires a valid certificate on both ends of every connection
    // (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT) as soon as any of these is set.
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = settings.certificate;
    cfg.openssl_key = settings.key;
    cfg.openssl_cafile = settings.ca;
  }
  cfg.add_message_type<work_batch>("arbiter::work_batch");
  cfg.add_message_type<work_result>("arbiter::work_result");
  cfg.add_message_type<scheduler::source_spec>("arbiter::source_spec");
  cfg.add_message_type<node_hello>("arbiter::node_hello");
  cfg.set("middleman.heartbeat-interval", caf::timespan{settings.heartbeat});
  cfg.set("middleman.connection-timeout", caf::timespan{settings.connection_timeout});
}

caf::expected<uint16_t> publish_cluster(caf::actor_system& sys, const caf::actor& whom,
                                        const std::string& host, uint16_t port,
                                        const cluster_settings& settings) {
  if (settings.tls()) {
    return caf::openssl::publish(whom, port, host.c_str(), true);
  }
  return sys.middleman().publish(whom, port, host.c_str(), true);
}

caf::expected<caf::actor> join_cluster(caf::actor_system& sys, const std::string& host,
                                       uint16_t port, const cluster_settings& settings) {
  if (settings.tls()) {
    return caf::openssl::remote_actor(sys, host, port);
  }
  return sys.middleman().remote_actor(host, port);
}

namespace {

using clock_type = std::chrono::steady_clock;

int64_t ms_since(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

struct node_entry {
  node_hello hello;
  caf::actor_addr actor;
  bool up = true;
  std::string reason;
  clock_type::time_point joined;
  clock_type::time_point last_seen;
  std::vector<std::string> sources;
  /// The pass-through models its registered sources answer to (cleared once it is gone).
  std::vector<node_models::entry> models;
  /// When it was lost (while it is).
  clock_type::time_point lost_at;
};

struct gateway_state {
  caf::actor scheduler;
  cluster_metrics* metrics = nullptr;
  /// By node name; lost nodes stay until their name joins again.
  std::map<std::string, node_entry> nodes;
  /// The coordinator's `cluster.timeout_ms`: silence past it loses a node.
  std::chrono::milliseconds timeout{0};
  /// The coordinator's `cluster.heartbeat_ms` (0: unknown).
  std::chrono::milliseconds heartbeat{0};
  /// Where the up nodes' models are published for the ingress; may be null.
  node_models* models = nullptr;
  /// How long a lost node's models are published as away (`spawn_cluster_gateway`).
  std::chrono::milliseconds away_for{lost_models_away_for};
  static inline const char* name = "arbiter.cluster_gateway";
};

/// Lost nodes kept for /info at most; the oldest lost one goes first.
constexpr size_t max_lost_nodes = 256;

void forget_oldest_lost(gateway_state& s) {
  size_t lost = 0;
  auto oldest = s.nodes.end();
  for (auto it = s.nodes.begin(); it != s.nodes.end(); ++it) {
    if (!it->second.up) {
      ++lost;
      if (oldest == s.nodes.end() || it->second.last_seen < oldest->second.last_seen) {
        oldest = it;
      }
    }
  }
  if (lost > max_lost_nodes) {
    s.nodes.erase(oldest);
  }
}

/// Sets arbiter_cluster_nodes from the table, and counts `event` when given.
void count(gateway_state& s, const char* event = nullptr) {
  size_t up = 0;
  for (const auto& [name, node] : s.nodes) {
    up += node.up ? 1 : 0;
  }
  s.metrics->nodes.Add({{"state", "up"}}).Set(static_cast<double>(up));
  s.metrics->nodes.Add({{"state", "lost"}}).Set(static_cast<double>(s.nodes.size() - up));
  if (event != nullptr) {
    s.metrics->events.Add({{"event", event}}).Increment();
  }
}

/// Publishes the models of the nodes that are up, then those of the lost ones, marked away.
void publish_models(gateway_state& s) {
  if (s.models == nullptr) {
    return;
  }
  std::vector<node_models::entry> entries;
  for (const auto& [name, node] : s.nodes) {
    if (node.up) {
      entries.insert(entries.end(), node.models.begin(), node.models.end());
    }
  }
  for (const auto& [name, node] : s.nodes) {
    if (!node.up) {
      for (auto e : node.models) {
        e.away = "node '" + name + "' was lost: " + node.reason;
        entries.push_back(std::move(e));
      }
    }
  }
  s.models->set(std::move(entries));
}

caf::behavior gateway(caf::stateful_actor<gateway_state>* self, caf::actor scheduler,
                      cluster_metrics* metrics, std::chrono::milliseconds timeout,
                      node_models* models, std::chrono::milliseconds away_for,
                      std::chrono::milliseconds heartbeat) {
  self->state.scheduler = std::move(scheduler);
  self->state.metrics = metrics;
  self->state.timeout = timeout;
  self->state.heartbeat = heartbeat;
  self->state.models = models;
  self->state.away_for = away_for;
  count(self->state);
  // A node that left (a signal) or was lost (its connection closed or timed out) shows as
  // lost; its models are away until it joins again or `away_for` passes.
  auto lose = [self](const std::string& name, node_entry& node, std::string reason,
                     bool left) {
    node.up = false;
    node.lost_at = clock_type::now();
    self->delayed_send(self, self->state.away_for, node_gone_atom::value, name);
    node.reason = std::move(reason);
    if (left) {
      log::info("cluster: node '", name, "' (", node.hello.host, " pid ", node.hello.pid,
                ") left: ", node.reason, "; its work is retried elsewhere");
    } else {
      log::warn("cluster: lost node '", name, "' (", node.hello.host, " pid ",
                node.hello.pid, "): ", node.reason, "; its work is retried elsewhere");
    }
    self->state.metrics->events.Add({{"event", left ? "left" : "lost"}}).Increment();
    forget_oldest_lost(self->state);
    count(self->state);
    publish_models(self->state);
  };
  self->set_down_handler([self, lose](const caf::down_msg& down) {
    for (auto& [name, node] : self->state.nodes) {
      if (node.up && node.actor == down.source) {
        lose(name, node, exit_text(self->system(), down.reason), false);
        break;
      }
    }
  });
  return {
    [self](node_join_atom, node_hello& hello, caf::actor node) -> caf::result<caf::ok_atom> {
      auto& nodes = self->state.nodes;
      if (hello.name.empty() || hello.name.find('/') != std::string::npos) {
        count(self->state, "refused");
        return caf::make_error(caf::sec::invalid_argument,
                               "node name must be non-empty and without '/'");
      }
      if (hello.version != arbiter::version) {
        // The work messages' layout may differ between versions: refuse rather than risk
        // items that cannot be read on the other side.
        count(self->state, "refused");
        return caf::make_error(caf::sec::invalid_argument,
                               "node '" + hello.name + "' runs arbiter " + hello.version
                                 + ", the coordinator " + arbiter::version
                                 + "; run the same version on every member");
      }
      if (auto limit = self->state.timeout.count();
          hello.heartbeat_ms > 0 && limit > 0 && hello.heartbeat_ms >= limit) {
        // It would be taken for lost between its beats, and join again, over and over.
        count(self->state, "refused");
        return caf::make_error(caf::sec::invalid_argument,
                               "node '" + hello.name + "' sends a heartbeat every "
                                 + std::to_string(hello.heartbeat_ms)
                                 + " ms, not within the coordinator's cluster.timeout_ms ("
                                 + std::to_string(limit) + "); set the node's "
                                 + "cluster.heartbeat_ms below it");
      }
      if (auto beat = self->state.heartbeat.count();
          hello.timeout_ms > 0 && beat > 0 && beat >= hello.timeout_ms) {
        // The other way round: the node would take this coordinator for lost between its
        // beats, and leave and join again, its long calls never answered.
        count(self->state, "refused");
        return caf::make_error(caf::sec::invalid_argument,
                               "node '" + hello.name + "' takes the coordinator for lost after "
                                 + std::to_string(hello.timeout_ms)
                                 + " ms of silence (its cluster.timeout_ms), and the "
                                 + "coordinator sends a heartbeat every "
                                 + std::to_string(beat) + " ms (cluster.heartbeat_ms); set "
                                 + "the node's cluster.timeout_ms above it");
      }
      auto it = nodes.find(hello.name);
      if (it != nodes.end() && it->second.up && it->second.actor != node.address()) {
        count(self->state, "refused");
        return caf::make_error(caf::sec::invalid_argument,
                               "a node named '" + hello.name + "' is already joined");
      }
      node_entry entry;
      entry.hello = std::move(hello);
      entry.actor = node.address();
      entry.joined = entry.last_seen = clock_type::now();
      self->monitor(node);
      log::info("cluster: node '", entry.hello.name, "' joined (", entry.hello.host, " pid ",
                entry.hello.pid, ", arbiter ", entry.hello.version, ")");
      auto name = entry.hello.name;
      nodes[name] = std::move(entry);
      count(self->state, "joined");
      publish_models(self->state);
      return caf::ok_atom::value;
    },
    [self](add_source_atom, const std::string& node, scheduler::source_spec& spec,
           caf::actor worker) -> caf::result<scheduler::source_id> {
      auto it = self->state.nodes.find(node);
      if (it == self->state.nodes.end() || !it->second.up) {
        return caf::make_error(caf::sec::invalid_argument,
                               "node '" + node + "' has not joined");
      }
      spec.name = node + "/" + spec.name;
      spec.capabilities = node_routing_keys(spec.capabilities);
      it->second.sources.push_back(spec.name);
      std::vector<node_models::entry> served;
      for (auto& [cap, model] : models_of_keys(spec.capabilities)) {
        served.push_back({std::move(model), cap, spec.name, {}});
      }
      auto rp = self->make_response_promise<scheduler::source_id>();
      self->request(self->state.scheduler, std::chrono::seconds{10}, add_source_atom::value,
                    std::move(spec), std::move(worker))
        .then(
          [self, rp, node, actor = it->second.actor,
           served = std::move(served)](scheduler::source_id id) mutable {
            // The routes learn the models once the scheduler can route to them, and only
            // while the node that registered them is the one up under its name.
            auto at = self->state.nodes.find(node);
            if (at != self->state.nodes.end() && at->second.up && at->second.actor == actor
                && !served.empty()) {
              auto& kept = at->second.models;
              kept.insert(kept.end(), served.begin(), served.end());
              publish_models(self->state);
            }
            rp.deliver(id);
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
    [self](node_gone_atom, const std::string& name) {
      // Still lost since then (not up, nor lost again later): gone. Its models are no longer
      // published as away: a scaled-down node's models would have answered 503 for good.
      auto it = self->state.nodes.find(name);
      if (it != self->state.nodes.end() && !it->second.up && !it->second.models.empty()
          && clock_type::now() - it->second.lost_at >= self->state.away_for) {
        log::info("cluster: node '", name, "' has been lost for ",
                  self->state.away_for.count() / 1000, " s: its models are forgotten");
        it->second.models.clear();
        publish_models(self->state);
      }
    },
    [self, lose](node_leave_atom, const std::string& name) -> caf::ok_atom {
      auto it = self->state.nodes.find(name);
      if (it != self->state.nodes.end() && it->second.up
          && it->second.actor == caf::actor_cast<caf::actor_addr>(self->current_sender())) {
        lose(name, it->second, "it stopped (a signal)", true);
      }
      return caf::ok_atom::value;
    },
    [self](node_beat_atom, const std::string& node) {
      auto it = self->state.nodes.find(node);
      if (it != self->state.nodes.end() && it->second.up) {
        it->second.last_seen = clock_type::now();
      }
    },
    [self](info_atom) {
      std::vector<node_info> out;
      for (const auto& [name, node] : self->state.nodes) {
        node_info info;
        info.name = name;
        info.host = node.hello.host;
        info.pid = node.hello.pid;
        info.version = node.hello.version;
        info.state = node.up ? "up" : "lost";
        info.reason = node.reason;
        info.joined_ms_ago = ms_since(node.joined);
        info.last_seen_ms_ago = ms_since(node.last_seen);
        info.sources = node.sources;
        out.push_back(std::move(info));
      }
      return out;
    },
  };
}

/// Waits up to `d` for SIGINT, SIGTERM or SIGHUP (blocked in every thread); true when one came.
bool wait_for_signal(const sigset_t& signals, std::chrono::milliseconds d) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(d.count() / 1000);
  ts.tv_nsec = static_cast<long>((d.count() % 1000) * 1000000);
  return sigtimedwait(&signals, nullptr, &ts) > 0;
}

/// The node's side of one membership: watches the gateway and sends it a heartbeat message
/// every `every`; sets `lost` when the gateway goes. Asked to leave, it tells the gateway
/// (which knows the node by this actor) and answers once the gateway has.
caf::behavior node_watch(caf::event_based_actor* self, caf::actor gateway, std::string name,
                         std::chrono::milliseconds every,
                         std::shared_ptr<std::atomic<bool>> lost) {
  self->monitor(gateway);
  self->set_down_handler([self, lost](const caf::down_msg& down) {
    log::warn("lost the coordinator: ", exit_text(self->system(), down.reason));
    *lost = true;
    self->quit();
  });
  self->delayed_send(self, every, tick_atom::value);
  return {
    [self, gateway, name, every](tick_atom) {
      self->send(gateway, node_beat_atom::value, name);
      self->delayed_send(self, every, tick_atom::value);
    },
    [self, gateway, name](node_leave_atom) -> caf::result<caf::ok_atom> {
      auto rp = self->make_response_promise<caf::ok_atom>();
      self->request(gateway, std::chrono::seconds{1}, node_leave_atom::value, name)
        .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
              [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
  };
}

/// Stops a joined node's workers and tells the coordinator it left. Each worker's end goes to
/// the coordinator through this node's connection broker, which watches the workers the
/// coordinator holds; the leave goes the same way after them, so once it is answered the
/// coordinator has seen them go. (A worker's end left in the broker's mailbox, which CAF 0.17
/// stops without emptying, kept a detached model worker's thread, and so the actor system's
/// end, waiting past the stop deadline; exe/worker.cpp now exits without that end once the
/// node has left.) A worker busy with a batch ends when the batch does: waited for up to 3 s.
/// Returns how many workers are still busy.
size_t leave_cluster(caf::actor_system& sys, const caf::actor& watch,
                     const std::vector<spawned_source>& sources, const std::string& where) {
  caf::scoped_actor self{sys};
  for (const auto& s : sources) {
    self->monitor(s.worker);
    caf::anon_send_exit(s.worker, caf::exit_reason::user_shutdown);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{3};
  size_t down = 0;
  bool waiting = true;
  while (down < sources.size() && waiting) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
    self->receive([&](const caf::down_msg&) { ++down; },
                  caf::after(std::max(left, std::chrono::milliseconds{0})) >>
                    [&] { waiting = false; });
  }
  if (down < sources.size()) {
    log::warn("stopping: ", sources.size() - down, " of ", sources.size(),
              " workers still busy after 3 s");
  }
  self->request(watch, std::chrono::seconds{2}, node_leave_atom::value)
    .receive([&](caf::ok_atom) { log::info("left ", where); },
             [&](caf::error& e) {
               log::warn("could not tell ", where, " that this node left: ", sys.render(e));
             });
  return sources.size() - down;
}

} // namespace

caf::actor spawn_cluster_gateway(caf::actor_system& sys, caf::actor scheduler,
                                 cluster_metrics& metrics, std::chrono::milliseconds timeout,
                                 node_models* models, std::chrono::milliseconds away_for,
                                 std::chrono::milliseconds heartbeat) {
  return sys.spawn(gateway, std::move(scheduler), &metrics, timeout, models, away_for,
                   heartbeat);
}

int run_worker_node(caf::actor_system& sys, const std::string& host, uint16_t port,
                    const node_hello& hello, const std::vector<spawned_source>& sources,
                    const cluster_settings& settings, std::atomic<bool>* joined_flag,
                    node_leaving* left) {
  auto set_joined = [joined_flag](bool value) {
    if (joined_flag != nullptr) {
      *joined_flag = value;
    }
  };
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  const std::chrono::milliseconds first_backoff{250};
  const std::chrono::milliseconds max_backoff{8000};
  auto backoff = first_backoff;
  const std::string where = host + ":" + std::to_string(port);
  // Join, serve until the coordinator is lost, and join again (a restarted coordinator), with
  // a doubling wait between attempts; a signal ends the node at any point.
  while (true) {
    auto gateway = join_cluster(sys, host, port, settings);
    bool joined = static_cast<bool>(gateway);
    if (!joined) {
      const bool handshake = gateway.error() == caf::sec::disconnect_during_handshake;
      log::warn("cannot join ", where, settings.tls() ? " (TLS)" : "", ": ",
                sys.render(gateway.error()),
                handshake ? " (closed during the handshake: a certificate the other end's CA "
                            "did not sign, one expired or not yet valid on either end, or TLS "
                            "configured on one end only; check-config checks this node's own)"
                          : "",
                "; trying again in ", backoff.count(), " ms");
    }
    auto lost = std::make_shared<std::atomic<bool>>(false);
    caf::actor watch;
    if (joined) {
      watch = sys.spawn(node_watch, *gateway, hello.name, settings.heartbeat, lost);
      caf::scoped_actor self{sys};
      const auto timeout = std::chrono::seconds{10};
      self->request(*gateway, timeout, node_join_atom::value, hello, watch)
        .receive([](caf::ok_atom) {},
                 [&](caf::error& e) {
                   log::warn("the coordinator at ", where, " refused the node: ",
                             sys.render(e));
                   joined = false;
                 });
      for (size_t i = 0; i < sources.size() && joined; ++i) {
        self->request(*gateway, timeout, add_source_atom::value, hello.name, sources[i].spec,
                      sources[i].worker)
          .receive([](scheduler::source_id) {},
                   [&](caf::error& e) {
                     log::warn("the coordinator did not take source '", sources[i].spec.name,
                               "': ", sys.render(e));
                     joined = false;
                   });
      }
    }
    if (joined) {
      backoff = first_backoff;
      // Joined before it is said: whoever reads the log line (a probe, a test) sees /health 200.
      set_joined(true);
      log::info("node '", hello.name, "' joined ", where, settings.tls() ? " over TLS" : "",
                " with ", sources.size(), " sources");
      bool stop = false;
      while (!*lost && !stop) {
        stop = wait_for_signal(signals, std::chrono::milliseconds{200});
      }
      set_joined(false);
      if (stop) {
        const auto still_busy = leave_cluster(sys, watch, sources, where);
        if (left != nullptr) {
          *left = {true, still_busy};
        }
        caf::anon_send_exit(watch, caf::exit_reason::user_shutdown);
        return 0;
      }
    }
    if (watch) {
      caf::anon_send_exit(watch, caf::exit_reason::user_shutdown);
    }
    if (joined) {
      log::info("rejoining in ", backoff.count(), " ms");
    }
    if (wait_for_signal(signals, backoff)) {
      return 0;
    }
    backoff = std::min(backoff * 2, max_backoff);
  }
}

} // namespace arbiter::actors
