#pragma once

#include <chrono>

namespace arbiter {

using steady_clock = std::chrono::steady_clock;
using time_point = steady_clock::time_point;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

/// Where policy classes read the time. Production code uses `steady_time_source`; tests use
/// `manual_time_source` and move time by hand, so no test sleeps.
class time_source {
public:
  virtual ~time_source() = default;
  virtual time_point now() const noexcept = 0;
};

/// The process's monotonic clock.
class steady_time_source final : public time_source {
public:
  time_point now() const noexcept override {
    return steady_clock::now();
  }
};

/// A clock that only moves when told to.
class manual_time_source final : public time_source {
public:
  explicit manual_time_source(time_point start = time_point{std::chrono::hours{1}})
    : now_(start) {
  }

  time_point now() const noexcept override {
    return now_;
  }

  void advance(nanoseconds d) noexcept {
    now_ += d;
  }

private:
  time_point now_;
};

/// Milliseconds between two time points, as a double (for reporting).
inline double ms_between(time_point from, time_point to) noexcept {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

/// Seconds between two time points, as a double (for histograms).
inline double seconds_between(time_point from, time_point to) noexcept {
  return std::chrono::duration<double>(to - from).count();
}

} // namespace arbiter
