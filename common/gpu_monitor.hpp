#pragma once

// GPU memory and utilization from NVML (libnvidia-ml.so.1, which the NVIDIA driver installs),
// loaded at run time: a machine without a driver has no GPU metrics and no error.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.hpp"

namespace arbiter {

/// One GPU as NVML reports it.
struct gpu_status {
  unsigned index = 0;
  std::string name;
  uint64_t memory_used = 0;
  uint64_t memory_total = 0;
  /// Share of the last sample period a kernel ran, 0..1.
  double utilization = 0.0;
};

/// Reads every GPU through NVML and keeps the `arbiter_gpu_*` gauges (docs/metrics.md) up to
/// date. Thread-safe: `read` may run on any thread.
class gpu_monitor {
public:
  /// Loads NVML (`library`, else $ARBITER_NVML_LIBRARY, else libnvidia-ml.so.1) and, when it
  /// finds at least one GPU, registers the GPU metrics in `registry`. Nullptr when NVML is
  /// absent, fails to initialize or sees no GPU.
  static std::unique_ptr<gpu_monitor> open(metrics_registry& registry,
                                           const std::string& library = {});
  ~gpu_monitor();

  gpu_monitor(const gpu_monitor&) = delete;
  gpu_monitor& operator=(const gpu_monitor&) = delete;

  /// Every GPU now; refreshes the gauges. A GPU NVML fails to read keeps its last values.
  std::vector<gpu_status> read();

  /// Records which model workers run on which GPU (`arbiter_gpu_model_workers`): model name →
  /// device ("cuda:N"; other devices are ignored).
  void set_workers(const std::multimap<std::string, std::string>& model_devices);

  size_t count() const noexcept;

private:
  struct impl;
  explicit gpu_monitor(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace arbiter
