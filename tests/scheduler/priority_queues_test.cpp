#include "scheduler/priority_queues.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

std::vector<config::priority_class> two_classes(config::queue_order order = config::queue_order::fifo,
                                                uint32_t capacity = 10) {
  return {{"high", capacity, order}, {"low", capacity, order}};
}

queued_task task(task_id id, time_point deadline) {
  return queued_task{id, id, 0, deadline, time_point{}, std::nullopt};
}

const time_point t0{std::chrono::hours{1}};

} // namespace

TEST(PriorityQueues, FindsClassesByName) {
  priority_queues q{two_classes()};
  EXPECT_EQ(q.find_class("high"), 0u);
  EXPECT_EQ(q.find_class("low"), 1u);
  EXPECT_FALSE(q.find_class("urgent").has_value());
}

TEST(PriorityQueues, FifoServesInArrivalOrder) {
  priority_queues q{two_classes()};
  ASSERT_TRUE(q.push(0, "cpu", task(1, t0 + 30s)));
  ASSERT_TRUE(q.push(0, "cpu", task(2, t0 + 10s)));
  ASSERT_TRUE(q.push(0, "cpu", task(3, t0 + 20s)));
  EXPECT_EQ(q.pop(0, "cpu")->id, 1u);
  EXPECT_EQ(q.pop(0, "cpu")->id, 2u);
  EXPECT_EQ(q.pop(0, "cpu")->id, 3u);
  EXPECT_FALSE(q.pop(0, "cpu").has_value());
}

TEST(PriorityQueues, EdfServesEarliestDeadlineFirstThenArrival) {
  priority_queues q{two_classes(config::queue_order::edf)};
  ASSERT_TRUE(q.push(0, "cpu", task(1, t0 + 30s)));
  ASSERT_TRUE(q.push(0, "cpu", task(2, t0 + 10s)));
  ASSERT_TRUE(q.push(0, "cpu", task(3, t0 + 20s)));
  ASSERT_TRUE(q.push(0, "cpu", task(4, t0 + 10s)));
  EXPECT_EQ(q.pop(0, "cpu")->id, 2u);
  EXPECT_EQ(q.pop(0, "cpu")->id, 4u);
  EXPECT_EQ(q.pop(0, "cpu")->id, 3u);
  EXPECT_EQ(q.pop(0, "cpu")->id, 1u);
}

TEST(PriorityQueues, CapacityIsPerClass) {
  priority_queues q{two_classes(config::queue_order::fifo, 2)};
  EXPECT_TRUE(q.push(0, "cpu", task(1, t0)));
  EXPECT_TRUE(q.push(0, "embed", task(2, t0)));
  EXPECT_EQ(q.free_capacity(0), 0u);
  EXPECT_FALSE(q.push(0, "cpu", task(3, t0)));
  EXPECT_EQ(q.depth(0), 2u);
  EXPECT_TRUE(q.push(1, "cpu", task(4, t0)));
  EXPECT_EQ(q.free_capacity(1), 1u);
}

TEST(PriorityQueues, CapabilitiesDoNotBlockEachOther) {
  priority_queues q{two_classes()};
  ASSERT_TRUE(q.push(0, "embed", task(1, t0)));
  ASSERT_TRUE(q.push(0, "cpu", task(2, t0)));
  EXPECT_EQ(q.pop(0, "cpu")->id, 2u);
  EXPECT_EQ(q.waiting_capabilities(), std::vector<std::string>{"embed"});
  EXPECT_EQ(q.waiting(0, "embed"), 1u);
  EXPECT_EQ(q.waiting(0, "cpu"), 0u);
}

TEST(PriorityQueues, RemoveTakesATaskOutWherever) {
  priority_queues q{two_classes()};
  ASSERT_TRUE(q.push(1, "cpu", task(1, t0)));
  ASSERT_TRUE(q.push(1, "cpu", task(2, t0)));
  EXPECT_TRUE(q.remove(1));
  EXPECT_FALSE(q.remove(1));
  EXPECT_EQ(q.depth(1), 1u);
  EXPECT_EQ(q.pop(1, "cpu")->id, 2u);
  EXPECT_EQ(q.total_depth(), 0u);
  EXPECT_TRUE(q.waiting_capabilities().empty());
}

TEST(PriorityQueues, WaitingCapabilitiesSpanEveryClassOnce) {
  priority_queues q{two_classes()};
  ASSERT_TRUE(q.push(0, "cpu", task(1, t0)));
  ASSERT_TRUE(q.push(1, "cpu", task(2, t0)));
  ASSERT_TRUE(q.push(1, "chat", task(3, t0)));
  EXPECT_EQ(q.waiting_capabilities(), (std::vector<std::string>{"cpu", "chat"}));
}

TEST(PriorityQueues, AFifoTaskQueuedAgainKeepsItsPlace) {
  priority_queues q{two_classes()};
  ASSERT_TRUE(q.push(0, "chat", queued_task{1, 1, 0, t0, t0, std::nullopt}));
  ASSERT_TRUE(q.push(0, "chat", queued_task{2, 2, 0, t0, t0 + 1s, std::nullopt}));
  auto first = q.pop(0, "chat");
  ASSERT_TRUE(q.push(0, "chat", queued_task{3, 1, 0, t0, first->enqueued, std::nullopt})); // back after a 429
  EXPECT_EQ(q.pop(0, "chat")->request, 1u) << "it arrived first";
}

TEST(PriorityQueues, ATaskWithAnOrderTimeIsOrderedByItInAFifoClass) {
  priority_queues q{two_classes()};
  // A group's late member (its group began at t0) goes ahead of a later group's first one.
  ASSERT_TRUE(q.push(0, "chat", queued_task{1, 1, 0, t0, t0 + 1s, std::nullopt}));
  ASSERT_TRUE(q.push(0, "chat", queued_task{2, 2, 0, t0, t0 + 2s, t0}));
  ASSERT_TRUE(q.push(0, "chat", queued_task{3, 3, 0, t0, t0 + 3s, t0}));
  EXPECT_EQ(q.pop(0, "chat")->id, 2u);
  EXPECT_EQ(q.pop(0, "chat")->id, 3u) << "members of one group leave in arrival order";
  EXPECT_EQ(q.pop(0, "chat")->id, 1u);
}

TEST(PriorityQueues, ATaskWithAnOrderTimeIsOrderedByItInAnEdfClass) {
  priority_queues q{two_classes(config::queue_order::edf)};
  ASSERT_TRUE(q.push(0, "chat", queued_task{1, 1, 0, t0 + 5s, t0, std::nullopt}));
  // Its own deadline is later, its group's earliest is earlier.
  ASSERT_TRUE(q.push(0, "chat", queued_task{2, 2, 0, t0 + 9s, t0, t0 + 4s}));
  EXPECT_EQ(q.pop(0, "chat")->id, 2u);
  EXPECT_EQ(q.pop(0, "chat")->id, 1u);
}

TEST(PriorityQueues, SumsTheEstimatedTokensWaitingByClassAndCapability) {
  priority_queues q{two_classes()};
  auto with_tokens = [](task_id id, uint64_t tokens) {
    return queued_task{id, id, 0, t0, t0, std::nullopt, tokens};
  };
  ASSERT_TRUE(q.push(0, "chat", with_tokens(1, 100)));
  ASSERT_TRUE(q.push(0, "chat", with_tokens(2, 2000)));
  ASSERT_TRUE(q.push(0, "embed", with_tokens(3, 7)));
  ASSERT_TRUE(q.push(1, "chat", with_tokens(4, 50)));
  ASSERT_TRUE(q.push(0, "cpu", with_tokens(5, 0)));
  EXPECT_EQ(q.waiting_tokens(0, "chat"), 2100u);
  EXPECT_EQ(q.waiting_tokens(0, "embed"), 7u);
  EXPECT_EQ(q.waiting_tokens(1, "chat"), 50u);
  EXPECT_EQ(q.waiting_tokens(0, "cpu"), 0u);
  EXPECT_EQ(q.waiting_tokens(1, "embed"), 0u);
  EXPECT_EQ(q.pop(0, "chat")->id, 1u);
  EXPECT_EQ(q.waiting_tokens(0, "chat"), 2000u) << "a popped task leaves the sum";
  EXPECT_TRUE(q.remove(2));
  EXPECT_EQ(q.waiting_tokens(0, "chat"), 0u) << "so does a removed one";
  EXPECT_TRUE(q.remove(4));
  EXPECT_EQ(q.waiting_tokens(1, "chat"), 0u);
  EXPECT_EQ(q.waiting_tokens(0, "embed"), 7u);
}

TEST(PriorityQueues, SumsALocalModelsWorkApartFromTheTokens) {
  // One capability may be served by a remote endpoint (paced by tokens) and a local model
  // (weighing items by work): each sum counts its own.
  priority_queues q{two_classes()};
  auto task = [](task_id id, uint64_t tokens, uint64_t work) {
    return queued_task{id, id, 0, t0, t0, std::nullopt, tokens, work};
  };
  ASSERT_TRUE(q.push(0, "embed", task(1, 100, 300)));
  ASSERT_TRUE(q.push(0, "embed", task(2, 0, 40)));
  ASSERT_TRUE(q.push(1, "embed", task(3, 0, 5)));
  EXPECT_EQ(q.waiting_work(0, "embed"), 340u);
  EXPECT_EQ(q.waiting_tokens(0, "embed"), 100u);
  EXPECT_EQ(q.waiting_work(1, "embed"), 5u);
  EXPECT_EQ(q.pop(0, "embed")->id, 1u);
  EXPECT_EQ(q.waiting_work(0, "embed"), 40u);
  EXPECT_EQ(q.waiting_tokens(0, "embed"), 0u) << "the token sum empties, the work sum stays";
  EXPECT_TRUE(q.remove(2));
  EXPECT_EQ(q.waiting_work(0, "embed"), 0u);
  EXPECT_EQ(q.waiting_work(1, "embed"), 5u);
}
