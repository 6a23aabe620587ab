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

/// Whether `src` serves `capability` ("chat", "embed", ...): its configured list, else its
/// kind's defaults.
bool serves(const config::source_config& src, const std::string& capability);

/// What a `[[models]]` entry serves: {"embed"} for an embedding model, {"generate", "chat"}
/// for a generator.
std::vector<std::string> model_capabilities(const config::model_config& m);

/// The model id a source answers to on the pass-through routes (/v1/chat/completions,
/// /v1/embeddings): its `model`, else its name.
std::string served_model(const config::source_config& src);

/// The suffix that restricts a capability to the sources serving model `id`: "@model:" + id.
std::string model_route_suffix(const std::string& id);

/// The capabilities a configured source serves, with the route suffixes of the rewards that
/// name it and, for chat and embed, of the model it serves (e.g. {"chat",
/// "chat@model:qwen3-8b", "chat@strict_judge"}).
std::vector<std::string> routed_capabilities(const config::source_config& src,
                                             const config::arbiter_config& cfg);

/// The same for any source called `source` that serves `base` as model `model`.
std::vector<std::string> routed_capabilities(const std::string& source,
                                             const std::vector<std::string>& base,
                                             const std::string& model,
                                             const config::arbiter_config& cfg);

/// Spawns the actor that runs reward graphs. It answers `(work_atom, work_batch)` for items of
/// kind judge, info_gain and em_info_gain: for each item it sends the model calls the reward
/// needs ("chat", "generate", "nli", or a nested "info_gain" item) to `scheduler` as internal
/// requests with the batch's priority and deadline, combines their answers, and reports one
/// outcome per item with the provenance of its calls. A call that fails fails its item with
/// the call's code and reason. `catalog` must outlive the actor.
caf::actor spawn_reward_graph(caf::actor_system& sys, caf::actor scheduler,
                              const backends::reward_catalog& catalog);

} // namespace arbiter::actors
