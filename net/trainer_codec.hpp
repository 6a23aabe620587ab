#pragma once

// The trainers' own reward-server protocols (see docs/integrations/): OpenRLHF's
// `POST /get_reward` and slime's `remote_rm`. Both carry no options, so the reward comes from
// the URL (`?reward=NAME`) or `[protocols] reward`, and failures follow `[protocols]
// on_failure`.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/reward_catalog.hpp"
#include "common/errc.hpp"
#include "common/score_types.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

/// How a trainer route answers an item that failed.
struct failure_policy {
  /// When set, a failed item scores this (flagged where the protocol has room); when not, the
  /// request is answered with an error status so the trainer retries.
  std::optional<double> score;
};

/// `raw` with its %XX escapes decoded (and '+' as a space when `plus_is_space`, as in a query);
/// a '%' not followed by two hex digits stays as it is.
std::string percent_decode(std::string_view raw, bool plus_is_space);

/// The value of query parameter `name` in `target` ("/path?a=1&b=2"), percent-decoded, or
/// nullopt when absent.
std::optional<std::string> query_parameter(std::string_view target, std::string_view name);

/// For the routes whose options are in their body (`/v1/score`, `/compute_info_gain`): any
/// query parameter but `api_key` is refused naming it, since `?deadline_ms=500` (as the trainer
/// routes take it) was dropped unseen.
bool refuse_query(std::string_view target, codec_error& err);

/// What the zero-code trainer routes (`/get_reward`, `/remote_rm`) take from their URL
/// besides `reward` and `api_key`: `priority` (a class name) and `deadline_ms`, so a job on a
/// shared server can be given its class and deadline in the URL the trainer is configured
/// with. Unset, they keep the server's defaults (`priority`, `deadline` as given). Any other
/// parameter is refused, naming it, as a misspelt field of `/v1/score` is.
bool read_trainer_query(std::string_view target, const codec_context& ctx, size_t& priority,
                        std::chrono::milliseconds& deadline, codec_error& err);

/// The response text of an OpenRLHF query: `query` without its `prompt` prefix, or after the
/// prompt's first occurrence, or, when the trainer cut the prompt on the left (its last
/// max_prompt_length tokens), after the longest tail of the prompt (32 bytes at least) the
/// query starts with, perhaps after up to 8 bytes of a token decoded alone. Runs of a VLM's
/// `<|image_pad|>` / `<|video_pad|>` count as one. Trailing end-of-sequence markers
/// (`<|im_end|>`, `<|endoftext|>`, `</s>`, `<|eot_id|>`, `<|end_of_text|>`,
/// `<|end▁of▁sentence|>` in its full-width form, Gemma's `<end_of_turn>` and `<eos>`, Phi-3's
/// `<|end|>`) and the whitespace around them are removed.
std::string response_of(std::string_view query, std::string_view prompt);

/// Decodes `{"query": [...], "prompts": [...], "labels": [...]}` (`prompts` and `labels`
/// optional or null; empty lists allowed) into items for `reward`: `solution_str` is
/// `response_of(query, prompt)`, `ground_truth` the label's references (a string, or a number
/// as Python's `str()` writes it, see number_text.hpp; a list of them; none for a null or ""
/// label, OpenRLHF's "no label"), `extra_info` carries the prompt as `prompt`
/// and `question`, and the item's GRPO group is named by the prompt (`prompt:` and its 64-bit
/// FNV-1a hash; none for an empty prompt), so that a prompt's samples are scheduled together.
bool decode_openrlhf_request(std::string_view body, const backends::reward_entry& reward,
                             const codec_context& ctx, std::vector<score_item>& out,
                             codec_error& err);

/// `{"rewards": [...], "scores": [...], "extra_logs": {"arbiter_failed": [...],
/// "arbiter_fallback": [...], "arbiter_cached": [...]}}`, failed items scored by `policy`
/// (which must have a score when any failed). `extra_logs` also gets each sample's GRPO group
/// (`groups`: one name per item, its prompt's, see `decode_openrlhf_request`) as `summaries`
/// report it: `arbiter_group_scored`, `arbiter_group_mean`, `arbiter_group_std` (as torch.std)
/// and `arbiter_group_zero_std` (1 when its scores are all equal: GRPO learns nothing from it);
/// a sample with no group name is a group of its own.
std::string encode_openrlhf_response(const std::vector<item_result>& results,
                                     const failure_policy& policy,
                                     const std::vector<std::string>& groups = {},
                                     const std::vector<scheduler::group_summary>& summaries = {});

/// Decodes `{"prompt": string | [messages], "response": string, "label": string | number |
/// [strings and numbers] | null}` into one item for `reward` (a number as Python's `str()`
/// writes it; a boolean is refused); the question (the prompt, or its last user message) goes
/// into `extra_info` as `prompt` and `question`; the item's GRPO group is named by the prompt
/// as for OpenRLHF (slime sends one sample per request, as each finishes).
bool decode_slime_request(std::string_view body, const backends::reward_entry& reward,
                          score_item& out, codec_error& err);

/// A bare number when `key` is empty, else `{KEY: score, "status", "source", "error"}` (the
/// same keys for every answer). A failed item is scored by `policy`.
std::string encode_slime_response(const item_result& result, const std::string& key,
                                  const failure_policy& policy);

} // namespace arbiter::net
