#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/enum_names.hpp"
#include "common/errc.hpp"

namespace arbiter {

/// A model call that a reward graph or a pass-through route makes: an item of kind "chat" (a
/// judge prompt, or a whole conversation), "generate" (a raw completion prompt with per-token
/// log-probabilities), "nli" (one premise/hypothesis pair) or "embedding" (one text whose
/// vector is wanted). Unset fields take the source's settings.
struct model_call {
  /// chat: the user message; generate: the prompt; nli: the premise; embedding: the text.
  std::string prompt;
  /// chat: an OpenAI `messages` array as JSON text; when not empty it is sent instead of one
  /// user message holding `prompt`.
  std::string messages;
  /// nli: the hypothesis.
  std::string hypothesis;
  /// Sent as "model" when not empty.
  std::string model;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<uint32_t> max_tokens;
  /// Completions wanted from the one call (judge votes, IG samples).
  uint32_t n = 1;
  std::optional<bool> enable_thinking;
  std::vector<std::string> stop;
  /// Sent as "seed" when set, so sampling is reproducible where the provider supports it.
  std::optional<uint64_t> seed;
  /// chat, from the pass-through route: the client's other fields that shape the answer
  /// (penalties, `logit_bias`, vLLM's `top_k`, `min_p`, ...), a JSON object's text with its
  /// keys in order; a remote source gets them in its request body as they came, a local
  /// generator, which cannot honour them, fails the call. Empty: none.
  std::string extra_body;
};

/// One text a chat or generate call produced.
struct generated_text {
  std::string text;
  /// generate: the mean log-probability of its tokens, and how many there were.
  double mean_logprob = 0.0;
  uint32_t tokens = 0;
  /// chat, generate: why the model stopped ("stop", "length", ...), when the source said.
  std::string finish_reason;
  /// chat, for the pass-through route (`passthrough_chat_reward`), the reply as the provider
  /// gave it: the reasoning a reasoning parser split off (vLLM's `reasoning_content`), a
  /// refusal (OpenAI's `refusal`), and whether `content` was null (a reasoning model cut off
  /// before it answered). A judge reads only `text`: a null content fails its call.
  std::string reasoning;
  std::string refusal;
  bool no_content = false;
};

/// The reward of the items the /v1/chat/completions route makes: their replies are passed
/// on as the provider gave them, not read as a judge's.
inline constexpr std::string_view passthrough_chat_reward = "chat_completions";

/// What a model call returned.
struct model_output {
  /// chat, generate: one entry per completion, in order.
  std::vector<generated_text> texts;
  /// nli: class probabilities.
  double entailment = 0.0;
  double neutral = 0.0;
  double contradiction = 0.0;
  /// embedding: the vector, as the source returned it.
  std::vector<float> embedding;
  /// chat, generate, embedding: the token counts the source reported (0 when it did not).
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  /// The model that answered, as the source said: an OpenAI-compatible reply's `model`, a
  /// local model's name; empty when it did not say. The replay log keeps it, so a provider
  /// that changes the model behind a name shows.
  std::string model;
};

/// One item to score, as the ingress decoded it. Field names follow verl's `compute_score`.
struct score_item {
  /// The configured reward that scores this item (resolved at the ingress).
  std::string reward;
  /// The reward's kind, e.g. "lexical" (resolved from `reward` at the ingress).
  std::string kind;
  /// What a source must serve to run this item, e.g. "cpu" (resolved from `kind`).
  std::string capability;
  /// The candidate text (verl's `solution_str`).
  std::string solution_str;
  /// The reference(s); a string in the request becomes a list of one.
  std::vector<std::string> ground_truth;
  /// verl's `data_source`, kept for metrics and later rewards; may be empty.
  std::string data_source;
  /// The GRPO group the item belongs to (the rollouts of one prompt), or empty: the scheduler
  /// orders a group's members together and keeps its score statistics (see
  /// `scheduler::group_tracker`). A reward graph's model calls carry their item's group.
  std::string group;
  /// With a group: its members must be answered within this many milliseconds of the group's
  /// first arrival (0: no group deadline; the request's own deadline still holds).
  uint32_t group_deadline_ms = 0;
  /// The training step the item belongs to (a trainer's tag), or empty: the scheduler
  /// accounts each step's items, calls, tokens and cost (see `scheduler::step_ledger`). A
  /// reward graph's model calls carry their item's step.
  std::string step;
  /// The raw JSON text of `extra_info` (an object), or empty when absent.
  std::string extra_info;
  /// The reward's configured options (a JSON object's text, or empty); `extra_info` keys
  /// override them.
  std::string options;
  /// The kind that scores the item, flagged `fallback`, when no source can (empty: none).
  std::string fallback;
  /// Restricts routing to the sources configured for the reward: appended to every
  /// capability the item and its model calls need ("@NAME"), empty when any source may serve.
  std::string route_suffix;
  /// Set on model calls (see `model_call`); null on rewards.
  std::shared_ptr<const model_call> call;
};

/// An item shared, read-only, between the scheduler (which keeps it for metrics and retries)
/// and the batch a worker runs, so dispatching copies no text.
using shared_item = std::shared_ptr<const score_item>;

/// `items`, each moved into a `shared_item`. The ingress does this on its own thread before
/// handing a request over, so the scheduler's thread, which every request goes through, only
/// takes the pointers.
inline std::vector<shared_item> share_items(std::vector<score_item>&& items) {
  std::vector<shared_item> out;
  out.reserve(items.size());
  for (auto& item : items) {
    out.push_back(std::make_shared<const score_item>(std::move(item)));
  }
  return out;
}

/// How an item ended.
enum class item_status : uint8_t {
  /// Scored by the reward asked for.
  ok = 0,
  /// Scored by the reward's configured fallback, and flagged so.
  fallback = 1,
  /// Not scored; `error` says why.
  failed = 2,
};

/// "ok", "fallback" or "failed".
inline constexpr auto item_status_names = names_of<item_status::failed>("ok", "fallback", "failed");

inline const char* to_string(item_status s) noexcept {
  return item_status_names[s];
}

/// What a worker reports for one item of a batch.
struct item_outcome {
  /// `errc::none` when `score` holds the result.
  errc code = errc::none;
  double score = 0.0;
  /// Why the item failed (empty when it did not).
  std::string error;
  /// A reward graph failed by a model call: that call's `item_result::retry_after_ms`.
  int64_t retry_after_ms = 0;
  /// Time the worker spent on this item.
  double run_ms = 0.0;
  /// A reward graph: of `run_ms`, the time its model calls waited in their queues (per step
  /// of calls, the longest wait), which the scheduler reports as the item's queue time.
  double queue_ms = 0.0;
  /// Model calls: what the model returned. Null for rewards.
  std::shared_ptr<const model_output> output;
  /// Rewards computed from several model calls (graphs): the sources they ran on, whether
  /// every call came from the cache (`cached`) or else from the cache and identical calls in
  /// flight (`coalesced`: made for another item), and the attempts all calls took.
  /// Empty/false/0 otherwise.
  std::vector<std::string> sources;
  bool cached = false;
  bool coalesced = false;
  uint32_t attempts = 0;
  /// Optional details as JSON text (info_gain: samples, weights, entailment matrices).
  std::string detail;
  /// Fields the reward returns beside its score, for the trainer, as a JSON object's text
  /// (math_dapo: `acc`, `pred`); empty when it returns none. /v1/score reports it as `extra`.
  std::string extra;
  /// With the replay log on (`work_batch::record`): what the score was computed from, as a
  /// JSON object's text, for `arbiter replay` (embedding: the model and the vectors; reward
  /// graphs: their model calls' answers, step by step). Empty otherwise.
  std::string evidence;
};

/// An outcome scored `score`.
inline item_outcome success(double score) {
  item_outcome out;
  out.score = score;
  return out;
}

/// An outcome that failed with `code` for `reason`.
inline item_outcome failure(errc code, std::string reason) {
  item_outcome out;
  out.code = code;
  out.error = std::move(reason);
  return out;
}

/// A reward that could not be computed from what it was given (`errc::reward_failed`).
inline item_outcome failure(std::string reason) {
  return failure(errc::reward_failed, std::move(reason));
}

/// The answer for one item, as the ingress writes it.
struct item_result {
  double score = 0.0;
  item_status status = item_status::failed;
  /// The source that produced the score: a worker or endpoint name; for a fallback, the
  /// fallback kind (e.g. "lexical").
  std::string source;
  /// Every source a reward graph's model calls ran on (empty for single-call rewards).
  std::vector<std::string> sources;
  bool cached = false;
  /// Answered by an identical item in flight, whose calls it shared: it ran nothing itself
  /// (the calls, their tokens and cost count where they were made).
  bool coalesced = false;
  uint32_t attempts = 0;
  /// `errc::none` unless the item failed.
  errc code = errc::none;
  /// Human-readable reason (empty unless failed).
  std::string error;
  /// For a failure a later try may avoid: how long until its sources take calls again (a
  /// rate limit's block or an ejection lifts), in ms; 0: not known. A route that answers the
  /// failure with an HTTP error sends it as `Retry-After`.
  int64_t retry_after_ms = 0;
  double queue_ms = 0.0;
  double run_ms = 0.0;
  /// For a fallback: why the reward asked for could not score it.
  std::string fallback_reason;
  /// Model calls: what the model returned (for the graph that asked).
  std::shared_ptr<const model_output> output;
  /// Optional details as JSON text (see item_outcome::detail).
  std::string detail;
  /// The reward's extra fields (see item_outcome::extra).
  std::string extra;
  /// What the score was computed from, for the replay log (see item_outcome::evidence).
  std::string evidence;
};

} // namespace arbiter
