#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/errc.hpp"

namespace arbiter {

/// One item to score, as the ingress decoded it. Field names follow verl's `compute_score`.
struct score_item {
  /// The configured reward that scores this item (resolved at the ingress).
  std::string reward;
  /// The reward's kind, e.g. "lexical" (resolved from `reward` at the ingress).
  std::string kind;
  /// What a source must serve to run this item, e.g. "cpu" (resolved from `kind`).
  std::string capability;
  /// The candidate text (verl's `solution_str`).
  std::string solution_str;
  /// The reference(s); a string in the request becomes a list of one.
  std::vector<std::string> ground_truth;
  /// verl's `data_source`, kept for metrics and later rewards; may be empty.
  std::string data_source;
  /// The raw JSON text of `extra_info` (an object), or empty when absent.
  std::string extra_info;
};

/// An item shared, read-only, between the scheduler (which keeps it for metrics and retries)
/// and the batch a worker runs, so dispatching copies no text.
using shared_item = std::shared_ptr<const score_item>;

/// How an item ended.
enum class item_status : uint8_t {
  /// Scored by the reward asked for.
  ok = 0,
  /// Scored by the reward's configured fallback, and flagged so.
  fallback = 1,
  /// Not scored; `error` says why.
  failed = 2,
};

/// "ok", "fallback" or "failed".
inline const char* to_string(item_status s) noexcept {
  switch (s) {
    case item_status::ok:
      return "ok";
    case item_status::fallback:
      return "fallback";
    default:
      return "failed";
  }
}

/// What a worker reports for one item of a batch.
struct item_outcome {
  /// `errc::none` when `score` holds the result.
  errc code = errc::none;
  double score = 0.0;
  /// Why the item failed (empty when it did not).
  std::string error;
  /// Time the worker spent on this item.
  double run_ms = 0.0;
};

/// The answer for one item, as the ingress writes it.
struct item_result {
  double score = 0.0;
  item_status status = item_status::failed;
  /// The source that produced the score ("cpu", later an endpoint or a GPU worker).
  std::string source;
  bool cached = false;
  uint32_t attempts = 0;
  /// `errc::none` unless the item failed.
  errc code = errc::none;
  /// Human-readable reason (empty unless failed).
  std::string error;
  double queue_ms = 0.0;
  double run_ms = 0.0;
};

} // namespace arbiter
