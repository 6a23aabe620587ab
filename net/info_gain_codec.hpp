#pragma once

// `POST /compute_info_gain`: the IG service's protocol at the ingress, so a trainer's
// IG_SERVICE_URL can point at Arbiter. Pure functions, like score_codec.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/score_types.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

/// A validated `/compute_info_gain` body.
struct info_gain_request_body {
  size_t priority = 0;
  std::chrono::milliseconds deadline{0};
  /// The items that can be scored, in order.
  std::vector<score_item> items;
  /// Per request item: its index in `items`, or -1 when it could not be scored.
  std::vector<int64_t> positions;
  /// Per request item: why it could not be scored (empty when it can).
  std::vector<std::string> errors;
};

/// Decodes `{"items": [{"question", "context", "answers": str | [str]}], "reward"?,
/// "options"?, "deadline_ms"?, "priority"?}`. As the IG service does, an item missing a
/// field is answered with a null score and an error, not refused; a body that is not such an
/// object, an unknown reward, a reward of another kind, or a bad option is a 400 naming the
/// field. `reward` defaults to "info_gain"; `options` (an object of info_gain options) applies
/// to every item.
bool decode_info_gain_request(std::string_view body, const codec_context& ctx,
                              info_gain_request_body& out, codec_error& err);

/// The IG service's reply: `{"scores": [ΔIG | null], "errors": [null | str], "details":
/// [obj | null]}`, plus `"results"` with each item's provenance as `/v1/score` gives it
/// (null for items that were not scored).
std::string encode_info_gain_response(const info_gain_request_body& req,
                                      const std::vector<item_result>& results);

} // namespace arbiter::net
