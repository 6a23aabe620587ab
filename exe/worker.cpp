// `arbiter worker`: a worker node of the cluster (docs/deployment.md).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include <utility>  // Boost 1.74's Asio needs std::exchange declared first.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include "actors/cluster.hpp"
#include "arbiter/version.hpp"
#include "common/gpu_monitor.hpp"
#include "common/log.hpp"
#include "exe/serve.hpp"
#include "exe/startup.hpp"
#include "net/http_metrics.hpp"
#include "net/http_server.hpp"
#include "net/node_status.hpp"
#include "common/metrics.hpp"

namespace arbiter::exe {

int worker(const worker_options& options) {
  config::arbiter_config cfg;
  auto flags = [&options](config::arbiter_config& c,
                          std::vector<config::config_problem>& problems) {
    if (options.cpu_workers) {
      c.cpu.workers = *options.cpu_workers;
    }
    if (options.status_host) {
      c.server.host = *options.status_host;
    }
    // The status port serves /health and /metrics only: nothing there spends a provider key,
    // so binding every interface needs no API key.
    c.server.allow_unauthenticated = true;
    apply_port_flag(options.status_port, "--status-port", c.server.port, problems);
  };
  if (!load_configuration(options.config_file, flags, cfg)) {
    return 2;
  }
  // SIGINT/SIGTERM/SIGHUP are blocked in every thread (CAF's and Asio's start after this) and
  // waited for by run_worker_node.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const auto cluster = actors::cluster_settings::from(cfg.cluster);
  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", static_cast<size_t>(or_cores(cfg.scheduler.threads)));
  caf_cfg.set("scheduler.policy", caf::atom_from_string(cfg.scheduler.policy));
  actors::configure_cluster(caf_cfg, cluster);
  boost::asio::io_context ioc;
  caf::actor_system sys{caf_cfg};
  stop_deadline stopping{std::chrono::seconds{5}};

  // The node's model-worker metrics are served on its status port, when it has one; the
  // coordinator's /info and /metrics show its sources.
  metrics_registry registry;
  actors::local_model_metrics model_metrics{registry};
  net::http_metrics http_metrics{registry};
  std::vector<actors::spawned_source> sources;
  if (cfg.cpu.enabled) {
    spawn_cpu_workers(sys, cfg, or_cores(cfg.cpu.workers), sources);
  }
  spawn_remote_sources(sys, ioc, cfg, sources);
  std::vector<net::local_model_info> loaded;
  const bool models_ok = start_local_models(sys, cfg, model_metrics, loaded, sources);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  actors::node_hello hello;
  hello.host = host;
  hello.pid = static_cast<uint32_t>(getpid());
  hello.version = arbiter::version;
  hello.heartbeat_ms = cfg.cluster.heartbeat.count();
  hello.timeout_ms = cfg.cluster.timeout.count();
  hello.name = options.name.empty() ? std::string{host} + "-" + std::to_string(hello.pid)
                                    : options.name;
  std::atomic<bool> joined{false};
  const std::string coordinator = options.host + ":" + std::to_string(options.port);
  auto gpus = gpu_monitor::open(registry);
  if (gpus) {
    std::multimap<std::string, std::string> placed;
    for (const auto& m : loaded) {
      placed.emplace(m.name, m.device);
    }
    gpus->set_workers(placed);
  }
  net::node_status_routes status_routes{
    [&] { return net::node_status{hello.name, coordinator, joined.load()}; }, registry,
    http_metrics, gpus.get()};
  std::unique_ptr<net::http_server> status_server;
  if (options.status_port) {
    status_server = std::make_unique<net::http_server>(ioc, cfg.server, status_routes,
                                                       http_metrics);
    std::string error;
    if (!status_server->listen(cfg.server.host, cfg.server.port, error)) {
      std::cerr << "arbiter: --status-port: " << error << "\n";
      for (auto& s : sources) {
        caf::anon_send_exit(s.worker, caf::exit_reason::user_shutdown);
      }
      status_server->shutdown();
      return 1;
    }
    status_server->start();
    log::info("node status: http://", url_host(cfg.server.host), ":", status_server->port(),
              "/health and /metrics");
  }
  auto keep_running = boost::asio::make_work_guard(ioc);
  std::vector<std::thread> io_threads;
  if (!cfg.sources.empty() || status_server) {
    for (uint32_t i = 0; i < std::min(or_cores(cfg.server.io_threads), 4u); ++i) {
      io_threads.emplace_back([&ioc] { ioc.run(); });
    }
  }
  int rc = 2;
  actors::node_leaving leaving;
  if (models_ok) {
    rc = actors::run_worker_node(sys, options.host, options.port, hello, sources, cluster,
                                 &joined, &leaving);
  }
  for (auto& s : sources) {
    caf::anon_send_exit(s.worker, caf::exit_reason::user_shutdown);
  }
  if (status_server) {
    status_server->begin_drain();
    status_server->finish_drain();
  }
  keep_running.reset();
  ioc.stop();
  for (auto& t : io_threads) {
    t.join();
  }
  if (status_server) {
    status_server->shutdown();
  }
  if (leaving.left) {
    // The node has left and nothing of it is left to write: the actor system's end would only
    // wait for each detached model worker's thread, which a worker that was busy when stopped
    // was seen to hold past the 5 s stop deadline even once it had ended (helper-55: 7 s in
    // all). Its items are retried elsewhere once the connection closes, now.
    log::info("worker node stopped",
              leaving.busy > 0
                ? " (" + std::to_string(leaving.busy) + " busy workers not waited for)"
                : std::string{});
    std::cout.flush();
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  log::info("worker node stopped");
  stopping.exit_code(rc);
  return rc;
}

} // namespace arbiter::exe
