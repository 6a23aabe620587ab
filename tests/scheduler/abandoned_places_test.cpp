#include "scheduler/abandoned_places.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

const time_point t0{std::chrono::hours{1}};

} // namespace

TEST(AbandonedPlaces, APlaceIsTakenOnceWithinTheMemory) {
  abandoned_places places{60s, 100};
  places.remember("k", t0 - 5s, t0);
  EXPECT_FALSE(places.take("other", t0 + 1s));
  auto place = places.take("k", t0 + 59s);
  ASSERT_TRUE(place);
  EXPECT_EQ(*place, t0 - 5s);
  EXPECT_FALSE(places.take("k", t0 + 59s)) << "taken once";
  EXPECT_EQ(places.size(), 0u);
}

TEST(AbandonedPlaces, APlaceOlderThanTheMemoryIsForgotten) {
  abandoned_places places{60s, 100};
  places.remember("k", t0, t0);
  places.remember("j", t0, t0 + 30s);
  EXPECT_FALSE(places.take("k", t0 + 61s));
  EXPECT_EQ(places.size(), 1u) << "j is 31 s old";
  places.remember("x", t0 + 91s, t0 + 91s);
  EXPECT_EQ(places.size(), 1u) << "j went when x came";
  EXPECT_TRUE(places.take("x", t0 + 92s));
}

TEST(AbandonedPlaces, TheEarlierPlaceOfACallAbandonedTwiceIsKept) {
  abandoned_places places{60s, 100};
  places.remember("k", t0 - 10s, t0);
  places.remember("k", t0 - 2s, t0 + 50s);
  auto place = places.take("k", t0 + 100s);
  ASSERT_TRUE(place) << "remembered again at 50 s, so 50 s old";
  EXPECT_EQ(*place, t0 - 10s);
}

TEST(AbandonedPlaces, PastItsCapacityTheOldestGoFirst) {
  abandoned_places places{60s, 3};
  for (int i = 0; i < 5; ++i) {
    places.remember("k" + std::to_string(i), t0, t0 + std::chrono::seconds{i});
  }
  EXPECT_EQ(places.size(), 3u);
  EXPECT_FALSE(places.take("k0", t0 + 5s));
  EXPECT_FALSE(places.take("k1", t0 + 5s));
  EXPECT_TRUE(places.take("k4", t0 + 5s));
  // The same key over and over holds one place and does not grow the bookkeeping unbounded.
  for (int i = 0; i < 1000; ++i) {
    places.remember("same", t0, t0 + 10s);
  }
  EXPECT_LE(places.size(), 3u);
  EXPECT_TRUE(places.take("same", t0 + 11s));
}
