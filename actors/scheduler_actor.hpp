#pragma once

#include <memory>

#include <caf/fwd.hpp>

#include "actors/replay_writer.hpp"
#include "config/config.hpp"
#include "scheduler/scheduler_core.hpp"
#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::actors {

/// Spawns the scheduler actor: it owns a `scheduler::scheduler_core` and turns messages into
/// calls on it (see actors/messages.hpp for the protocol). `metrics` must outlive the actor.
/// `fallback` scores items whose reward falls back (see `scheduler_core::set_fallback`).
/// With a `recorder` (the replay log), sources are asked for their evidence and every finished
/// request goes to it.
caf::actor spawn_scheduler(caf::actor_system& sys, const config::scheduler_config& cfg,
                           scheduler::scheduler_metrics& metrics,
                           const config::routing_config& routing = {},
                           scheduler::fallback_fn fallback = {},
                           std::shared_ptr<replay_recorder> recorder = nullptr);

} // namespace arbiter::actors
