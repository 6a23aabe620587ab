#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/errc.hpp"
#include "common/score_types.hpp"

namespace arbiter::scheduler {

/// What one source did for one training step.
struct step_source_account {
  /// Calls sent to the source (batches; for a remote endpoint, one HTTP request each), of
  /// which hedges; answers that were 429s; retries decided after a failed call.
  uint64_t calls = 0;
  uint64_t hedges = 0;
  uint64_t rate_limited = 0;
  uint64_t retries = 0;
  /// Calls that failed (any outcome but success, 429s included).
  uint64_t failed_calls = 0;
  /// Token counts the source reported in its answers' `usage`, and what they cost at the
  /// source's configured prices.
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  double cost = 0.0;
  /// Time its calls ran (dispatch to answer), summed.
  double run_ms = 0.0;
};

/// What a training step's rewards took: its items by how they ended, and per source its calls,
/// tokens, cost and troubles. Items are the rewards the trainer asked for; a judge's or ΔIG
/// reward's model calls are counted at the sources they ran on.
struct step_account {
  std::string step;
  /// When the step was first seen, as a number that grows across every ledger of the process
  /// (the scheduler shards'), so that shards' accounts can be put in one order.
  uint64_t begun = 0;
  /// When it was last used (an item or a call of it), on the same scale: a step still in use
  /// is kept however many began after it.
  uint64_t used = 0;
  uint64_t items_ok = 0;
  uint64_t items_fallback = 0;
  uint64_t items_failed = 0;
  /// Items answered from the result cache or by an identical item in flight (`coalesced`).
  uint64_t cache_hits = 0;
  /// Failed items by code ("deadline_exceeded", ...).
  std::map<std::string, uint64_t> failures;
  /// Items' time queued (admission to dispatch) and running, summed.
  double queue_ms = 0.0;
  double run_ms = 0.0;
  std::map<std::string, step_source_account> sources;

  uint64_t items() const noexcept {
    return items_ok + items_fallback + items_failed;
  }
};

/// Adds `from`'s counts, times and per-source accounts to `into` (the same step's account kept
/// by another scheduler shard); `begun` becomes the earlier of the two, `used` the later.
void add_account(step_account& into, const step_account& from);

/// The accounts of the most recent training steps, by the step tag requests carry. Bounded:
/// beyond `max_steps` the step used longest ago is dropped (by when it began, a long eval
/// step was dropped while in use after 256 training steps, and began again from zero:
/// helper-62). Not thread-safe: one owner (the scheduler core).
class step_ledger {
public:
  explicit step_ledger(size_t max_steps = 256) : max_steps_(max_steps) {}

  /// A call to `source` carrying items of `step`.
  void call(const std::string& step, const std::string& source, bool hedge);

  /// A call counted by `call` that was given up before it was sent: it is not counted.
  void call_unsent(const std::string& step, const std::string& source, bool hedge);

  /// How that call ended: `rate_limited` (a 429), `failed` (any failure), the tokens the
  /// source reported and their `cost`, and how long it ran.
  void call_ended(const std::string& step, const std::string& source, bool failed,
                  bool rate_limited, double run_ms);
  void usage(const std::string& step, const std::string& source, uint64_t prompt_tokens,
             uint64_t completion_tokens, double cost);

  /// A retry of an item of `step` decided after a failed call to `source`.
  void retry(const std::string& step, const std::string& source);

  /// An item of `step` the trainer asked for ended with `result`.
  void item_ended(const std::string& step, const item_result& result);

  /// The account of `step`, if it is among the recent ones.
  std::optional<step_account> find(const std::string& step) const;

  /// The recent steps' accounts, the most recently begun last.
  std::deque<step_account> recent() const;

private:
  struct entry {
    step_account account;
    /// Its place in `order_`.
    std::list<std::string>::iterator place;
  };
  step_account& account(const std::string& step);
  step_source_account& source(const std::string& step, const std::string& name) {
    return account(step).sources[name];
  }

  size_t max_steps_;
  std::unordered_map<std::string, entry> steps_;
  /// The steps, the one used longest ago first.
  std::list<std::string> order_;
};

} // namespace arbiter::scheduler
