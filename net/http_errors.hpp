#pragma once

// The one table from `errc` to an HTTP answer, and the error bodies of every route. Codecs and
// the scheduler report an `errc` and a reason; this file alone decides the status, whether a
// `Retry-After` goes with it, and the body's shape.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/errc.hpp"
#include "common/score_types.hpp"

namespace arbiter::net {

/// A response, independent of Beast.
struct http_reply {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

/// How a route writes its error bodies: Arbiter's `{"error": {"code", "message", "field"}}`,
/// OpenAI's `{"error": {"message", "type", "param", "code"}}` or TEI's `{"error",
/// "error_type"}`.
enum class error_style : uint8_t { arbiter, openai, tei };

/// What a client should do with a failure.
enum class retry_advice : uint8_t {
  /// The same request fails the same way (a 4xx): do not send it again.
  never,
  /// It may succeed later: send it again after `Retry-After`.
  later,
  /// A bug (500): nothing is promised.
  unknown,
};

/// The HTTP answer to a failure.
struct failure_status {
  unsigned status = 500;
  retry_advice advice = retry_advice::unknown;
};

/// The table. Permanent: `invalid_request` 400; `reward_failed` (the reward cannot score this
/// input: a missing reference, a template that cannot render, a text over a limit) and
/// `upstream_rejected` (a provider refused the call itself) 422. Transient, with `Retry-After`:
/// `overloaded` 429; `no_eligible_source`, `shutting_down`, `upstream_failed` and
/// `worker_failed` 503; `deadline_exceeded` 504. `internal` (and `none`) 500.
failure_status failure_status_for(errc code) noexcept;

/// Why a codec refused a body before it reached the scheduler. Codecs say which, and the
/// field; `refusal_answer_for` alone turns it into a status.
enum class refusal : uint8_t {
  /// A field is missing, of the wrong type, out of range or unknown.
  invalid,
  /// The request names a model no source serves.
  unknown_model,
  /// The request names a model that only lost cluster nodes serve: it may be back soon.
  model_away,
  /// More items or inputs than the configured limits.
  too_large,
};

/// The HTTP answer to a refusal: its status, the error code its body names, and the reason
/// counted in `arbiter_rejections_total`.
struct refusal_answer {
  unsigned status = 400;
  std::string_view code;
  std::string_view reason;
};

/// `invalid` 400 "invalid_request" (counted as "bad_request"); `unknown_model` 404
/// "model_not_found" ("not_found"); `model_away` 503 "model_unavailable" (with Retry-After;
/// "model_away"); `too_large` 413 "payload_too_large".
refusal_answer refusal_answer_for(refusal why) noexcept;

/// An error body in `style`: `code` and `message` (and `field` when not empty) for Arbiter's
/// shape, OpenAI's `type` from `status`, TEI's `error_type` from `status`.
std::string error_body(error_style style, unsigned status, std::string_view code,
                       std::string_view message, std::string_view field = {});

/// The answer to a failure with `code`: `failure_status_for(code).status`, a body naming
/// `code` and `message` (and `field`) in `style`, and for `retry_advice::later` a
/// `Retry-After` of `retry_after_s` seconds (at least 1). In OpenAI's style a call the
/// provider refused (`upstream_rejected`) is a 400, as the provider's own answer would be: a
/// client catches a prompt past the context as the SDK's `BadRequestError` either way.
http_reply failure_reply(error_style style, errc code, std::string_view message,
                         std::string_view field = {}, int64_t retry_after_s = 1);

/// The failed result that decides the answer to a request whose items must all succeed (the
/// trainer and pass-through routes): the first permanent failure, so that a request that
/// cannot succeed is not retried in vain, else the first failure; nullptr when none failed.
const item_result* deciding_failure(const std::vector<item_result>& results) noexcept;

/// The answer to such a request when an item failed: `failure_reply` for
/// `deciding_failure(results)`, its message prefixed with "item I failed: " when the request
/// had several items, its `retry_after_ms` (rounded up to seconds, at least 1) as
/// `Retry-After`; nullopt when none failed.
std::optional<http_reply> failed_items_reply(const std::vector<item_result>& results,
                                             error_style style);

} // namespace arbiter::net
