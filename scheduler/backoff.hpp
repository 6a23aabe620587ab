#pragma once

#include <cstdint>
#include <random>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// Where policy classes draw randomness (jitter). Production code uses `seeded_random_source`;
/// tests script the values so that every delay is known in advance.
class random_source {
public:
  virtual ~random_source() = default;

  /// A number in [0, 1).
  virtual double uniform() = 0;
};

/// A 64-bit Mersenne Twister with a seed given by the owner. Not thread-safe: one per actor.
class seeded_random_source final : public random_source {
public:
  explicit seeded_random_source(uint64_t seed) : engine_(seed) {
  }

  /// A number in [0, 1) with 53 random bits (never exactly 1, unlike some
  /// `std::uniform_real_distribution` implementations).
  double uniform() override;

private:
  std::mt19937_64 engine_;
};

/// Full-jitter exponential backoff: the delay before retry `attempt` (0 for the first retry)
/// is uniform in [0, min(cap, base × 2^attempt)). Spreading retries over the whole interval
/// keeps callers that failed together from retrying together.
class jittered_backoff {
public:
  /// `base` is the ceiling of the first delay, `cap` the largest ceiling. Negative values are
  /// taken as 0; a `cap` below `base` caps every delay at `cap`.
  jittered_backoff(nanoseconds base, nanoseconds cap);

  /// The upper bound of the delay before retry `attempt`: min(cap, base × 2^attempt), without
  /// overflow for any `attempt`.
  nanoseconds ceiling(uint32_t attempt) const noexcept;

  /// The delay before retry `attempt`: `ceiling(attempt)` scaled by one draw from `random`
  /// (a draw outside [0, 1) is clamped into it).
  nanoseconds next(uint32_t attempt, random_source& random) const;

  nanoseconds base() const noexcept {
    return base_;
  }

  nanoseconds cap() const noexcept {
    return cap_;
  }

private:
  nanoseconds base_;
  nanoseconds cap_;
};

} // namespace arbiter::scheduler
