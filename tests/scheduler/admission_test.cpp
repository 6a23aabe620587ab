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
  in.parallel_sources = 2;
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
  service_estimator est;
  est.record(100.0); // 100 ms per item
  auto in = request_of(50, 10);
  in.estimate = &est;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_queue_full);
  // 40 missing items × 100 ms ÷ 2 sources = 2 s.
  EXPECT_EQ(r.retry_after, 2s);
  EXPECT_NE(r.reason.find("room for 10"), std::string::npos) << r.reason;
}

TEST(Admission, RetryAfterIsAtLeastOneSecond) {
  auto r = decide_admission(request_of(11, 10));
  EXPECT_EQ(r.decision, admission_decision::reject_queue_full);
  EXPECT_EQ(r.retry_after, 1s);
}

TEST(Admission, QueuesWhileTheDeadlineAllows) {
  service_estimator est;
  est.record(10.0);
  auto in = request_of(1, 1000);
  in.estimate = &est;
  in.items_ahead = 500; // 500 × 10 ms ÷ 2 = 2.5 s of wait
  in.time_left = 3s;
  EXPECT_TRUE(decide_admission(in).admitted());
  in.time_left = 2s;
  auto r = decide_admission(in);
  EXPECT_EQ(r.decision, admission_decision::reject_deadline_unmeetable);
  EXPECT_EQ(r.retry_after, 1s); // ceil(0.5 s)
}

TEST(Admission, NoDeadlineRefusalBeforeAnyServiceTimeIsKnown) {
  service_estimator est;
  auto in = request_of(1, 1000);
  in.estimate = &est;
  in.items_ahead = 999;
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

TEST(ServiceEstimator, AveragesExponentially) {
  service_estimator est{0.5};
  EXPECT_FALSE(est.has_samples());
  est.record(10.0);
  EXPECT_DOUBLE_EQ(est.item_ms(), 10.0);
  est.record(20.0);
  EXPECT_DOUBLE_EQ(est.item_ms(), 15.0);
  est.record(-1.0); // ignored
  EXPECT_DOUBLE_EQ(est.item_ms(), 15.0);
}
