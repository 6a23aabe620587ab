#include "scheduler/admission.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace std::chrono_literals;

namespace {

admission_input request_of(size_t items, size_t free_capacity) {
  admission_input in;
  in.items = items;
  in.priority = "normal";
  in.free_capacity = free_capacity;
  in.time_left = 30s;
  return in;
}

} // namespace

TEST(Admission, AdmitsWhatFits) {
  auto r = decide_admission(request_of(10, 10));
  EXPECT_TRUE(r.admitted());
  EXPECT_EQ(r.decision, admission_decision::admit);
}

TEST(Admission, RefusesWhenTheClassIsFullWithRetryAfter) {
  auto in = request_of(50, 10);
  in.items_per_second = 20.0;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_queue_full);
  // 40 missing items at 20 items/s = 2 s.
  EXPECT_EQ(r.retry_after, 2s);
  EXPECT_NE(r.reason.find("room for 10"), std::string::npos) << r.reason;
}

TEST(Admission, RetryAfterIsAtLeastOneSecond) {
  auto r = decide_admission(request_of(11, 10));
  EXPECT_EQ(r.decision, admission_decision::reject_queue_full);
  EXPECT_EQ(r.retry_after, 1s);
}

TEST(Admission, QueuesWhileTheDeadlineAllows) {
  auto in = request_of(1, 1000);
  in.expected_wait = 2500ms;
  in.time_left = 3s;
  EXPECT_TRUE(decide_admission(in).admitted());
  in.time_left = 2s;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable);
  EXPECT_EQ(r.retry_after, 1s); // ceil(0.5 s): the queue ahead drains by then
  EXPECT_NE(r.reason.find("2500 ms"), std::string::npos) << r.reason;
  in.expected_wait = 9200ms;
  EXPECT_EQ(decide_admission(in).retry_after, 8s); // ceil(7.2 s)
}

TEST(Admission, NoDeadlineRefusalWhileTheCapacityIsUnknown) {
  auto in = request_of(1, 1000);
  in.time_left = 1ms;
  EXPECT_TRUE(decide_admission(in).admitted());
}

TEST(Admission, RefusesWhileDraining) {
  auto in = request_of(1, 10);
  in.draining = true;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_draining);
  EXPECT_STREQ(to_string(r.decision), "draining");
}

TEST(Admission, ARequestLargerThanItsWholeClassIsRefusedForGoodNotAskedToRetry) {
  auto in = request_of(6, 5);
  in.capacity = 5;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_too_large);
  EXPECT_STREQ(to_string(r.decision), "too_large");
  EXPECT_NE(r.reason.find("holds at most 5 items"), std::string::npos) << r.reason;
  // The same count into a class that holds it, but is busy now, may be retried.
  in.capacity = 100;
  EXPECT_EQ(decide_admission(in).decision, admission_decision::reject_queue_full);
}

TEST(Admission, ARequestTooSlowEvenAloneIsRefusedForGoodNotAskedToRetry) {
  // helper-32: 3,000 embedding inputs, about 229 s at the model's pace, 30 s deadline on an
  // idle server: 429 with Retry-After 200, which the OpenAI SDK retries to the same answer.
  auto in = request_of(3000, 10000);
  in.expected_wait = 229s;
  in.alone_wait = 229s;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_too_large);
  EXPECT_EQ(r.retry_after, 0s);
  EXPECT_NE(r.reason.find("3000 items alone take about 229000 ms"), std::string::npos)
    << r.reason;
  EXPECT_NE(r.reason.find("longer deadline_ms"), std::string::npos) << r.reason;
  // One item cannot be sent in smaller requests (helper-34: a 3 s judge, a 1 s deadline).
  auto single = request_of(1, 10000);
  single.alone_wait = 3s;
  single.time_left = 1s;
  r = decide_admission(single);
  EXPECT_EQ(r.decision, admission_decision::reject_too_large);
  EXPECT_NE(r.reason.find("its item alone takes about 3000 ms"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("send it with a longer deadline_ms"), std::string::npos) << r.reason;
  EXPECT_EQ(r.reason.find("smaller requests"), std::string::npos) << r.reason;
  // Within twice its deadline alone (the capacity estimate may grow): busy now, retry.
  in.alone_wait = 50s;
  r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable);
  EXPECT_GE(r.retry_after, 1s);
}

TEST(Admission, ARequestRefusedForItsDeadlineComesBackWhenItMightFit) {
  // Refused on the cautious count (a batching source's first single-item calls: 90 s), told
  // to come back when it might fit at the soonest (full calls as long as those: 40 s), not
  // a minute later (helper-60).
  auto in = request_of(1, 100);
  in.expected_wait = 90s;
  in.soonest_wait = 40s;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable);
  EXPECT_EQ(r.retry_after, 10s);
  EXPECT_NE(r.reason.find("expected to be answered in 90000 ms"), std::string::npos) << r.reason;
  in.soonest_wait = 20s;
  EXPECT_EQ(decide_admission(in).retry_after, 1s) << "it might fit now: soon";
}

TEST(Admission, RetryAfterComesAfterTheRequestsRefusedBefore) {
  auto in = request_of(1, 100);
  in.expected_wait = 9s;
  in.time_left = 8s;
  in.refused = {{0.5, 5.0}};
  in.refused_rate = 1.0;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable);
  EXPECT_EQ(r.retry_after, 6s) << "1 s for the queue, 5 s for those refused before it";
  EXPECT_NE(r.reason.find("the requests refused before it come back first, for about 5000 ms"),
            std::string::npos)
    << r.reason;
  auto full = request_of(50, 10);
  full.items_per_second = 20.0;
  full.refused = {{1.0, 60.0}};
  full.refused_rate = 20.0;
  r = decide_admission(full);
  EXPECT_EQ(r.decision, admission_decision::reject_queue_full);
  EXPECT_EQ(r.retry_after, 5s) << "40 missing at 20 a second, then 3 s";
  in.refused.clear();
  r = decide_admission(in);
  EXPECT_EQ(r.retry_after, 1s);
  EXPECT_EQ(r.reason.find("refused before"), std::string::npos) << r.reason;
}

TEST(Admission, RefusedRequestsToldToComeBackLaterComeAfterIt) {
  // helper-63: requests refused and never sent again held the next ones back: on an idle
  // server, a round 1 s after a herd was told 30 to 58 s, behind items told to come back at
  // 30 s that would come after it anyway (and never came).
  auto in = request_of(1, 100);
  in.expected_wait = 9s;
  in.time_left = 8s;
  in.refused = {{30.0, 100.0}};
  in.refused_rate = 10.0;
  auto r = decide_admission(in);
  EXPECT_EQ(r.retry_after, 1s);
  EXPECT_EQ(r.reason.find("refused before"), std::string::npos) << r.reason;
  // Each one counted may bring more before it: 10 back by 1 s take 1 s, so it comes back at
  // 2 s (0.5 + 1, rounded up), after the 10 back by 2 s as well; the 10 at 5 s come after.
  in.expected_wait = 8500ms;
  in.refused = {{1.0, 10.0}, {2.0, 10.0}, {5.0, 10.0}};
  r = decide_admission(in);
  EXPECT_EQ(r.retry_after, 3s) << r.reason;
  EXPECT_NE(r.reason.find("for about 2000 ms"), std::string::npos) << r.reason;
  // Clients that come back sooner than told are refused again: what counts is capped.
  in.refused = {{1.0, 1000.0}};
  in.refused_rate = 1.0;
  EXPECT_EQ(decide_admission(in).retry_after,
            std::chrono::seconds{1 + static_cast<int64_t>(refusal_backlog::max_seconds)});
}

namespace {

double total(const std::vector<std::pair<double, double>>& pending) {
  double items = 0.0;
  for (const auto& [due, count] : pending) {
    items += count;
  }
  return items;
}

} // namespace

TEST(RefusalBacklog, RefusedItemsCountUntilTheyWereToldToComeBack) {
  refusal_backlog backlog;
  const time_point t0{std::chrono::hours{1}};
  EXPECT_FALSE(backlog.holds("chat"));
  EXPECT_TRUE(backlog.pending("chat", 0, t0).empty());
  backlog.add("chat", 0, 4.0, t0 + 1s, t0);
  backlog.add("chat", 0, 6.0, t0 + 3s, t0);
  EXPECT_TRUE(backlog.holds("chat"));
  using pending = std::vector<std::pair<double, double>>;
  EXPECT_EQ(backlog.pending("chat", 0, t0), (pending{{1.0, 4.0}, {3.0, 6.0}}));
  EXPECT_EQ(backlog.pending("chat", 0, t0 + 2s), (pending{{1.0, 6.0}})) << "4 of them are back";
  EXPECT_TRUE(backlog.pending("embed", 0, t0 + 2s).empty()) << "per capability";
  // helper-61: the 4 back at 1 s and refused again count once, not twice.
  backlog.add("chat", 0, 4.0, t0 + 5s, t0 + 2s);
  EXPECT_DOUBLE_EQ(total(backlog.pending("chat", 0, t0 + 2s)), 10.0);
  EXPECT_DOUBLE_EQ(total(backlog.pending("chat", 0, t0 + 3s)), 4.0);
  EXPECT_TRUE(backlog.pending("chat", 0, t0 + 5s).empty());
  EXPECT_FALSE(backlog.holds("chat")) << "all back";
}

TEST(RefusalBacklog, ALowerClassesRefusalsDoNotHoldBackAHigherOnesRetry) {
  refusal_backlog backlog;
  const time_point t0{std::chrono::hours{1}};
  backlog.add("chat", 2, 30.0, t0 + 30s, t0); // a low class's herd
  backlog.add("chat", 0, 4.0, t0 + 4s, t0);
  using pending = std::vector<std::pair<double, double>>;
  EXPECT_EQ(backlog.pending("chat", 0, t0), (pending{{4.0, 4.0}}));
  EXPECT_EQ(backlog.pending("chat", 1, t0), (pending{{4.0, 4.0}}));
  EXPECT_EQ(backlog.pending("chat", 2, t0), (pending{{4.0, 4.0}, {30.0, 30.0}}))
    << "both may come back before it";
}
