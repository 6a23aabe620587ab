// The scheduler actor with real CAF threads: requests through real CPU workers, a worker that
// dies mid-batch, refusals and draining. The policy itself is tested without actors in
// tests/scheduler/.
#include "actors/scheduler_actor.hpp"

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include "actors/cpu_worker_actor.hpp"
#include "actors/messages.hpp"

using namespace arbiter;
using namespace arbiter::actors;
using namespace std::chrono_literals;

namespace {

score_item lexical_item(std::string text, std::string reference) {
  score_item item;
  item.reward = "lexical";
  item.kind = "lexical";
  item.capability = "cpu";
  item.solution_str = std::move(text);
  item.ground_truth = {std::move(reference)};
  return item;
}

/// What a holding worker saw: the batches it was given and the ones it was told to drop.
struct holding_log {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<scheduler::batch_id> given;
  std::vector<scheduler::batch_id> cancelled;

  /// Waits up to 5 s until `done()` holds (read under the lock); whether it did.
  template <class Pred>
  bool wait_for(Pred done) {
    std::unique_lock<std::mutex> lock{mutex};
    return changed.wait_for(lock, std::chrono::seconds{5}, done);
  }
};

/// A worker that keeps every batch without answering (a slow model), and notes cancels.
caf::behavior holding_worker(caf::event_based_actor* self, std::shared_ptr<holding_log> log) {
  return {
    [self, log](work_atom, const work_batch& batch) {
      {
        std::lock_guard<std::mutex> guard{log->mutex};
        log->given.push_back(batch.id);
      }
      log->changed.notify_all();
      return self->make_response_promise<work_result>();
    },
    [log](cancel_atom, scheduler::batch_id id) {
      {
        std::lock_guard<std::mutex> guard{log->mutex};
        log->cancelled.push_back(id);
      }
      log->changed.notify_all();
    },
  };
}

/// A worker that stops as soon as it is given work, without answering.
caf::behavior dying_worker(caf::event_based_actor* self) {
  return {
    [self](work_atom, const work_batch&) { self->quit(caf::exit_reason::user_shutdown); },
  };
}

class SchedulerActor : public ::testing::Test {
protected:
  SchedulerActor() : metrics_(registry_, {"high", "normal", "low"}) {
    caf_cfg_.set("scheduler.max-threads", size_t{2});
    sys_ = std::make_unique<caf::actor_system>(caf_cfg_);
  }

  ~SchedulerActor() override {
    for (auto& a : actors_) {
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
  }

  caf::actor start_scheduler(config::scheduler_config cfg) {
    auto s = spawn_scheduler(*sys_, cfg, metrics_);
    actors_.push_back(s);
    return s;
  }

  void add_source(const caf::actor& sched, const caf::actor& worker, const std::string& name) {
    actors_.push_back(worker);
    caf::scoped_actor self{*sys_};
    self->request(sched, 10s, add_source_atom::value, name, std::vector<std::string>{"cpu"},
                  worker)
      .receive([](scheduler::source_id) {},
               [&](caf::error& e) { FAIL() << sys_->render(e); });
  }

  score_reply score(const caf::actor& sched, std::vector<score_item> items,
                    nanoseconds deadline = nanoseconds{10s}, size_t priority = 1) {
    caf::scoped_actor self{*sys_};
    score_reply out;
    score_request req{priority, steady_clock::now() + deadline, share_items(std::move(items))};
    self->request(sched, 20s, score_atom::value, std::move(req))
      .receive([&](score_reply& r) { out = std::move(r); },
               [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
    return out;
  }

  metrics_registry registry_;
  scheduler::scheduler_metrics metrics_;
  caf::actor_system_config caf_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::vector<caf::actor> actors_;
};

} // namespace

TEST_F(SchedulerActor, ScoresThroughCpuWorkersInOrder) {
  auto sched = start_scheduler({});
  add_source(sched, spawn_cpu_worker(*sys_, {}), "cpu");
  add_source(sched, spawn_cpu_worker(*sys_, {}), "cpu");
  std::vector<score_item> items;
  for (int i = 0; i < 100; ++i) {
    items.push_back(lexical_item(std::string(static_cast<size_t>(i % 7), 'a'), "aaa"));
  }
  auto reply = score(sched, items);
  ASSERT_TRUE(reply.admitted);
  ASSERT_EQ(reply.results.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    const auto& r = reply.results[static_cast<size_t>(i)];
    ASSERT_EQ(r.status, item_status::ok) << r.error;
    auto n = static_cast<double>(i % 7);
    EXPECT_DOUBLE_EQ(r.score, 2.0 * std::min(n, 3.0) / (n + 3.0)) << i;
  }
}

TEST_F(SchedulerActor, AWorkerThatDiesHasItsItemsRetriedOnTheOthers) {
  config::scheduler_config cfg;
  cfg.dispatch_batch_items = 1;
  cfg.max_inflight_batches_per_source = 1;
  auto sched = start_scheduler(cfg);
  add_source(sched, sys_->spawn(dying_worker), "doomed");
  add_source(sched, spawn_cpu_worker(*sys_, {}), "cpu");
  std::vector<score_item> items;
  for (int i = 0; i < 20; ++i) {
    items.push_back(lexical_item("abc", "abd"));
  }
  auto reply = score(sched, items);
  ASSERT_TRUE(reply.admitted);
  ASSERT_EQ(reply.results.size(), 20u);
  size_t failed = 0;
  for (const auto& r : reply.results) {
    if (r.status == item_status::failed) {
      ++failed;
      ADD_FAILURE() << r.source << ": " << r.error;
    } else {
      EXPECT_EQ(r.source, "cpu");
      EXPECT_DOUBLE_EQ(r.score, 2.0 / 3.0);
    }
  }
  EXPECT_EQ(failed, 0u) << "the batch the dying worker held is retried on the other";
  // The scheduler carries on with the worker that is left.
  auto again = score(sched, {lexical_item("x", "x")});
  ASSERT_EQ(again.results.size(), 1u);
  EXPECT_EQ(again.results[0].status, item_status::ok);
}

TEST_F(SchedulerActor, RefusesWhatItsClassCanNeverHold) {
  config::scheduler_config cfg;
  cfg.priorities = {{"normal", 3, config::queue_order::fifo}};
  auto sched = start_scheduler(cfg);
  add_source(sched, spawn_cpu_worker(*sys_, {}), "cpu");
  std::vector<score_item> items(4, lexical_item("a", "a"));
  auto reply = score(sched, items, nanoseconds{10s}, 0);
  EXPECT_FALSE(reply.admitted);
  EXPECT_EQ(reply.rejection, "too_large") << "4 items never fit a class of 3";
  EXPECT_TRUE(reply.results.empty());
}

TEST_F(SchedulerActor, ItemsWithoutAnyWorkerFailAtTheirDeadline) {
  config::scheduler_config cfg;
  auto sched = start_scheduler(cfg);
  // A source that never answers: the deadline timer must still end the item.
  add_source(sched, sys_->spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](work_atom, const work_batch&) -> caf::result<work_result> {
      return caf::delegated<work_result>{};
    }};
  }), "silent");
  auto start = steady_clock::now();
  auto reply = score(sched, {lexical_item("a", "a")}, nanoseconds{200ms});
  ASSERT_EQ(reply.results.size(), 1u);
  EXPECT_EQ(reply.results[0].code, errc::deadline_exceeded);
  EXPECT_GE(steady_clock::now() - start, 200ms);
}

TEST_F(SchedulerActor, DrainAnswersOnceNothingIsPendingAndRefusesNewWork) {
  auto sched = start_scheduler({});
  add_source(sched, spawn_cpu_worker(*sys_, {}), "cpu");
  caf::scoped_actor self{*sys_};
  bool drained = false;
  self->request(sched, 10s, drain_atom::value, int64_t{1000})
    .receive([&](caf::ok_atom) { drained = true; },
             [&](caf::error& e) { FAIL() << sys_->render(e); });
  EXPECT_TRUE(drained);
  auto reply = score(sched, {lexical_item("a", "a")});
  EXPECT_FALSE(reply.admitted);
  EXPECT_EQ(reply.rejection, "draining");
}

TEST_F(SchedulerActor, AnAbandonedTicketEndsItsRequestClientClosedAndCancelsItsBatch) {
  config::scheduler_config cfg;
  cfg.max_inflight_batches_per_source = 1;
  auto sched = start_scheduler(cfg);
  auto log = std::make_shared<holding_log>();
  add_source(sched, sys_->spawn(holding_worker, log), "slow");

  auto submit = [&](uint64_t ticket, size_t n) {
    auto answer = std::make_shared<std::promise<score_reply>>();
    std::vector<score_item> items;
    for (size_t i = 0; i < n; ++i) {
      items.push_back(lexical_item("abc " + std::to_string(ticket), "abd"));
    }
    score_request req{1, steady_clock::now() + 10s, share_items(std::move(items))};
    req.ticket = ticket;
    reply_callback reply_to = [answer](score_reply&& r) { answer->set_value(std::move(r)); };
    caf::anon_send(sched, score_atom::value, std::move(req), std::move(reply_to));
    return answer->get_future();
  };
  auto given = [&] {
    std::lock_guard<std::mutex> guard{log->mutex};
    return log->given;
  };

  // In flight at the worker when its client goes.
  auto first = submit(42, 3);
  log->wait_for([&] { return !log->given.empty(); });
  ASSERT_EQ(given().size(), 1u);
  caf::anon_send(sched, abandon_atom::value, uint64_t{42});
  ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
  auto reply = first.get();
  ASSERT_TRUE(reply.admitted);
  ASSERT_EQ(reply.results.size(), 3u);
  for (const auto& r : reply.results) {
    EXPECT_EQ(r.code, errc::client_closed);
  }
  log->wait_for([&] { return !log->cancelled.empty(); });
  {
    std::lock_guard<std::mutex> guard{log->mutex};
    EXPECT_EQ(log->cancelled, log->given) << "the batch carried only its items";
  }

  // Abandoned before its request reached the scheduler (the ingress's messages are not
  // ordered among themselves; these two, from one thread, arrive in turn): ended as soon as
  // it arrives, never sent to the worker.
  caf::anon_send(sched, abandon_atom::value, uint64_t{43});
  auto second = submit(43, 2);
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  reply = second.get();
  ASSERT_TRUE(reply.admitted);
  for (const auto& r : reply.results) {
    EXPECT_EQ(r.code, errc::client_closed);
  }
  EXPECT_EQ(given().size(), 1u);
  // A ticket nobody holds is harmless, and the scheduler goes on scoring.
  caf::anon_send(sched, abandon_atom::value, uint64_t{99});
  auto third = submit(44, 1);
  log->wait_for([&] { return log->given.size() >= 2; });
  EXPECT_EQ(given().size(), 2u);
  EXPECT_EQ(third.wait_for(10ms), std::future_status::timeout) << "held by the worker";
}
