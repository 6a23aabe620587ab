#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace arbiter {

/// Error codes of Arbiter. Values are stable: they appear in logs, metric labels and API error
/// bodies (as the names `to_string` returns).
enum class errc : uint8_t {
  /// No error.
  none = 0,
  /// The request failed validation. Never retried; answered 400 at the ingress.
  invalid_request = 1,
  /// Admission control refused the request: its priority class is full, or the expected queue
  /// wait exceeds its deadline. Answered 429 with Retry-After.
  overloaded = 2,
  /// The item's deadline passed before a result was produced.
  deadline_exceeded = 3,
  /// No source serves the capability the item needs.
  no_eligible_source = 4,
  /// The server is draining and accepts no new work, or it failed queued work at the end of
  /// the drain deadline.
  shutting_down = 5,
  /// The reward function could not score this input (for example, a text over the reward's
  /// length limit). Not retried: the same input fails the same way.
  reward_failed = 6,
  /// A worker failed while running the item (an exception, a crashed actor).
  worker_failed = 7,
  /// A bug: an invariant did not hold. Counted and reported, never expected.
  internal = 8,
  /// Remote sources failed (5xx, timeouts, broken connections, unusable bodies, 429s) on every
  /// attempt the retry policy allowed.
  upstream_failed = 9,
  /// A remote source refused the call itself (400, 401, 403, 404, 413, 422): the same call
  /// fails the same way anywhere, so it is not retried.
  upstream_rejected = 10,
  /// The client closed its connection before the answer: the item's remaining work (queued,
  /// waiting for a retry, or a remote call that carried nothing else) was dropped unsent.
  /// Nobody reads this answer; it is counted.
  client_closed = 11,
};

/// The stable name of `code`, e.g. "deadline_exceeded".
std::string_view to_string(errc code) noexcept;

/// The code spelled `name` ("deadline_exceeded"), if any.
std::optional<errc> parse_error_code(std::string_view name) noexcept;

} // namespace arbiter
