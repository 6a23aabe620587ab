#pragma once

// Text in, vectors out: a model folder's tokenizer (tokenizer.json) in front of its native
// embedder. Inputs longer than the model takes are truncated, as sentence-transformers does;
// a batch is tokenized on torch's intra-op threads and cut into forward calls of at most
// `max_batch_tokens` tokens (shortest first; the model pads nothing but, on a GPU, attention),
// and an input's vector does not depend on the others.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/models/bert_embedder.hpp"

namespace arbiter::backends::tokenizers {
class tokenizer;
}

namespace arbiter::backends::models {

class text_embedder {
public:
  /// Loads the model and `folder`/tokenizer.json; throws std::runtime_error naming the file.
  static std::shared_ptr<const text_embedder> load(const std::string& folder,
                                                   const model_options& options = {});
  ~text_embedder();

  /// One vector per text, in order; a text repeated in `texts` is embedded once. `tokens`,
  /// when given, gets each text's token count (after truncation to the model's `max_tokens`,
  /// padding excluded), in the same order, a repeated text's at each place.
  std::vector<std::vector<double>> embed(const std::vector<std::string>& texts,
                                         size_t max_batch_tokens = 16384,
                                         std::vector<uint32_t>* tokens = nullptr) const;

  const model_info& info() const noexcept {
    return model_->info();
  }

private:
  text_embedder() = default;
  std::unique_ptr<tokenizers::tokenizer> tokenizer_;
  std::unique_ptr<bert_embedder> model_;
};

} // namespace arbiter::backends::models
