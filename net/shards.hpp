#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "actors/messages.hpp"

namespace arbiter::net {

/// Which scheduler shard (see `scheduler.shards`) each part of a request goes to: the indices
/// of the request's items in each part, in their order.
struct shard_part {
  size_t shard = 0;
  std::vector<uint32_t> items;
};

/// Splits a request's items over `shards` scheduler shards. A CPU reward's item (capability
/// "cpu") with a group goes to the shard its group's name hashes to, whatever else the request
/// holds, so a GRPO group always meets in one shard (its order and statistics stay whole);
/// unless the request also holds a model reward's member of that group, and then the whole
/// group stays on shard 0 with it. Any other item goes to shard 0, which holds the model
/// sources, except that in a request of CPU items only, an item without a group goes to
/// `spare`. Empty parts are left out; one part means no split.
std::vector<shard_part> plan_shards(const std::vector<shared_item>& items, size_t shards,
                                    size_t spare);

/// One part of a split request, with where its answer goes.
struct shard_submission {
  size_t shard = 0;
  actors::score_submission submission;
};

/// Splits `req` along `plan` (from `plan_shards`, two parts or more). The parts' answers are
/// joined into one for `reply_to`, called once, on the thread of the shard that answers last:
/// the results and items in the request's order, the groups in order of first appearance. If
/// any part is refused, the request is refused with that part's reason, and `on_refused`
/// (when given) is called once, as the first refusal comes while other parts are out, to stop
/// their work (the router abandons the request's ticket).
std::vector<shard_submission> split_request(actors::score_request req,
                                            const std::vector<shard_part>& plan,
                                            actors::reply_callback reply_to,
                                            std::function<void()> on_refused = {});

/// The shards' views of the scheduler as one: queue depths and pending requests summed,
/// sources listed shard by shard (`source_shard` says whose each is), draining if any is.
struct sharded_snapshot {
  actors::scheduler_info merged;
  std::vector<size_t> source_shard;
};
sharded_snapshot merge_snapshots(std::vector<actors::scheduler_info> shards);

/// The shards' accounts of the same steps as one (see `scheduler::add_account`), oldest first
/// by when each step began in any shard, the `most` most recent kept (each shard keeps as
/// many, so together they may hold more).
actors::step_accounts merge_steps(std::vector<actors::step_accounts> shards,
                                  size_t most = 256);

/// `step`'s account among the shards' `most` most recent steps (`merge_steps`), or nullopt.
/// A step past them is not answered from a shard that still holds it: another shard may have
/// dropped its part already, and the sum would be short.
std::optional<scheduler::step_account> find_step(std::vector<actors::step_accounts> shards,
                                                 const std::string& step, size_t most = 256);

} // namespace arbiter::net
