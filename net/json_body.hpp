#pragma once

// Reading a request body as a JSON object (nlohmann::json), for the codecs that keep the whole
// document: the trainer protocols and the OpenAI/TEI pass-through routes. (/v1/score reads its
// body with simdjson instead, field by field.)

#include <string_view>

#include <nlohmann/json.hpp>

#include "net/score_codec.hpp"

namespace arbiter::net {

/// Parses `body` into `doc`. On a body that is not JSON, or not an object, sets `err` (400,
/// field "body") and returns false.
inline bool parse_json_object(std::string_view body, nlohmann::json& doc, codec_error& err) {
  doc = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    err = {refusal::invalid, "body", "body: not valid JSON"};
    return false;
  }
  if (!doc.is_object()) {
    err = {refusal::invalid, "body", "body: expected a JSON object"};
    return false;
  }
  return true;
}

} // namespace arbiter::net
