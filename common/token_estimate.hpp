#pragma once

#include <cstdint>
#include <string_view>

#include "common/score_types.hpp"

namespace arbiter {

/// Tokens a chat message costs beyond its content (role and separators; OpenAI counts 3-4),
/// rounded up generously.
inline constexpr uint64_t chat_message_overhead_tokens = 8;

/// Tokens a reward item's prompt template adds around its texts (a remote reward that is not a
/// model call: an embedding or IG service item).
inline constexpr uint64_t item_template_tokens = 64;

/// Tokens an instruction adds before an embedding reward item's candidate: Qwen3-Embedding's
/// default ("Instruct: Retrieve semantically similar text\nQuery:", 51 bytes), rounded up. A
/// custom one is in the item's options, which its estimate counts.
inline constexpr uint64_t embedding_instruction_tokens = 20;

/// Generous token estimate of `text` until a tokenizer is at hand: max(whitespace-separated
/// words, ceil(UTF-8 bytes / 3)). A BPE tokenizer rarely beats 3 bytes a token; CJK text is
/// about one token per character, which is 3 bytes.
uint64_t estimate_text_tokens(std::string_view text) noexcept;

/// The prompt tokens a provider counts for `item`: a model call's prompt, conversation and
/// hypothesis (plus a message's overhead for a chat prompt), a reward item's candidate,
/// references and `extra_info` plus `item_template_tokens`, or an embedding reward item's
/// candidate, references, options and `embedding_instruction_tokens` (what its call sends).
/// The one estimate the scheduler's token pacing and the remote codec share.
uint64_t estimate_prompt_tokens(const score_item& item) noexcept;

/// The work a local model does for `item`: for each text it encodes (an embedding item's
/// candidate and each reference, an embedding call's text, a chat or generate call's prompt)
/// or NLI pair (a call's premise and hypothesis), its tokens t as a model's tokenizer makes
/// them (about: 4 per 3 words or one per 4 bytes, whichever is more) plus 2 special ones,
/// capped at `max_input_tokens` (the model truncates there; 0: no cap), and t^2 / 512 for its
/// attention. Admission weighs a local model's items by it: an item of eight 400-word
/// references costs about 58 times one of a 20-word reference.
uint64_t estimate_model_work(const score_item& item, uint64_t max_input_tokens) noexcept;

/// The output tokens `item` may cost: a model call's `max_tokens` (else `default_max_tokens`,
/// the source's setting) times its `n`; `default_max_tokens` for other items.
uint64_t estimate_completion_tokens(const score_item& item, uint64_t default_max_tokens) noexcept;

/// How the sources of a capability weigh its items (`source_registry::work_rule`); all 0
/// where none does.
struct work_rule {
  /// A local embedding or NLI model's longest input (`estimate_model_work`'s cap).
  uint64_t input_cap = 0;
  /// A remote generating source's `max_tokens`, for calls that name none.
  uint64_t completion_default = 0;
};

/// `item`'s work under `rule`: a chat or generate call's output tokens
/// (`estimate_completion_tokens`) where a remote source generates (decoding them is most of
/// its time: a 3,500-token answer takes 200 times a judge's 16-token one), else its texts'
/// (`estimate_model_work`) where a local model weighs them, else 0.
uint64_t estimate_work(const score_item& item, const work_rule& rule) noexcept;

} // namespace arbiter
