#include "backends/embedding_scoring.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/replay/replay_log.hpp"
#include "backends/rewards/reward_options.hpp"
#include "backends/rewards/text_similarity.hpp"

namespace arbiter::backends {

namespace {

/// What one embedding item sends and how it is scored: built the same way by
/// embedding_texts and score_embeddings from the item and the model name.
struct embedding_plan {
  embedding_options options;
  /// The references it is scored against: indices into ground_truth.
  std::vector<size_t> references;
  /// The candidate as sent (with the instruction, when there is one).
  std::string candidate;
};

constexpr const char* no_reference = "embedding needs at least one reference in ground_truth";

embedding_plan plan_embedding(std::string_view model, const score_item& item) {
  embedding_plan plan;
  if (item.call) {
    // A pass-through call: its text as it is, no references, no options.
    plan.candidate = item.call->prompt;
    return plan;
  }
  auto merged = merged_options(item);
  plan.options = parse_embedding_options(merged);
  plan.references = rewards::filter_references(item.ground_truth, merged);
  std::optional<std::string_view> instruction;
  if (plan.options.instruction) {
    if (!plan.options.instruction->empty()) {
      instruction = *plan.options.instruction;
    }
  } else if (rewards::ascii_lower(model).find("qwen3-embedding") != std::string::npos) {
    instruction = default_embedding_instruction;
  }
  if (instruction) {
    plan.candidate = "Instruct: ";
    plan.candidate += *instruction;
    plan.candidate += "\nQuery:";
    plan.candidate += item.solution_str;
  } else {
    plan.candidate = item.solution_str;
  }
  return plan;
}

/// The L2 norm of the first `dims` values of `v`.
double norm(const std::vector<double>& v, size_t dims) {
  double sum = 0.0;
  for (size_t i = 0; i < dims; ++i) {
    sum += v[i] * v[i];
  }
  return std::sqrt(sum);
}

/// The largest magnitude among the first `dims` values of `v`: 0 for a zero vector, NaN or
/// infinity when one of them is not finite (a model that overflowed, e.g. in half precision).
double largest_magnitude(const std::vector<double>& v, size_t dims) {
  double most = 0.0;
  for (size_t i = 0; i < dims; ++i) {
    if (!std::isfinite(v[i])) {
      return v[i];
    }
    most = std::max(most, std::abs(v[i]));
  }
  return most;
}

/// The cosine of `a` and `b` (both nonzero and finite) over their first `dims` values,
/// `a_norm` being `a`'s norm. Taken directly, as it always was (so logs replay bit for bit),
/// unless a norm, their product or the dot product leaves double's range (values beyond
/// about 1e154 or below 1e-154): then over the vectors scaled to a largest magnitude of 1.
double cosine_of(const std::vector<double>& a, double a_norm, const std::vector<double>& b,
                 size_t dims) {
  double b_norm = norm(b, dims);
  double dot = 0.0;
  for (size_t i = 0; i < dims; ++i) {
    dot += a[i] * b[i];
  }
  double denominator = a_norm * b_norm;
  if (std::isnormal(a_norm) && std::isnormal(b_norm) && std::isnormal(denominator)
      && std::isfinite(dot)) {
    return std::clamp(dot / denominator, -1.0, 1.0);
  }
  double a_scale = largest_magnitude(a, dims);
  double b_scale = largest_magnitude(b, dims);
  double a_sum = 0.0;
  double b_sum = 0.0;
  double scaled_dot = 0.0;
  for (size_t i = 0; i < dims; ++i) {
    double x = a[i] / a_scale;
    double y = b[i] / b_scale;
    a_sum += x * x;
    b_sum += y * y;
    scaled_dot += x * y;
  }
  return std::clamp(scaled_dot / (std::sqrt(a_sum) * std::sqrt(b_sum)), -1.0, 1.0);
}

/// Scores one embedding item from its vectors.
item_outcome score_embedding(const score_item& item, const embedding_plan& plan,
                             const input_span& span,
                             const std::vector<std::vector<double>>& vectors,
                             const std::vector<uint32_t>& tokens) {
  if (item.call) {
    auto output = std::make_shared<model_output>();
    const auto& vector = vectors[span.first];
    output->embedding.assign(vector.begin(), vector.end());
    if (span.first < tokens.size()) {
      output->prompt_tokens = tokens[span.first];
    }
    item_outcome out;
    out.output = std::move(output);
    return out;
  }
  if (span.references == 0) {
    return failure(no_reference);
  }
  const auto& candidate = vectors[span.first];
  for (uint32_t r = 1; r <= span.references; ++r) {
    const auto& reference = vectors[span.first + r];
    if (reference.size() != candidate.size()) {
      throw embedding_mismatch{"embeddings have different dimensions ("
                               + std::to_string(candidate.size()) + " and "
                               + std::to_string(reference.size()) + ")"};
    }
  }
  // Keeping the first d values and re-normalizing (Matryoshka) leaves the cosine of the
  // prefixes, so the cosine is taken over the prefix directly.
  size_t dims = candidate.size();
  if (plan.options.dimensions > 0) {
    if (plan.options.dimensions > dims) {
      return failure("dimensions " + std::to_string(plan.options.dimensions)
                     + " is more than the embedding's " + std::to_string(dims));
    }
    dims = plan.options.dimensions;
  }
  double candidate_scale = largest_magnitude(candidate, dims);
  if (!std::isfinite(candidate_scale)) {
    return failure("the embedding of solution_str holds a value that is not finite (NaN or "
                   "infinity)");
  }
  if (candidate_scale == 0.0) {
    return failure("the embedding of solution_str is a zero vector");
  }
  double candidate_norm = norm(candidate, dims);
  std::optional<double> best;
  size_t best_reference = 0;
  for (uint32_t r = 1; r <= span.references; ++r) {
    const auto& reference = vectors[span.first + r];
    double reference_scale = largest_magnitude(reference, dims);
    if (!std::isfinite(reference_scale)) {
      return failure("the embedding of ground_truth[" + std::to_string(plan.references[r - 1])
                     + "] holds a value that is not finite (NaN or infinity)");
    }
    if (reference_scale == 0.0) {
      continue;
    }
    double cosine = cosine_of(candidate, candidate_norm, reference, dims);
    if (!best || cosine > *best) {
      best = cosine;
      best_reference = plan.references[r - 1];
    }
  }
  if (!best) {
    return failure("the embedding of every reference is a zero vector");
  }
  double penalty = rewards::length_penalty(item.ground_truth[best_reference], item.solution_str,
                                           plan.options.length_penalty,
                                           plan.options.length_threshold);
  return success(rewards::cosine_to_unit(*best) * penalty);
}

} // namespace

std::string embedding_unscorable(const score_item& item) {
  return item.kind == "embedding" && !item.call && item.ground_truth.empty() ? no_reference : "";
}

embedding_inputs embedding_texts(const std::vector<shared_item>& items, std::string_view model) {
  embedding_inputs out;
  for (const auto& item : items) {
    auto plan = plan_embedding(model, *item);
    input_span span;
    span.first = static_cast<uint32_t>(out.texts.size());
    span.references = static_cast<uint32_t>(plan.references.size());
    out.texts.push_back(std::move(plan.candidate));
    for (size_t r : plan.references) {
      out.texts.push_back(item->ground_truth[r]);
    }
    out.spans.push_back(span);
  }
  return out;
}

std::vector<item_outcome> score_embeddings(const std::vector<shared_item>& items,
                                           std::string_view model,
                                           const embedding_inputs& inputs,
                                           const std::vector<std::vector<double>>& vectors,
                                           bool keep_vectors) {
  if (inputs.spans.size() != items.size() || vectors.size() != inputs.texts.size()) {
    throw std::invalid_argument{"embedding inputs do not fit their items or vectors"};
  }
  std::vector<item_outcome> outcomes;
  outcomes.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& span = inputs.spans[i];
    if (uint64_t{span.first} + span.references >= vectors.size()) {
      throw std::invalid_argument{"embedding span lies outside the vectors"};
    }
    auto plan = plan_embedding(model, *items[i]);
    if (plan.references.size() != span.references) {
      throw std::invalid_argument{"embedding span " + std::to_string(i) + " has "
                                  + std::to_string(span.references) + " references, its item "
                                  + std::to_string(plan.references.size())};
    }
    outcomes.push_back(score_embedding(*items[i], plan, span, vectors, inputs.tokens));
    if (keep_vectors) {
      replay::embedding_evidence evidence;
      evidence.model = std::string{model};
      evidence.vectors.assign(vectors.begin() + span.first,
                              vectors.begin() + span.first + span.references + 1);
      outcomes.back().evidence = replay::encode(evidence);
    }
  }
  return outcomes;
}

void charge_reward_tokens(const std::vector<shared_item>& items, const embedding_inputs& inputs,
                          std::vector<item_outcome>& outcomes) {
  for (size_t i = 0; i < items.size() && i < outcomes.size() && i < inputs.spans.size(); ++i) {
    if (items[i]->call) {
      continue; // a pass-through text: score_embedding gave it its text's part
    }
    const auto& span = inputs.spans[i];
    auto output = std::make_shared<model_output>();
    for (uint32_t t = span.first; t <= span.first + span.references && t < inputs.tokens.size();
         ++t) {
      output->prompt_tokens += inputs.tokens[t];
    }
    outcomes[i].output = std::move(output);
  }
}

} // namespace arbiter::backends
