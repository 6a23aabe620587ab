#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/score_types.hpp"
#include "common/time_source.hpp"

namespace arbiter::scheduler {

/// Builds a cache key from its parts (normalized inputs, model, template, parameters). Each
/// part is written as its length, ':', then its bytes, so different splits of the same bytes
/// give different keys: {"ab", "c"} → "2:ab1:c", {"a", "bc"} → "1:a2:bc".
std::string make_cache_key(std::initializer_list<std::string_view> parts);

/// What the cache keeps for one key.
struct cached_result {
  double score = 0.0;
  /// The source that produced the score, reported with the cached answer.
  std::string source;
  /// Model calls: what the model returned; rewards: their details and graph sources.
  std::shared_ptr<const model_output> output;
  std::string detail;
  std::string extra;
  std::vector<std::string> sources;
  // Not the replay log's evidence (vectors can be tens of KiB per entry): a cached answer's
  // record names it `cached`, and `arbiter replay` takes the evidence from the record of the
  // item that computed it.
};

/// The bytes an entry holds: its key and every text, vector and name of its value, plus the
/// bookkeeping around them (list node, index slot, allocation headers).
size_t cached_bytes(std::string_view key, const cached_result& value) noexcept;

/// An LRU cache of scores by key, bounded in entries and, optionally, in bytes
/// (`cached_bytes`), with an optional time to live. A lookup makes its entry the most recently
/// used; an insert past either bound evicts least recently used entries until it fits, and an
/// entry larger than the whole byte bound is not kept. With a TTL, an entry older than it
/// (since its last insert) is a miss and is dropped. Capacity 0 caches nothing.
///
/// The cache does not own its time source; it must outlive the cache. Not thread-safe: one
/// owner (the scheduler actor) calls it.
class result_cache {
public:
  /// A cache without expiry.
  explicit result_cache(size_t capacity);

  /// A cache whose entries expire `ttl` after insertion (zero or less: never), timed by
  /// `clock`, and that holds at most `max_bytes` (0: no bound but the count).
  result_cache(size_t capacity, nanoseconds ttl, const time_source& clock, size_t max_bytes = 0);

  result_cache(const result_cache&) = delete;
  result_cache& operator=(const result_cache&) = delete;

  /// The entry for `key`, or nullopt when absent or expired. Counts a hit or a miss.
  std::optional<cached_result> lookup(std::string_view key);

  /// Whether a lookup of `key` would hit now; counts nothing and moves nothing.
  bool holds(std::string_view key) const;

  /// Stores `value` under `key` (replacing and refreshing an existing entry), evicting the least
  /// recently used entry when full.
  void insert(std::string key, cached_result value);

  /// Stores a score without a source.
  void insert(std::string key, double score) {
    cached_result value;
    value.score = score;
    insert(std::move(key), std::move(value));
  }

  /// Drops `key`. Returns false when it was not there.
  bool erase(std::string_view key);

  void clear() noexcept;

  /// Entries held now (expired ones count until a lookup or an insert drops them).
  size_t size() const noexcept {
    return index_.size();
  }

  size_t capacity() const noexcept {
    return capacity_;
  }

  /// What the entries held now take (`cached_bytes`), and the most they may (0: no bound).
  size_t bytes() const noexcept {
    return bytes_;
  }
  size_t max_bytes() const noexcept {
    return max_bytes_;
  }

  nanoseconds ttl() const noexcept {
    return ttl_;
  }

  uint64_t hits() const noexcept {
    return hits_;
  }

  uint64_t misses() const noexcept {
    return misses_;
  }

  /// Entries dropped to make room.
  uint64_t evictions() const noexcept {
    return evictions_;
  }

  /// Entries dropped because they were older than the TTL.
  uint64_t expirations() const noexcept {
    return expirations_;
  }

private:
  struct entry {
    std::string key;
    cached_result value;
    time_point inserted{};
    size_t bytes = 0;
  };

  bool expired(const entry& e) const noexcept;
  /// Drops the least recently used entry, counting it as an eviction or an expiration.
  void drop_last();
  /// Drops the entry `it` indexes.
  void drop(std::unordered_map<std::string_view, std::list<entry>::iterator>::iterator it);

  size_t capacity_;
  size_t max_bytes_ = 0;
  size_t bytes_ = 0;
  nanoseconds ttl_{0};
  const time_source* clock_ = nullptr;
  /// Most recently used first.
  std::list<entry> entries_;
  /// Keys view the strings held in `entries_` (list nodes do not move).
  std::unordered_map<std::string_view, std::list<entry>::iterator> index_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  uint64_t evictions_ = 0;
  uint64_t expirations_ = 0;
};

/// Which part a caller plays in a coalesced call.
enum class flight_role {
  /// First for this key: make the call, then `complete` or `fail` it.
  leader,
  /// The call is already out: wait for the leader's result.
  follower,
};

/// Single-flight coalescing: identical calls in flight at once are made once. The first caller
/// for a key becomes the leader and makes the call; later callers join as followers. When the
/// call ends, `complete` (or `fail`) hands back every waiter, leader first, so the caller
/// answers them all with one result, and the key is free again.
///
/// `Waiter` is whatever the caller needs to answer a request (a task id, a promise); the
/// registry owns the waiters until it hands them back. Not thread-safe: one owner calls it.
template <typename Waiter>
class single_flight {
public:
  /// Registers `waiter` for `key` and says whether it leads the call or follows it.
  flight_role join(const std::string& key, Waiter waiter) {
    auto [it, fresh] = flights_.try_emplace(key);
    it->second.push_back(std::move(waiter));
    if (fresh) {
      ++leaders_;
      return flight_role::leader;
    }
    ++followers_;
    return flight_role::follower;
  }

  /// Ends the call for `key` with a result: returns its waiters, leader first (empty when no
  /// call was in flight).
  std::vector<Waiter> complete(const std::string& key) {
    return take(key);
  }

  /// Ends the call for `key` with an error: returns its waiters, leader first, for the caller
  /// to fail or retry (empty when no call was in flight).
  std::vector<Waiter> fail(const std::string& key) {
    return take(key);
  }

  /// Whether a call for `key` is in flight.
  bool in_flight(const std::string& key) const {
    return flights_.count(key) > 0;
  }

  /// Waiters on `key`, the leader included (0 when none is in flight).
  size_t waiters(const std::string& key) const {
    auto it = flights_.find(key);
    return it == flights_.end() ? 0 : it->second.size();
  }

  /// Calls in flight now.
  size_t size() const noexcept {
    return flights_.size();
  }

  /// Calls made (leaders) and calls saved (followers) so far.
  uint64_t leaders() const noexcept {
    return leaders_;
  }

  uint64_t followers() const noexcept {
    return followers_;
  }

private:
  std::vector<Waiter> take(const std::string& key) {
    auto it = flights_.find(key);
    if (it == flights_.end()) {
      return {};
    }
    std::vector<Waiter> out = std::move(it->second);
    flights_.erase(it);
    return out;
  }

  std::unordered_map<std::string, std::vector<Waiter>> flights_;
  uint64_t leaders_ = 0;
  uint64_t followers_ = 0;
};

} // namespace arbiter::scheduler
