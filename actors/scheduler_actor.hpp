#pragma once

#include <caf/fwd.hpp>

#include "config/config.hpp"
#include "scheduler/scheduler_core.hpp"
#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::actors {

/// Spawns the scheduler actor: it owns a `scheduler::scheduler_core` and turns messages into
/// calls on it (see actors/messages.hpp for the protocol). `metrics` must outlive the actor.
/// `fallback` scores items whose reward falls back (see `scheduler_core::set_fallback`).
caf::actor spawn_scheduler(caf::actor_system& sys, const config::scheduler_config& cfg,
                           scheduler::scheduler_metrics& metrics,
                           const config::routing_config& routing = {},
                           scheduler::fallback_fn fallback = {});

} // namespace arbiter::actors
