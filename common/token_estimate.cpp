#include "common/token_estimate.hpp"

#include <algorithm>

namespace arbiter {

namespace {

uint64_t count_words(std::string_view text) noexcept {
  uint64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in_word) {
      ++words;
    }
    in_word = !space;
  }
  return words;
}

/// About the tokens a local model's tokenizer makes of `text`, neither high nor low: 4 per 3
/// words or one per 4 bytes, whichever is more (all-MiniLM-L6-v2's WordPiece: 29 tokens of
/// 20 rare words, estimated 36; 757 of 400 words of markdown, estimated 689; 127 of 125 CJK
/// characters, estimated 94). `estimate_text_tokens`, generous for pacing, put 20-word texts
/// at 49, 1.7 times their share beside texts capped at the model's limit.
uint64_t estimate_model_tokens(std::string_view text) noexcept {
  uint64_t words = (count_words(text) * 4 + 2) / 3;
  uint64_t quarters = (uint64_t{text.size()} + 3) / 4;
  return std::max(words, quarters);
}

} // namespace

uint64_t estimate_text_tokens(std::string_view text) noexcept {
  uint64_t thirds = (uint64_t{text.size()} + 2) / 3;
  return std::max(count_words(text), thirds);
}

uint64_t estimate_prompt_tokens(const score_item& item) noexcept {
  if (item.call) {
    const auto& c = *item.call;
    uint64_t tokens = estimate_text_tokens(c.hypothesis);
    if (!c.messages.empty()) {
      // The conversation's JSON text: its keys and quotes stand in for each message's overhead.
      tokens += estimate_text_tokens(c.messages);
    } else {
      tokens += estimate_text_tokens(c.prompt);
      if (item.kind == "chat") {
        tokens += chat_message_overhead_tokens;
      }
    }
    return tokens;
  }
  uint64_t tokens = estimate_text_tokens(item.solution_str);
  for (const auto& reference : item.ground_truth) {
    tokens += estimate_text_tokens(reference);
  }
  if (item.kind == "embedding") {
    // Its /v1/embeddings call sends these texts and at most an instruction: a template's 64
    // tokens made the ratio learned from short texts a third too low for long ones, whose
    // first call drew a 429.
    return tokens + estimate_text_tokens(item.options) + embedding_instruction_tokens;
  }
  return tokens + estimate_text_tokens(item.extra_info) + item_template_tokens;
}

uint64_t estimate_model_work(const score_item& item, uint64_t max_input_tokens) noexcept {
  constexpr uint64_t special_tokens = 2;
  // A text's attention grows with the square of its length: all-MiniLM-L6-v2 on the CPU took
  // 1.3 times as long a token for texts at its 256-token cap as for 30-token ones.
  constexpr uint64_t attention_tokens = 512;
  // Tokenizing reads the whole text, though the model sees only its beginning: on the CPU
  // all-MiniLM-L6-v2's tokenizer took 100 ms a megabyte (a 256-token text's model work 40 ms),
  // about 128 tokens past the cap a unit. Left out, one 1 MB text taught admission a pace
  // 4 times too slow, and a 5,000-item batch took its fallback (helper-58).
  constexpr uint64_t tokens_read_per_unit = 128;
  auto capped = [max_input_tokens](uint64_t tokens) {
    tokens += special_tokens;
    uint64_t past = 0;
    if (max_input_tokens > 0 && tokens > max_input_tokens) {
      past = tokens - max_input_tokens;
      tokens = max_input_tokens;
    }
    return tokens + tokens * tokens / attention_tokens + past / tokens_read_per_unit;
  };
  if (item.call) {
    const auto& c = *item.call;
    auto text = c.messages.empty() ? estimate_model_tokens(c.prompt)
                                   : estimate_model_tokens(c.messages);
    return capped(text + estimate_model_tokens(c.hypothesis));
  }
  uint64_t work = capped(estimate_model_tokens(item.solution_str));
  for (const auto& reference : item.ground_truth) {
    work += capped(estimate_model_tokens(reference));
  }
  return work;
}

uint64_t estimate_work(const score_item& item, const work_rule& rule) noexcept {
  if (rule.completion_default > 0 && item.call
      && (item.kind == "chat" || item.kind == "generate")) {
    return estimate_completion_tokens(item, rule.completion_default);
  }
  return rule.input_cap > 0 ? estimate_model_work(item, rule.input_cap) : 0;
}

uint64_t estimate_completion_tokens(const score_item& item, uint64_t default_max_tokens) noexcept {
  if (item.call) {
    auto per_text = item.call->max_tokens ? uint64_t{*item.call->max_tokens} : default_max_tokens;
    return per_text * std::max<uint64_t>(item.call->n, 1);
  }
  return default_max_tokens;
}

} // namespace arbiter
