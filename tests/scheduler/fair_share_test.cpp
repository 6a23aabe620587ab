#include "scheduler/fair_share.hpp"

#include <gtest/gtest.h>

using namespace arbiter::scheduler;

namespace {

/// Serves `rounds` single items with every class waiting; returns how many each class got.
std::vector<int> serve(fair_share& fair, const std::vector<bool>& waiting, int rounds) {
  std::vector<int> got(waiting.size(), 0);
  for (int i = 0; i < rounds; ++i) {
    auto cls = fair.next("chat", waiting);
    EXPECT_TRUE(cls.has_value());
    fair.charge("chat", *cls, 1);
    ++got[*cls];
  }
  return got;
}

} // namespace

TEST(FairShare, ServesClassesInProportionToTheirWeights) {
  fair_share fair{{16.0, 4.0, 1.0}};
  auto got = serve(fair, {true, true, true}, 210);
  EXPECT_EQ(got, (std::vector<int>{160, 40, 10}));
}

TEST(FairShare, HighGoesFirstButLowIsNeverStarved) {
  fair_share fair{{16.0, 4.0, 1.0}};
  // With a high backlog that never ends, low still gets one item in every 17.
  auto got = serve(fair, {true, false, true}, 170);
  EXPECT_EQ(got[0], 160);
  EXPECT_EQ(got[2], 10);
  EXPECT_EQ(fair.next("chat", {true, false, true}), 0u) << "ties go to the higher class";
}

TEST(FairShare, AnIdleClassBanksNoCredit) {
  fair_share fair{{1.0, 1.0}};
  // Class 0 alone for a long time...
  serve(fair, {true, false}, 100);
  // ...then class 1 arrives: it does not get 100 items in a row, they alternate.
  auto got = serve(fair, {true, true}, 10);
  EXPECT_EQ(got, (std::vector<int>{5, 5}));
}

TEST(FairShare, CapabilitiesAreKeptApart) {
  fair_share fair{{1.0, 1.0}};
  fair.charge("embed", 0, 50);
  EXPECT_EQ(fair.next("chat", {true, true}), 0u);
  EXPECT_EQ(fair.next("embed", {true, true}), 1u);
  EXPECT_FALSE(fair.next("chat", {false, false}).has_value());
}

TEST(FairShare, ShareIsTheWeightOverThoseWaiting) {
  fair_share fair{{16.0, 4.0, 1.0}};
  EXPECT_DOUBLE_EQ(fair.share(2, {true, true, true}), 1.0 / 21.0);
  EXPECT_DOUBLE_EQ(fair.share(2, {false, false, false}), 1.0);
  EXPECT_DOUBLE_EQ(fair.share(0, {false, false, true}), 16.0 / 17.0);
}
