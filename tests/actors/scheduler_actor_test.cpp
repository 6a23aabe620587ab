// The scheduler actor with real CAF threads: requests through real CPU workers, a worker that
// dies mid-batch, refusals and draining. The policy itself is tested without actors in
// tests/scheduler/.
#include "actors/scheduler_actor.hpp"

#include <chrono>
#include <memory>

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

TEST_F(SchedulerActor, RefusesWhatItsClassCannotHoldWithRetryAfter) {
  config::scheduler_config cfg;
  cfg.priorities = {{"normal", 3, config::queue_order::fifo}};
  auto sched = start_scheduler(cfg);
  add_source(sched, spawn_cpu_worker(*sys_, {}), "cpu");
  std::vector<score_item> items(4, lexical_item("a", "a"));
  auto reply = score(sched, items, nanoseconds{10s}, 0);
  EXPECT_FALSE(reply.admitted);
  EXPECT_EQ(reply.rejection, "queue_full");
  EXPECT_GE(reply.retry_after_s, 1);
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
