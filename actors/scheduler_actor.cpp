#include "actors/scheduler_actor.hpp"

#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "backends/embedding_scoring.hpp"
#include "common/log.hpp"
#include "scheduler/scheduler_core.hpp"
#include "scheduler/wakeup_timers.hpp"

namespace arbiter::actors {

namespace {

struct scheduler_state {
  steady_time_source clock;
  std::unique_ptr<scheduler::scheduler_core> core;
  /// Who gets each admitted request's answer, and the ingress's ticket for it (0: none).
  struct awaiting {
    reply_callback reply_to;
    uint64_t ticket = 0;
  };
  std::unordered_map<scheduler::request_id, awaiting> replies;
  /// The admitted requests by their ingress ticket, for `abandon_atom`.
  std::unordered_map<uint64_t, scheduler::request_id> by_ticket;
  /// Tickets abandoned before their request arrived (the ingress's messages are not ordered
  /// among themselves), the oldest forgotten past `max_early_abandons`.
  std::unordered_set<uint64_t> early_abandons;
  std::deque<uint64_t> early_order;
  static constexpr size_t max_early_abandons = 4096;
  std::unordered_map<scheduler::source_id, caf::actor> workers;
  std::unordered_map<caf::actor_addr, scheduler::source_id> source_of;
  std::vector<caf::response_promise> drain_waiters;
  /// The tick messages on their way (`arm_timer`).
  scheduler::wakeup_timers timers;
  scheduler::request_id next_request = 1;
  /// The replay log's writer, when it is on: gets every finished request.
  std::shared_ptr<replay_recorder> recorder;

  static const char* name;
};

const char* scheduler_state::name = "arbiter.scheduler";

using scheduler_actor = caf::stateful_actor<scheduler_state>;

void pump(scheduler_actor* self);

/// Delivers finished requests and, once idle while draining, the drain waiters.
void deliver_finished(scheduler_actor* self) {
  auto& st = self->state;
  for (auto& done : st.core->take_finished()) {
    if (st.recorder && !done.refused) {
      st.recorder->record(done.internal, done.items, done.results, done.ended);
    }
    auto node = st.replies.extract(done.id);
    if (node.empty()) {
      continue;
    }
    if (node.mapped().ticket != 0) {
      st.by_ticket.erase(node.mapped().ticket);
    }
    auto reply_to = std::move(node.mapped().reply_to);
    score_reply reply;
    if (done.refused) {
      // As admission refuses: the client sends it again after Retry-After.
      reply.admitted = false;
      reply.rejection =
        scheduler::to_string(scheduler::admission_decision::reject_deadline_unmeetable);
      reply.reason = std::move(done.reason);
      reply.retry_after_s = done.retry_after_s;
      reply.items = std::move(done.items);
      reply_to(std::move(reply));
      continue;
    }
    reply.results = std::move(done.results);
    reply.groups = std::move(done.groups);
    reply.items = std::move(done.items);
    reply_to(std::move(reply));
  }
  if (st.core->draining() && st.core->idle()) {
    for (auto& rp : st.drain_waiters) {
      rp.deliver(caf::ok_atom::value);
    }
    st.drain_waiters.clear();
  }
}

/// Arms the timer for the core's next wake-up, unless a tick at or before it is on its way.
void arm_timer(scheduler_actor* self) {
  auto& st = self->state;
  auto next = st.core->next_wakeup();
  if (!next || !st.timers.arm(*next)) {
    return;
  }
  auto delay = *next - st.clock.now();
  if (delay < nanoseconds{0}) {
    delay = nanoseconds{0};
  }
  // Wake a little after the deadline so the core sees it passed. The tick names the time it
  // was armed for, so that `timers` knows which one came.
  self->delayed_send(self, delay + std::chrono::microseconds{100}, tick_atom::value,
                     next->time_since_epoch().count());
}

/// Sends every batch the core can dispatch now, then delivers and re-arms.
void pump(scheduler_actor* self) {
  auto& st = self->state;
  for (auto& batch : st.core->dispatch()) {
    auto worker = st.workers.find(batch.source);
    if (worker == st.workers.end()) {
      st.core->fail_batch(batch.id, errc::worker_failed, "the source is gone");
      continue;
    }
    auto id = batch.id;
    // No request timeout: the core fails items at their deadline on its own timer, and a
    // worker that dies is seen through its down message. (A timeout would cost a round trip
    // through CAF's clock thread per batch.)
    self->request(worker->second, caf::infinite, work_atom::value,
                  work_batch{id, std::move(batch.items), batch.priority, batch.deadline,
                             batch.record})
      .then(
        [self](work_result& result) {
          self->state.core->complete(result.id, std::move(result.report), result.outcomes);
          pump(self);
        },
        [self, id, source = batch.source](caf::error& err) {
          auto& s = self->state;
          auto why = "the worker failed: " + self->system().render(err);
          // Workers answer every batch, failures included; an error means the actor itself
          // is gone (or its node is unreachable). Stop routing to it now rather than when its
          // down message arrives; what it held is retried elsewhere (remove_source).
          if (auto gone = s.workers.find(source); gone != s.workers.end()) {
            s.source_of.erase(gone->second.address());
            s.workers.erase(gone);
            s.core->remove_source(source, why);
          } else {
            scheduler::attempt_report report;
            report.kind = scheduler::attempt_outcome_kind::connect_failure;
            report.detail = why;
            s.core->complete(id, std::move(report), {});
          }
          pump(self);
        });
  }
  for (auto& gone : st.core->take_cancelled()) {
    if (auto worker = st.workers.find(gone.source); worker != st.workers.end()) {
      self->send(worker->second, cancel_atom::value, gone.id);
    }
  }
  deliver_finished(self);
  arm_timer(self);
}

constexpr const char* client_closed_reason =
  "the client closed its connection before the answer; this item's remaining work was dropped";

/// Admits `req` (its answer goes to `reply_to` later) or refuses it (`reply_to` now). The
/// caller pumps.
void submit(scheduler_actor* self, score_request req, reply_callback reply_to) {
  auto& s = self->state;
  auto id = s.next_request++;
  auto decision = s.core->submit(id, req.priority, req.deadline, std::move(req.items),
                                 req.internal);
  if (!decision.admitted()) {
    score_reply reply;
    reply.admitted = false;
    reply.rejection = scheduler::to_string(decision.decision);
    reply.reason = decision.reason;
    reply.retry_after_s = decision.retry_after.count();
    reply_to(std::move(reply));
    return;
  }
  if (req.caller != 0) {
    s.core->follow_caller(id, req.caller);
  }
  s.replies.emplace(id, scheduler_state::awaiting{std::move(reply_to), req.ticket});
  if (req.ticket != 0) {
    if (s.early_abandons.erase(req.ticket) > 0) {
      s.core->cancel(id, client_closed_reason);
    } else {
      s.by_ticket.emplace(req.ticket, id);
    }
  }
}

/// The client of the request with `ticket` hung up: end what is left of it. The caller pumps.
void abandon(scheduler_actor* self, uint64_t ticket) {
  auto& s = self->state;
  auto found = s.by_ticket.find(ticket);
  if (found == s.by_ticket.end()) {
    // Not here (yet): remember it a while, in case its request is still on its way.
    if (ticket != 0 && s.early_abandons.insert(ticket).second) {
      s.early_order.push_back(ticket);
      if (s.early_order.size() > scheduler_state::max_early_abandons) {
        s.early_abandons.erase(s.early_order.front());
        s.early_order.pop_front();
      }
    }
    return;
  }
  auto id = found->second;
  s.by_ticket.erase(found);
  s.core->cancel(id, client_closed_reason);
}

caf::behavior scheduler(scheduler_actor* self, config::scheduler_config cfg,
                        scheduler::scheduler_metrics* metrics, config::routing_config routing,
                        scheduler::fallback_fn fallback,
                        std::shared_ptr<replay_recorder> recorder) {
  auto& st = self->state;
  st.core = std::make_unique<scheduler::scheduler_core>(cfg, st.clock, *metrics, routing,
                                                        std::random_device{}());
  st.core->set_fallback(std::move(fallback));
  st.core->set_item_check(backends::embedding_unscorable);
  st.core->set_recording(recorder != nullptr);
  st.recorder = std::move(recorder);
  // A bug that throws must not leave requests without an answer: fail every pending request,
  // then stop.
  self->set_exception_handler([self](std::exception_ptr& eptr) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log::error("scheduler: internal error, failing every pending request: ", what);
    auto err = caf::make_error(caf::sec::runtime_error, "scheduler failed: " + what);
    for (auto& entry : self->state.replies) {
      score_reply failed;
      failed.admitted = false;
      failed.rejection = "internal";
      failed.reason = "the scheduler failed: " + what;
      entry.second.reply_to(std::move(failed));
    }
    self->state.replies.clear();
    self->state.by_ticket.clear();
    for (auto& rp : self->state.drain_waiters) {
      rp.deliver(err);
    }
    self->state.drain_waiters.clear();
    return caf::exit_reason::unhandled_exception;
  });
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& s = self->state;
    auto found = s.source_of.find(down.source);
    if (found == s.source_of.end()) {
      return;
    }
    auto id = found->second;
    // A worker stopped on purpose (the server's shutdown) is no news to warn about. Named
    // (helper-41: "source 2 went down" said nothing of which node's endpoint it was).
    auto name = "source '" + s.core->source_name(id) + "' (" + std::to_string(id) + ")";
    if (down.reason == caf::exit_reason::user_shutdown) {
      log::debug(name, " stopped");
    } else {
      log::warn(name, " went down: ", exit_text(self->system(), down.reason));
    }
    s.core->remove_source(id, "the worker stopped: " + exit_text(self->system(), down.reason));
    s.workers.erase(id);
    s.source_of.erase(found);
    pump(self);
  });
  return {
    [self](score_atom, score_request& req) -> caf::result<score_reply> {
      auto rp = self->make_response_promise();
      submit(self, std::move(req), [rp](score_reply&& reply) mutable {
        rp.deliver(std::move(reply));
      });
      pump(self);
      return caf::delegated<score_reply>{};
    },
    [self](score_atom, score_request& req, reply_callback& reply_to) {
      submit(self, std::move(req), std::move(reply_to));
      pump(self);
    },
    [self](score_atom, std::vector<score_submission>& batch) {
      for (auto& sub : batch) {
        submit(self, std::move(sub.request), std::move(sub.reply_to));
      }
      pump(self);
    },
    [self](abandon_atom, uint64_t ticket) {
      abandon(self, ticket);
      pump(self);
    },
    [self](add_source_atom, const std::string& name, const std::vector<std::string>& caps,
           caf::actor worker) {
      auto& s = self->state;
      auto id = s.core->add_source(name, caps);
      self->monitor(worker);
      s.source_of.emplace(worker.address(), id);
      s.workers.emplace(id, std::move(worker));
      pump(self);
      return id;
    },
    [self](add_source_atom, scheduler::source_spec& spec, caf::actor worker) {
      auto& s = self->state;
      auto id = s.core->add_source(std::move(spec));
      self->monitor(worker);
      s.source_of.emplace(worker.address(), id);
      s.workers.emplace(id, std::move(worker));
      pump(self);
      return id;
    },
    [self](tick_atom, int64_t armed_for) {
      self->state.timers.fired(time_point{nanoseconds{armed_for}});
      self->state.core->on_timer();
      pump(self);
    },
    [self](drain_atom, int64_t timeout_ms) -> caf::result<caf::ok_atom> {
      auto& s = self->state;
      s.core->begin_drain(s.clock.now() + milliseconds{timeout_ms});
      if (s.core->idle()) {
        return caf::ok_atom::value;
      }
      auto rp = self->make_response_promise();
      s.drain_waiters.push_back(rp);
      pump(self);
      return caf::delegated<caf::ok_atom>{};
    },
    [self](info_atom) -> scheduler_info { return self->state.core->snapshot(); },
    [self](steps_atom) -> step_accounts {
      auto recent = self->state.core->steps().recent();
      return step_accounts(recent.begin(), recent.end());
    },
  };
}

} // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, const config::scheduler_config& cfg,
                           scheduler::scheduler_metrics& metrics,
                           const config::routing_config& routing,
                           scheduler::fallback_fn fallback,
                           std::shared_ptr<replay_recorder> recorder) {
  return sys.spawn(scheduler, cfg, &metrics, routing, std::move(fallback), std::move(recorder));
}

} // namespace arbiter::actors
