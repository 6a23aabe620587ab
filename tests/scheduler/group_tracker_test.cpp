#include "scheduler/group_tracker.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

const time_point t0{std::chrono::hours{1}};

} // namespace

TEST(GroupTracker, AGroupIsOrderedByItsFirstArrivalAndEarliestDeadline) {
  group_tracker groups{60s};
  auto first = groups.admit("g", t0, t0 + 30s, true);
  EXPECT_EQ(first.first_arrival, t0);
  EXPECT_EQ(first.earliest_deadline, t0 + 30s);
  auto later = groups.admit("g", t0 + 5s, t0 + 10s, true);
  EXPECT_EQ(later.first_arrival, t0) << "a late member keeps the group's place";
  EXPECT_EQ(later.earliest_deadline, t0 + 10s);
  auto other = groups.admit("h", t0 + 6s, t0 + 40s, true);
  EXPECT_EQ(other.first_arrival, t0 + 6s);
}

TEST(GroupTracker, StatisticsAreTheMeanAndTorchStdOfTheScoredMembers) {
  group_tracker groups{60s};
  for (int i = 0; i < 5; ++i) {
    groups.admit("g", t0, t0 + 30s, true);
  }
  double scores[] = {1.0, 0.0, 1.0, 1.0};
  for (double& s : scores) {
    groups.ended("g", t0 + 1s, &s);
  }
  auto done = groups.ended("g", t0 + 1s, nullptr);
  ASSERT_TRUE(done) << "the last pending member";
  EXPECT_EQ(*done, 1s);
  auto g = groups.summary("g");
  EXPECT_EQ(g.group, "g");
  EXPECT_EQ(g.scored, 4u);
  EXPECT_EQ(g.failed, 1u);
  EXPECT_EQ(g.pending, 0u);
  EXPECT_DOUBLE_EQ(g.mean, 0.75);
  EXPECT_NEAR(g.std, 0.5, 1e-12) << "sqrt(0.75 / 3), Bessel-corrected as torch.std";
  EXPECT_FALSE(g.zero_std);
}

TEST(GroupTracker, AWithdrawnMemberCountsNeitherScoredNorFailedAndCompletesNothing) {
  group_tracker groups{60s};
  groups.admit("g", t0, t0 + 30s, true);
  groups.admit("g", t0, t0 + 30s, true);
  double one = 1.0;
  EXPECT_FALSE(groups.ended("g", t0 + 1s, &one));
  groups.withdrawn("g", t0 + 2s);
  auto g = groups.summary("g");
  EXPECT_EQ(g.scored, 1u);
  EXPECT_EQ(g.failed, 0u);
  EXPECT_EQ(g.pending, 0u);
  // Its retry joins the group in its first member's place and completes it.
  EXPECT_EQ(groups.admit("g", t0 + 3s, t0 + 30s, true).first_arrival, t0);
  double zero = 0.0;
  auto done = groups.ended("g", t0 + 4s, &zero);
  ASSERT_TRUE(done);
  EXPECT_EQ(*done, 4s);
  g = groups.summary("g");
  EXPECT_EQ(g.scored, 2u);
  EXPECT_EQ(g.failed, 0u);
  EXPECT_DOUBLE_EQ(g.mean, 0.5);
  groups.withdrawn("unknown", t0); // ignored
  EXPECT_EQ(groups.size(), 1u);
}

TEST(GroupTracker, AGroupWhoseScoresAreAllEqualHasZeroStd) {
  group_tracker groups{60s};
  groups.admit("g", t0, t0 + 30s, true);
  groups.admit("g", t0, t0 + 30s, true);
  groups.admit("g", t0, t0 + 30s, true);
  double one = 0.3;
  EXPECT_FALSE(groups.ended("g", t0, &one));
  EXPECT_FALSE(groups.ended("g", t0, &one)) << "one member still pending";
  auto g = groups.summary("g");
  EXPECT_TRUE(g.zero_std);
  EXPECT_EQ(g.std, 0.0);
  EXPECT_EQ(g.mean, 0.3);
  EXPECT_EQ(g.pending, 1u);
  EXPECT_FALSE(groups.summary("unknown").zero_std) << "nothing scored";
}

TEST(GroupTracker, ModelCallsShareTheOrderButNotTheStatistics) {
  group_tracker groups{60s};
  groups.admit("g", t0, t0 + 30s, true);
  auto call = groups.admit("g", t0 + 1s, t0 + 20s, false);
  EXPECT_EQ(call.first_arrival, t0);
  EXPECT_EQ(groups.summary("g").pending, 1u);
}

TEST(GroupTracker, AnIdleGroupIsForgottenAfterTheMemoryAndAPendingOneNever) {
  group_tracker groups{60s};
  groups.admit("done", t0, t0 + 30s, true);
  double s = 1.0;
  groups.ended("done", t0 + 1s, &s);
  groups.admit("busy", t0, t0 + 30s, true);
  groups.prune(t0 + 30s);
  EXPECT_EQ(groups.size(), 2u) << "idle for less than the memory";
  groups.prune(t0 + 2min);
  EXPECT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups.summary("busy").pending, 1u);
  // The name starts afresh: a new first arrival, no old scores.
  auto again = groups.admit("done", t0 + 3min, t0 + 4min, true);
  EXPECT_EQ(again.first_arrival, t0 + 3min);
  EXPECT_EQ(groups.summary("done").scored, 0u);
}

TEST(GroupTracker, ANameUsedAgainPastTheMemoryIsANewGroupBeforeAnyPrune) {
  group_tracker groups{60s};
  groups.admit("g", t0, t0 + 30s, true);
  double s = 1.0;
  groups.ended("g", t0 + 1s, &s);
  EXPECT_EQ(groups.first_arrival("g", t0 + 60s), t0) << "idle for less than the memory";
  EXPECT_FALSE(groups.first_arrival("g", t0 + 62s).has_value());
  auto again = groups.admit("g", t0 + 62s, t0 + 90s, true);
  EXPECT_EQ(again.first_arrival, t0 + 62s);
  EXPECT_EQ(groups.summary("g").scored, 0u);
  EXPECT_EQ(groups.summary("g").pending, 1u);
}

TEST(GroupTracker, PastItsCapTheGroupsIdleLongestAreForgottenAndPendingOnesKept) {
  // A client naming a fresh group per item must not grow the tracker without bound.
  group_tracker groups{1h, 8};
  groups.admit("busy", t0, t0 + 1h, true);
  double s = 0.5;
  for (int i = 0; i < 100; ++i) {
    const auto name = "g" + std::to_string(i);
    const auto at = t0 + std::chrono::seconds{i + 1};
    groups.admit(name, at, at + 1h, true);
    groups.ended(name, at, &s);
    EXPECT_LE(groups.size(), 9u) << "after " << i;
  }
  EXPECT_EQ(groups.summary("busy").pending, 1u) << "a group with members pending stays";
  EXPECT_EQ(groups.summary("g99").scored, 1u) << "the newest idle group stays";
  EXPECT_EQ(groups.summary("g0").scored, 0u) << "the oldest idle group went first";
  // All pending: nothing can go, and the tracker still admits (and does not rescan each time).
  group_tracker busy{1h, 4};
  for (int i = 0; i < 20; ++i) {
    busy.admit("p" + std::to_string(i), t0, t0 + 1h, true);
  }
  EXPECT_EQ(busy.size(), 20u);
  EXPECT_EQ(busy.summary("p0").pending, 1u);
}
