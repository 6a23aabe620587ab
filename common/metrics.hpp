#pragma once

#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace arbiter {

/// The process's metric registry. Each subsystem declares its metrics once, in one struct
/// (`scheduler_metrics`, `http_metrics`), registered here; `GET /metrics` renders them.
/// Counters, gauges and histograms are thread-safe, so actors and I/O threads update them
/// directly.
class metrics_registry {
public:
  metrics_registry();

  prometheus::Registry& registry() noexcept {
    return *registry_;
  }

  /// The Prometheus text exposition format (version 0.0.4) of every metric.
  std::string render() const;

  /// Registers a metric family and remembers its name (through `counter`, `gauge` and
  /// `histogram` below).
  template <class Builder>
  auto& add(Builder&& builder) {
    auto& family = builder.Register(*registry_);
    names_.push_back(family.GetName());
    return family;
  }

  /// A counter, gauge or histogram family called `name`, described by `help`:
  /// `registry.counter("arbiter_x_total", "...")`.
  prometheus::Family<prometheus::Counter>& counter(const std::string& name,
                                                   const std::string& help) {
    return add(prometheus::BuildCounter().Name(name).Help(help));
  }
  prometheus::Family<prometheus::Gauge>& gauge(const std::string& name, const std::string& help) {
    return add(prometheus::BuildGauge().Name(name).Help(help));
  }
  prometheus::Family<prometheus::Histogram>& histogram(const std::string& name,
                                                       const std::string& help) {
    return add(prometheus::BuildHistogram().Name(name).Help(help));
  }

  /// The names of every family registered through `add`, e.g. "arbiter_items_total", whether
  /// or not it has samples yet.
  const std::vector<std::string>& family_names() const noexcept {
    return names_;
  }

private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::string> names_;
};

/// Histogram buckets for latencies in seconds, from 50 µs to 60 s.
const prometheus::Histogram::BucketBoundaries& latency_buckets();

/// Histogram buckets for sizes (items per request, items per batch), 1 to 16384.
const prometheus::Histogram::BucketBoundaries& size_buckets();

} // namespace arbiter
