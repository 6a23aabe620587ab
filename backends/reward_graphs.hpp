#pragma once

// The rewards computed from model calls (judge, info_gain, em_info_gain) as plain classes: a
// graph says which calls it needs, is given their answers, and says the next calls or its
// outcome. No actors, no clocks: actors/reward_graph_actor.cpp sends the calls through the
// scheduler and hands the answers back; tests drive a graph directly.

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/reward_catalog.hpp"
#include "common/score_types.hpp"

namespace arbiter::backends {

/// What a graph wants next: model calls (items for the scheduler, answered in order), or,
/// when `calls` is empty, its outcome.
struct graph_step {
  std::vector<score_item> calls;
  item_outcome outcome;

  bool done() const noexcept {
    return calls.empty();
  }
};

/// One item's reward graph.
class reward_graph {
public:
  explicit reward_graph(shared_item item) : item_(std::move(item)) {}
  virtual ~reward_graph() = default;
  reward_graph(const reward_graph&) = delete;
  reward_graph& operator=(const reward_graph&) = delete;

  /// The first calls, or the outcome when none are needed or the item cannot be scored.
  virtual graph_step start() = 0;

  /// The answers to the last step's calls, one per call in order: records their provenance,
  /// fails the item with the first failed call's code and reason, else the next step.
  graph_step advance(const std::vector<item_result>& answers);

  /// Provenance over every answer so far: the sources that scored them, their attempts,
  /// whether all came from the cache, and whether all came from the cache or from identical
  /// calls in flight (none was made for this item).
  const std::set<std::string>& sources() const noexcept {
    return sources_;
  }
  uint32_t attempts() const noexcept {
    return attempts_;
  }
  bool all_cached() const noexcept {
    return all_cached_;
  }
  bool all_shared() const noexcept {
    return all_shared_;
  }
  /// How long its calls waited in their queues: per step, the longest wait, summed.
  double queued_ms() const noexcept {
    return queued_ms_;
  }

protected:
  /// What the current step's calls are, for failures ("judge", "generation", "NLI", ...).
  virtual const char* calls_name() const = 0;
  /// The next step, given answers that all succeeded.
  virtual graph_step next(const std::vector<item_result>& answers) = 0;

  /// A model call needing `needs` for this item (its reward's route suffix kept).
  score_item call_item(capability needs, model_call call) const;

  const score_item& item() const noexcept {
    return *item_;
  }

private:
  shared_item item_;
  std::set<std::string> sources_;
  uint32_t attempts_ = 0;
  bool all_cached_ = true;
  bool all_shared_ = true;
  double queued_ms_ = 0.0;
};

/// The graph of `item`'s kind (judge, info_gain, em_info_gain), or nullptr for a kind without
/// one. `catalog` (em_info_gain finds its info_gain reward there) must outlive the graph.
std::unique_ptr<reward_graph> make_reward_graph(shared_item item,
                                                const reward_catalog& catalog);

} // namespace arbiter::backends
