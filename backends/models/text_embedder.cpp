#include "backends/models/text_embedder.hpp"

#include <algorithm>
#include <numeric>

#include "backends/tokenizers/tokenizer.hpp"

namespace arbiter::backends::models {

text_embedder::~text_embedder() = default;

std::shared_ptr<const text_embedder> text_embedder::load(const std::string& folder,
                                                         const model_options& options) {
  std::shared_ptr<text_embedder> out{new text_embedder{}};
  out->model_ = bert_embedder::load(folder, options);
  out->tokenizer_ = std::make_unique<tokenizers::tokenizer>(
    tokenizers::tokenizer::from_file(folder + "/tokenizer.json"));
  return out;
}

std::vector<std::vector<double>> text_embedder::embed(const std::vector<std::string>& texts,
                                                      size_t max_batch_tokens,
                                                      size_t* tokens) const {
  const size_t max_tokens = model_->info().max_tokens;
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(texts.size());
  size_t total = 0;
  for (const auto& text : texts) {
    ids.push_back(tokenizer_->encode(text, max_tokens).ids);
    total += ids.back().size();
  }
  if (tokens != nullptr) {
    *tokens = total;
  }
  // Shortest first, in forward calls of at most `max_batch_tokens` tokens (one longer input
  // runs alone); the model pads nothing.
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  std::vector<std::vector<double>> out(texts.size());
  size_t next = 0;
  while (next < order.size()) {
    std::vector<std::vector<int64_t>> chunk;
    std::vector<size_t> owners;
    size_t tokens_in_call = 0;
    while (next < order.size()
           && (chunk.empty() || tokens_in_call + ids[order[next]].size() <= max_batch_tokens)) {
      tokens_in_call += ids[order[next]].size();
      owners.push_back(order[next]);
      chunk.push_back(std::move(ids[order[next]]));
      ++next;
    }
    auto vectors = model_->embed(chunk);
    for (size_t k = 0; k < owners.size(); ++k) {
      out[owners[k]].assign(vectors[k].begin(), vectors[k].end());
    }
  }
  return out;
}

} // namespace arbiter::backends::models
