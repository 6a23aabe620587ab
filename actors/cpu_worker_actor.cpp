#include "actors/cpu_worker_actor.hpp"

#include <exception>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/messages.hpp"
#include "backends/cpu/cpu_rewards.hpp"

namespace arbiter::actors {

namespace {

caf::behavior cpu_worker(caf::event_based_actor*, config::cpu_config cfg) {
  const backends::cpu_limits limits{cfg.max_lexical_chars};
  return {
    [limits](work_atom, const work_batch& batch) {
      work_result result;
      result.id = batch.id;
      result.outcomes.reserve(batch.items.size());
      for (const auto& item : batch.items) {
        try {
          result.outcomes.push_back(backends::cpu::evaluate(*item, limits));
        } catch (const std::exception& e) {
          item_outcome failed;
          failed.code = errc::worker_failed;
          failed.error = std::string{"cpu worker: "} + e.what();
          result.outcomes.push_back(std::move(failed));
        }
      }
      return result;
    },
    [](cancel_atom, scheduler::batch_id) {
      // A batch runs whole as one message, so a cancel for it comes after its answer.
    },
  };
}

} // namespace

caf::actor spawn_cpu_worker(caf::actor_system& sys, const config::cpu_config& cfg) {
  return sys.spawn(cpu_worker, cfg);
}

} // namespace arbiter::actors
