#pragma once

// Qwen2 / Qwen3 decoders run natively with libtorch (equations in
// ../shared/reference/models.md §2.2): causal LM mode (logits, batched generation with a KV
// cache, greedy or sampled with temperature / top-p / top-k and a seed, per-token
// log-probabilities of the chosen tokens, stop tokens) and embedding mode (Qwen3-Embedding:
// last-token pooling, L2 normalization). Batches are left-padded; an output does not depend on
// what else shares its batch. No torch type in this header.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/models/model_options.hpp"

namespace arbiter::backends::models {

/// How `generate` picks tokens. temperature 0 is greedy.
struct sampling_options {
  double temperature = 0.0;
  double top_p = 1.0;
  /// 0: no top-k cut.
  uint32_t top_k = 0;
  uint32_t max_new_tokens = 64;
  /// Generation of a sequence ends after it produces one of these ids (kept in its tokens).
  std::vector<int64_t> stop_ids;
  /// When set, called with a sequence's tokens after each one it produces: true ends it there
  /// (finish_reason "stop", the token kept), as a stop string found in its text does.
  std::function<bool(const std::vector<int64_t>&)> stop_when;
  uint64_t seed = 0;
};

/// One generated continuation.
struct generation {
  std::vector<int64_t> tokens;
  /// log p of each chosen token under the model's own distribution (temperature 1, before
  /// top-k / top-p), as vLLM reports prompt-independent logprobs.
  std::vector<double> logprobs;
  /// "stop" (a stop id, or `stop_when`) or "length".
  std::string finish_reason;
};

/// One call's share of a batched `generate`: its prompt, how to sample it and how many times.
struct generation_request {
  std::vector<int64_t> prompt;
  sampling_options options;
  uint32_t n = 1;
};

class qwen_decoder {
public:
  /// Loads `folder` (config.json with model_type qwen2 or qwen3, model.safetensors or its
  /// index); throws std::runtime_error naming the file and tensor, as bert_embedder does.
  static std::unique_ptr<qwen_decoder> load(const std::string& folder,
                                            const model_options& options = {});
  ~qwen_decoder();

  /// The logits at every position of one sequence: [length][vocab].
  std::vector<std::vector<float>> logits(const std::vector<int64_t>& ids) const;

  /// Embedding mode: the final-norm hidden state of each sequence's last token, L2-normalized.
  std::vector<std::vector<float>> embed(const std::vector<std::vector<int64_t>>& ids) const;

  /// Continues each prompt `n` times (prompts × n sequences, prompt-major), batched with left
  /// padding and a KV cache. Each prompt samples with its own generator seeded by
  /// `options.seed`.
  std::vector<generation> generate(const std::vector<std::vector<int64_t>>& prompts,
                                   const sampling_options& options, uint32_t n = 1) const;

  /// Several calls in one left-padded batch: request r's `n` sequences follow its own options
  /// (temperature, top-k, top-p, max_new_tokens, stop ids) and draw from its own generator
  /// seeded by its seed, so what a request samples depends on the rest of the batch only
  /// through float rounding of its logits (which keeps greedy picks, but can flip a sampled
  /// token now and then). Result r holds request r's generations.
  std::vector<std::vector<generation>> generate(
    const std::vector<generation_request>& requests) const;

  const model_info& info() const noexcept;
  int64_t vocab_size() const noexcept;
  /// Decoding steps replayed from a CUDA graph so far (model_options::decode_graphs).
  uint64_t replayed_steps() const noexcept;

private:
  struct impl;
  explicit qwen_decoder(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace arbiter::backends::models
