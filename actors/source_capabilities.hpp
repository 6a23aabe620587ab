#pragma once

// What each configured source serves, and under which routes: a remote source's capabilities
// (configured, else its kind's defaults), a local model's, the model id a pass-through route
// answers to, and the "@model:ID" and "@REWARD" suffixes that restrict routing. Read by the
// source specs (remote_source_spec, local_model_spec, reward_graph_spec), the ingress
// (net/routes.cpp, net/openai_codec.cpp) and start-up (exe/).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/capability.hpp"
#include "config/config.hpp"

namespace arbiter::actors {

/// The kind's default capabilities ("openai" → chat, "tei" → embed, "ig_service" → ig).
std::vector<capability> default_capabilities(const std::string& kind);

/// Their routing keys, unnarrowed.
std::vector<std::string> keys_of(const std::vector<capability>& capabilities);

/// Whether routing keys `keys` hold `c`'s, alone or narrowed ("chat", "chat@judge").
bool serves(const std::vector<std::string>& keys, capability c);

/// Whether `src` serves `c`: its configured list, else its kind's defaults.
bool serves(const config::source_config& src, capability c);

/// What a `[[models]]` entry serves: embed for an embedding model, generate and chat for a
/// generator, nli for an NLI model.
std::vector<capability> model_capabilities(const config::model_config& m);

/// The model id a source answers to on the pass-through routes (/v1/chat/completions,
/// /v1/embeddings): its `model`, else its name.
std::string served_model(const config::source_config& src);

/// The suffix that restricts a capability to the sources serving model `id`: "@model:" + id.
std::string model_route_suffix(const std::string& id);

/// The routing keys a worker node's source keeps at the coordinator: its capabilities and
/// their narrowing by model ("chat", "chat@model:qwen3-8b"), not their narrowing by the
/// node's own rewards ("chat@strict"). The coordinator's `[rewards]` decide which sources
/// serve a reward; a node's are not used, and its keys would have let a coordinator reward
/// restricted to named sources reach the node's.
std::vector<std::string> node_routing_keys(const std::vector<std::string>& keys);

/// The pass-through models routing keys `keys` name ("chat@model:qwen3-8b" → chat,
/// "qwen3-8b"), chat before embed: what a worker node's source answers to at the coordinator.
std::vector<std::pair<capability, std::string>> models_of_keys(
  const std::vector<std::string>& keys);

/// The routing keys of a configured source: its capabilities, and those narrowed by the
/// rewards that name it and, for chat and embed, by the model it serves (e.g. {"chat",
/// "chat@model:qwen3-8b", "chat@strict_judge"}).
std::vector<std::string> routed_capabilities(const config::source_config& src,
                                             const config::arbiter_config& cfg);

/// The same for any source called `source` that serves `base` as model `model`.
std::vector<std::string> routed_capabilities(const std::string& source,
                                             const std::vector<capability>& base,
                                             const std::string& model,
                                             const config::arbiter_config& cfg);

} // namespace arbiter::actors
