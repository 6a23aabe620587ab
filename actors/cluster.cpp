#include "actors/cluster.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
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

namespace {

/// Waits up to `d` for SIGINT or SIGTERM (blocked in every thread); true when one came.
bool wait_for_signal(const sigset_t& signals, std::chrono::milliseconds d) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(d.count() / 1000);
  ts.tv_nsec = static_cast<long>((d.count() % 1000) * 1000000);
  return sigtimedwait(&signals, nullptr, &ts) > 0;
}

} // namespace

int run_worker_node(const worker_node_options& options) {
  // SIGINT/SIGTERM are blocked in every thread (CAF's start after this) and waited for here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  caf::actor_system_config cfg;
  configure_cluster(cfg, options.settings);
  caf::actor_system sys{cfg};
  const std::string name = options.name.empty() ? "node-" + std::to_string(getpid())
                                                : options.name;
  const uint32_t n = options.cpu_workers != 0
                       ? options.cpu_workers
                       : std::max(1u, std::thread::hardware_concurrency());
  const std::chrono::milliseconds first_backoff{250};
  const std::chrono::milliseconds max_backoff{8000};
  auto backoff = first_backoff;
  // Join, serve until the coordinator is lost, and join again (a restarted coordinator), with
  // a doubling wait between attempts; a signal ends the node at any point.
  while (true) {
    auto coordinator = sys.middleman().remote_actor(options.host, options.port);
    if (!coordinator) {
      log::warn("cannot join ", options.host, ":", options.port, " (",
                sys.render(coordinator.error()), "); trying again in ", backoff.count(), " ms");
      if (wait_for_signal(signals, backoff)) {
        return 0;
      }
      backoff = std::min(backoff * 2, max_backoff);
      continue;
    }
    std::vector<caf::actor> workers;
    bool joined = true;
    {
      caf::scoped_actor self{sys};
      for (uint32_t i = 0; i < n && joined; ++i) {
        auto worker = spawn_cpu_worker(sys, {});
        workers.push_back(worker);
        self->request(*coordinator, std::chrono::seconds{10}, add_source_atom::value, name,
                      std::vector<std::string>{"cpu"}, worker)
          .receive([](scheduler::source_id) {},
                   [&](caf::error& e) {
                     log::warn("the coordinator did not take worker ", i, ": ",
                               sys.render(e));
                     joined = false;
                   });
      }
    }
    auto lost = std::make_shared<std::atomic<bool>>(!joined);
    caf::actor watcher;
    if (joined) {
      backoff = first_backoff;
      log::info("node '", name, "' joined ", options.host, ":", options.port, " with ", n,
                " cpu workers");
      watcher = sys.spawn(
        [lost](caf::event_based_actor* self, caf::actor target) -> caf::behavior {
          self->monitor(target);
          self->set_down_handler([self, lost](const caf::down_msg& down) {
            log::warn("lost the coordinator: ", self->system().render(down.reason));
            *lost = true;
            self->quit();
          });
          // A behavior keeps it alive until the down message (it takes no other message).
          return {[](caf::ok_atom) {}};
        },
        *coordinator);
    }
    bool stop = false;
    while (!*lost && !stop) {
      stop = wait_for_signal(signals, std::chrono::milliseconds{200});
    }
    for (auto& w : workers) {
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    }
    if (watcher) {
      caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
    }
    if (stop) {
      return 0;
    }
    log::info("rejoining in ", backoff.count(), " ms");
    if (wait_for_signal(signals, backoff)) {
      return 0;
    }
    backoff = std::min(backoff * 2, max_backoff);
  }
}

} // namespace arbiter::actors
