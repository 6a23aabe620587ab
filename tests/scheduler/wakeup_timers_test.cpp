#include "scheduler/wakeup_timers.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

const time_point t0{std::chrono::hours{1}};

} // namespace

TEST(WakeupTimers, AWakeUpIsAskedForOnlyWhenNoneComingIsAtOrBeforeIt) {
  wakeup_timers timers;
  EXPECT_TRUE(timers.arm(t0 + 30s)) << "none coming";
  EXPECT_FALSE(timers.arm(t0 + 30s));
  EXPECT_FALSE(timers.arm(t0 + 40s)) << "the one at 30 s wakes first";
  EXPECT_TRUE(timers.arm(t0 + 1s)) << "earlier than every one coming";
  EXPECT_EQ(timers.coming(), 2u);
  timers.fired(t0 + 1s);
  EXPECT_FALSE(timers.arm(t0 + 30s)) << "the one asked for 30 s is still coming";
  EXPECT_EQ(timers.coming(), 1u);
  timers.fired(t0 + 99s); // one never asked for: ignored
  EXPECT_EQ(timers.coming(), 1u);
  timers.fired(t0 + 30s);
  EXPECT_EQ(timers.coming(), 0u);
  EXPECT_TRUE(timers.arm(t0 + 31s)) << "nothing coming any more";
}

namespace {

/// The scheduler actor's pattern, 100 s of it, one pump a millisecond: in a random half of them a
/// model call is under way, and then its straggler deadline, a second away, is the earliest
/// need; otherwise a request's deadline, 30 s away, is. Returns how many ticks
/// were on their way at the end; `arm` and `fired` are the policy under test.
template <typename Arm, typename Fired>
size_t ticks_in_flight_after_100_s(Arm arm, Fired fired) {
  std::multiset<time_point> clock; // the delayed messages sent and not yet delivered
  std::mt19937 rng{7};
  for (int ms = 0; ms < 100000; ++ms) {
    auto now = t0 + std::chrono::milliseconds{ms};
    while (!clock.empty() && *clock.begin() <= now) {
      auto at = *clock.begin();
      clock.erase(clock.begin());
      fired(at);
      // The tick's pump asks again below.
    }
    bool call_under_way = rng() % 2 == 0;
    auto next = call_under_way ? now + 1s : now + 30s;
    if (arm(next)) {
      clock.insert(next);
    }
  }
  return clock.size();
}

} // namespace

TEST(WakeupTimers, UnderSteadyLoadTheTicksOnTheirWayStayFew) {
  wakeup_timers timers;
  auto kept = ticks_in_flight_after_100_s([&](time_point at) { return timers.arm(at); },
                                          [&](time_point at) { timers.fired(at); });
  EXPECT_LE(kept, 2u);
  EXPECT_EQ(timers.coming(), kept);
  // The policy it replaced: one armed time, forgotten when any tick came.
  bool is_armed = false;
  time_point armed = t0;
  auto grew = ticks_in_flight_after_100_s(
    [&](time_point at) {
      if (is_armed && armed <= at) {
        return false;
      }
      is_armed = true;
      armed = at;
      return true;
    },
    [&](time_point) { is_armed = false; });
  EXPECT_GT(grew, 100u) << "the old policy's ticks pile up (236 here: the soak's slowdown)";
}
