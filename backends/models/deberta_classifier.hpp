#pragma once

// A DeBERTa-v2/v3 sequence classifier (the NLI model: microsoft/deberta-v2-xlarge-mnli,
// cross-encoder/nli-deberta-v3-*) run natively with libtorch: disentangled attention with
// (log-bucketed) relative positions, the conv layer after the first layer, ContextPooler and
// the classifier — what transformers' DebertaV2ForSequenceClassification computes in eval mode.
// The interface holds no torch type, so only deberta_classifier.cpp pays for <torch/torch.h>.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/models/model_options.hpp"

namespace arbiter::backends::models {

/// Where an NLI model puts its three classes (from config.json id2label, never assumed).
struct nli_label_indices {
  size_t entailment = 0;
  size_t neutral = 0;
  size_t contradiction = 0;
};

class deberta_classifier {
public:
  /// Loads `folder` (config.json with model_type "deberta-v2", model.safetensors or its
  /// index). Throws std::runtime_error naming the file and the problem: a missing file, an
  /// unsupported model_type, activation or dtype, a missing tensor, or a tensor whose shape
  /// differs from what config.json implies.
  static std::unique_ptr<deberta_classifier> load(const std::string& folder,
                                                  const model_options& options = {});
  ~deberta_classifier();

  /// One row of `labels().size()` logits per input. `ids` are complete sequences
  /// ([CLS] A [SEP] B [SEP]), 1 to `info().max_tokens` long; `type_ids` is empty (all 0) or
  /// holds one sequence per input of the same length (ignored when the model has no token
  /// types). Bad inputs throw std::invalid_argument. Inputs are padded into one batch; an
  /// input's row does not depend on what else shares the batch.
  std::vector<std::vector<float>> logits(const std::vector<std::vector<int64_t>>& ids,
                                         const std::vector<std::vector<int64_t>>& type_ids) const;

  /// softmax(logits) per input, in `labels()` order.
  std::vector<std::vector<float>> probabilities(
    const std::vector<std::vector<int64_t>>& ids,
    const std::vector<std::vector<int64_t>>& type_ids) const;

  /// Class names by index, from config.json id2label ("LABEL_i" where it has none).
  const std::vector<std::string>& labels() const noexcept;

  /// The index of the label called `name`, compared case-insensitively.
  std::optional<size_t> label_index(std::string_view name) const;

  /// entailment / neutral / contradiction by name, or nullopt when any is missing.
  std::optional<nli_label_indices> nli_labels() const;

  const model_info& info() const noexcept;

private:
  struct impl;
  explicit deberta_classifier(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace arbiter::backends::models
