#pragma once

// The `embedding` reward between texts and vectors, whoever computes the vectors (a remote
// /v1/embeddings or TEI endpoint, or a local model): which texts an item needs (its candidate,
// with an instruction for Qwen3-Embedding, and the references its options keep), and how its
// score follows from their vectors (best cosine mapped to [0, 1] × length penalty, over the
// first `dimensions` values). Pass-through items (`score_item::call`) need their one text and
// get its vector back as output.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/score_types.hpp"

namespace arbiter::backends {

/// Where one item's texts sit in a batch's text list: `texts[first]` is its candidate and
/// `texts[first + 1]` ... `texts[first + references]` its references (those its options'
/// filters keep, in ground_truth order).
struct input_span {
  uint32_t first = 0;
  uint32_t references = 0;
};

/// The texts a batch of embedding items needs, and where each item's are. `tokens`, when the
/// embedder fills it (local models), holds each text's token count; a pass-through item then
/// reports its text's count as `prompt_tokens`.
struct embedding_inputs {
  std::vector<std::string> texts;
  std::vector<input_span> spans;
  std::vector<uint32_t> tokens;
};

/// Builds the text list for `items` (kind "embedding"). `model` is the model name the
/// embedder serves: one containing "qwen3-embedding" (any case) turns the default instruction
/// on, unless the item's options set `instruction`.
embedding_inputs embedding_texts(const std::vector<shared_item>& items, std::string_view model);

/// Why an embedding reward item cannot be scored whatever its embedder answers (it has no
/// reference: a filter that keeps none keeps all), or "" when it can or is not one. The
/// scheduler fails such an item before any call (`scheduler_core::set_item_check`).
std::string embedding_unscorable(const score_item& item);

/// Vectors of one batch that cannot be compared (different dimensions): the embedder's fault.
class embedding_mismatch : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One outcome per item from `vectors[i]`, the vector of `inputs.texts[i]` (same `model` as
/// `embedding_texts`). Items fail (reward_failed) without references, over `dimensions`, or
/// when a vector is zero. Throws std::invalid_argument when `inputs` do not fit `items` or
/// `vectors`, and embedding_mismatch when an item's vectors differ in dimension. With
/// `keep_vectors` (the replay log is on) each outcome's `evidence` holds `model` and its
/// item's vectors (backends/replay/replay_log.hpp).
std::vector<item_outcome> score_embeddings(const std::vector<shared_item>& items,
                                           std::string_view model,
                                           const embedding_inputs& inputs,
                                           const std::vector<std::vector<double>>& vectors,
                                           bool keep_vectors = false);

/// Gives each reward item of `outcomes` (not a pass-through text, which has its own) the
/// tokens its texts took, `inputs.tokens` over its span, as `output->prompt_tokens`: what the
/// step accounts, the token metrics and costs count for it.
void charge_reward_tokens(const std::vector<shared_item>& items, const embedding_inputs& inputs,
                          std::vector<item_outcome>& outcomes);

} // namespace arbiter::backends
