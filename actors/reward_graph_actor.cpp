#include "actors/reward_graph_actor.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "actors/source_capabilities.hpp"
#include "backends/replay/replay_log.hpp"
#include "backends/reward_graphs.hpp"
#include "common/tickets.hpp"
#include "scheduler/admission.hpp"

namespace arbiter::actors {

namespace {

/// graph -> itself: the answer to one stage's model calls.
using graph_done_atom = caf::atom_constant<caf::atom("graphdone")>;

/// One item being computed: its graph and where its outcome goes.
struct job {
  scheduler::batch_id batch = 0;
  size_t index = 0;
  size_t priority = 0;
  time_point deadline;
  time_point started;
  std::unique_ptr<backends::reward_graph> graph;
  /// With the replay log on: the calls and their answers, the outcome's evidence.
  std::optional<backends::replay::graph_trace> trace;
  /// The ticket of its model calls in flight (`score_request::ticket`; 0: none).
  uint64_t calls = 0;
};

/// A batch whose items are being computed.
struct pending_batch {
  caf::response_promise promise;
  std::vector<item_outcome> outcomes;
  size_t remaining = 0;
  /// Its items' jobs.
  std::vector<uint64_t> jobs;
};

struct graph_state {
  caf::actor scheduler;
  const backends::reward_catalog* catalog = nullptr;
  std::unordered_map<scheduler::batch_id, pending_batch> batches;
  std::unordered_map<uint64_t, job> jobs;
  uint64_t next_job = 1;
  steady_time_source clock;

  static const char* name;
};

const char* graph_state::name = "arbiter.reward_graph";

using graph_actor = caf::stateful_actor<graph_state>;

/// Ends job `id` with `outcome` (provenance added); answers its batch when it was the last.
void finish(graph_actor* self, uint64_t id, item_outcome outcome) {
  auto& st = self->state;
  auto node = st.jobs.extract(id);
  if (node.empty()) {
    return;
  }
  auto j = std::move(node.mapped());
  if (j.graph) {
    const auto& sources = j.graph->sources();
    outcome.sources.assign(sources.begin(), sources.end());
    outcome.cached = j.graph->all_cached();
    outcome.coalesced = !outcome.cached && j.graph->all_shared();
    outcome.attempts = j.graph->attempts();
    outcome.queue_ms = j.graph->queued_ms();
  }
  if (j.trace) {
    outcome.evidence = j.trace->encode();
  }
  if (outcome.sources.empty()) {
    outcome.sources.push_back(reward_graph_source); // no model call was needed
    outcome.cached = false;
    outcome.coalesced = false;
  }
  outcome.run_ms = std::chrono::duration<double, std::milli>(st.clock.now() - j.started).count();
  auto b = st.batches.find(j.batch);
  if (b == st.batches.end()) {
    return;
  }
  b->second.outcomes[j.index] = std::move(outcome);
  if (--b->second.remaining == 0) {
    auto done = std::move(b->second);
    st.batches.erase(b);
    work_result result;
    result.id = j.batch;
    result.outcomes = std::move(done.outcomes);
    done.promise.deliver(std::move(result));
  }
}

/// Sends `items` for job `id` as an internal request; the answer comes back as
/// `(graph_done_atom, id, reply)`.
void send_calls(graph_actor* self, uint64_t id, std::vector<score_item> items) {
  auto& j = self->state.jobs.at(id);
  score_request req;
  req.priority = j.priority;
  // The calls end a little before the item does, so a call's own failure (its source, its
  // attempts) reaches the caller rather than a bare "deadline passed".
  auto left = j.deadline - self->state.clock.now();
  req.deadline = j.deadline - std::min<nanoseconds>(scheduler::graph_call_margin, left / 10);
  req.items = share_items(std::move(items));
  req.internal = true;
  req.caller = j.batch;
  req.ticket = new_ticket();
  j.calls = req.ticket;
  auto hdl = caf::actor_cast<caf::actor>(self);
  reply_callback reply_to = [hdl, id](score_reply&& reply) {
    caf::anon_send(hdl, graph_done_atom::value, id, std::move(reply));
  };
  self->send(self->state.scheduler, score_atom::value, std::move(req), std::move(reply_to));
}

/// Sends the step's calls, or ends the job with its outcome.
void follow(graph_actor* self, uint64_t id, backends::graph_step step) {
  if (step.done()) {
    finish(self, id, std::move(step.outcome));
  } else {
    if (auto& trace = self->state.jobs.at(id).trace) {
      trace->calls(step.calls);
    }
    send_calls(self, id, std::move(step.calls));
  }
}

// ---- the actor ----------------------------------------------------------------------------

void advance(graph_actor* self, uint64_t id, const score_reply& reply) {
  auto found = self->state.jobs.find(id);
  if (found == self->state.jobs.end()) {
    return;
  }
  auto& j = found->second;
  if (!reply.admitted || reply.results.empty()) {
    // Refused while draining, or after admission (`refuse_doomed`: their item's request is
    // refused in turn, and sent again), or failed by a scheduler that failed itself: nothing
    // to replay.
    j.trace.reset();
    auto outcome = failure(reply.rejection == "draining" ? errc::shutting_down : errc::overloaded,
                           "the reward's model calls were refused: " + reply.reason);
    outcome.retry_after_ms = reply.retry_after_s * 1000;
    finish(self, id, std::move(outcome));
    return;
  }
  if (j.trace) {
    j.trace->answers(reply.results);
  }
  follow(self, id, j.graph->advance(reply.results));
}

caf::behavior reward_graph(graph_actor* self, caf::actor scheduler,
                           const backends::reward_catalog* catalog) {
  self->state.scheduler = std::move(scheduler);
  self->state.catalog = catalog;
  return {
    [self](work_atom, work_batch& batch) -> caf::result<work_result> {
      auto& st = self->state;
      auto& pending = st.batches[batch.id];
      pending.promise = self->make_response_promise();
      pending.outcomes.resize(batch.items.size());
      pending.remaining = batch.items.size();
      std::vector<uint64_t> started;
      std::vector<std::string> kinds;
      for (size_t i = 0; i < batch.items.size(); ++i) {
        auto id = st.next_job++;
        job j;
        j.batch = batch.id;
        j.index = i;
        j.priority = batch.priority;
        j.deadline = batch.deadline;
        j.started = st.clock.now();
        if (batch.record) {
          j.trace.emplace();
        }
        kinds.push_back(batch.items[i]->kind);
        j.graph = backends::make_reward_graph(std::move(batch.items[i]), *st.catalog);
        st.jobs.emplace(id, std::move(j));
        started.push_back(id);
        pending.jobs.push_back(id);
      }
      for (size_t i = 0; i < started.size(); ++i) {
        auto& graph = st.jobs.at(started[i]).graph;
        if (!graph) {
          finish(self, started[i], failure(errc::reward_failed,
                                           "reward kind '" + kinds[i] + "' has no graph"));
        } else {
          follow(self, started[i], graph->start());
        }
      }
      return caf::delegated<work_result>{};
    },
    [self](graph_done_atom, uint64_t id, score_reply& reply) { advance(self, id, reply); },
    [self](cancel_atom, scheduler::batch_id id) {
      // Graphs are local and never hedged: the scheduler gives one up when nobody wants its
      // item any more (its client hung up). Its model calls in flight are abandoned too, and
      // the batch is answered (the scheduler ignores it) so that no promise is left open.
      auto& st = self->state;
      auto node = st.batches.extract(id);
      if (node.empty()) {
        return;
      }
      auto& pending = node.mapped();
      for (auto job_id : pending.jobs) {
        auto found = st.jobs.find(job_id);
        if (found == st.jobs.end()) {
          continue;
        }
        if (found->second.calls != 0) {
          self->send(st.scheduler, abandon_atom::value, found->second.calls);
        }
        st.jobs.erase(found);
      }
      work_result result;
      result.id = id;
      result.outcomes.assign(pending.outcomes.size(),
                             failure(errc::client_closed, "the item was given up"));
      pending.promise.deliver(std::move(result));
    },
  };
}

} // namespace

scheduler::source_spec reward_graph_spec(const config::arbiter_config& cfg,
                                         const backends::reward_catalog& catalog) {
  auto any_serves = [&cfg](const std::vector<std::string>& names, capability needed) {
    auto listed = [&names](const std::string& name) {
      return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
    };
    return std::any_of(cfg.sources.begin(), cfg.sources.end(),
                       [&](const config::source_config& s) {
                         return listed(s.name) && serves(s, needed);
                       })
           || std::any_of(cfg.models.begin(), cfg.models.end(), [&](const config::model_config& m) {
                auto caps = model_capabilities(m);
                return listed(m.name)
                       && std::find(caps.begin(), caps.end(), needed) != caps.end();
              });
  };
  scheduler::source_spec spec;
  spec.name = reward_graph_source;
  // One item per batch: the actor answers a batch when its last graph ends, so a batch of
  // several would hold every finished item back until the slowest one's model calls are
  // answered (seconds, behind a rate limit). The graphs run concurrently all the same; their
  // model calls are what the scheduler queues, orders and batches.
  spec.max_batch_items = 1;
  spec.max_inflight = 1u << 16;
  spec.remote = false;
  for (const auto& entry : catalog.rewards()) {
    if (!backends::runs_as_graph(entry.kind)) {
      continue;
    }
    // With the cluster on, worker nodes may bring the generator and NLI models later: the
    // graph takes ΔIG items unless a configured IG service serves them (without any node
    // serving generate and nli, its calls fail at once with no_eligible_source).
    bool can = entry.kind != "info_gain"
               || (any_serves(entry.sources, capability::generate)
                   && any_serves(entry.sources, capability::nli))
               || (cfg.cluster.enabled && entry.sources.empty()
                   && !any_serves({}, capability::ig));
    if (can
        && std::find(spec.capabilities.begin(), spec.capabilities.end(), entry.capability)
             == spec.capabilities.end()) {
      spec.capabilities.push_back(entry.capability);
      // What its model calls need, for admission's estimate of a graph item's wait.
      auto& under = spec.feeds[entry.capability];
      for (auto call : backends::call_capabilities(entry.kind)) {
        under.push_back(routing_key(call, entry.route_suffix));
      }
    }
  }
  return spec;
}

caf::actor spawn_reward_graph(caf::actor_system& sys, caf::actor scheduler,
                              const backends::reward_catalog& catalog) {
  return sys.spawn(reward_graph, std::move(scheduler), &catalog);
}

} // namespace arbiter::actors
