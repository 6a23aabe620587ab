#pragma once

// The reward kinds: one descriptor per kind, and everything that needs to know a kind reads it —
// the configuration's checks (names, fallbacks), the catalog (capability, default fallback), the
// CPU workers (the function), option checking (the rules) and the reward graphs (their calls).
// Adding a CPU reward is its own file plus one entry in reward_kinds.cpp
// (docs/architecture.md, "Adding a reward").

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/rewards/reward_options.hpp"
#include "common/capability.hpp"
#include "common/score_types.hpp"

namespace arbiter::backends {

/// How a kind's items are computed.
enum class reward_runner : uint8_t {
  /// A function of the item alone, on the CPU workers.
  cpu,
  /// Embeddings from an `embed` source, then similarity (backends/embedding_scoring).
  embedding,
  /// A reward graph: model calls back through the scheduler (actors/reward_graph_actor);
  /// `ig` items may also go whole to an IG service.
  graph,
};

/// What the CPU functions may be limited by (from `[cpu]`).
struct cpu_limits {
  /// Longest text, in code points, `lexical` takes per side (`cpu.max_lexical_chars`).
  uint32_t max_lexical_chars = 100000;
};

/// Scores one item; may throw (the caller fails the item with the reason).
using cpu_function = item_outcome (*)(const score_item& item, const cpu_limits& limits);

/// One reward kind.
struct reward_kind {
  /// What configs and clients call it, e.g. "gsm8k".
  std::string name;
  reward_runner runner = reward_runner::cpu;
  /// What a source must serve to run its items: cpu, embed, judge, ig or em_ig.
  arbiter::capability needs = arbiter::capability::cpu;
  /// The CPU kind that scores its items when no source can, unless configured ("" = none).
  std::string default_fallback;
  /// Whether a reward may name it as its `fallback` (CPU kinds that compare text).
  bool can_be_fallback = false;
  /// A graph's model calls: the capabilities they ask for (chat; generate, nli; ig).
  std::vector<arbiter::capability> calls;
  /// Its options (checked at the ingress and in `check-config`), and their keys in order.
  std::vector<option_rule> options;
  std::vector<std::string> option_keys;
  /// The function, for `cpu` kinds.
  cpu_function score = nullptr;
  /// For a kind that returns fields beside its score (`extra`): those fields as a failed item
  /// reports them (a JSON object), so that every result has the same keys, as trainers that
  /// build arrays from the first result's keys need (verl's reward_extra_info). "" = none.
  std::string failed_extra;
  /// One of verl's rule rewards: verl's `default_compute_score` calls it with its defaults
  /// whatever the row's extra_info holds, so an item that reaches it through its
  /// `data_source` takes no options from extra_info (options come from the config alone).
  bool verl_rule = false;
  /// Scores an item with no reference, as verl does: search-R1's `{"target": []}` matches
  /// nothing (format_score, or 0 with no answer). Other kinds fail such an item
  /// (`ground_truth is empty`, or their own message).
  bool scores_no_reference = false;
  /// Keys of which an item's options (its extra_info or its reward's) must hold one as a
  /// string, else the ingress refuses it naming the first: ΔIG's question, without which its
  /// samples answer nothing and the score means nothing. Empty: none needed.
  std::vector<std::string> needs_one_of;
};

/// Every built-in kind, in the order the docs list them.
const std::vector<reward_kind>& reward_kinds();

/// The kind called `name`, or nullptr.
const reward_kind* find_reward_kind(std::string_view name);

/// Every kind's name, in the same order.
std::vector<std::string> reward_kind_names();

/// The names a reward's `fallback` may take: the kinds that can be fallbacks, then "none".
std::vector<std::string> fallback_names();

} // namespace arbiter::backends
