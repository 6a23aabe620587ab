#include "scheduler/backoff.hpp"

#include <algorithm>
#include <cmath>

namespace arbiter::scheduler {

double seeded_random_source::uniform() {
  // The top 53 bits as a fraction of 2^53: exactly representable, always below 1.
  return static_cast<double>(engine_() >> 11) * 0x1.0p-53;
}

jittered_backoff::jittered_backoff(nanoseconds base, nanoseconds cap)
  : base_(std::max(base, nanoseconds{0})), cap_(std::max(cap, nanoseconds{0})) {
}

nanoseconds jittered_backoff::ceiling(uint32_t attempt) const noexcept {
  auto ceiling = std::min(base_, cap_);
  // Doubling stops at the cap (or at once for a zero base), so it never overflows and ends
  // within 64 steps.
  for (uint32_t i = 0; i < attempt && ceiling > nanoseconds{0} && ceiling < cap_; ++i) {
    ceiling = ceiling > cap_ / 2 ? cap_ : ceiling * 2;
  }
  return ceiling;
}

nanoseconds jittered_backoff::next(uint32_t attempt, random_source& random) const {
  double u = random.uniform();
  if (!(u >= 0.0)) {
    u = 0.0;
  }
  u = std::min(u, std::nextafter(1.0, 0.0));
  auto scaled = static_cast<double>(ceiling(attempt).count()) * u;
  return nanoseconds{static_cast<nanoseconds::rep>(std::floor(scaled))};
}

} // namespace arbiter::scheduler
