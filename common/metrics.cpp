#include "common/metrics.hpp"

#include <prometheus/text_serializer.h>

namespace arbiter {

metrics_registry::metrics_registry() : registry_(std::make_shared<prometheus::Registry>()) {
}

std::string metrics_registry::render() const {
  return prometheus::TextSerializer{}.Serialize(registry_->Collect());
}

const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 30.0, 60.0};
  return buckets;
}

const prometheus::Histogram::BucketBoundaries& size_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  return buckets;
}

} // namespace arbiter
