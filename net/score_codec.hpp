#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "backends/reward_catalog.hpp"
#include "common/json_text.hpp" // append_json_string, append_json_number (the encoders use them)
#include "common/score_types.hpp"
#include "config/config.hpp"
#include "net/http_errors.hpp"
#include "scheduler/group_tracker.hpp"

namespace arbiter::net {

/// Longest group name or step tag accepted, in bytes.
constexpr size_t max_tag_bytes = 1024;

/// What the decoder needs to know about the server.
struct codec_context {
  const backends::reward_catalog* catalog = nullptr;
  /// Priority class names, highest first.
  std::vector<std::string> priorities;
  size_t default_priority = 0;
  std::chrono::milliseconds default_deadline{30000};
  std::chrono::milliseconds max_deadline{600000};
  uint32_t max_batch_items = 8192;
};

/// A validated `POST /v1/score` body.
struct score_request_body {
  size_t priority = 0;
  std::chrono::milliseconds deadline{0};
  std::vector<score_item> items;
};

/// Why a body was refused: which kind of refusal (http_errors.hpp maps it to a status), the
/// field at fault (dotted path, e.g.
/// "items[2].ground_truth", or "body") and a sentence.
struct codec_error {
  refusal why = refusal::invalid;
  std::string field;
  std::string message;

  /// The refusal of a request without the required `field`: "FIELD: required".
  static codec_error missing(const std::string& field) {
    return {refusal::invalid, field, field + ": required"};
  }
};

/// The index of priority class `name` in `ctx`, or false with a 400 on `priority` listing the
/// classes.
bool priority_named(const std::string& name, const codec_context& ctx, size_t& out,
                    codec_error& err);

/// `ms` as a request's deadline, or false with a 400 on `deadline_ms` when it is not in
/// 1..`max_deadline`.
bool deadline_within(int64_t ms, const codec_context& ctx, std::chrono::milliseconds& out,
                     codec_error& err);

/// Makes `item` one for `reward` (kind, capability, options, fallback, routing) and checks the
/// options its `extra_info` overrides; a bad one fails with 400 naming
/// `PREFIX.extra_info.KEY`.
bool bind_reward(score_item& item, const backends::reward_entry& reward,
                 const std::string& prefix, codec_error& err);

/// Decodes and validates a `/v1/score` body. Returns false and fills `err` on the first
/// problem; nothing of a refused body reaches the scheduler.
bool decode_score_request(std::string_view body, const codec_context& ctx,
                          score_request_body& out, codec_error& err);

/// `{"scores": [...], "results": [...]}` for `results`, in order, and `"groups": {NAME:
/// {"scored", "failed", "pending", "mean", "std", "zero_std"}}` when the items had groups.
std::string encode_score_response(const std::vector<item_result>& results,
                                  const std::vector<scheduler::group_summary>& groups = {});

/// `{"error": {"code": ..., "message": ..., "field": ...}}` (`field` omitted when empty).
std::string encode_error(std::string_view code, std::string_view message,
                         std::string_view field = {});

} // namespace arbiter::net
