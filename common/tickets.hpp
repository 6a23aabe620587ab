#pragma once

#include <atomic>
#include <cstdint>

namespace arbiter {

/// A process-unique, non-zero name for a scoring request (`score_request::ticket`), by which
/// whoever sent it can later say its answer is no longer wanted (`abandon_atom`): the HTTP
/// ingress for a client that hung up, a reward graph for its model calls.
inline uint64_t new_ticket() noexcept {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

} // namespace arbiter
