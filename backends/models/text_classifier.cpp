#include "backends/models/text_classifier.hpp"

#include <filesystem>
#include <stdexcept>

#include <ATen/Parallel.h>

#include "backends/models/passes.hpp"
#include "backends/tokenizers/tokenizer.hpp"

namespace arbiter::backends::models {

namespace {

tokenizers::tokenizer load_tokenizer(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string spm = folder + "/spm.model";
  const std::string json = folder + "/tokenizer.json";
  if (fs::exists(spm)) {
    return tokenizers::tokenizer::from_sentencepiece(spm, fs::exists(json) ? json : "");
  }
  if (fs::exists(json)) {
    return tokenizers::tokenizer::from_file(json);
  }
  throw std::runtime_error(folder + ": no tokenizer (neither spm.model nor tokenizer.json)");
}

} // namespace

text_classifier::~text_classifier() = default;

std::shared_ptr<const text_classifier> text_classifier::load(const std::string& folder,
                                                             const model_options& options) {
  std::shared_ptr<text_classifier> out{new text_classifier{}};
  out->model_ = deberta_classifier::load(folder, options);
  auto labels = out->model_->nli_labels();
  if (!labels) {
    std::string names;
    for (const auto& l : out->model_->labels()) {
      names += (names.empty() ? "" : ", ") + l;
    }
    throw std::runtime_error(folder + "/config.json: id2label (" + names
                             + ") must name entailment, neutral and contradiction");
  }
  out->labels_ = *labels;
  out->tokenizer_ = std::make_unique<tokenizers::tokenizer>(load_tokenizer(folder));
  const auto& info = out->model_->info();
  out->pass_overhead_ = pass_overhead_tokens(options.pass_overhead_tokens,
                                             info.device.rfind("cuda", 0) == 0,
                                             info.dtype != "f32", 32);
  return out;
}

std::vector<nli_probabilities> text_classifier::nli(
  const std::vector<std::pair<std::string, std::string>>& pairs, size_t max_batch_tokens,
  size_t* tokens) const {
  const size_t max_tokens = model_->info().max_tokens;
  // Tokenized on torch's intra-op threads: on a GPU the model waits for this, not the CPU.
  std::vector<tokenizers::encoding> encoded(pairs.size());
  at::parallel_for(0, static_cast<int64_t>(pairs.size()), 8, [&](int64_t begin, int64_t end) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
      encoded[i] = tokenizer_->encode_pair(pairs[i].first, pairs[i].second, max_tokens);
    }
  });
  size_t total = 0;
  for (const auto& e : encoded) {
    total += e.ids.size();
  }
  if (tokens != nullptr) {
    *tokens = total;
  }
  std::vector<size_t> lengths;
  lengths.reserve(encoded.size());
  for (const auto& e : encoded) {
    lengths.push_back(e.ids.size());
  }
  std::vector<nli_probabilities> out(pairs.size());
  for (const auto& pass : plan_passes(lengths, max_batch_tokens, pass_overhead_)) {
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<int64_t>> type_ids;
    for (auto i : pass.inputs) {
      ids.push_back(std::move(encoded[i].ids));
      type_ids.push_back(std::move(encoded[i].type_ids));
    }
    auto probs = model_->probabilities(ids, type_ids);
    for (size_t k = 0; k < pass.inputs.size(); ++k) {
      const auto& p = probs[k];
      out[pass.inputs[k]] = {p.at(labels_.entailment), p.at(labels_.neutral),
                             p.at(labels_.contradiction)};
    }
  }
  return out;
}

} // namespace arbiter::backends::models
