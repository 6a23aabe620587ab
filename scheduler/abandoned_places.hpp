#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// The queue places of model calls whose client hung up (`scheduler_core::cancel`), by the
/// call's cache key, for a while: a client that times out and sends the same items again (the
/// Python client does, after its per-attempt timeout) gets them back where they were, instead of
/// behind everything that arrived while it waited. A place is taken once, and forgotten after
/// `memory` or when more than `capacity` are held (the oldest first). Keys are held as 64-bit
/// hashes (a cache key carries the whole prompt): about 100 bytes a place, and a collision only
/// gives another call an earlier place. Not thread-safe: one owner (the scheduler core).
class abandoned_places {
public:
  abandoned_places(nanoseconds memory, size_t capacity)
    : memory_(memory), capacity_(capacity) {}

  /// Remembers, at `now`, that the call `key` was ordered by `place` in its queue (an earlier
  /// place already held for it stays).
  void remember(const std::string& key, time_point place, time_point now);

  /// The place held for `key`, if one was remembered less than `memory` before `now`; it is
  /// given up in either case.
  std::optional<time_point> take(const std::string& key, time_point now);

  size_t size() const noexcept {
    return places_.size();
  }

private:
  struct held {
    time_point place;
    time_point remembered;
    /// Which entry of `order_` is this place's latest.
    uint64_t entry = 0;
  };
  struct entry {
    time_point remembered;
    uint64_t number = 0;
    size_t key = 0;
  };
  /// Forgets what is older than the memory, and the oldest past the capacity.
  void forget_old(time_point now);

  nanoseconds memory_;
  size_t capacity_;
  std::unordered_map<size_t, held> places_;
  /// Keys in the order they were remembered; an entry whose key was taken, or remembered again
  /// later, no longer matches `places_` and is skipped.
  std::deque<entry> order_;
  uint64_t next_entry_ = 0;
};

} // namespace arbiter::scheduler
