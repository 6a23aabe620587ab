#pragma once

// Request bodies for remote model APIs and the parsing of their replies. Pure functions: no
// network, no actors, no clocks. The remote client sends what `prepare_call` builds and hands
// the 2xx body it gets back to `parse_reply`.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/embedding_scoring.hpp"
#include "common/score_types.hpp"

namespace arbiter::backends::remote {

/// The API a remote source speaks.
enum class api_kind : uint8_t {
  /// OpenAI-compatible (OpenAI, vLLM, SGLang): /v1/chat/completions, /v1/completions,
  /// /v1/embeddings.
  openai = 0,
  /// Hugging Face text-embeddings-inference: /embed, and /predict for NLI (sequence
  /// classification) models.
  tei = 1,
  /// The information-gain service: /compute_info_gain.
  ig_service = 2,
};

/// The kind called `name` ("openai", "tei", "ig_service"; exact spelling), or nullopt.
std::optional<api_kind> parse_api_kind(std::string_view name);

/// "openai", "tei" or "ig_service".
const char* to_string(api_kind k) noexcept;

/// Per-source settings from config: what chat and generate calls send for the fields their
/// `model_call` leaves unset.
struct endpoint_options {
  /// Sent as "model" (openai) when the call names none and this is not empty; never sent to
  /// tei or ig_service. Embedding: a name containing "qwen3-embedding" (any case) turns the
  /// default instruction on (see `embedding_options::instruction`).
  std::string model;
  /// chat, generate: max new tokens.
  uint32_t max_tokens = 1024;
  /// chat, generate: sampling.
  double temperature = 0.0;
  /// chat only (generate sends top_p only when its call sets it).
  double top_p = 1.0;
  /// When set, chat calls carry "chat_template_kwargs": {"enable_thinking": b}. Completions
  /// calls have no chat template and never carry it.
  std::optional<bool> enable_thinking;
  /// chat to an OpenAI reasoning model: `max_completion_tokens`, no temperature or top_p.
  /// Unset: when the model sent names one (`is_reasoning_model`).
  std::optional<bool> reasoning_model;
  /// chat via POST /v1/completions with "prompt" instead of /v1/chat/completions.
  bool use_completions = false;
  /// chat: sent as "stop" when the call has none and this is not empty.
  std::vector<std::string> stop;
};

/// Where one item's texts sit in an embedding call's input list (see embedding_scoring.hpp).
using backends::input_span;

/// One HTTP call for a batch.
struct prepared_call {
  /// The request path, e.g. "/v1/chat/completions", "/v1/completions", "/v1/embeddings",
  /// "/embed", "/predict", "/compute_info_gain".
  std::string path;
  /// The JSON request body.
  std::string body;
  /// Embedding calls: one span per item, in item order, over the batch's texts before a
  /// repeated one is dropped (embedding_texts). Empty for other kinds.
  std::vector<input_span> spans;
  /// Number of texts in an embedding call's input list, each distinct text once (0 for other
  /// kinds).
  uint32_t input_count = 0;
  /// Embedding calls: `parse_reply` keeps each item's vectors in its outcome's `evidence`
  /// (set by the caller when the replay log is on).
  bool keep_vectors = false;
};

/// Which item kinds an API serves: openai → "chat", "generate", "embedding"; tei →
/// "embedding", "nli"; ig_service → "info_gain".
bool supports(api_kind api, std::string_view item_kind) noexcept;

/// Builds the one call that serves `items` (all of the same kind, non-empty) on an endpoint
/// speaking `api`:
/// - "chat" (one item): the item's `call` as one user message to /v1/chat/completions (or a
///   "prompt" to /v1/completions with `use_completions`), with "n", and "seed" when set;
///   unset fields take `opts`.
/// - "generate" (one item): the call's prompt to /v1/completions with "n", "temperature",
///   "max_tokens", "stop" and "logprobs": 1; "top_p" and "seed" only when the call sets them.
/// - "nli" (tei): every item's (call.prompt, call.hypothesis) pair to /predict.
/// - "embedding": each item's candidate, then its references (`rewards::filter_references` of
///   its merged options), to /v1/embeddings or /embed; with an instruction (see
///   `embedding_options`) the candidate is sent as "Instruct: {instruction}\nQuery:{text}".
///   A text the batch holds more than once (a group's reference) is sent once.
/// - "info_gain" (ig_service): question, context and answers per item to /compute_info_gain;
///   items whose options ask for a variant other than "soft" are left out (the service
///   computes only soft) and `parse_reply` fails them.
/// Throws std::invalid_argument naming the problem when `items` is empty or holds a null
/// item, the kind is not served by the API, the kinds are mixed, a chat or generate batch
/// holds more than one item, a model-call item has no `call` (or asks for n = 0), or no
/// info_gain item of the batch can be sent (the reason says which variant it asked for). An
/// embedding item without references still sends its candidate (so every call has a
/// non-empty input list); `parse_reply` fails it.
prepared_call prepare_call(api_kind api, const endpoint_options& opts,
                           const std::vector<shared_item>& items);

/// The request bodies that carry `call`: one, its own, unless it is an embedding call with more
/// input texts than `max_inputs` (0: no cap; the remote source passes a TEI endpoint's
/// `max_batch_items`). Then its input list is cut into consecutive parts
/// of at most `max_inputs` texts, each a body of its own with the same other fields: an item
/// with more references than a call takes (TEI's --max-client-batch-size, 32 by default) is
/// served in several requests instead of refused.
std::vector<std::string> split_embedding_call(const prepared_call& call, uint32_t max_inputs);

/// The replies to `split_embedding_call`'s parts, in order, as one reply to the whole call for
/// `parse_reply`: TEI's lists of vectors one after another; OpenAI's `data` entries with their
/// `index` moved past the parts before, and `usage` summed. A part that is not the shape its
/// API answers is returned as it is, for `parse_reply` to refuse it by its words.
std::string join_embedding_replies(api_kind api, const std::vector<std::string>& replies);

/// Thrown by parse_reply when a 2xx body cannot be used at all (not JSON, wrong shape, wrong
/// count): the whole attempt counts as a bad response (retryable elsewhere). Its what() names
/// the problem and quotes at most the first 120 characters of the body (bytes that are not
/// printable ASCII replaced by '?').
struct bad_reply : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A bad_reply that is well formed but does not fit what was asked: fewer completions than the
/// call's `n` (a server that ignores or caps `n`). The source is healthy; it cannot serve this
/// request as asked, so another source may be tried and its breaker is left alone.
struct unfit_reply : bad_reply {
  using bad_reply::bad_reply;
};

/// Parses a 2xx reply `body` to `call` (built by `prepare_call` from the same `api`, `opts` and
/// `items`) into one outcome per item, in order; `run_ms` is left 0 for the caller to fill.
/// - chat: `output.texts` holds every choice's content (choices ordered by "index" when they
///   carry one); fewer choices than n is an unfit reply.
/// - generate: exactly n choices, ordered by index; each text Python-`strip()`ped, with the
///   mean of its non-null `logprobs.token_logprobs` and their count.
/// - nli: `output`'s entailment, neutral and contradiction from the labels (any case;
///   "entail" and "contradict" too; a missing neutral or contradiction is 0).
/// - embedding: `score` = (cos + 1) / 2 of the reference with the highest cosine (the first
///   on ties) times `rewards::length_penalty(that reference, candidate, ...)`.
/// - info_gain: `score` is the service's, `detail` its "details" entry (compact JSON) when
///   that is an object.
/// A per-item problem (null chat content or a refusal, an embedding item without references,
/// with a zero vector or asking for more dimensions than the model returns, an IG service
/// per-item error, an info_gain variant the service does not compute) is an outcome with
/// code errc::reward_failed and a reason that quotes the opening (≤ 80 bytes) of the model's
/// reply where there is one — never a silent 0.
/// Throws bad_reply when the body is unusable, and std::invalid_argument when `call` and
/// `items` do not belong together (a bug in the caller).
std::vector<item_outcome> parse_reply(api_kind api, const endpoint_options& opts,
                                      const prepared_call& call,
                                      const std::vector<shared_item>& items,
                                      std::string_view body);

/// The human-readable message of an error body, for any of the shapes providers send:
/// nested OpenAI {"error":{"message":...}}, flat {"message":...}, {"error":"..."} (TEI),
/// FastAPI {"detail": "..."} or {"detail":[{"loc":[...],"msg":...}, ...]} (as
/// "loc.path: msg; ..."); otherwise the first 160 characters of the body (bytes that are not
/// printable ASCII replaced by '?'), or "(empty body)". A message taken from JSON is cut to
/// 200 bytes on a UTF-8 boundary. Credential-like text is redacted first (redaction.hpp).
/// Never throws.
/// Whether `model` names an OpenAI reasoning model, which refuses `max_tokens`, `temperature`
/// and `top_p`: after any "provider/" prefix, o1, o3 or o4 (alone or with a `-` suffix), or
/// gpt-5 but not its chat variants (`gpt-5-chat-latest` samples as chat models do).
bool is_reasoning_model(std::string_view model);

/// `known_secret` (the source's own key) is redacted before the cut, as the patterns are.
std::string error_message(std::string_view body, std::string_view known_secret = {}) noexcept;

/// The `usage` token counts (prompt, completion) of a 2xx `body` that could not be used (a
/// `bad_reply`): the provider bills them all the same. Zeros when it has none or is not JSON.
/// Never throws.
std::pair<uint64_t, uint64_t> reply_usage(std::string_view body) noexcept;

/// The judge score in a model reply, or nullopt when there is none. First strips every
/// <think>...</think> block; an unclosed <think> drops the rest of the reply, and a
/// </think> with no opening tag drops everything before it (templates that open the block
/// in the prompt). Then takes the LAST place where "REWARD" (any case, not preceded by a
/// letter) is followed by optional '*' / whitespace, ':' or '=', optional '*' / whitespace /
/// '[', and a decimal number (sign, fraction and exponent allowed; no inf, nan or hex).
/// Whatever follows the number is ignored: "REWARD: 0.85/1" is 0.85 and "REWARD: 8/10" is 8
/// (the caller's range check refuses it rather than this function guessing a scale). The
/// number is returned as written, in range or not: the caller checks the range. `at_end`, when
/// given, says whether the number runs to the reply's last character (a reply cut at
/// max_tokens there may have lost digits: "REWARD: 0.8" of "REWARD: 0.875").
std::optional<double> extract_judge_score(std::string_view reply, bool* at_end = nullptr);

} // namespace arbiter::backends::remote
