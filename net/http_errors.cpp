#include "net/http_errors.hpp"

#include <algorithm>

#include "net/openai_codec.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

failure_status failure_status_for(errc code) noexcept {
  switch (code) {
    case errc::invalid_request:
      return {400, retry_advice::never};
    case errc::reward_failed:
    case errc::upstream_rejected:
      return {422, retry_advice::never};
    case errc::overloaded:
      return {429, retry_advice::later};
    case errc::no_eligible_source:
    case errc::shutting_down:
    case errc::upstream_failed:
    case errc::worker_failed:
      return {503, retry_advice::later};
    case errc::deadline_exceeded:
      return {504, retry_advice::later};
    case errc::client_closed:
      // Nobody reads it: the client hung up (nginx's "client closed request").
      return {499, retry_advice::later};
    case errc::internal:
    case errc::none:
      break;
  }
  return {500, retry_advice::unknown};
}

refusal_answer refusal_answer_for(refusal why) noexcept {
  switch (why) {
    case refusal::invalid:
      return {400, to_string(errc::invalid_request), "bad_request"};
    case refusal::unknown_model:
      return {404, "model_not_found", "not_found"};
    case refusal::model_away:
      return {503, "model_unavailable", "model_away"};
    case refusal::too_large:
      return {413, "payload_too_large", "payload_too_large"};
  }
  return {400, to_string(errc::invalid_request), "bad_request"};
}

std::string error_body(error_style style, unsigned status, std::string_view code,
                       std::string_view message, std::string_view field) {
  switch (style) {
    case error_style::openai:
      return encode_openai_error(status, code, message, field);
    case error_style::tei:
      return encode_tei_error(status, message);
    case error_style::arbiter:
      break;
  }
  return encode_error(code, message, field);
}

http_reply failure_reply(error_style style, errc code, std::string_view message,
                         std::string_view field, int64_t retry_after_s) {
  auto answer = failure_status_for(code);
  if (style == error_style::openai && code == errc::upstream_rejected) {
    answer.status = 400;
  }
  http_reply r;
  r.status = answer.status;
  if (answer.advice == retry_advice::later) {
    r.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(retry_after_s, 1)));
  }
  r.body = error_body(style, r.status, to_string(code), message, field);
  return r;
}

const item_result* deciding_failure(const std::vector<item_result>& results) noexcept {
  const item_result* first = nullptr;
  for (const auto& r : results) {
    if (r.status != item_status::failed) {
      continue;
    }
    if (failure_status_for(r.code).advice == retry_advice::never) {
      return &r;
    }
    if (first == nullptr) {
      first = &r;
    }
  }
  return first;
}

std::optional<http_reply> failed_items_reply(const std::vector<item_result>& results,
                                             error_style style) {
  const item_result* failed = deciding_failure(results);
  if (failed == nullptr) {
    return std::nullopt;
  }
  std::string message = failed->error;
  if (results.size() > 1) {
    auto index = static_cast<size_t>(failed - results.data());
    message = "item " + std::to_string(index) + " failed: " + message;
  }
  // Where the sources are known to take calls again only later (a rate limit's block), a
  // client that retries after a second (the OpenAI SDK does, on a 503) fails again at once.
  return failure_reply(style, failed->code, message, {},
                       std::max<int64_t>(1, (failed->retry_after_ms + 999) / 1000));
}

} // namespace arbiter::net
