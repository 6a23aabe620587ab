#pragma once

#include <memory>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "backends/reward_catalog.hpp"
#include "config/config.hpp"
#include "scheduler/source_registry.hpp"

namespace arbiter::actors {

/// The name reward graphs report as their source when their model calls ran on more than one.
inline constexpr const char* reward_graph_source = "reward-graph";

/// What the scheduler needs to know of the reward-graph source: the graph capabilities it
/// serves, given the configured sources and rewards — "judge" and "em_ig" always, "ig" when
/// some source serves "generate" and some serves "nli" (a remote IG service may serve "ig"
/// too; routing picks) or when the cluster is on and no IG service is configured (worker
/// nodes may bring the models), and each again with the "@NAME" suffix of every reward that names
/// its sources (when those sources serve what the graph needs).
scheduler::source_spec reward_graph_spec(const config::arbiter_config& cfg,
                                         const backends::reward_catalog& catalog);

/// Spawns the actor that runs reward graphs. It answers `(work_atom, work_batch)` for items of
/// kind judge, info_gain and em_info_gain: for each item it sends the model calls the reward
/// needs ("chat", "generate", "nli", or a nested "info_gain" item) to `scheduler` as internal
/// requests with the batch's priority and deadline, combines their answers, and reports one
/// outcome per item with the provenance of its calls. A call that fails fails its item with
/// the call's code and reason. `catalog` must outlive the actor.
caf::actor spawn_reward_graph(caf::actor_system& sys, caf::actor scheduler,
                              const backends::reward_catalog& catalog);

} // namespace arbiter::actors
