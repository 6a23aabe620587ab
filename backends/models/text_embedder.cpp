#include "backends/models/text_embedder.hpp"

#include <algorithm>
#include <numeric>

#include <ATen/Parallel.h>

#include "backends/tokenizers/tokenizer.hpp"
#include "common/distinct.hpp"

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
                                                      std::vector<uint32_t>* tokens) const {
  const size_t max_tokens = model_->info().max_tokens;
  // A text repeated in the batch is tokenized and embedded once: a GRPO group's rollouts are
  // scored against the same reference, so a batch of one group holds it once per rollout.
  const auto distinct = find_distinct(texts);
  // Tokenized on torch's intra-op threads: on a GPU the model waits for this, not the CPU.
  std::vector<std::vector<int64_t>> ids(distinct.first.size());
  at::parallel_for(0, static_cast<int64_t>(ids.size()), 8, [&](int64_t begin, int64_t end) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
      ids[i] = tokenizer_->encode(texts[distinct.first[i]], max_tokens).ids;
    }
  });
  if (tokens != nullptr) {
    tokens->clear();
    for (auto d : distinct.same_as) {
      tokens->push_back(static_cast<uint32_t>(ids[d].size()));
    }
  }
  // Shortest first, in forward calls of at most `max_batch_tokens` tokens (one longer input
  // runs alone); the model pads nothing but, on a GPU, attention (bert_embedder).
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  std::vector<std::vector<double>> vectors_of(ids.size());
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
      vectors_of[owners[k]].assign(vectors[k].begin(), vectors[k].end());
    }
  }
  std::vector<std::vector<double>> out(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    out[i] = vectors_of[distinct.same_as[i]];
  }
  return out;
}

} // namespace arbiter::backends::models
