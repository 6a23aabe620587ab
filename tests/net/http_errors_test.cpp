// The one table from errc to HTTP: every code's status and Retry-After, and the answers the
// trainer and pass-through routes give when an item failed, in each error style.

#include "net/http_errors.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter;
using namespace arbiter::net;
using json = nlohmann::json;

namespace {

item_result ok_result() {
  item_result r;
  r.status = item_status::ok;
  r.score = 1.0;
  return r;
}

item_result failed_result(errc code, std::string why) {
  item_result r;
  r.status = item_status::failed;
  r.code = code;
  r.error = std::move(why);
  return r;
}

std::string header(const http_reply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) {
      return v;
    }
  }
  return {};
}

} // namespace

TEST(FailureStatus, PermanentFailuresAre4xxAndTransientOnesSayWhenToRetry) {
  struct row {
    errc code;
    unsigned status;
    retry_advice advice;
  };
  const std::vector<row> table{
    {errc::invalid_request, 400, retry_advice::never},
    {errc::reward_failed, 422, retry_advice::never},
    {errc::upstream_rejected, 422, retry_advice::never},
    {errc::overloaded, 429, retry_advice::later},
    {errc::no_eligible_source, 503, retry_advice::later},
    {errc::shutting_down, 503, retry_advice::later},
    {errc::upstream_failed, 503, retry_advice::later},
    {errc::worker_failed, 503, retry_advice::later},
    {errc::deadline_exceeded, 504, retry_advice::later},
    {errc::internal, 500, retry_advice::unknown},
  };
  for (const auto& r : table) {
    auto got = failure_status_for(r.code);
    EXPECT_EQ(got.status, r.status) << to_string(r.code);
    EXPECT_EQ(got.advice, r.advice) << to_string(r.code);
    auto reply = failure_reply(error_style::arbiter, r.code, "why");
    EXPECT_EQ(reply.status, r.status);
    EXPECT_EQ(header(reply, "Retry-After").empty(), r.advice != retry_advice::later)
      << to_string(r.code);
  }
  // Every other code the scheduler can report (values added later too) is either permanent
  // (400/422, never retried) or transient (429/503/504 with Retry-After).
  for (int c = 1; c <= static_cast<int>(errc::upstream_rejected); ++c) {
    auto code = static_cast<errc>(c);
    if (code == errc::internal) {
      continue;
    }
    auto got = failure_status_for(code);
    bool permanent = (got.status == 400 || got.status == 422) && got.advice == retry_advice::never;
    bool transient = (got.status == 429 || got.status == 503 || got.status == 504)
                     && got.advice == retry_advice::later;
    EXPECT_TRUE(permanent || transient) << to_string(code) << " -> " << got.status;
  }
}

TEST(FailureReply, CarriesTheCodeAndReasonInEachStyle) {
  auto arbiter_style = failure_reply(error_style::arbiter, errc::reward_failed,
                                     "ground_truth is empty", "label");
  EXPECT_EQ(arbiter_style.status, 422u);
  EXPECT_EQ(json::parse(arbiter_style.body),
            json::parse(R"({"error":{"code":"reward_failed","message":"ground_truth is empty",
                "field":"label"}})"));
  auto openai = failure_reply(error_style::openai, errc::upstream_rejected, "HTTP 400 from a");
  // What the provider would have answered the SDK itself: BadRequestError, not 422.
  EXPECT_EQ(openai.status, 400u);
  EXPECT_EQ(json::parse(openai.body),
            json::parse(R"({"error":{"message":"HTTP 400 from a","type":"invalid_request_error",
                "param":null,"code":"upstream_rejected"}})"));
  auto tei = failure_reply(error_style::tei, errc::upstream_rejected, "HTTP 400 from a");
  EXPECT_EQ(tei.status, 422u);
  EXPECT_EQ(json::parse(tei.body),
            json::parse(R"({"error":"HTTP 400 from a","error_type":"validation"})"));
  auto busy = failure_reply(error_style::openai, errc::upstream_failed, "down", {}, 7);
  EXPECT_EQ(busy.status, 503u);
  EXPECT_EQ(header(busy, "Retry-After"), "7");
  EXPECT_EQ(json::parse(busy.body)["error"]["code"], "upstream_failed");
  // A Retry-After is never 0: a client would retry at once.
  EXPECT_EQ(header(failure_reply(error_style::arbiter, errc::overloaded, "full", {}, 0),
                   "Retry-After"),
            "1");
}

TEST(FailedItemsReply, APermanentFailureDecidesSoTheTrainerDoesNotRetryInVain) {
  EXPECT_EQ(failed_items_reply({ok_result(), ok_result()}, error_style::arbiter), std::nullopt);
  auto one = failed_items_reply({failed_result(errc::reward_failed, "no reference")},
                                error_style::arbiter);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 422u);
  EXPECT_EQ(json::parse(one->body)["error"]["message"], "no reference");
  // A transient failure before a permanent one: the request can never succeed whole.
  auto mixed = failed_items_reply({ok_result(), failed_result(errc::upstream_failed, "down"),
                                   failed_result(errc::upstream_rejected, "HTTP 400")},
                                  error_style::arbiter);
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->status, 422u);
  EXPECT_TRUE(mixed->headers.empty());
  EXPECT_EQ(json::parse(mixed->body)["error"]["message"], "item 2 failed: HTTP 400");
  // Only transient failures: the first one, with Retry-After.
  auto transient = failed_items_reply({failed_result(errc::deadline_exceeded, "late"),
                                       failed_result(errc::upstream_failed, "down")},
                                      error_style::tei);
  ASSERT_TRUE(transient);
  EXPECT_EQ(transient->status, 504u);
  EXPECT_EQ(header(*transient, "Retry-After"), "1");
  EXPECT_EQ(json::parse(transient->body)["error"], "item 0 failed: late");
}

TEST(FailedItemsReply, RetryAfterIsWhenTheSourcesTakeCallsAgain) {
  // An item failed because every source is blocked by a rate limit for 41.2 s more: a client
  // told to retry after 1 s (the OpenAI SDK retries a 503) would only fail again.
  auto blocked = failed_result(errc::upstream_failed, "every source is rate-limited");
  blocked.retry_after_ms = 41200;
  auto reply = failed_items_reply({blocked}, error_style::openai);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 503u);
  EXPECT_EQ(header(*reply, "Retry-After"), "42");
  blocked.retry_after_ms = 3;
  EXPECT_EQ(header(*failed_items_reply({blocked}, error_style::openai), "Retry-After"), "1");
}
