#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>

#include "common/score_types.hpp"
#include "common/time_source.hpp"
#include "scheduler/scheduler_core.hpp"

namespace arbiter::actors {

/// ingress -> scheduler: score a request. As a request, `(score_atom, score_request)` is
/// answered with a `score_reply`; as a message, `(score_atom, score_request, reply_callback)`
/// hands the `score_reply` to the callback; `(score_atom, std::vector<score_submission>)`
/// does the same for several requests in one message.
using score_atom = caf::atom_constant<caf::atom("score")>;
/// scheduler -> worker: run a batch; answered with a `work_result`.
using work_atom = caf::atom_constant<caf::atom("work")>;
/// scheduler -> itself: a deadline or the drain deadline may have passed.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// main -> scheduler: stop admitting, finish or fail what is queued; answered with `ok_atom`
/// once nothing is pending.
using drain_atom = caf::atom_constant<caf::atom("drain")>;
/// anyone -> scheduler: describe queues and sources; answered with a `scheduler_info`.
using info_atom = caf::atom_constant<caf::atom("info")>;
/// anyone -> scheduler: answered with the `step_accounts` of every recent training step
/// (one step is looked up among all shards' recent ones: `net::find_step`).
using steps_atom = caf::atom_constant<caf::atom("steps")>;
/// main -> scheduler: register a worker actor as a source; answered with its source id.
using add_source_atom = caf::atom_constant<caf::atom("addsource")>;
/// scheduler -> source: stop working on a batch (a hedge that lost); no answer expected
/// beyond the batch's own `work_result`, which the scheduler ignores.
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
/// ingress -> scheduler: `(abandon_atom, TICKET)`: the client of the request with that
/// `score_request::ticket` closed its connection; what is left of it ends `client_closed`.
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;
/// I/O thread -> remote source: an HTTP exchange finished.
using http_done_atom = caf::atom_constant<caf::atom("httpdone")>;
/// worker node -> cluster gateway: join (actors/cluster.hpp).
using node_join_atom = caf::atom_constant<caf::atom("nodejoin")>;
/// worker node -> cluster gateway: still here (every heartbeat interval).
using node_beat_atom = caf::atom_constant<caf::atom("nodebeat")>;
/// worker node -> cluster gateway: stopping (a signal); its workers have stopped.
using node_leave_atom = caf::atom_constant<caf::atom("nodeleave")>;
/// cluster gateway -> itself: a node lost this long ago is gone; its models are forgotten.
using node_gone_atom = caf::atom_constant<caf::atom("nodegone")>;

/// A request as the ingress hands it to the scheduler.
struct score_request {
  /// Index of the priority class (resolved by the ingress).
  size_t priority = 0;
  time_point deadline;
  /// Shared by the sender (`share_items`), on its own thread.
  std::vector<shared_item> items;
  /// A reward graph's model calls: part of admitted work, so never refused (see
  /// `scheduler_core::submit`).
  bool internal = false;
  /// The ingress's name for it (0: none), by which `abandon_atom` drops its remaining work
  /// when the client hangs up.
  uint64_t ticket = 0;
  /// For a reward graph's model calls: the scheduler's batch whose items made them (0: none).
  /// When that batch is given up, these calls end in the same turn (`follow_caller`).
  uint64_t caller = 0;
};

/// The scheduler's answer: either every item's result, or a refusal.
struct score_reply {
  bool admitted = true;
  /// For refusals: "queue_full", "deadline_unmeetable" or "draining".
  std::string rejection;
  std::string reason;
  int64_t retry_after_s = 0;
  std::vector<item_result> results;
  /// The groups of its items (see `scheduler::finished_request::groups`).
  std::vector<scheduler::group_summary> groups;
  /// The request's items, held until the reply is done with: their last reference then drops
  /// on the connection's thread, not the scheduler's (the freeing of a large batch's texts
  /// would otherwise hold up the one thread every request goes through).
  std::vector<shared_item> items;
};

/// Where the scheduler sends the answer to a request that arrived with one: called exactly
/// once, on the scheduler's thread, so it must only hand the reply on (the ingress posts it to
/// the connection's strand). Lets the ingress talk to the scheduler without a bridge actor.
using reply_callback = std::function<void(score_reply&&)>;

/// One request with where its answer goes; the ingress sends several at once as
/// `(score_atom, std::vector<score_submission>)` when they arrive together.
struct score_submission {
  score_request request;
  reply_callback reply_to;
};

/// A batch of items for one worker.
struct work_batch {
  scheduler::batch_id id = 0;
  std::vector<shared_item> items;
  /// Its items' most urgent priority class and earliest deadline (a reward graph gives them
  /// to its model calls).
  size_t priority = 0;
  time_point deadline;
  /// The replay log is on: say what each score was computed from (`item_outcome::evidence`).
  bool record = false;
};

/// A worker's answer: one outcome per item of the batch, in order.
struct work_result {
  scheduler::batch_id id = 0;
  /// How the attempt went; `ok` unless the source itself failed (remote sources).
  scheduler::attempt_report report;
  std::vector<item_outcome> outcomes;
};

using scheduler_info = scheduler::scheduler_snapshot;

/// Training steps' accounts (see `steps_atom`).
using step_accounts = std::vector<scheduler::step_account>;

/// Why an actor (a worker, a node) ended, in words: CAF's rendering names the reason's enum
/// ("exit_reason(remote_link_unreachable)"), which told an operator little (helper-67).
std::string exit_text(caf::actor_system& sys, const caf::error& reason);

} // namespace arbiter::actors

// The work messages can cross to other nodes: actors/wire.hpp gives them `inspect` overloads
// (in one process they still travel unserialized). These types travel between actors of one
// process only.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::actors::score_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::actors::score_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::actors::scheduler_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::actors::step_accounts)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::actors::reply_callback)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<arbiter::actors::score_submission>)

#include "actors/wire.hpp" // after the types it describes
