#include "actors/cluster.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cpu_worker_actor.hpp"
#include "actors/messages.hpp"
#include "common/log.hpp"

namespace arbiter::actors {

void configure_cluster(caf::actor_system_config& cfg, const cluster_settings& settings) {
  cfg.load<caf::io::middleman>();
  cfg.add_message_type<work_batch>("arbiter::work_batch");
  cfg.add_message_type<work_result>("arbiter::work_result");
  cfg.set("middleman.heartbeat-interval", caf::timespan{settings.heartbeat});
  cfg.set("middleman.connection-timeout", caf::timespan{settings.connection_timeout});
}

int run_worker_node(const worker_node_options& options) {
  // SIGINT/SIGTERM are waited for below, on this thread only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  caf::actor_system_config cfg;
  configure_cluster(cfg, options.settings);
  caf::actor_system sys{cfg};
  auto coordinator = sys.middleman().remote_actor(options.host, options.port);
  if (!coordinator) {
    log::error("cannot join ", options.host, ":", options.port, ": ",
               sys.render(coordinator.error()));
    return 1;
  }
  const std::string name = options.name.empty() ? "node-" + std::to_string(getpid())
                                                : options.name;
  auto n = options.cpu_workers != 0 ? options.cpu_workers
                                    : std::max(1u, std::thread::hardware_concurrency());
  std::vector<caf::actor> workers;
  {
    caf::scoped_actor self{sys};
    for (uint32_t i = 0; i < n; ++i) {
      auto worker = spawn_cpu_worker(sys, {});
      bool added = false;
      self->request(*coordinator, std::chrono::seconds{10}, add_source_atom::value, name,
                    std::vector<std::string>{"cpu"}, worker)
        .receive([&](scheduler::source_id) { added = true; },
                 [&](caf::error& e) {
                   log::error("the coordinator refused worker ", i, ": ", sys.render(e));
                 });
      if (!added) {
        return 1;
      }
      workers.push_back(worker);
    }
  }
  log::info("node '", name, "' joined ", options.host, ":", options.port, " with ", n,
            " cpu workers");
  // Lost coordinator: a down message; a signal: sigwait. Whichever comes first ends the node.
  auto lost = std::make_shared<std::atomic<bool>>(false);
  auto watcher = sys.spawn([lost](caf::event_based_actor* self, caf::actor target) {
    self->monitor(target);
    self->set_down_handler([self, lost](const caf::down_msg& down) {
      log::error("lost the coordinator: ", self->system().render(down.reason));
      *lost = true;
      kill(getpid(), SIGTERM);
    });
  }, *coordinator);
  int sig = 0;
  sigwait(&signals, &sig);
  for (auto& w : workers) {
    caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  }
  caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
  return *lost ? 1 : 0;
}

} // namespace arbiter::actors
