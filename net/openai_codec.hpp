#pragma once

// The pass-through routes: OpenAI-compatible `POST /v1/chat/completions`, `POST
// /v1/embeddings` and `GET /v1/models`, and TEI-compatible `POST /embed`. Each request becomes
// model-call items the scheduler routes to `chat` or `embed` sources like any other work, so
// Arbiter doubles as a rate-aware router for judges and embedders.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/score_types.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

/// A model the pass-through routes serve: a source's `model` (or its name when it has none),
/// what it serves and which sources serve it.
struct model_entry {
  std::string id;
  /// chat and/or embed.
  std::vector<capability> capabilities;
  std::vector<std::string> sources;
  /// Empty for a model served now. Else why it is away (only lost cluster nodes serve it): a
  /// request for it is refused 503 with this reason, and /v1/models leaves it out.
  std::string away;
};

/// What the pass-through decoders need.
struct passthrough_context {
  const codec_context* codec = nullptr;
  const std::vector<model_entry>* models = nullptr;
  /// The deadline of a request without `deadline_ms` when its client said how long it waits
  /// for the answer (`client_deadline` in routes.hpp); unset: `codec->default_deadline`.
  std::optional<std::chrono::milliseconds> client_deadline{};
};

/// A validated chat completion request: one `chat` item.
struct chat_request_body {
  size_t priority = 0;
  std::chrono::milliseconds deadline{0};
  score_item item;
  /// The model asked for (empty: any chat source).
  std::string model;
  uint32_t n = 1;
};

/// Decodes an OpenAI chat completion request. `stream: true`, tools, functions,
/// `response_format` other than text and `logprobs: true` are refused (400 naming the field);
/// an unknown model is 404 `model_not_found`. Arbiter's `priority` and `deadline_ms` may ride
/// along (the SDKs' `extra_body`).
bool decode_chat_request(std::string_view body, const passthrough_context& ctx,
                         chat_request_body& out, codec_error& err);

/// A `chat.completion` object for a scored item (`result.output` holds the texts); `id` is
/// unique per answer, `created` in Unix seconds.
std::string encode_chat_response(const chat_request_body& request, const item_result& result,
                                 const std::string& id, int64_t created);

/// The wire format of embedding vectors.
enum class vector_format : uint8_t { float_list, base64 };

/// A validated embeddings request (OpenAI or TEI): one `embedding` item per input.
struct embed_request_body {
  size_t priority = 0;
  std::chrono::milliseconds deadline{0};
  std::vector<score_item> items;
  std::string model;
  vector_format format = vector_format::float_list;
  /// Keep the first `dimensions` values (0: all), then re-normalize when `normalize`.
  uint32_t dimensions = 0;
  /// L2-normalize each vector (TEI's `normalize`, default true; OpenAI vectors are normalized).
  bool normalize = true;
};

/// Decodes `POST /v1/embeddings` (`input`: a string or a list of strings; token arrays are
/// refused; `encoding_format` float or base64; `dimensions`).
bool decode_openai_embeddings(std::string_view body, const passthrough_context& ctx,
                              embed_request_body& out, codec_error& err);

/// Decodes TEI's `POST /embed` (`inputs`: a string or a list of strings; `normalize`,
/// `dimensions`; `truncate` may be a boolean (the source truncates); `prompt_name` and
/// `truncation_direction` are refused when set, since the source decides).
bool decode_tei_embed(std::string_view body, const passthrough_context& ctx,
                      embed_request_body& out, codec_error& err);

/// A validated TEI `POST /predict` for NLI: one `nli` item per (premise, hypothesis) pair.
struct predict_request_body {
  size_t priority = 0;
  std::chrono::milliseconds deadline{0};
  std::vector<score_item> items;
  /// `inputs` was one pair (answered with one list of labels) rather than a list of pairs.
  bool single = false;
};

/// Decodes TEI's `POST /predict` for NLI: `inputs` is a `[premise, hypothesis]` pair or a
/// list of them; `truncate` may be a boolean (the source truncates); `raw_scores: true` and
/// `truncation_direction` are refused, since sources answer probabilities.
bool decode_tei_predict(std::string_view body, const passthrough_context& ctx,
                        predict_request_body& out, codec_error& err);

/// TEI's answer: per pair, `[{"label", "score"}, ...]` for entailment, neutral and
/// contradiction, highest score first; a bare list for a single pair.
std::string encode_tei_predict(const predict_request_body& request,
                               const std::vector<item_result>& results);

/// The vector of one result, sliced and normalized as `request` asks.
std::vector<float> shaped_vector(const embed_request_body& request, const item_result& result);

/// OpenAI's `{"object": "list", "data": [...], "model", "usage"}`.
std::string encode_openai_embeddings(const embed_request_body& request,
                                     const std::vector<item_result>& results);

/// TEI's `[[...], ...]`.
std::string encode_tei_embed(const embed_request_body& request,
                             const std::vector<item_result>& results);

/// `GET /v1/models`: `{"object": "list", "data": [{"id", "object": "model", "created",
/// "owned_by", "capabilities", "sources"}]}`.
std::string encode_models(const std::vector<model_entry>& models, int64_t created);

/// OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.
std::string encode_openai_error(unsigned status, std::string_view code, std::string_view message,
                                std::string_view param = {});

/// TEI's error shape: `{"error": message, "error_type": type}`.
std::string encode_tei_error(unsigned status, std::string_view message);

/// The item kind, reward label and capability of pass-through items.
inline constexpr std::string_view chat_item_kind = "chat";
inline constexpr std::string_view embed_item_kind = "embedding";

} // namespace arbiter::net
