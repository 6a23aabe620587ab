#pragma once

// A BERT-family sentence embedder (all-MiniLM-L6-v2 and its kin) run natively with libtorch:
// post-LN encoder, mean (or CLS) pooling, L2 normalization — what sentence-transformers
// computes for such a folder. The interface holds no torch type, so only bert_embedder.cpp
// pays for <torch/torch.h>.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/models/model_options.hpp"

namespace arbiter::backends::models {

class bert_embedder {
public:
  /// Loads `folder` (config.json, model.safetensors or its index, optional 1_Pooling/config.json
  /// and sentence_bert_config.json). Throws std::runtime_error naming the file and the problem:
  /// a missing file, an unsupported model_type, activation, pooling or dtype, a missing
  /// tensor, or a tensor whose shape differs from what config.json implies.
  static std::unique_ptr<bert_embedder> load(const std::string& folder,
                                             const model_options& options = {});
  ~bert_embedder();

  /// One vector per input: `ids` are complete token sequences ([CLS] ... [SEP]), at most
  /// `info().max_tokens` long (longer ones throw std::invalid_argument). Nothing is padded:
  /// the linear layers take every token of every input at once, attention runs per run of
  /// inputs of equal length. An input's vector does not depend on what else shares the batch.
  std::vector<std::vector<float>> embed(const std::vector<std::vector<int64_t>>& ids) const;

  const model_info& info() const noexcept;

private:
  struct impl;
  explicit bert_embedder(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace arbiter::backends::models
