#include "scheduler/backoff.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

/// Returns the given draws in order, then repeats the last.
class scripted_random final : public random_source {
public:
  explicit scripted_random(std::vector<double> draws) : draws_(std::move(draws)) {
  }

  double uniform() override {
    auto value = draws_[std::min(next_, draws_.size() - 1)];
    ++next_;
    return value;
  }

private:
  std::vector<double> draws_;
  size_t next_ = 0;
};

} // namespace

TEST(JitteredBackoff, CeilingDoublesUpToTheCap) {
  jittered_backoff backoff{100ms, 1s};
  EXPECT_EQ(backoff.ceiling(0), 100ms);
  EXPECT_EQ(backoff.ceiling(1), 200ms);
  EXPECT_EQ(backoff.ceiling(2), 400ms);
  EXPECT_EQ(backoff.ceiling(3), 800ms);
  EXPECT_EQ(backoff.ceiling(4), 1s);
  EXPECT_EQ(backoff.ceiling(63), 1s);
  EXPECT_EQ(backoff.ceiling(4'000'000'000u), 1s); // no overflow
}

TEST(JitteredBackoff, CapBelowBaseCapsEveryDelay) {
  jittered_backoff backoff{2s, 1s};
  EXPECT_EQ(backoff.ceiling(0), 1s);
  EXPECT_EQ(backoff.ceiling(5), 1s);
}

TEST(JitteredBackoff, FullJitterScalesTheCeilingByTheDraw) {
  jittered_backoff backoff{100ms, 10s};
  scripted_random random{{0.0, 0.5, 0.75}};
  EXPECT_EQ(backoff.next(2, random), 0ms);   // 0 × 400 ms
  EXPECT_EQ(backoff.next(2, random), 200ms); // 0.5 × 400 ms
  EXPECT_EQ(backoff.next(3, random), 600ms); // 0.75 × 800 ms
}

TEST(JitteredBackoff, DrawsOutsideTheUnitIntervalAreClamped) {
  jittered_backoff backoff{1s, 1s};
  scripted_random random{{-0.5, 1.5}};
  EXPECT_EQ(backoff.next(0, random), 0ns);
  auto high = backoff.next(0, random);
  EXPECT_LT(high, 1s);
  EXPECT_GT(high, 999ms);
}

TEST(JitteredBackoff, ZeroBaseNeverWaits) {
  jittered_backoff backoff{0ns, 1s};
  scripted_random random{{0.9}};
  EXPECT_EQ(backoff.ceiling(4'000'000'000u), 0ns);
  EXPECT_EQ(backoff.next(10, random), 0ns);
}

TEST(SeededRandomSource, SameSeedSameSequenceAllInUnitInterval) {
  seeded_random_source a{42};
  seeded_random_source b{42};
  seeded_random_source c{43};
  double sum = 0.0;
  int differing = 0;
  constexpr int draws = 10000;
  for (int i = 0; i < draws; ++i) {
    double x = a.uniform();
    EXPECT_EQ(x, b.uniform());
    if (x != c.uniform()) {
      ++differing;
    }
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    sum += x;
  }
  EXPECT_GT(differing, draws - 10);
  EXPECT_NEAR(sum / draws, 0.5, 0.02);
}
