#pragma once

// Premise/hypothesis pairs in, NLI class probabilities out: a DeBERTa-v2/v3 model folder's
// tokenizer (spm.model through libsentencepiece, with tokenizer.json's added tokens when the
// folder has one; else tokenizer.json alone) in front of the native classifier. Pairs longer
// than the model takes are truncated longest-first, as transformers' pipelines do; a batch is
// cut into forward passes of at most `max_batch_tokens` padded tokens, shortest first, where
// padding would cost more than another pass (`plan_passes`), and a pair's probabilities do
// not depend on what else shares its batch.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/models/deberta_classifier.hpp"

namespace arbiter::backends::tokenizers {
class tokenizer;
}

namespace arbiter::backends::models {

/// One pair's class probabilities.
struct nli_probabilities {
  double entailment = 0.0;
  double neutral = 0.0;
  double contradiction = 0.0;
};

class text_classifier {
public:
  /// Loads the model and its tokenizer; throws std::runtime_error naming the file: no
  /// tokenizer, a config.json whose id2label lacks entailment, neutral or contradiction, and
  /// whatever deberta_classifier::load refuses.
  static std::shared_ptr<const text_classifier> load(const std::string& folder,
                                                     const model_options& options = {});
  ~text_classifier();

  /// One result per (premise, hypothesis), in order. `tokens`, when given, gets the tokens
  /// run (padding excluded).
  std::vector<nli_probabilities> nli(
    const std::vector<std::pair<std::string, std::string>>& pairs,
    size_t max_batch_tokens = 16384, size_t* tokens = nullptr) const;

  const model_info& info() const noexcept {
    return model_->info();
  }

private:
  text_classifier() = default;
  std::unique_ptr<tokenizers::tokenizer> tokenizer_;
  std::unique_ptr<deberta_classifier> model_;
  size_t pass_overhead_ = 32;
  nli_label_indices labels_;
};

} // namespace arbiter::backends::models
