#include "scheduler/scheduler_core.hpp"
#include "common/token_estimate.hpp"

#include <limits>
#include <memory>
#include <set>

#include <gtest/gtest.h>

#include "test_support.hpp"

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace arbiter::scheduler::testing;
using namespace std::chrono_literals;

namespace {

config::scheduler_config small_config() {
  config::scheduler_config cfg;
  cfg.dispatch_batch_items = 4;
  cfg.max_inflight_batches_per_source = 1;
  cfg.priorities = {{"high", 100, config::queue_order::fifo},
                    {"normal", 100, config::queue_order::fifo},
                    {"low", 100, config::queue_order::fifo}};
  return cfg;
}

class SchedulerCore : public ::testing::Test {
protected:
  explicit SchedulerCore(config::scheduler_config cfg = small_config())
    : cfg_(cfg), metrics_(cfg_), core_(cfg_, clock_, metrics_.metrics) {
  }

  /// Answers every item of `batch` with `score`.
  void answer(const dispatch_batch& batch, double score, double run_ms = 1.0) {
    std::vector<item_outcome> outcomes(batch.items.size(), ok_outcome(score, run_ms));
    core_.complete(batch.id, outcomes);
  }

  std::string metrics_text() {
    return metrics_.registry.render();
  }

  /// Submits `items` (due in 120 s) as request `id`, sends them as one batch, and answers it
  /// `takes` later: what its source then learns a call of them takes.
  void run_alone(request_id id, std::vector<shared_item> items, nanoseconds takes) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 120s, std::move(items)).admitted());
    auto sent = core_.dispatch();
    ASSERT_EQ(sent.size(), 1u);
    clock_.advance(takes);
    answer(sent[0], 0.5);
    core_.take_finished();
  }

  config::scheduler_config cfg_;
  manual_time_source clock_;
  metrics_fixture metrics_;
  scheduler_core core_;
};

} // namespace

TEST_F(SchedulerCore, AnswersEveryItemInRequestOrder) {
  auto src = core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, cpu_items(3)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].source, src);
  ASSERT_EQ(batches[0].items.size(), 3u);
  EXPECT_EQ(batches[0].items[2]->solution_str, "item 2");
  clock_.advance(5ms);
  std::vector<item_outcome> outcomes{ok_outcome(0.1), ok_outcome(0.2), ok_outcome(0.3)};
  core_.complete(batches[0].id, outcomes);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1u);
  ASSERT_EQ(done[0].results.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& r = done[0].results[i];
    EXPECT_EQ(r.status, item_status::ok);
    EXPECT_DOUBLE_EQ(r.score, 0.1 * static_cast<double>(i + 1));
    EXPECT_EQ(r.source, "cpu");
    EXPECT_EQ(r.attempts, 1u);
    EXPECT_EQ(r.code, errc::none);
  }
  EXPECT_TRUE(core_.idle());
  EXPECT_NE(metrics_text().find(R"(arbiter_items_total{reward="lexical",status="ok"} 3)"),
            std::string::npos);
}

TEST_F(SchedulerCore, QueueTimeIsMeasuredFromAdmissionToDispatch) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, cpu_items(1)).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, cpu_items(1)).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "one source with one slot, busy";
  clock_.advance(40ms);
  answer(first[0], 1.0);
  auto second = core_.dispatch();
  ASSERT_EQ(second.size(), 1u);
  answer(second[0], 1.0);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_DOUBLE_EQ(done[0].results[0].queue_ms, 0.0);
  EXPECT_DOUBLE_EQ(done[1].results[0].queue_ms, 40.0);
}

TEST_F(SchedulerCore, SplitsLargeRequestsIntoBatchesAndKeepsOrder) {
  core_.add_source("a", {"cpu"});
  core_.add_source("b", {"cpu"});
  ASSERT_TRUE(core_.submit(7, 1, clock_.now() + 10s, cpu_items(10)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 2u) << "two sources, one slot each";
  EXPECT_EQ(batches[0].items.size(), 4u);
  EXPECT_EQ(batches[1].items.size(), 4u);
  EXPECT_NE(batches[0].source, batches[1].source);
  // The second batch finishes first; order in the answer must not change.
  answer(batches[1], 0.5);
  auto third = core_.dispatch();
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].items.size(), 2u);
  EXPECT_EQ(third[0].items[0]->solution_str, "item 8");
  answer(third[0], 0.75);
  answer(batches[0], 0.25);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  std::vector<double> scores;
  for (const auto& r : done[0].results) {
    scores.push_back(r.score);
  }
  EXPECT_EQ(scores, (std::vector<double>{0.25, 0.25, 0.25, 0.25, 0.5, 0.5, 0.5, 0.5, 0.75,
                                         0.75}));
}

TEST_F(SchedulerCore, HigherPriorityClassesGoFirst) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 2, clock_.now() + 10s, {cpu_item("low 1")}).admitted());
  auto busy = core_.dispatch();
  ASSERT_EQ(busy.size(), 1u);
  ASSERT_TRUE(core_.submit(2, 2, clock_.now() + 10s, {cpu_item("low 2")}).admitted());
  ASSERT_TRUE(core_.submit(3, 0, clock_.now() + 10s, {cpu_item("high")}).admitted());
  ASSERT_TRUE(core_.submit(4, 1, clock_.now() + 10s, {cpu_item("normal")}).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "the only slot is busy";
  answer(busy[0], 1.0);
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    auto next = core_.dispatch();
    ASSERT_EQ(next.size(), 1u);
    order.push_back(next[0].items[0]->solution_str);
    answer(next[0], 1.0);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"high", "normal", "low 2"}));
}

TEST_F(SchedulerCore, RefusesARequestItsClassCannotHoldAndQueuesNothing) {
  core_.add_source("cpu", {"cpu"});
  // More than the class ever holds: refused for good.
  auto r = core_.submit(1, 2, clock_.now() + 10s, cpu_items(101));
  EXPECT_EQ(r.decision, admission_decision::reject_too_large);
  EXPECT_TRUE(core_.idle());
  EXPECT_TRUE(core_.dispatch().empty());
  // The class holds 100: of 64 admitted, 4 run and 60 wait, so 41 more do not fit now.
  ASSERT_TRUE(core_.submit(2, 2, clock_.now() + 10s, cpu_items(64)).admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  r = core_.submit(3, 2, clock_.now() + 10s, cpu_items(41));
  EXPECT_EQ(r.decision, admission_decision::reject_queue_full);
  EXPECT_GE(r.retry_after, 1s);
  EXPECT_TRUE(core_.submit(4, 2, clock_.now() + 10s, cpu_items(40)).admitted());
}

TEST_F(SchedulerCore, QueuedItemsFailWhenTheDeadlinePasses) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 100ms, cpu_items(6)).admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  ASSERT_EQ(running[0].items.size(), 4u);
  ASSERT_EQ(core_.next_wakeup(), clock_.now() + 100ms);
  clock_.advance(99ms);
  core_.on_timer();
  EXPECT_TRUE(core_.take_finished().empty());
  clock_.advance(1ms);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::failed);
    EXPECT_EQ(r.code, errc::deadline_exceeded);
    EXPECT_NE(r.error.find("deadline"), std::string::npos);
  }
  EXPECT_EQ(done[0].results[0].attempts, 1u) << "was running";
  EXPECT_NE(done[0].results[0].error.find("(it was running on 'cpu' for 100 ms)"),
            std::string::npos)
    << done[0].results[0].error;
  EXPECT_EQ(done[0].results[5].attempts, 0u) << "never left the queue";
  EXPECT_EQ(done[0].results[5].error.find("running on"), std::string::npos);
  EXPECT_DOUBLE_EQ(done[0].results[5].queue_ms, 100.0);
  // The late answer of the running batch is ignored and frees the source.
  answer(running[0], 1.0);
  EXPECT_TRUE(core_.take_finished().empty());
  EXPECT_TRUE(core_.idle());
  EXPECT_FALSE(core_.next_wakeup().has_value());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 1s, cpu_items(1)).admitted());
  EXPECT_EQ(core_.dispatch().size(), 1u);
}

TEST_F(SchedulerCore, OneFailedItemDoesNotFailTheBatch) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, cpu_items(3)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  item_outcome bad;
  bad.code = errc::reward_failed;
  bad.error = "solution_str has 200001 characters";
  core_.complete(batches[0].id, {ok_outcome(0.5), bad, ok_outcome(0.25)});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_EQ(done[0].results[1].status, item_status::failed);
  EXPECT_EQ(done[0].results[1].code, errc::reward_failed);
  EXPECT_EQ(done[0].results[1].error, "solution_str has 200001 characters");
  EXPECT_EQ(done[0].results[2].status, item_status::ok);
  EXPECT_NE(metrics_text().find(R"(arbiter_item_failures_total{reason="reward_failed"} 1)"),
            std::string::npos);
}

TEST_F(SchedulerCore, AScoreThatIsNotFiniteFailsItsItemInsteadOfAnsweringOk) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, cpu_items(3)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  core_.complete(batches[0].id, {ok_outcome(std::numeric_limits<double>::quiet_NaN()),
                                 ok_outcome(0.5),
                                 ok_outcome(-std::numeric_limits<double>::infinity())});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::failed);
  EXPECT_EQ(done[0].results[0].code, errc::reward_failed);
  EXPECT_EQ(done[0].results[0].error, "the reward computed a score that is not finite (NaN)");
  EXPECT_EQ(done[0].results[1].status, item_status::ok);
  EXPECT_EQ(done[0].results[2].status, item_status::failed);
  EXPECT_EQ(done[0].results[2].error,
            "the reward computed a score that is not finite (infinity)");
}

TEST_F(SchedulerCore, ItemsNoSourceServesFailAtOnceOthersRun) {
  core_.add_source("cpu", {"cpu"});
  auto embed = cpu_item("needs a model");
  embed.capability = "embed";
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, {cpu_item("x"), embed}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].items.size(), 1u);
  answer(batches[0], 1.0);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_EQ(done[0].results[1].code, errc::no_eligible_source);
}

TEST_F(SchedulerCore, AnItemItsRewardCannotScoreFailsAtOnceAndMakesNoCall) {
  core_.add_source("cpu", {"cpu"});
  core_.set_item_check([](const score_item& item) {
    return item.ground_truth.empty() ? std::string{"no reference"} : std::string{};
  });
  auto bare = cpu_item("nothing to compare with");
  bare.ground_truth.clear();
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, {cpu_item("x"), bare}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].items.size(), 1u);
  EXPECT_EQ(batches[0].items[0]->solution_str, "x");
  answer(batches[0], 1.0);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_EQ(done[0].results[1].code, errc::reward_failed);
  EXPECT_EQ(done[0].results[1].error, "no reference");
  EXPECT_EQ(done[0].results[1].attempts, 0u);
}

TEST_F(SchedulerCore, ALostSourcesItemsAreRetriedOnAnotherAndItsLateAnswerIgnored) {
  auto a = core_.add_source("a", {"cpu"});
  core_.add_source("b", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, cpu_items(12)).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 2u);
  const auto lost = batches[0].source == a ? batches[0] : batches[1];
  core_.remove_source(a, "node 'n1' lost (heartbeat)");
  // Retries go one item per batch: 6 lost items take a few rounds.
  for (int i = 0; i < 30; ++i) {
    auto next = core_.dispatch();
    for (auto& b : batches) {
      if (b.source != a) {
        answer(b, 1.0);
      }
    }
    batches = std::move(next);
    clock_.advance(10ms); // past any retry backoff
  }
  answer(lost, 0.5); // the lost node answers after all: ignored
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::ok) << r.error;
    EXPECT_EQ(r.source, "b");
    EXPECT_EQ(r.score, 1.0);
  }
}

TEST_F(SchedulerCore, ItemsWhoseOnlySourceIsLostWaitForOneToJoinThenFailTogether) {
  auto a = core_.add_source("a", {"embed"});
  core_.add_source("b", {"cpu"});
  score_item embed = cpu_item("x");
  embed.capability = "embed";
  score_item other = embed;
  other.solution_str = "y";
  // Request 1: one item in flight on a, one queued behind it (a takes one batch of one).
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, {embed, other}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  core_.remove_source(a, "node 'n1' lost (heartbeat)");
  EXPECT_TRUE(core_.take_finished().empty()) << "they wait a while for a source";
  // A node that comes back within the wait serves both.
  core_.add_source("a2", {"embed"});
  clock_.advance(1s);
  core_.on_timer();
  for (int k = 0; k < 4 && !core_.idle(); ++k) {
    for (const auto& b : core_.dispatch()) {
      answer(b, 0.5);
    }
  }
  auto served = core_.take_finished();
  ASSERT_EQ(served.size(), 1u);
  for (const auto& r : served[0].results) {
    EXPECT_EQ(r.status, item_status::ok) << r.error;
  }

  // Lost again, and none joins: both fail together after the wait, not at the deadline.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, {embed, other}).admitted());
  ASSERT_FALSE(core_.dispatch().empty());
  core_.remove_source(core_.snapshot().sources.back().id, "node 'n1' lost (heartbeat)");
  const auto lost = clock_.now();
  // A request arriving meanwhile waits with them, rather than failing at admission.
  clock_.advance(2s);
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 60s, {embed}).admitted());
  auto done = core_.take_finished();
  EXPECT_TRUE(done.empty());
  while (done.empty() && core_.next_wakeup() && clock_.now() - lost < 20s) {
    clock_.advance(*core_.next_wakeup() - clock_.now());
    core_.on_timer();
    core_.dispatch();
    done = core_.take_finished();
  }
  EXPECT_EQ(clock_.now() - lost, 10s);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.status, item_status::failed);
    EXPECT_EQ(r.code, errc::worker_failed);
    EXPECT_NE(r.error.find("every source serving 'embed' was lost 10000 ms ago"),
              std::string::npos) << r.error;
    EXPECT_NE(r.error.find("node 'n1' lost (heartbeat)"), std::string::npos) << r.error;
  }
}

TEST_F(SchedulerCore, FailBatchFailsEveryItemOfIt) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, cpu_items(2)).admitted());
  auto batches = core_.dispatch();
  core_.fail_batch(batches[0].id, errc::worker_failed, "the worker failed: boom");
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[1].code, errc::worker_failed);
  core_.fail_batch(batches[0].id, errc::worker_failed, "twice"); // unknown now: ignored
  EXPECT_TRUE(core_.take_finished().empty());
}

TEST_F(SchedulerCore, DrainRefusesNewWorkFinishesQueuedWorkThenFailsTheRest) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, cpu_items(12)).admitted());
  core_.begin_drain(clock_.now() + 1s);
  EXPECT_EQ(core_.submit(2, 1, clock_.now() + 60s, cpu_items(1)).decision,
            admission_decision::reject_draining);
  EXPECT_EQ(core_.next_wakeup(), clock_.now() + 1s);
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u) << "queued work still runs while draining";
  answer(first[0], 1.0);
  auto second = core_.dispatch();
  ASSERT_EQ(second.size(), 1u);
  clock_.advance(1s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_EQ(done[0].results[4].code, errc::shutting_down);
  EXPECT_EQ(done[0].results[11].code, errc::shutting_down);
  EXPECT_TRUE(core_.idle());
}

TEST_F(SchedulerCore, AdmissionUsesTheSourcesMeasuredCapacity) {
  core_.add_source("cpu", {"cpu"});
  // Nothing measured yet: nothing is refused for its deadline.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1ms, cpu_items(4)).admitted());
  auto b = core_.dispatch();
  ASSERT_EQ(b.size(), 1u);
  clock_.advance(4s);
  answer(b[0], 1.0); // 4 items in 4 s, one batch at a time: 1 item per second
  core_.take_finished();
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 60s, cpu_items(50)).admitted());
  // 50 items ahead and this one: the idle worker's slot takes a batch of 4 at once, the other
  // 47 start at 1 per second, and 4 s for the last batch. A 10 s deadline cannot be met;
  // about 41 s later the same request would fit.
  auto r = core_.submit(3, 1, clock_.now() + 10s, cpu_items(1));
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable);
  EXPECT_EQ(r.retry_after, 41s);
  EXPECT_NE(r.reason.find("after its deadline"), std::string::npos) << r.reason;
  // A minute is enough.
  EXPECT_TRUE(core_.submit(4, 1, clock_.now() + 60s, cpu_items(1)).admitted());
  // The high class waits behind nothing.
  EXPECT_TRUE(core_.submit(5, 0, clock_.now() + 10s, cpu_items(1)).admitted());
}

TEST_F(SchedulerCore, AnEstimateTooOldToRefuseOnLetsOneRequestThroughAsAProbe) {
  // helper-43: a source's first call took 35 s (3,500 tokens); every later request due in
  // 30 s was refused by that estimate, so none ever reached the source to correct it.
  core_.add_source("cpu", {"cpu"});
  run_alone(1, share_items(cpu_items(1)), 35s);
  EXPECT_EQ(core_.submit(2, 1, clock_.now() + 30s, cpu_items(1)).decision,
            admission_decision::reject_deadline_unmeetable)
    << "a fresh estimate still refuses";
  clock_.advance(71s); // idle for more than twice its latency
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 30s, cpu_items(1)).admitted())
    << "the probe";
  EXPECT_FALSE(core_.submit(4, 1, clock_.now() + 30s, cpu_items(1)).admitted())
    << "one probe at a time: the next waits behind it, on the old estimate";
  auto b = core_.dispatch();
  ASSERT_EQ(b.size(), 1u);
  clock_.advance(1s);
  answer(b[0], 1.0);
  core_.take_finished();
  EXPECT_TRUE(core_.submit(5, 1, clock_.now() + 30s, cpu_items(1)).admitted())
    << "the probe's answer replaced the 35 s estimate";
}

TEST_F(SchedulerCore, SnapshotShowsQueuesAndSources) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 2, clock_.now() + 60s, cpu_items(9)).admitted());
  core_.dispatch();
  auto snap = core_.snapshot();
  ASSERT_EQ(snap.queues.size(), 3u);
  EXPECT_EQ(snap.queues[2].priority, "low");
  EXPECT_EQ(snap.queues[2].depth, 5u);
  ASSERT_EQ(snap.sources.size(), 1u);
  EXPECT_EQ(snap.sources[0].inflight, 1u);
  EXPECT_EQ(snap.pending_requests, 1u);
  EXPECT_NE(metrics_text().find(R"(arbiter_queue_depth{priority="low"} 5)"), std::string::npos);
  // A reward graph's model calls (internal requests) are part of their item's request: they
  // counted twice in /info and arbiter_requests_pending (helper-33: 20 for 10 judge items).
  ASSERT_TRUE(core_.submit(2, 2, clock_.now() + 60s, cpu_items(1), /*internal=*/true).admitted());
  EXPECT_EQ(core_.snapshot().pending_requests, 1u);
  EXPECT_NE(metrics_text().find("arbiter_requests_pending 1\n"), std::string::npos);
}

TEST_F(SchedulerCore, CoresSharingTheMetricsAddUpInTheDepthGauge) {
  // Scheduler shards: each core moves the shared gauge by its own changes.
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 2, clock_.now() + 60s, cpu_items(9)).admitted());
  core_.dispatch(); // 4 of 9 run, 5 wait
  auto second = std::make_unique<scheduler_core>(cfg_, clock_, metrics_.metrics);
  second->add_source("cpu", {"cpu"});
  ASSERT_TRUE(second->submit(1, 2, clock_.now() + 60s, cpu_items(7)).admitted());
  auto batches = second->dispatch(); // 4 of 7 run, 3 wait
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_NE(metrics_text().find(R"(arbiter_queue_depth{priority="low"} 8)"), std::string::npos)
    << metrics_text();
  second->complete(batches[0].id, std::vector<item_outcome>(4, ok_outcome(1.0)));
  second->dispatch(); // the last 3 run: none of the second core's wait
  EXPECT_NE(metrics_text().find(R"(arbiter_queue_depth{priority="low"} 5)"), std::string::npos)
    << metrics_text();
  ASSERT_TRUE(second->submit(2, 2, clock_.now() + 60s, cpu_items(6)).admitted());
  second->dispatch(); // its source is busy: all 6 wait
  EXPECT_NE(metrics_text().find(R"(arbiter_queue_depth{priority="low"} 11)"), std::string::npos)
    << metrics_text();
  // A core that goes takes its share with it.
  second.reset();
  EXPECT_NE(metrics_text().find(R"(arbiter_queue_depth{priority="low"} 5)"), std::string::npos)
    << metrics_text();
}

namespace {

score_item member(const std::string& group, const std::string& text) {
  auto item = cpu_item(text);
  item.group = group;
  return item;
}

/// The order one busy single-slot source takes four single-item requests: the first member of
/// group g1, then g2's and g3's first members, then g1's second member.
std::vector<std::string> order_with(bool group_order, config::queue_order order) {
  auto cfg = small_config();
  cfg.dispatch_batch_items = 1;
  cfg.group_order = group_order;
  cfg.priorities[1].order = order;
  manual_time_source clock;
  metrics_fixture metrics{cfg};
  scheduler_core core{cfg, clock, metrics.metrics};
  core.add_source("cpu", {"cpu"});
  auto deadline = clock.now() + 10s;
  EXPECT_TRUE(core.submit(1, 1, deadline, {member("g1", "g1 first")}).admitted());
  auto busy = core.dispatch();
  EXPECT_EQ(busy.size(), 1u);
  clock.advance(1ms);
  EXPECT_TRUE(core.submit(2, 1, deadline + 1s, {member("g2", "g2 first")}).admitted());
  clock.advance(1ms);
  EXPECT_TRUE(core.submit(3, 1, deadline + 2s, {member("g3", "g3 first")}).admitted());
  clock.advance(1ms);
  EXPECT_TRUE(core.submit(4, 1, deadline + 3s, {member("g1", "g1 second")}).admitted());
  std::vector<std::string> taken;
  auto next = busy;
  while (!next.empty()) {
    taken.push_back(next[0].items[0]->solution_str);
    core.complete(next[0].id, {ok_outcome(1.0)});
    next = core.dispatch();
  }
  return taken;
}

} // namespace

TEST(SchedulerCoreGroups, AGroupsRemainingMembersGoAheadOfLaterGroupsFirstOnes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(order_with(true, config::queue_order::fifo),
            (V{"g1 first", "g1 second", "g2 first", "g3 first"}));
  EXPECT_EQ(order_with(true, config::queue_order::edf),
            (V{"g1 first", "g1 second", "g2 first", "g3 first"}))
    << "in an EDF class, by the group's earliest deadline";
  EXPECT_EQ(order_with(false, config::queue_order::fifo),
            (V{"g1 first", "g2 first", "g3 first", "g1 second"}))
    << "group_order = false: each item by its own arrival";
}

TEST_F(SchedulerCore, FinishedRequestsCarryTheirGroupsStatisticsAcrossRequests) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s,
                           {member("g", "a"), member("g", "b"), member("h", "c"), cpu_item()})
                .admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  core_.complete(first[0].id, {ok_outcome(1.0), ok_outcome(0.0), ok_outcome(0.5),
                               ok_outcome(0.2)});
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].groups.size(), 2u) << "g and h, in order; the item with no group has none";
  EXPECT_EQ(done[0].groups[0].group, "g");
  EXPECT_EQ(done[0].groups[0].scored, 2u);
  EXPECT_DOUBLE_EQ(done[0].groups[0].mean, 0.5);
  EXPECT_FALSE(done[0].groups[0].zero_std);
  EXPECT_EQ(done[0].groups[1].group, "h");
  EXPECT_TRUE(done[0].groups[1].zero_std);

  // A later member of g, alone in its request, reports the whole group; a failed one counts.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, {member("g", "d"), member("g", "e")})
                .admitted());
  auto second = core_.dispatch();
  ASSERT_EQ(second.size(), 1u);
  core_.complete(second[0].id, {ok_outcome(0.5), failure(errc::reward_failed, "bad")});
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].groups.size(), 1u);
  const auto& g = done[0].groups[0];
  EXPECT_EQ(g.scored, 3u);
  EXPECT_EQ(g.failed, 1u);
  EXPECT_EQ(g.pending, 0u);
  EXPECT_DOUBLE_EQ(g.mean, 0.5);
  EXPECT_DOUBLE_EQ(g.std, 0.5);
}

TEST_F(SchedulerCore, InternalRequestsShareTheGroupsOrderButNotItsStatistics) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {member("g", "call")}, true).admitted());
  auto calls = core_.dispatch();
  ASSERT_EQ(calls.size(), 1u);
  answer(calls[0], 0.9);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].groups.empty());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, {member("g", "reward")}).admitted());
  auto reward = core_.dispatch();
  ASSERT_EQ(reward.size(), 1u);
  answer(reward[0], 0.4);
  done = core_.take_finished();
  ASSERT_EQ(done[0].groups.size(), 1u);
  EXPECT_EQ(done[0].groups[0].scored, 1u) << "the model call's 0.9 is not a member's score";
  EXPECT_DOUBLE_EQ(done[0].groups[0].mean, 0.4);
}

TEST_F(SchedulerCore, AGroupDeadlineCountsFromTheGroupsFirstArrival) {
  core_.add_source("cpu", {"cpu"});
  auto timed = [](std::string text) {
    auto item = member("g", std::move(text));
    item.group_deadline_ms = 1000;
    return item;
  };
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {timed("first")}).admitted());
  auto busy = core_.dispatch();
  ASSERT_EQ(busy.size(), 1u);
  clock_.advance(600ms);
  // Its own deadline is 10 s away; the group's is 400 ms away.
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, {timed("second")}).admitted());
  clock_.advance(399ms);
  core_.on_timer();
  EXPECT_TRUE(core_.take_finished().empty());
  clock_.advance(1ms);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u) << "both members: the group's deadline is both requests'";
  EXPECT_EQ(done[0].results[0].code, errc::deadline_exceeded);
  EXPECT_EQ(done[1].results[0].code, errc::deadline_exceeded);

  // A member arriving after the group's deadline fails at once, saying why, not refused.
  clock_.advance(100ms);
  auto late = core_.submit(3, 1, clock_.now() + 10s, {timed("third")});
  ASSERT_TRUE(late.admitted());
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].code, errc::deadline_exceeded);
  EXPECT_NE(done[0].results[0].error.find("group 'g'"), std::string::npos)
    << done[0].results[0].error;
  answer(busy[0], 1.0); // late: ignored
  EXPECT_TRUE(core_.take_finished().empty());
  EXPECT_TRUE(core_.idle());
}

TEST_F(SchedulerCore, ALateGroupsMemberFailsAloneItsRequestsOtherItemsAreScored) {
  core_.add_source("cpu", {"cpu"});
  auto timed = [](std::string group, std::string text) {
    auto item = member(std::move(group), std::move(text));
    item.group_deadline_ms = 100;
    return item;
  };
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {timed("old", "first")}).admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  answer(first[0], 0.5);
  ASSERT_EQ(core_.take_finished().size(), 1u);
  clock_.advance(300ms);
  // A resent batch: the stale group's member, a new group's, and one with no group.
  ASSERT_TRUE(core_
                .submit(2, 1, clock_.now() + 10s,
                        {timed("old", "again"), timed("new", "fresh"), cpu_item("plain")})
                .admitted());
  auto calls = core_.dispatch();
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].items.size(), 2u) << "only the stale member is left out";
  answer(calls[0], 0.7);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const auto& r = done[0].results;
  EXPECT_EQ(r[0].code, errc::deadline_exceeded);
  EXPECT_NE(r[0].error.find("group 'old'"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].status, item_status::ok);
  EXPECT_EQ(r[2].status, item_status::ok);
  bool seen_new = false;
  for (const auto& g : done[0].groups) {
    if (g.group == "new") {
      seen_new = true;
      EXPECT_EQ(g.scored, 1u);
      EXPECT_EQ(g.failed, 0u) << "the new group is not charged with the old one's lateness";
    }
  }
  EXPECT_TRUE(seen_new);
  EXPECT_TRUE(core_.idle());
  // Past the group memory (5 min) the name is a new group, whose first member is in time: it
  // failed, read against the forgotten group's first arrival (helper-37).
  clock_.advance(301s);
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, {timed("old", "next step")}).admitted());
  auto reused = core_.dispatch();
  ASSERT_EQ(reused.size(), 1u);
  answer(reused[0], 0.25);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok) << done[0].results[0].error;
  ASSERT_EQ(done[0].groups.size(), 1u);
  EXPECT_EQ(done[0].groups[0].scored, 1u);
  EXPECT_EQ(done[0].groups[0].failed, 0u) << "nothing of the old group's";
}

namespace {

/// A remote endpoint "remote" serving chat, one item a call, 4 calls at once.
source_spec remote_chat_source() {
  source_spec spec;
  spec.name = "remote";
  spec.capabilities = {"chat"};
  spec.max_batch_items = 1;
  spec.max_inflight = 4;
  spec.remote = true;
  return spec;
}

/// A chat item of training step `step` (none: ""), its text `text`.
score_item chat_item(const std::string& text, std::string step) {
  auto item = cpu_item(text);
  item.capability = "chat";
  item.step = std::move(step);
  return item;
}

} // namespace

TEST_F(SchedulerCore, StepsAccountTheirItemsCallsAndTheTokensSourcesReport) {
  auto spec = remote_chat_source();
  spec.input_cost_per_million = 1.0;
  spec.output_cost_per_million = 4.0;
  core_.add_source(spec);
  int n = 0;
  auto chat = [&n](std::string step) {
    return chat_item("judge me " + std::to_string(n++), std::move(step));  // none coalesces
  };
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {chat("s1"), chat("s1"), chat("")})
                .admitted());
  size_t calls = 0;
  for (int round = 0; round < 100 && !core_.idle(); ++round) {
    clock_.advance(50ms);
    core_.on_timer();
    for (const auto& b : core_.dispatch()) {
      auto out = ok_outcome(0.5);
      auto usage = std::make_shared<model_output>();
      usage->prompt_tokens = 1000;
      usage->completion_tokens = 10;
      out.output = usage;
      core_.complete(b.id, {out});
      ++calls;
    }
  }
  ASSERT_EQ(calls, 3u);
  ASSERT_TRUE(core_.idle());
  auto account = core_.steps().find("s1");
  ASSERT_TRUE(account);
  EXPECT_EQ(account->items_ok, 2u);
  const auto& remote = account->sources.at("remote");
  EXPECT_EQ(remote.calls, 2u);
  EXPECT_EQ(remote.prompt_tokens, 2000u);
  EXPECT_EQ(remote.completion_tokens, 20u);
  EXPECT_DOUBLE_EQ(remote.cost, (2000 * 1.0 + 20 * 4.0) / 1e6);
  EXPECT_EQ(core_.steps().recent().size(), 1u) << "an item without a step is in no account";
  EXPECT_NE(metrics_text().find(R"(arbiter_source_tokens_total{kind="prompt",source="remote"} 3000)"),
            std::string::npos);
}

TEST_F(SchedulerCore, ACallGivenUpBeforeItWasSentIsNotCountedForItsStep) {
  // Clients that hang up: their calls are given up at once, and the source answers each
  // cancel later, saying whether the request had been written. One never written did not
  // reach the provider, whose own count the step's `calls` must equal (helper-31: 10 calls
  // counted, 2 to 6 received).
  core_.add_source(remote_chat_source());
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {chat_item("judge me 0", "s")}).admitted());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, {chat_item("judge me 1", "s")}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(core_.steps().find("s")->sources.at("remote").calls, 2u);
  core_.cancel(1, "the client hung up");
  core_.cancel(2, "the client hung up");
  auto cancelled = core_.take_cancelled();
  ASSERT_EQ(cancelled.size(), 2u);
  // The first was written (the provider may bill it), the second still waited to be.
  attempt_report written;
  written.cancelled = true;
  attempt_report unsent = written;
  unsent.unsent = true;
  core_.complete(batches[0].id, written, {});
  core_.complete(batches[1].id, unsent, {});
  EXPECT_EQ(core_.steps().find("s")->sources.at("remote").calls, 1u);
  // A second answer for the same call changes nothing.
  core_.complete(batches[1].id, unsent, {});
  EXPECT_EQ(core_.steps().find("s")->sources.at("remote").calls, 1u);
}

TEST_F(SchedulerCore, AGivenUpCallSentAgainAfterAResetCountsWhatTheProviderRead) {
  // helper-68: a call written on a kept-alive connection that was reset goes once more on a
  // fresh one; given up (its client hung up) meanwhile, its late word was taken for a call
  // never written and uncounted, or counted once though the provider read it twice.
  core_.add_source(remote_chat_source());
  for (request_id id = 1; id <= 2; ++id) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 10s,
                             {chat_item("judge me " + std::to_string(id), "s")})
                  .admitted());
  }
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 2u);
  core_.cancel(1, "the client hung up");
  core_.cancel(2, "the client hung up");
  ASSERT_EQ(core_.take_cancelled().size(), 2u);
  attempt_report first_only; // the fresh connection was still being made
  first_only.cancelled = true;
  first_only.resent = true;
  first_only.unsent = true;
  attempt_report both = first_only; // the second was written too
  both.unsent = false;
  core_.complete(batches[0].id, first_only, {});
  core_.complete(batches[1].id, both, {});
  auto account = core_.steps().find("s");
  ASSERT_TRUE(account);
  const auto& remote = account->sources.at("remote");
  EXPECT_EQ(remote.calls, 3u) << "1 + 2, as the provider read them";
  EXPECT_EQ(remote.failed_calls, 2u) << "the two that were reset";
}

TEST_F(SchedulerCore, TheTokensOfAnAnswerTheCallCouldNotUseCountForItsStep) {
  // helper-62: a generate source answering fewer completions than n (a server capping n):
  // the provider billed 48 prompt and 256 completion tokens, the step counted none.
  auto spec = remote_chat_source();
  spec.input_cost_per_million = 1.0;
  spec.output_cost_per_million = 4.0;
  core_.add_source(spec);
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {chat_item("sample me", "s")}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  attempt_report unfit;
  unfit.kind = attempt_outcome_kind::unsupported;
  unfit.detail = "generate reply has 1 choices for n = 4";
  unfit.prompt_tokens = 48;
  unfit.completion_tokens = 256;
  core_.complete(batches[0].id, unfit, {});
  auto step = core_.steps().find("s"); // a copy: held while its accounts are read
  ASSERT_TRUE(step);
  const auto& account = step->sources.at("remote");
  EXPECT_EQ(account.calls, 1u);
  EXPECT_EQ(account.failed_calls, 1u);
  EXPECT_EQ(account.prompt_tokens, 48u);
  EXPECT_EQ(account.completion_tokens, 256u);
  EXPECT_DOUBLE_EQ(account.cost, (48 * 1.0 + 256 * 4.0) / 1e6);
  const std::string billed =
    R"(arbiter_source_tokens_total{kind="completion",source="remote"} 256)";
  EXPECT_NE(metrics_text().find(billed), std::string::npos);
}

TEST_F(SchedulerCore, ARefusedConnectionIsNoCallOfItsStepNorAnAttemptOfItsItem) {
  // helper-62: a source at a port nothing listened on had 6 calls, 6 failed calls and 6
  // retries in the step's account, and its items 2 attempts, though no request reached a
  // provider.
  core_.add_source(remote_chat_source());
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, {chat_item("judge me", "s")}).admitted());
  auto batches = core_.dispatch();
  ASSERT_EQ(batches.size(), 1u);
  attempt_report refused;
  refused.kind = attempt_outcome_kind::connect_failure;
  refused.unsent = true;
  refused.detail = "connect_failed: Connection refused";
  core_.complete(batches[0].id, refused, {});
  auto first = core_.steps().find("s"); // a copy: held while its accounts are read
  ASSERT_TRUE(first);
  EXPECT_EQ(first->sources.at("remote").calls, 0u);
  EXPECT_EQ(first->sources.at("remote").failed_calls, 0u);
  size_t sent = 0;
  for (int round = 0; round < 100 && !core_.idle(); ++round) {
    clock_.advance(50ms);
    core_.on_timer();
    for (const auto& b : core_.dispatch()) {
      core_.complete(b.id, {ok_outcome(0.5)});
      ++sent;
    }
  }
  ASSERT_EQ(sent, 1u);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_EQ(done[0].results[0].attempts, 1u) << "the one request the provider saw";
  auto step = core_.steps().find("s");
  ASSERT_TRUE(step);
  const auto& account = step->sources.at("remote");
  EXPECT_EQ(account.calls, 1u);
  EXPECT_EQ(account.failed_calls, 0u);
  EXPECT_EQ(account.retries, 0u);
}

TEST_F(SchedulerCore, AGraphsModelCallsGoInThoughNewRequestsFilledTheClassSince) {
  // A judge item leaves the class's queue when it goes to the reward graph; requests admitted
  // meanwhile may fill the class. Its chat calls (an internal request) used to fail the item
  // "overloaded: priority class 'normal' is full" in a 200, with its deadline far off.
  core_.add_source("cpu", {"cpu"});
  auto chat = core_.add_source("chat-source", {"chat"});
  std::vector<score_item> flood;
  for (int i = 0; i < 100; ++i) {
    flood.push_back(cpu_item("flood " + std::to_string(i)));
  }
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 60s, flood).admitted());
  EXPECT_FALSE(core_.submit(2, 1, clock_.now() + 60s, cpu_items(1)).admitted())
    << "the class is full to clients";
  score_item call = cpu_item("judge call");
  call.capability = "chat";
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 60s, {call}, /*internal=*/true).admitted());
  EXPECT_TRUE(core_.take_finished().empty()) << "nothing failed";
  for (const auto& batch : core_.dispatch()) {
    if (batch.source == chat) {
      answer(batch, 0.75);
    }
  }
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 3u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok) << done[0].results[0].error;
  EXPECT_EQ(done[0].results[0].score, 0.75);
}

TEST_F(SchedulerCore, WithRecordingOnBatchesAskForEvidenceAndFinishedRequestsCarryTheirItems) {
  core_.add_source("cpu", {"cpu"});
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, cpu_items(2)).admitted());
  auto off = core_.dispatch();
  ASSERT_EQ(off.size(), 1u);
  EXPECT_FALSE(off[0].record) << "off unless the replay log is on";
  answer(off[0], 0.5);
  core_.set_recording(true);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, cpu_items(2), /*internal=*/true).admitted());
  auto on = core_.dispatch();
  ASSERT_EQ(on.size(), 1u);
  EXPECT_TRUE(on[0].record);
  // A failed item's evidence is kept too: replay reproduces the failure.
  std::vector<item_outcome> outcomes{ok_outcome(0.25), failure(errc::reward_failed, "no")};
  outcomes[0].evidence = R"({"steps":[]})";
  outcomes[1].evidence = R"({"steps":[{}]})";
  core_.complete(on[0].id, outcomes);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_FALSE(done[0].internal);
  EXPECT_TRUE(done[1].internal);
  ASSERT_EQ(done[1].items.size(), 2u);
  EXPECT_EQ(done[1].items[1]->solution_str, "item 1");
  EXPECT_EQ(done[1].results[0].evidence, R"({"steps":[]})");
  EXPECT_EQ(done[1].results[1].status, item_status::failed);
  EXPECT_EQ(done[1].results[1].evidence, R"({"steps":[{}]})");
}

namespace {

score_item model_item(std::string kind, std::string capability, std::string text) {
  score_item item;
  item.reward = kind;
  item.kind = std::move(kind);
  item.capability = std::move(capability);
  item.solution_str = std::move(text);
  item.ground_truth = {"reference"};
  return item;
}

std::vector<shared_item> one(score_item item) {
  return {std::make_shared<const score_item>(std::move(item))};
}

/// A local model "minilm" serving `capabilities`, `max_inflight` batches at once.
source_spec local_model_source(std::vector<std::string> capabilities, uint32_t max_inflight) {
  source_spec spec;
  spec.name = "minilm";
  spec.capabilities = std::move(capabilities);
  spec.max_inflight = max_inflight;
  spec.local_model = true;
  return spec;
}

/// Each of `done` (requests of one item) ended with a late answer of 0.625 from "minilm".
template <typename Finished>
void expect_late_answers(const Finished& done) {
  for (const auto& d : done) {
    EXPECT_EQ(d.results[0].status, item_status::ok);
    EXPECT_DOUBLE_EQ(d.results[0].score, 0.625);
    EXPECT_EQ(d.results[0].source, "minilm");
    EXPECT_TRUE(d.results[0].cached);
  }
}

/// A generator call of a local model: `temperature` and `seed` as given.
score_item generate_call(std::optional<double> temperature, std::optional<uint64_t> seed) {
  auto item = model_item("generate", "generate", "");
  model_call call;
  call.prompt = "Question: what is 2 + 2?\nAnswer:";
  call.temperature = temperature;
  call.seed = seed;
  item.call = std::make_shared<const model_call>(std::move(call));
  return item;
}

} // namespace

TEST_F(SchedulerCore, ALocalModelsIdenticalItemsShareOneAnswerUnlessItsGeneratorSamples) {
  core_.add_source(local_model_source({"embed", "generate"}, 4));
  core_.add_source("cpu", {"cpu"});

  // Two requests with the same embedding item while the first is in flight: one computation.
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "follows request 1's item, as a remote source's do";
  answer(first[0], 0.75);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    EXPECT_EQ(d.results[0].status, item_status::ok);
    EXPECT_DOUBLE_EQ(d.results[0].score, 0.75);
    EXPECT_EQ(d.results[0].source, "minilm");
  }
  // A retry of it later (a trainer's client timed out) is answered from the cache.
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].results[0].cached);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.75);
  EXPECT_EQ(done[0].results[0].source, "minilm");

  // A generator call that samples (no temperature: 1; no seed: a fresh one) is run each time.
  for (request_id id : {4, 5}) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 10s, one(generate_call(std::nullopt,
                                                                           std::nullopt)))
                  .admitted());
  }
  auto sampled = core_.dispatch();
  size_t sent = 0;
  for (const auto& b : sampled) {
    sent += b.items.size();
    answer(b, 0.5);
  }
  EXPECT_EQ(sent, 2u) << "two samples asked for, two drawn";
  EXPECT_EQ(core_.take_finished().size(), 2u);
  // Seeded or greedy, the same call gives the same texts: shared.
  request_id next = 10;
  for (auto call : {generate_call(0.7, 7), generate_call(0.0, std::nullopt)}) {
    ASSERT_TRUE(core_.submit(next++, 1, clock_.now() + 10s, one(call)).admitted());
    ASSERT_TRUE(core_.submit(next++, 1, clock_.now() + 10s, one(call)).admitted());
    auto batches = core_.dispatch();
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(batches[0].items.size(), 1u) << call.call->temperature.value();
    answer(batches[0], 0.25);
    EXPECT_EQ(core_.take_finished().size(), 2u);
  }

  // CPU rewards are scored each time: the key would cost about what the scoring does.
  for (request_id id : {20, 21}) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 10s, cpu_items(1)).admitted());
  }
  sent = 0;
  for (const auto& b : core_.dispatch()) {
    sent += b.items.size();
    answer(b, 1.0);
  }
  EXPECT_EQ(sent, 2u);
}

TEST_F(SchedulerCore, AdmissionWeighsALocalModelsItemsByTheirTextsTokens) {
  // An embedder truncating at 256 tokens: an item of eight long references costs it about 58
  // times one of a 20-word reference. Counted per item, a request of heavy items was admitted
  // on short ones' pace and failed at its deadline, and short items were refused on heavy
  // ones' (helper-42: 1,000 short items after long ones all took their fallback).
  auto spec = local_model_source({"embed"}, 1);
  spec.max_batch_items = 4;
  spec.max_input_tokens = 256;
  core_.add_source(spec);
  auto words = [](size_t n) {
    std::string text = "ab";
    for (size_t i = 1; i < n; ++i) {
      text += " ab";
    }
    return text;
  };
  size_t made = 0; // each item differs: a cached answer makes no call
  auto items = [&](size_t n, size_t references, size_t length) {
    std::vector<shared_item> out;
    for (size_t i = 0; i < n; ++i) {
      auto item = model_item("embedding", "embed", words(length) + std::to_string(made++));
      item.ground_truth.assign(references, words(length));
      out.push_back(std::make_shared<const score_item>(std::move(item)));
    }
    return out;
  };
  const auto short_work = estimate_model_work(*items(1, 1, 20)[0], 256);
  const auto heavy_work = estimate_model_work(*items(1, 8, 3000)[0], 256);
  ASSERT_EQ(heavy_work, 9u * 413u);
  ASSERT_GT(heavy_work, 50 * short_work);

  run_alone(1, items(4, 1, 20), 400ms); // 0.1 s an item
  auto heavy = core_.submit(2, 1, clock_.now() + 15s, items(4, 8, 3000));
  EXPECT_EQ(heavy.decision, admission_decision::reject_deadline_unmeetable)
    << "4 heavy items take about 23 s at that pace of work, not 0.4 s: " << heavy.reason;
  run_alone(3, items(4, 1, 20), 400ms);

  run_alone(4, items(4, 8, 3000), 30s); // somewhat slower a unit than the short ones
  EXPECT_TRUE(core_.submit(5, 1, clock_.now() + 1s, items(4, 1, 20)).admitted())
    << "short items after heavy ones take about 0.4 s, not 30 s";
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u);
  clock_.advance(420ms);
  answer(sent[0], 0.5);
  core_.take_finished();

  // Heavy items queued ahead count at their own work: 4 of them wait behind the batch sent.
  ASSERT_TRUE(core_.submit(6, 1, clock_.now() + 120s, items(8, 8, 3000)).admitted());
  ASSERT_EQ(core_.dispatch().size(), 1u);
  auto behind = core_.submit(7, 1, clock_.now() + 10s, items(4, 1, 20));
  EXPECT_EQ(behind.decision, admission_decision::reject_deadline_unmeetable) << behind.reason;
  EXPECT_TRUE(core_.submit(8, 1, clock_.now() + 90s, items(4, 1, 20)).admitted());
}

TEST_F(SchedulerCore, AdmissionWeighsAGeneratingSourcesCallsByTheTokensTheyMayProduce) {
  // helper-43: one source served 3,500-token generations (35 s) and a judge's 16-token calls.
  // Counted alike, every judge call due in 30 s after a generation was refused on its 35 s.
  auto spec = remote_chat_source();
  spec.max_inflight = 1;
  spec.completion_tokens = 1024; // the source's max_tokens, for calls that name none
  core_.add_source(spec);
  size_t made = 0; // each call differs: a cached answer makes no call
  auto call = [&made](std::optional<uint32_t> max_tokens) {
    auto item = model_item("chat", "chat", "");
    auto c = std::make_shared<model_call>();
    c->prompt = "question " + std::to_string(made++);
    c->max_tokens = max_tokens;
    item.call = std::move(c);
    return one(std::move(item));
  };
  run_alone(1, call(3500), 35s);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 30s, call(16)).admitted())
    << "16 tokens at the pace of 3,500 in 35 s take about 0.16 s";
  auto sent = core_.dispatch();
  ASSERT_EQ(sent.size(), 1u);
  clock_.advance(300ms);
  answer(sent[0], 0.5);
  core_.take_finished();
  // Two sizes fit a line: about 0.14 s a call and 0.01 s a token.
  EXPECT_FALSE(core_.submit(3, 1, clock_.now() + 10s, call(3500)).admitted())
    << "another generation still takes about 35 s";
  EXPECT_FALSE(core_.submit(4, 1, clock_.now() + 5s, call(std::nullopt)).admitted())
    << "a call naming no max_tokens may produce the source's 1024 (about 10 s)";
  EXPECT_TRUE(core_.submit(5, 1, clock_.now() + 20s, call(std::nullopt)).admitted());
  EXPECT_TRUE(core_.submit(6, 1, clock_.now() + 30s, call(16)).admitted())
    << "a judge's call waits behind that one: about 10.5 s";
}

TEST_F(SchedulerCore, ALocalBatchPastItsItemsDeadlineKeepsItsAnswersForTheRetry) {
  // helper-42: a request of long texts failed at its deadline while the CPU embedder ran its
  // batch 17 s more; the answers were thrown away, and the client's retry, queued behind that
  // batch, computed them all again.
  core_.add_source(local_model_source({"embed"}, 1));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, one(model_item("embedding", "embed", "x")))
                .admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  clock_.advance(1s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].code, errc::deadline_exceeded);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "the model is still busy with the late batch";
  clock_.advance(3s);
  answer(running[0], 0.625);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "the retry ends with the late answer";
  expect_late_answers(done);
  EXPECT_TRUE(core_.dispatch().empty()) << "nothing computed twice";
  EXPECT_TRUE(core_.idle());
}

TEST_F(SchedulerCore, ARemoteCallPastItsItemsDeadlineRunsOnAndItsAnswerServesTheRetry) {
  // A generation longer than its deadline: its answer was dropped when it came, so every
  // retry paid for the whole call again and failed again.
  auto spec = remote_chat_source();
  spec.max_inflight = 2;
  core_.add_source(spec);
  auto call = [](const std::string& text) {
    auto item = model_item("chat", "chat", "");
    auto c = std::make_shared<model_call>();
    c->prompt = text;
    c->temperature = 0.0;
    item.call = std::move(c);
    return one(std::move(item));
  };
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, call("long")).admitted());
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 1s, call("longer")).admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 2u);
  clock_.advance(1s);
  core_.on_timer();
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].results[0].code, errc::deadline_exceeded);
  EXPECT_TRUE(core_.take_cancelled().empty()) << "the calls run on upstream";
  // One retry comes while the calls run (both slots are still taken, so it waits), one after.
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, call("long")).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "the source's two slots are still taken";
  clock_.advance(2s);
  answer(running[0], 0.625);
  answer(running[1], 0.25);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "the waiting retry ends with the late answer";
  EXPECT_TRUE(done[0].results[0].cached);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.625);
  // The source now takes 3 s a call: a new call due in 200 ms is refused, but not a retry
  // that the cache answers.
  EXPECT_FALSE(core_.submit(4, 1, clock_.now() + 200ms, call("new")).admitted());
  ASSERT_TRUE(core_.submit(5, 1, clock_.now() + 200ms, call("longer")).admitted());
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u) << "the later retry is answered from the cache";
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.25);
  EXPECT_TRUE(core_.dispatch().empty()) << "nothing is paid for twice";
}

TEST_F(SchedulerCore, ARetryWhileTheLateCallRunsTakesItsPlaceInsteadOfCallingAgain) {
  // helper-45: with a slot free, the retry of a call still running past its deadline was
  // sent as a second call, paid for twice.
  auto spec = remote_chat_source(); // 4 calls at once
  core_.add_source(spec);
  auto call = [](const std::string& text) {
    auto item = model_item("chat", "chat", "");
    auto c = std::make_shared<model_call>();
    c->prompt = text;
    item.call = std::move(c);
    return one(std::move(item));
  };
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 1s, call("long")).admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  clock_.advance(1s);
  core_.on_timer();
  ASSERT_EQ(core_.take_finished().size(), 1u);
  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, call("long")).admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "the retry rides on the call already running";
  clock_.advance(2s);
  answer(running[0], 0.75);
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].status, item_status::ok);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.75);
  EXPECT_TRUE(done[0].results[0].cached) << "computed for the request that ended";

  // A retry that took a call's place which then fails is sent again, as its own.
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 5s, call("flaky")).admitted());
  running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  clock_.advance(5s);
  core_.on_timer();
  ASSERT_EQ(core_.take_finished().size(), 1u);
  ASSERT_TRUE(core_.submit(4, 1, clock_.now() + 30s, call("flaky")).admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  attempt_report failed;
  failed.kind = attempt_outcome_kind::server_error;
  core_.complete(running[0].id, failed, {});
  std::vector<dispatch_batch> again;
  for (int i = 0; i < 20 && again.empty(); ++i) {
    clock_.advance(250ms);
    core_.on_timer();
    again = core_.dispatch();
  }
  ASSERT_EQ(again.size(), 1u) << "sent again after the failure";
  answer(again[0], 0.5);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_DOUBLE_EQ(done[0].results[0].score, 0.5);
  EXPECT_FALSE(done[0].results[0].cached) << "its own call's answer";
}

TEST_F(SchedulerCore, ALocalBatchGivenUpKeepsItsSlotAndItsLateAnswerServesTheRetry) {
  // A trainer's client times out and hangs up while the local model runs its batch; it sends
  // the same item again. The model finishes the batch anyway (it runs as one message), so the
  // retry waits for that answer rather than computing the item a second time.
  core_.add_source(local_model_source({"embed"}, 1));
  ASSERT_TRUE(core_.submit(1, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  auto running = core_.dispatch();
  ASSERT_EQ(running.size(), 1u);
  core_.cancel(1, "the client hung up");
  auto done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].results[0].code, errc::client_closed);
  ASSERT_EQ(core_.take_cancelled().size(), 1u) << "the worker is told, though it runs on";

  ASSERT_TRUE(core_.submit(2, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  ASSERT_TRUE(core_.submit(3, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  EXPECT_TRUE(core_.dispatch().empty()) << "the model is still busy with the given-up batch";
  clock_.advance(40ms);
  answer(running[0], 0.625);
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 2u) << "the retry and the item following it end with the late answer";
  expect_late_answers(done);
  EXPECT_TRUE(core_.dispatch().empty()) << "nothing computed twice";
  EXPECT_TRUE(core_.idle());
  // And it is in the cache for a later retry.
  ASSERT_TRUE(core_.submit(4, 1, clock_.now() + 10s, one(model_item("embedding", "embed", "x")))
                .admitted());
  EXPECT_TRUE(core_.dispatch().empty());
  done = core_.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].results[0].cached);
}

TEST_F(SchedulerCore, AFullClassOfJudgeItemsSaysWhenItsChatCallsMakeRoom) {
  // A judge item's room comes back at the pace of its chat calls (10 a second here). The
  // graph has no rate of its own, so a full class said Retry-After: 1 each time, and a
  // client that honours it gave up after its retries.
  auto chat = remote_chat_source();
  chat.rate_limit = rate_limit_config{};
  chat.rate_limit->requests_per_minute = 600;
  chat.rate_limit->burst = 1s;
  core_.add_source(chat);
  source_spec graph;
  graph.name = "reward-graph";
  graph.capabilities = {"judge"};
  graph.max_inflight = 1u << 16;
  graph.feeds["judge"] = {"chat"};
  core_.add_source(graph);
  std::vector<score_item> held;
  for (int i = 0; i < 100; ++i) {
    auto item = cpu_item("held " + std::to_string(i));
    item.capability = "judge";
    held.push_back(std::move(item));
  }
  ASSERT_TRUE(core_.submit(1, 2, clock_.now() + 60s, std::move(held)).admitted());
  std::vector<score_item> more;
  for (int i = 0; i < 50; ++i) {
    auto item = cpu_item("more " + std::to_string(i));
    item.capability = "judge";
    more.push_back(std::move(item));
  }
  auto r = core_.submit(2, 2, clock_.now() + 60s, std::move(more));
  ASSERT_EQ(r.decision, admission_decision::reject_queue_full);
  EXPECT_EQ(r.retry_after, 5s) << "50 items' room at 10 a second";
}

TEST_F(SchedulerCore, NamesASourceForTheLogs) {
  // helper-41: a lost node's endpoint was logged as "source 2 went down".
  auto id = core_.add_source(local_model_source({"embed"}, 1));
  EXPECT_EQ(core_.source_name(id), "minilm");
}

TEST_F(SchedulerCore, RequestsAdmittedBeforeTheLimitsWereKnownAreRefusedWhenTheyCannotStart) {
  // helper-57: 300 single-item judge requests due in 5 s, to a provider taking 20 calls a
  // second whose limits nobody configured. Admitted before its headers told them, 183 failed
  // at their deadline; with the limits configured, admission refused them and the client sent
  // them again later (298 scored). Now they are refused once the limits are learned.
  auto spec = remote_chat_source();
  spec.max_inflight = 1;
  spec.rate_limit = rate_limit_config{}; // no limits written: learned from headers
  core_.add_source(spec);
  for (request_id id = 1; id <= 40; ++id) {
    ASSERT_TRUE(core_.submit(id, 1, clock_.now() + 2s,
                             {chat_item("judge me " + std::to_string(id), "s")})
                  .admitted());
  }
  auto first = core_.dispatch();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(core_.take_finished().empty()) << "nothing known yet: nothing refused";
  clock_.advance(100ms);
  attempt_report report;
  report.headers.limit_requests = 600; // 10 a second
  report.headers.remaining_requests = 0;
  report.headers.reset_requests = 100ms;
  core_.complete(first[0].id, report, {ok_outcome(0.5)});
  EXPECT_TRUE(core_.dispatch().empty()) << "the bucket is empty for 100 ms";
  auto done = core_.take_finished();
  std::set<request_id> refused;
  for (const auto& d : done) {
    if (d.refused) {
      refused.insert(d.id);
      EXPECT_EQ(d.results[0].code, errc::overloaded);
      EXPECT_GE(d.retry_after_s, 1);
      EXPECT_NE(d.reason.find("after its deadline"), std::string::npos) << d.reason;
    } else {
      EXPECT_EQ(d.id, 1u) << "the one answered";
    }
  }
  // 39 wait; the k-th of them starts no sooner than 0.1 s + (k - 1) / 10 s and is answered
  // 0.1 s after (the quickest answer), and 1.9 s are left: the first 18 may make it, the
  // last 21 cannot.
  ASSERT_EQ(refused.size(), 21u);
  EXPECT_EQ(*refused.begin(), 20u);
  EXPECT_EQ(*refused.rbegin(), 40u);
  EXPECT_FALSE(core_.steps().find("s")->items_failed > 0) << "a refusal is no step's item";
  // The others are served as the bucket allows.
  for (int round = 0; round < 40 && !core_.idle(); ++round) {
    clock_.advance(100ms);
    core_.on_timer();
    for (const auto& b : core_.dispatch()) {
      core_.complete(b.id, {ok_outcome(0.5)});
    }
  }
  size_t ok = 0;
  for (const auto& d : core_.take_finished()) {
    ok += !d.refused && d.results[0].status == item_status::ok;
  }
  EXPECT_GE(ok, 17u) << "the 18th is answered at its deadline";
}
