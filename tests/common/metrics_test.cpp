#include "common/metrics.hpp"

#include <gtest/gtest.h>

using namespace arbiter;

TEST(MetricsRegistry, RendersPrometheusText) {
  metrics_registry reg;
  auto& family = reg.add(
    prometheus::BuildCounter().Name("arbiter_test_events_total").Help("Events for the test"));
  family.Add({{"kind", "a"}}).Increment(3);
  auto text = reg.render();
  EXPECT_NE(text.find("# TYPE arbiter_test_events_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(arbiter_test_events_total{kind="a"} 3)"), std::string::npos) << text;
  EXPECT_EQ(reg.family_names(), std::vector<std::string>{"arbiter_test_events_total"});
}

TEST(MetricsRegistry, BucketsAreIncreasing) {
  for (const auto* buckets : {&latency_buckets(), &size_buckets()}) {
    for (size_t i = 1; i < buckets->size(); ++i) {
      EXPECT_LT((*buckets)[i - 1], (*buckets)[i]);
    }
  }
}
