#include "common/token_estimate.hpp"

#include <algorithm>

namespace arbiter {

uint64_t estimate_text_tokens(std::string_view text) noexcept {
  uint64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in_word) {
      ++words;
    }
    in_word = !space;
  }
  uint64_t thirds = (uint64_t{text.size()} + 2) / 3;
  return std::max(words, thirds);
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

uint64_t estimate_completion_tokens(const score_item& item, uint64_t default_max_tokens) noexcept {
  if (item.call) {
    auto per_text = item.call->max_tokens ? uint64_t{*item.call->max_tokens} : default_max_tokens;
    return per_text * std::max<uint64_t>(item.call->n, 1);
  }
  return default_max_tokens;
}

} // namespace arbiter
