#include "scheduler/result_cache.hpp"

#include <memory>

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

TEST(ResultCache, MissThenHit) {
  result_cache cache(4);
  EXPECT_FALSE(cache.lookup("k").has_value());
  cached_result value;
  value.score = 0.75;
  value.source = "cpu";
  cache.insert("k", value);
  auto hit = cache.lookup("k");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->score, 0.75);
  EXPECT_EQ(hit->source, "cpu");
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(ResultCache, EvictsLeastRecentlyUsed) {
  result_cache cache(3);
  cache.insert("a", 1.0);
  cache.insert("b", 2.0);
  cache.insert("c", 3.0);
  ASSERT_TRUE(cache.lookup("a").has_value()); // order now a, c, b (most recent first)
  cache.insert("d", 4.0);                     // evicts b
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.lookup("b").has_value());
  EXPECT_TRUE(cache.lookup("a").has_value());
  EXPECT_TRUE(cache.lookup("c").has_value());
  EXPECT_TRUE(cache.lookup("d").has_value());
  // Order now d, c, a: the next insert evicts a.
  cache.insert("e", 5.0);
  EXPECT_FALSE(cache.lookup("a").has_value());
  EXPECT_EQ(cache.evictions(), 2u);
}

TEST(ResultCache, InsertReplacesAndRefreshes) {
  result_cache cache(2);
  cache.insert("a", 1.0);
  cache.insert("b", 2.0);
  cache.insert("a", 10.0); // a is most recent now
  EXPECT_EQ(cache.size(), 2u);
  cache.insert("c", 3.0); // evicts b
  ASSERT_TRUE(cache.lookup("a").has_value());
  EXPECT_EQ(cache.lookup("a")->score, 10.0);
  EXPECT_FALSE(cache.lookup("b").has_value());
}

TEST(ResultCache, ZeroCapacityCachesNothing) {
  result_cache cache(0);
  cache.insert("a", 1.0);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.lookup("a").has_value());
}

TEST(ResultCache, EntriesExpireAfterTheTtl) {
  manual_time_source clock;
  result_cache cache(8, 10s, clock);
  cache.insert("a", 1.0);
  clock.advance(5s);
  cache.insert("b", 2.0);
  clock.advance(4s); // a is 9 s old
  EXPECT_TRUE(cache.lookup("a").has_value());
  clock.advance(1s); // a is 10 s old: expired; b is 5 s old
  EXPECT_FALSE(cache.lookup("a").has_value());
  EXPECT_TRUE(cache.lookup("b").has_value());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.expirations(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 2u);
}

TEST(ResultCache, HoldsSaysWhatALookupWouldFindWithoutCountingIt) {
  manual_time_source clock;
  result_cache cache(8, 10s, clock);
  cache.insert("a", 1.0);
  EXPECT_TRUE(cache.holds("a"));
  EXPECT_FALSE(cache.holds("b"));
  clock.advance(10s);
  EXPECT_FALSE(cache.holds("a")) << "expired";
  EXPECT_EQ(cache.hits() + cache.misses() + cache.expirations(), 0u);
}

TEST(ResultCache, LookupDoesNotExtendTheTtlButInsertDoes) {
  manual_time_source clock;
  result_cache cache(8, 10s, clock);
  cache.insert("a", 1.0);
  clock.advance(8s);
  EXPECT_TRUE(cache.lookup("a").has_value());
  clock.advance(2s);
  EXPECT_FALSE(cache.lookup("a").has_value());
  cache.insert("a", 2.0);
  clock.advance(8s);
  cache.insert("a", 3.0);
  clock.advance(8s);
  ASSERT_TRUE(cache.lookup("a").has_value());
  EXPECT_EQ(cache.lookup("a")->score, 3.0);
}

TEST(ResultCache, NoTtlNeverExpires) {
  manual_time_source clock;
  result_cache cache(8, 0s, clock);
  cache.insert("a", 1.0);
  clock.advance(std::chrono::hours{24 * 365});
  EXPECT_TRUE(cache.lookup("a").has_value());
}

TEST(ResultCache, EraseAndClear) {
  result_cache cache(4);
  cache.insert("a", 1.0);
  cache.insert("b", 2.0);
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_FALSE(cache.erase("a"));
  EXPECT_EQ(cache.size(), 1u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.lookup("b").has_value());
  cache.insert("b", 3.0); // usable after clear
  EXPECT_EQ(cache.lookup("b")->score, 3.0);
}

TEST(ResultCache, ManyKeysStayConsistent) {
  result_cache cache(16);
  for (int i = 0; i < 1000; ++i) {
    // Long keys (no small-string buffer) and short ones alike.
    auto key = std::to_string(i) + (i % 2 == 0 ? std::string(40, 'x') : std::string{});
    cache.insert(key, static_cast<double>(i));
  }
  EXPECT_EQ(cache.size(), 16u);
  for (int i = 984; i < 1000; ++i) {
    auto key = std::to_string(i) + (i % 2 == 0 ? std::string(40, 'x') : std::string{});
    auto hit = cache.lookup(key);
    ASSERT_TRUE(hit.has_value()) << key;
    EXPECT_EQ(hit->score, static_cast<double>(i));
  }
  EXPECT_EQ(cache.evictions(), 984u);
}

TEST(ResultCache, LongEntriesAreBoundedInBytesNotOnlyInCount) {
  // Judge items of 8k-token rollouts: 65,536 of them held gigabytes under a count alone.
  manual_time_source clock;
  auto judged = [](size_t text_bytes) {
    cached_result value;
    value.score = 1.0;
    auto output = std::make_shared<model_output>();
    output->texts.push_back(
      generated_text{std::string(text_bytes, 'v'), 0.0, 0, "stop", {}, {}, false});
    value.output = output;
    return value;
  };
  std::string long_key(30000, 'k');
  auto one = cached_bytes(long_key + "0", judged(1000));
  EXPECT_GT(one, 31000u);
  EXPECT_LT(one, 32000u);
  result_cache cache(1000, 0ns, clock, 3 * one + one / 2);
  for (char c : std::string{"0123"}) {
    cache.insert(long_key + c, judged(1000));
  }
  EXPECT_EQ(cache.size(), 3u) << "the fourth evicted the least recently used";
  EXPECT_EQ(cache.bytes(), 3 * one);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_FALSE(cache.lookup(long_key + "0").has_value());
  EXPECT_TRUE(cache.lookup(long_key + "3").has_value());
  // An entry past the whole bound is not kept, and costs the others nothing.
  cache.insert("huge", judged(4 * one));
  EXPECT_FALSE(cache.lookup("huge").has_value());
  EXPECT_EQ(cache.size(), 3u);
  // Replaced by a larger answer, an entry is counted anew.
  cache.insert(long_key + "3", judged(2000));
  EXPECT_EQ(cache.bytes(), 2 * one + cached_bytes(long_key + "3", judged(2000)));
  cache.erase(long_key + "3");
  EXPECT_EQ(cache.bytes(), 2 * one);
  cache.clear();
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(CacheKey, SplitsOfTheSameBytesDiffer) {
  EXPECT_NE(make_cache_key({"ab", "c"}), make_cache_key({"a", "bc"}));
  EXPECT_NE(make_cache_key({"a", ""}), make_cache_key({"", "a"}));
  EXPECT_NE(make_cache_key({"a"}), make_cache_key({"a", ""}));
  // A part that looks like an encoded prefix cannot forge another split.
  EXPECT_NE(make_cache_key({"1:a", "b"}), make_cache_key({"1", "a1:b"}));
  EXPECT_EQ(make_cache_key({"ab", "c"}), "2:ab1:c");
  EXPECT_EQ(make_cache_key({"ab", "c"}), make_cache_key({"ab", "c"}));
}

TEST(CacheKey, KeepsEmbeddedNulsAndLongParts) {
  std::string nul("a\0b", 3);
  std::string long_part(1000, 'z');
  EXPECT_EQ(make_cache_key({nul}), std::string("3:a\0b", 5));
  EXPECT_EQ(make_cache_key({long_part}), "1000:" + long_part);
}

TEST(SingleFlight, FirstLeadsOthersFollow) {
  single_flight<int> flights;
  EXPECT_EQ(flights.join("k", 1), flight_role::leader);
  EXPECT_EQ(flights.join("k", 2), flight_role::follower);
  EXPECT_EQ(flights.join("k", 3), flight_role::follower);
  EXPECT_EQ(flights.join("other", 4), flight_role::leader);
  EXPECT_TRUE(flights.in_flight("k"));
  EXPECT_EQ(flights.waiters("k"), 3u);
  EXPECT_EQ(flights.size(), 2u);
  EXPECT_EQ(flights.leaders(), 2u);
  EXPECT_EQ(flights.followers(), 2u);
}

TEST(SingleFlight, CompleteReturnsEveryWaiterLeaderFirstAndFreesTheKey) {
  single_flight<int> flights;
  flights.join("k", 1);
  flights.join("k", 2);
  flights.join("k", 3);
  EXPECT_EQ(flights.complete("k"), (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(flights.in_flight("k"));
  EXPECT_EQ(flights.waiters("k"), 0u);
  EXPECT_TRUE(flights.complete("k").empty());
  // The next caller leads a new call.
  EXPECT_EQ(flights.join("k", 4), flight_role::leader);
}

TEST(SingleFlight, FailReturnsEveryWaiterAndLeavesOtherKeys) {
  single_flight<int> flights;
  flights.join("k", 1);
  flights.join("k", 2);
  flights.join("j", 9);
  EXPECT_EQ(flights.fail("k"), (std::vector<int>{1, 2}));
  EXPECT_FALSE(flights.in_flight("k"));
  EXPECT_TRUE(flights.in_flight("j"));
  EXPECT_TRUE(flights.fail("missing").empty());
  EXPECT_EQ(flights.join("k", 3), flight_role::leader);
}

TEST(SingleFlight, HoldsMoveOnlyWaiters) {
  single_flight<std::unique_ptr<int>> flights;
  EXPECT_EQ(flights.join("k", std::make_unique<int>(1)), flight_role::leader);
  EXPECT_EQ(flights.join("k", std::make_unique<int>(2)), flight_role::follower);
  auto waiters = flights.complete("k");
  ASSERT_EQ(waiters.size(), 2u);
  EXPECT_EQ(*waiters[0], 1);
  EXPECT_EQ(*waiters[1], 2);
}
