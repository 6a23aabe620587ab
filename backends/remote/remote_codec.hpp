#pragma once

// Request bodies for remote model APIs and the parsing of their replies. Pure functions: no
// network, no actors, no clocks. The remote client sends what `prepare_call` builds and hands
// the 2xx body it gets back to `parse_reply`.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/score_types.hpp"

namespace arbiter::backends::remote {

/// The API a remote source speaks.
enum class api_kind : uint8_t {
  /// OpenAI-compatible (OpenAI, vLLM, SGLang): /v1/chat/completions, /v1/completions,
  /// /v1/embeddings.
  openai = 0,
  /// Hugging Face text-embeddings-inference: /embed.
  tei = 1,
  /// The information-gain service: /compute_info_gain.
  ig_service = 2,
};

/// The kind called `name` ("openai", "tei", "ig_service"; exact spelling), or nullopt.
std::optional<api_kind> parse_api_kind(std::string_view name);

/// "openai", "tei" or "ig_service".
const char* to_string(api_kind k) noexcept;

/// Per-source settings from config.
struct endpoint_options {
  /// Sent as "model" (openai) when not empty; never sent to tei or ig_service.
  std::string model;
  /// Judge: max new tokens.
  uint32_t max_tokens = 1024;
  double temperature = 0.0;
  double top_p = 1.0;
  /// When set, chat calls carry "chat_template_kwargs": {"enable_thinking": b}. Completions
  /// calls have no chat template and never carry it.
  std::optional<bool> enable_thinking;
  /// Judge via POST /v1/completions with "prompt" instead of /v1/chat/completions.
  bool use_completions = false;
  /// Sent as "stop" (judge) when not empty.
  std::vector<std::string> stop;
};

/// Where one item's texts sit in an embedding call's input list: `inputs[first]` is its
/// candidate and `inputs[first + 1]` ... `inputs[first + references]` its references.
struct input_span {
  uint32_t first = 0;
  uint32_t references = 0;
};

/// One HTTP call for a batch.
struct prepared_call {
  /// The request path, e.g. "/v1/chat/completions", "/v1/embeddings", "/embed",
  /// "/compute_info_gain".
  std::string path;
  /// The JSON request body.
  std::string body;
  /// Tokens an OpenAI-style provider will count for this call (prompt + max_tokens × n), for
  /// tokens-per-minute pacing. Never lower than what a provider counts: every text sent counts
  /// `estimate_prompt_tokens`, a chat message adds `chat_message_overhead_tokens`, and a judge
  /// call adds `max_tokens`.
  uint64_t estimated_tokens = 0;
  /// Embedding calls: one span per item, in item order. Empty for other kinds.
  std::vector<input_span> spans;
  /// Number of texts in an embedding call's input list (0 for other kinds).
  uint32_t input_count = 0;
};

/// Tokens a chat message costs beyond its content (role and separators; OpenAI counts 3-4),
/// rounded up generously.
inline constexpr uint64_t chat_message_overhead_tokens = 8;

/// Generous token estimate of `text`: max(whitespace-separated words, ceil(UTF-8 bytes / 3)).
uint64_t estimate_prompt_tokens(std::string_view text) noexcept;

/// The default judge prompt; `judge_prompt` fills its {PROBLEM}, {REFERENCE_SOLUTION} and
/// {CANDIDATE_SOLUTION}. The candidate comes last, and the instructions never write a label
/// word followed by ':', so a grader that splits on the last "Reference:" and "Candidate:"
/// (the fake provider) sees exactly the item's texts.
extern const std::string_view default_judge_template;

/// `default_judge_template` filled from `item`: the problem is extra_info's "problem" string,
/// else its "question" string, else empty; the reference is ground_truth[0] (empty when there
/// is none); the candidate is solution_str. extra_info that is not a JSON object counts as
/// absent.
std::string judge_prompt(const score_item& item);

/// Which reward kinds an API can compute: openai → "judge", "embedding"; tei → "embedding";
/// ig_service → "info_gain".
bool supports(api_kind api, std::string_view reward_kind) noexcept;

/// Builds the one call that scores `items` (all of the same reward kind, non-empty; exactly
/// one for "judge", since a chat call carries one prompt) on an endpoint speaking `api`.
/// Throws std::invalid_argument naming the problem when `items` is empty or holds a null
/// item, the kind is not supported by the API, the kinds are mixed, or a judge batch holds
/// more than one item. An embedding item without references still sends its candidate (so
/// every call has a non-empty input list); `parse_reply` fails it.
prepared_call prepare_call(api_kind api, const endpoint_options& opts,
                           const std::vector<shared_item>& items);

/// Thrown by parse_reply when a 2xx body cannot be used at all (not JSON, wrong shape, wrong
/// count): the whole attempt counts as a bad response (retryable elsewhere). Its what() names
/// the problem and quotes at most the first 120 characters of the body (bytes that are not
/// printable ASCII replaced by '?').
struct bad_reply : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses a 2xx reply `body` to `call` (built by `prepare_call` from the same `api`, `opts` and
/// `items`) into one outcome per item, in order; `run_ms` is left 0 for the caller to fill.
/// A per-item problem (a judge answer with no extractable score or null content, a score out
/// of range, an embedding item without references or with a zero vector, an IG service
/// per-item error) is an outcome with code errc::reward_failed and a reason that quotes the
/// opening (≤ 80 bytes) of the model's reply where there is one — never a silent 0.
/// Throws bad_reply when the body is unusable, and std::invalid_argument when `call` and
/// `items` do not belong together (a bug in the caller).
std::vector<item_outcome> parse_reply(api_kind api, const endpoint_options& opts,
                                      const prepared_call& call,
                                      const std::vector<shared_item>& items,
                                      std::string_view body);

/// The human-readable message of an error body, for any of the shapes providers send:
/// nested OpenAI {"error":{"message":...}}, flat {"message":...}, {"error":"..."} (TEI),
/// FastAPI {"detail": "..."} or {"detail":[{"loc":[...],"msg":...}, ...]} (as
/// "loc.path: msg; ..."); otherwise the first 200 characters of the body (bytes that are not
/// printable ASCII replaced by '?'), or "(empty body)". A message taken from JSON is cut to
/// 500 bytes on a UTF-8 boundary. Never throws.
std::string error_message(std::string_view body) noexcept;

/// The judge score in a model reply, or nullopt when there is none. First strips every
/// <think>...</think> block; an unclosed <think> drops the rest of the reply, and a
/// </think> with no opening tag drops everything before it (templates that open the block
/// in the prompt). Then takes the LAST place where "REWARD" (any case, not preceded by a
/// letter) is followed by optional '*' / whitespace, ':' or '=', optional '*' / whitespace /
/// '[', and a decimal number (sign, fraction and exponent allowed; no inf, nan or hex).
std::optional<double> extract_judge_score(std::string_view reply);

/// The entailment probability in the TEI /predict result for one pair: `labels` is a list of
/// {"label","score"} objects and the entry whose label is "entailment" or "entail" (any case)
/// gives the score. Throws bad_reply when `labels` has another shape or no such entry.
double entailment_probability(const nlohmann::json& labels);

} // namespace arbiter::backends::remote
