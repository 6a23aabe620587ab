#include "net/shards.hpp"

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace arbiter::net {
namespace {

shared_item item(const std::string& capability, const std::string& group,
                 const std::string& text = "") {
  score_item it;
  it.capability = capability;
  it.group = group;
  it.solution_str = text;
  return std::make_shared<const score_item>(std::move(it));
}

std::vector<uint32_t> all_of(size_t n) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back(i);
  }
  return out;
}

TEST(PlanShards, OneShardKeepsTheRequestWhole) {
  std::vector<shared_item> items{item("cpu", "a"), item("cpu", "b"), item("cpu", "")};
  auto one = plan_shards(items, 1, 5);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].shard, 0u);
  EXPECT_EQ(one[0].items, all_of(3));
}

TEST(PlanShards, InAMixedRequestAGroupsCpuMembersStillGoToTheirGroupsShard) {
  // Where group "g" lives when its CPU members come alone.
  const size_t home = plan_shards({item("cpu", "g")}, 4, 0).front().shard;
  // A request that also holds model rewards: the model items (and ungrouped CPU items) go
  // to shard 0, which holds the model sources; g's member still goes home, so its group's
  // statistics stay in one shard.
  std::vector<shared_item> items{item("judge", "a"), item("cpu", "g"), item("cpu", ""),
                                 item("embed", "")};
  auto plan = plan_shards(items, 4, 3);
  std::vector<size_t> shard_of(items.size(), 99);
  for (const auto& part : plan) {
    for (auto i : part.items) {
      shard_of[i] = part.shard;
    }
  }
  EXPECT_EQ(shard_of[0], 0u);
  EXPECT_EQ(shard_of[1], home);
  EXPECT_EQ(shard_of[2], 0u) << "not the spare: a mixed request is not spread for balance";
  EXPECT_EQ(shard_of[3], 0u);
  EXPECT_EQ(plan.size(), home == 0 ? 1u : 2u);
  // A model reward's group is not moved: its members need shard 0's sources.
  auto judges = plan_shards({item("judge", "g"), item("judge", "h")}, 4, 1);
  ASSERT_EQ(judges.size(), 1u);
  EXPECT_EQ(judges[0].shard, 0u);
  // A group with a model member in the request keeps its CPU members with it on shard 0.
  auto both = plan_shards({item("cpu", "g"), item("judge", "g")}, 4, 1);
  ASSERT_EQ(both.size(), 1u);
  EXPECT_EQ(both[0].shard, 0u);
  EXPECT_EQ(both[0].items, all_of(2));
}

TEST(PlanShards, AGroupAlwaysGoesToOneShardAndUngroupedItemsToTheSpare) {
  std::vector<shared_item> items;
  for (int k = 0; k < 64; ++k) {
    items.push_back(item("cpu", "group-" + std::to_string(k % 16)));
  }
  items.push_back(item("cpu", ""));
  items.push_back(item("cpu", ""));
  auto plan = plan_shards(items, 4, 6);
  std::vector<std::optional<size_t>> shard_of_group(16);
  std::vector<bool> seen(items.size(), false);
  size_t spare_items = 0;
  for (const auto& part : plan) {
    ASSERT_LT(part.shard, 4u);
    ASSERT_FALSE(part.items.empty());
    for (size_t k = 0; k < part.items.size(); ++k) {
      auto i = part.items[k];
      if (k > 0) {
        EXPECT_LT(part.items[k - 1], i) << "a part keeps the request's order";
      }
      ASSERT_FALSE(seen[i]);
      seen[i] = true;
      if (i >= 64) {
        EXPECT_EQ(part.shard, 6u % 4u);
        ++spare_items;
        continue;
      }
      auto& where = shard_of_group[i % 16];
      if (where) {
        EXPECT_EQ(*where, part.shard) << "group " << i % 16 << " split";
      }
      where = part.shard;
    }
  }
  EXPECT_EQ(spare_items, 2u);
  for (bool s : seen) {
    EXPECT_TRUE(s) << "every item is in a part";
  }
  EXPECT_GE(plan.size(), 2u) << "16 groups over 4 shards use more than one";

  // The same group lands on the same shard in another request.
  auto again = plan_shards({item("cpu", "group-3")}, 4, 0);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].shard, *shard_of_group[3]);
}

struct captured {
  std::optional<actors::score_reply> reply;
  int calls = 0;
};

/// Three items in two parts: items 0 and 2 (group "a") in one, item 1 (group "b") in the other.
std::vector<shard_submission> split_three(captured& out) {
  actors::score_request req;
  req.priority = 2;
  req.items = {item("cpu", "a", "x0"), item("cpu", "b", "x1"), item("cpu", "a", "x2")};
  std::vector<shard_part> plan{{1, {0, 2}}, {0, {1}}};
  return split_request(std::move(req), plan, [&out](actors::score_reply&& r) {
    out.reply = std::move(r);
    ++out.calls;
  });
}

actors::score_reply answer(const actors::score_request& part, std::vector<double> scores,
                           std::vector<std::string> groups) {
  actors::score_reply r;
  for (double s : scores) {
    item_result res;
    res.score = s;
    res.status = item_status::ok;
    r.results.push_back(res);
  }
  for (const auto& g : groups) {
    scheduler::group_summary summary;
    summary.group = g;
    summary.scored = 7;
    r.groups.push_back(summary);
  }
  r.items = part.items;
  return r;
}

TEST(SplitRequest, TheJoinedReplyHasTheRequestsOrderAndComesOnceAfterTheLastPart) {
  captured out;
  auto parts = split_three(out);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].shard, 1u);
  EXPECT_EQ(parts[1].shard, 0u);
  EXPECT_EQ(parts[0].submission.request.priority, 2u);
  ASSERT_EQ(parts[0].submission.request.items.size(), 2u);
  EXPECT_EQ(parts[0].submission.request.items[1]->solution_str, "x2");
  ASSERT_EQ(parts[1].submission.request.items.size(), 1u);
  EXPECT_EQ(parts[1].submission.request.items[0]->solution_str, "x1");

  // The second part answers first.
  parts[1].submission.reply_to(answer(parts[1].submission.request, {0.5}, {"b"}));
  EXPECT_EQ(out.calls, 0);
  parts[0].submission.reply_to(answer(parts[0].submission.request, {1.0, 2.0}, {"a"}));
  ASSERT_EQ(out.calls, 1);
  const auto& r = *out.reply;
  EXPECT_TRUE(r.admitted);
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].score, 1.0);
  EXPECT_EQ(r.results[1].score, 0.5);
  EXPECT_EQ(r.results[2].score, 2.0);
  ASSERT_EQ(r.items.size(), 3u);
  EXPECT_EQ(r.items[1]->solution_str, "x1");
  // Groups in order of first appearance in the request: "a" (item 0), then "b".
  ASSERT_EQ(r.groups.size(), 2u);
  EXPECT_EQ(r.groups[0].group, "a");
  EXPECT_EQ(r.groups[1].group, "b");
  EXPECT_EQ(r.groups[0].scored, 7u);
}

TEST(SplitRequest, APartRefusedRefusesTheWholeRequestWithItsReason) {
  captured out;
  auto parts = split_three(out);
  actors::score_reply refused;
  refused.admitted = false;
  refused.rejection = "queue_full";
  refused.reason = "priority class 'normal' is full";
  refused.retry_after_s = 3;
  parts[0].submission.reply_to(std::move(refused));
  EXPECT_EQ(out.calls, 0);
  parts[1].submission.reply_to(answer(parts[1].submission.request, {0.5}, {"b"}));
  ASSERT_EQ(out.calls, 1);
  EXPECT_FALSE(out.reply->admitted);
  EXPECT_EQ(out.reply->rejection, "queue_full");
  EXPECT_EQ(out.reply->reason, "priority class 'normal' is full");
  EXPECT_EQ(out.reply->retry_after_s, 3);
}

TEST(SplitRequest, TheFirstRefusalStopsTheOtherPartsOnce) {
  captured out;
  actors::score_request req;
  req.items = {item("cpu", "a", "x0"), item("judge", "", "x1"), item("cpu", "b", "x2")};
  std::vector<shard_part> plan{{1, {0}}, {0, {1}}, {2, {2}}};
  int stopped = 0;
  auto parts = split_request(
    std::move(req), plan,
    [&out](actors::score_reply&& reply) {
      out.reply = std::move(reply);
      ++out.calls;
    },
    [&stopped] { ++stopped; });
  actors::score_reply refused;
  refused.admitted = false;
  refused.rejection = "queue_full";
  parts[0].submission.reply_to(actors::score_reply{refused});
  EXPECT_EQ(stopped, 1) << "the other two parts are still out";
  parts[2].submission.reply_to(std::move(refused));
  EXPECT_EQ(stopped, 1) << "once";
  parts[1].submission.reply_to(answer(parts[1].submission.request, {0.5}, {}));
  ASSERT_EQ(out.calls, 1);
  EXPECT_FALSE(out.reply->admitted);

  // A refusal that comes last has nothing left to stop.
  captured last;
  int stopped_late = 0;
  actors::score_request two;
  two.items = {item("cpu", "a", "y0"), item("cpu", "b", "y1")};
  auto halves = split_request(
    std::move(two), {{1, {0}}, {0, {1}}},
    [&last](actors::score_reply&& reply) {
      last.reply = std::move(reply);
      ++last.calls;
    },
    [&stopped_late] { ++stopped_late; });
  halves[0].submission.reply_to(answer(halves[0].submission.request, {0.5}, {"a"}));
  actors::score_reply no;
  no.admitted = false;
  halves[1].submission.reply_to(std::move(no));
  EXPECT_EQ(stopped_late, 0);
  EXPECT_EQ(last.calls, 1);
}

TEST(SplitRequest, PartsAnsweredAtOnceOnTwoThreadsGiveOneWholeReply) {
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> calls{0};
    std::vector<double> scores;
    actors::score_request req;
    req.items = {item("cpu", "a"), item("cpu", "b"), item("cpu", "a")};
    std::vector<shard_part> plan{{1, {0, 2}}, {0, {1}}};
    auto parts = split_request(std::move(req), plan, [&](actors::score_reply&& r) {
      for (const auto& res : r.results) {
        scores.push_back(res.score);
      }
      calls.fetch_add(1);
    });
    auto first = answer(parts[0].submission.request, {1.0, 2.0}, {"a"});
    auto second = answer(parts[1].submission.request, {0.5}, {"b"});
    std::thread t1{[&] { parts[0].submission.reply_to(std::move(first)); }};
    std::thread t2{[&] { parts[1].submission.reply_to(std::move(second)); }};
    t1.join();
    t2.join();
    ASSERT_EQ(calls.load(), 1);
    ASSERT_EQ(scores, (std::vector<double>{1.0, 0.5, 2.0}));
  }
}

TEST(MergeSnapshots, DepthsAndPendingAreSummedAndSourcesSayTheirShard) {
  actors::scheduler_info a;
  a.queues = {{"high", 1, 10}, {"normal", 2, 10}};
  a.sources.resize(2);
  a.sources[0].name = "cpu";
  a.sources[1].name = "provider";
  a.pending_requests = 3;
  actors::scheduler_info b;
  b.queues = {{"high", 4, 10}, {"normal", 0, 10}};
  b.sources.resize(1);
  b.sources[0].name = "cpu";
  b.pending_requests = 2;
  b.draining = true;
  auto merged = merge_snapshots({a, b});
  ASSERT_EQ(merged.merged.queues.size(), 2u);
  EXPECT_EQ(merged.merged.queues[0].depth, 5u);
  EXPECT_EQ(merged.merged.queues[1].depth, 2u);
  EXPECT_EQ(merged.merged.queues[0].capacity, 20u);
  EXPECT_EQ(merged.merged.pending_requests, 5u);
  EXPECT_TRUE(merged.merged.draining);
  ASSERT_EQ(merged.merged.sources.size(), 3u);
  EXPECT_EQ(merged.source_shard, (std::vector<size_t>{0, 0, 1}));
  EXPECT_EQ(merged.merged.sources[2].name, "cpu");
}

TEST(MergeSteps, TheSameStepFromSeveralShardsIsOneAccount) {
  scheduler::step_account s1;
  s1.step = "s1";
  s1.items_ok = 3;
  s1.failures["deadline_exceeded"] = 1;
  s1.items_failed = 1;
  s1.queue_ms = 1.5;
  s1.sources["cpu"].calls = 2;
  scheduler::step_account s2;
  s2.step = "s2";
  s2.items_ok = 1;
  scheduler::step_account s1b;
  s1b.step = "s1";
  s1b.items_ok = 4;
  s1b.items_fallback = 1;
  s1b.failures["deadline_exceeded"] = 2;
  s1b.queue_ms = 0.5;
  s1b.sources["cpu"].calls = 5;
  s1b.sources["cpu"].run_ms = 2.0;
  auto merged = merge_steps({{s1, s2}, {s1b}});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].step, "s1");
  EXPECT_EQ(merged[1].step, "s2");
  EXPECT_EQ(merged[0].items_ok, 7u);
  EXPECT_EQ(merged[0].items_fallback, 1u);
  EXPECT_EQ(merged[0].items(), 9u);
  EXPECT_EQ(merged[0].failures.at("deadline_exceeded"), 3u);
  EXPECT_DOUBLE_EQ(merged[0].queue_ms, 2.0);
  EXPECT_EQ(merged[0].sources.at("cpu").calls, 7u);
  EXPECT_DOUBLE_EQ(merged[0].sources.at("cpu").run_ms, 2.0);
  EXPECT_EQ(merged[1].items_ok, 1u);
}

/// A step that began at `begun` with one item scored.
scheduler::step_account step(std::string name, uint64_t begun) {
  scheduler::step_account a;
  a.step = std::move(name);
  a.begun = begun;
  a.used = begun;
  a.items_ok = 1;
  return a;
}

TEST(MergeSteps, ShardsStepsComeOldestFirstAndOnlyTheMostRecentAreKept) {
  // Shard 0 saw steps 1, 3, 5 begin; shard 1 saw 2, 4 and step 3 later than shard 0 did.
  auto merged = merge_steps({{step("s1", 1), step("s3", 3), step("s5", 5)},
                             {step("s2", 2), step("s4", 4), step("s3", 6)}},
                            4);
  std::vector<std::string> names;
  for (const auto& a : merged) {
    names.push_back(a.step);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"s2", "s3", "s4", "s5"}));
  EXPECT_EQ(merged[1].begun, 3u) << "a step begins where it was first seen";
  EXPECT_EQ(merged[1].items_ok, 2u);
}

TEST(MergeSteps, AStepPastTheMostRecentIsNotFoundThoughAShardStillHoldsAPartOfIt) {
  // Shard 1 has dropped "old" for newer steps; shard 0 still holds its half.
  std::vector<actors::step_accounts> shards = {{step("old", 1)},
                                               {step("n2", 2), step("n3", 3), step("n4", 4)}};
  EXPECT_FALSE(find_step(shards, "old", 3)) << "it used to be answered, short by half";
  auto n2 = find_step(shards, "n2", 3);
  ASSERT_TRUE(n2);
  EXPECT_EQ(n2->items_ok, 1u);
  EXPECT_FALSE(find_step(shards, "nope", 3));
  EXPECT_TRUE(find_step(shards, "old", 4)) << "among the 4 most recent it is whole";
}

TEST(MergeSteps, AStepUsedLastIsKeptThoughItBeganFirst) {
  auto old = step("eval", 1);
  old.used = 9; // its items still come
  auto merged = merge_steps({{old, step("n3", 3)}, {step("n2", 2), step("n4", 4)}}, 3);
  std::vector<std::string> names;
  for (const auto& a : merged) {
    names.push_back(a.step);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"eval", "n3", "n4"}));
}

} // namespace
} // namespace arbiter::net
