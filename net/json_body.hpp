#pragma once

// Reading a request body as a JSON object (nlohmann::json), for the codecs that keep the whole
// document: the OpenAI/TEI pass-through routes and the IG service route. (/v1/score and the
// trainer protocols read their bodies with simdjson instead, field by field.)

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "net/score_codec.hpp"

namespace arbiter::net {

/// The deepest nesting of arrays and objects a body read with nlohmann may have: writing a
/// document out (`dump`, as a chat request's messages are sent upstream) recurses once per
/// level, and a message nested 80,000 deep overflowed the stack and killed the server.
/// simdjson's own limit (1024) bounds the other routes.
inline constexpr size_t max_json_depth = 256;

/// Checks `body` before nlohmann reads it: false with `err` (400, field "body") when it nests
/// deeper than `max_json_depth`. A lone UTF-16 surrogate escape (`\ud800`, as Python's
/// json.dumps writes a lone surrogate), which nlohmann refuses, is read as U+FFFD, as the
/// other routes read it: `fixed` then holds the body with each such escape made `\ufffd`
/// (empty when nothing needed it).
bool check_json_text(std::string_view body, std::string& fixed, codec_error& err);

/// Parses `body` (after `check_json_text`) into `doc`. On a body that is not JSON, or not an
/// object, sets `err` (400, field "body") and returns false.
bool parse_json_object(std::string_view body, nlohmann::json& doc, codec_error& err);

} // namespace arbiter::net
