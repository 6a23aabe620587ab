#include "backends/rewards/info_gain_math.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "backends/rewards/text_similarity.hpp"
#include "common/enum_names.hpp"

namespace arbiter::backends::rewards {

namespace {

using json = nlohmann::json;

/// InfoReasoner's BRIEF_PROMPTS["default"].
constexpr std::string_view brief_instruction =
  "Answer the following question as briefly as possible.\n";

/// An NLI model's class, in the label order of DeBERTa-MNLI's outputs.
enum class nli_class : uint8_t { contradiction, neutral, entailment };

/// The argmax of `p`; ties go to the earlier class in label order (torch.argmax's rule).
nli_class argmax(const nli_probs& p) {
  nli_class best = nli_class::contradiction;
  double best_p = p.contradiction;
  if (p.neutral > best_p) {
    best = nli_class::neutral;
    best_p = p.neutral;
  }
  if (p.entailment > best_p) {
    best = nli_class::entailment;
  }
  return best;
}

/// log Σ exp(values[i]) over the `indices`, stable (the maximum is factored out).
template <typename Indices>
double log_sum_exp(const std::vector<double>& values, const Indices& indices) {
  double top = -std::numeric_limits<double>::infinity();
  for (size_t i : indices) {
    top = std::max(top, values[i]);
  }
  if (std::isinf(top)) {
    return top;
  }
  double sum = 0.0;
  for (size_t i : indices) {
    sum += std::exp(values[i] - top);
  }
  return top + std::log(sum);
}

std::vector<size_t> all_indices(size_t n) {
  std::vector<size_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = i;
  }
  return out;
}

/// The members of each cluster, by cluster id (ids need not be dense: empty clusters stay
/// empty).
std::vector<std::vector<size_t>> cluster_members(const std::vector<uint32_t>& cluster_ids) {
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < cluster_ids.size(); ++i) {
    if (cluster_ids[i] >= members.size()) {
      members.resize(size_t{cluster_ids[i]} + 1);
    }
    members[cluster_ids[i]].push_back(i);
  }
  return members;
}

/// The index of the pair (i, j), i < j, in the order `ig_side_pairs` lists sample pairs.
size_t sample_pair_index(size_t n, size_t i, size_t j) {
  return i * (2 * n - i - 1) / 2 + (j - i - 1);
}

/// How many NLI pairs `ig_side_pairs` lists: the soft block (2 per sample and answer) and the
/// clustering block (2 per sample pair).
struct pair_layout {
  size_t answer_pairs = 0;
  size_t sample_pairs = 0;
};

pair_layout layout_of(ig_variant variant, size_t n_samples, size_t n_answers) {
  const size_t answer_pairs = 2 * n_samples * n_answers;
  const size_t sample_pairs = n_samples * (n_samples - 1);
  switch (variant) {
    case ig_variant::soft:
      return {answer_pairs, 0};
    case ig_variant::hard:
      return {answer_pairs, sample_pairs};
    case ig_variant::se_rao:
    case ig_variant::se_discrete:
      return {0, sample_pairs};
  }
  return {};
}

json samples_detail(const std::vector<ig_sample>& samples) {
  json out = json::array();
  for (const auto& s : samples) {
    out.push_back({{"text", s.text}, {"mean_loglik", s.mean_logprob}, {"length", s.tokens}});
  }
  return out;
}

/// `detail[key]`, or null when `detail` has no such key.
json member_or_null(const json& detail, const char* key) {
  auto it = detail.find(key);
  return it == detail.end() ? json(nullptr) : *it;
}

/// A side's detail without what `ig_item_detail` lifts to the item's top level.
json side_extras(const json& detail) {
  json out = json::object();
  for (const char* key : {"value", "weights", "cluster_ids"}) {
    if (auto it = detail.find(key); it != detail.end()) {
      out[key] = *it;
    }
  }
  return out;
}

} // namespace

constexpr auto ig_variant_names = names_of<ig_variant::se_discrete>("soft", "hard", "se_rao",
                                                                    "se_discrete");

const char* to_string(ig_variant v) noexcept {
  return ig_variant_names[v];
}

std::optional<ig_variant> parse_ig_variant(std::string_view name) {
  return ig_variant_names.parse(name);
}

constexpr auto ig_clustering_names = names_of<ig_clustering::loose>("strict", "loose");

const char* to_string(ig_clustering c) noexcept {
  return ig_clustering_names[c];
}

std::optional<ig_clustering> parse_ig_clustering(std::string_view name) {
  return ig_clustering_names.parse(name);
}

const std::vector<std::string>& ig_stop_sequences() {
  static const std::vector<std::string> stops = {"\n\n\n\n", "\n\n\n", "\n\n", "\n",
                                                 "Question:", "Context:"};
  return stops;
}

std::string ig_prompt(std::string_view question, std::string_view context,
                      size_t max_context_words) {
  std::string prompt{brief_instruction};
  if (!context.empty()) {
    prompt += "Context: ";
    auto words = python_split(context);
    if (words.size() <= max_context_words) {
      prompt += context;
    } else {
      for (size_t i = 0; i < max_context_words; ++i) {
        if (i > 0) {
          prompt += ' ';
        }
        prompt += words[i];
      }
    }
    prompt += '\n';
  }
  prompt += "Question: ";
  prompt += question;
  prompt += "\nAnswer:";
  return prompt;
}

std::string ig_question(std::string_view question) {
  std::string out{question};
  if (out.empty() || out.back() != '?') {
    out += '?';
  }
  return out;
}

std::vector<nli_pair> ig_side_pairs(ig_variant variant, std::string_view question,
                                    const std::vector<ig_sample>& samples,
                                    const std::vector<std::string>& answers) {
  const std::string q = ig_question(question);
  auto with_question = [&q](std::string_view text) {
    std::string out = q;
    out += ' ';
    out += text;
    return out;
  };
  const auto layout = layout_of(variant, samples.size(), answers.size());
  std::vector<nli_pair> pairs;
  pairs.reserve(layout.answer_pairs + layout.sample_pairs);
  if (layout.answer_pairs != 0) {
    for (const auto& answer : answers) {
      const std::string qa = with_question(answer);
      for (const auto& sample : samples) {
        std::string qr = with_question(sample.text);
        pairs.push_back({qr, qa});
        pairs.push_back({qa, std::move(qr)});
      }
    }
  }
  if (layout.sample_pairs != 0) {
    std::vector<std::string> texts;
    texts.reserve(samples.size());
    for (const auto& sample : samples) {
      texts.push_back(with_question(sample.text));
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      for (size_t j = i + 1; j < texts.size(); ++j) {
        pairs.push_back({texts[i], texts[j]});
        pairs.push_back({texts[j], texts[i]});
      }
    }
  }
  return pairs;
}

ig_side_result ig_side_score(ig_variant variant, ig_clustering clustering, double threshold,
                             std::string_view /*question*/,
                             const std::vector<ig_sample>& samples,
                             const std::vector<std::string>& answers,
                             const std::vector<nli_probs>& probs) {
  const size_t n = samples.size();
  if (n == 0) {
    throw std::invalid_argument("info_gain: no samples");
  }
  for (const auto& s : samples) {
    if (!std::isfinite(s.mean_logprob)) {
      throw std::invalid_argument("info_gain: a sample's mean log-probability is not finite");
    }
  }
  const bool uses_answers = variant == ig_variant::soft || variant == ig_variant::hard;
  if (uses_answers && answers.empty()) {
    throw std::invalid_argument(std::string{"info_gain: variant "} + to_string(variant)
                                + " needs at least one gold answer");
  }
  const size_t n_answers = uses_answers ? answers.size() : 0;
  const auto layout = layout_of(variant, n, n_answers);
  if (probs.size() != layout.answer_pairs + layout.sample_pairs) {
    throw std::invalid_argument("info_gain: " + std::to_string(probs.size())
                                + " NLI results for " + to_string(variant) + " with "
                                + std::to_string(n) + " samples and "
                                + std::to_string(n_answers) + " answers; expected "
                                + std::to_string(layout.answer_pairs + layout.sample_pairs));
  }

  ig_side_result result;
  const std::vector<double> weights = ig_weights(samples);
  result.detail["samples"] = samples_detail(samples);
  result.detail["weights"] = weights;

  // The (q r ⇒ q a) and (q a ⇒ q r) results of sample r and answer a (answer-major pairs).
  auto forward_ra = [&](size_t r, size_t a) -> const nli_probs& {
    return probs[2 * (a * n + r)];
  };
  auto backward_ra = [&](size_t r, size_t a) -> const nli_probs& {
    return probs[2 * (a * n + r) + 1];
  };

  if (uses_answers) {
    std::vector<double> resp_entails_ans(n * n_answers);
    std::vector<double> ans_entails_resp(n * n_answers);
    for (size_t r = 0; r < n; ++r) {
      for (size_t a = 0; a < n_answers; ++a) {
        resp_entails_ans[r * n_answers + a] = forward_ra(r, a).entailment;
        ans_entails_resp[r * n_answers + a] = backward_ra(r, a).entailment;
      }
    }
    result.detail["entailment"] = {{"n_responses", n},
                                   {"n_answers", n_answers},
                                   {"resp_entails_ans", resp_entails_ans},
                                   {"ans_entails_resp", ans_entails_resp}};
  }

  if (variant == ig_variant::soft) {
    double best = -std::numeric_limits<double>::infinity();
    for (size_t a = 0; a < n_answers; ++a) {
      double mass = 0.0;
      for (size_t r = 0; r < n; ++r) {
        mass += weights[r] * std::max(forward_ra(r, a).entailment, backward_ra(r, a).entailment);
      }
      best = std::max(best, mass);
    }
    result.value = best;
  } else {
    const nli_probs* sample_probs = probs.data() + layout.answer_pairs;
    const auto cluster_ids = connected_components(n, [&](size_t i, size_t j) {
      const size_t k = sample_pair_index(n, i, j);
      return ig_equivalent(clustering, threshold, sample_probs[2 * k], sample_probs[2 * k + 1]);
    });
    result.detail["cluster_ids"] = cluster_ids;
    if (variant == ig_variant::hard) {
      auto matches_an_answer = [&](size_t r) {
        for (size_t a = 0; a < n_answers; ++a) {
          if (ig_equivalent(clustering, threshold, forward_ra(r, a), backward_ra(r, a))) {
            return true;
          }
        }
        return false;
      };
      double mass = 0.0;
      for (const auto& cluster : cluster_members(cluster_ids)) {
        if (std::any_of(cluster.begin(), cluster.end(), matches_an_answer)) {
          for (size_t r : cluster) {
            mass += weights[r];
          }
        }
      }
      result.value = mass;
    } else if (variant == ig_variant::se_rao) {
      result.value = semantic_entropy_rao(samples, cluster_ids);
    } else {
      result.value = semantic_entropy_discrete(cluster_ids);
    }
  }
  result.detail["value"] = result.value;
  return result;
}

json ig_item_detail(const ig_side_result& with_context, const ig_side_result& without_context) {
  return {
    {"with_context", member_or_null(with_context.detail, "samples")},
    {"no_context", member_or_null(without_context.detail, "samples")},
    {"entailment_with_context", member_or_null(with_context.detail, "entailment")},
    {"entailment_no_context", member_or_null(without_context.detail, "entailment")},
    {"sides",
     {{"with_context", side_extras(with_context.detail)},
      {"no_context", side_extras(without_context.detail)}}},
  };
}

double ig_delta(ig_variant variant, double with_context, double without_context) noexcept {
  switch (variant) {
    case ig_variant::soft:
    case ig_variant::hard:
      return with_context - without_context;
    case ig_variant::se_rao:
    case ig_variant::se_discrete:
      return without_context - with_context;
  }
  return 0.0;
}

std::vector<double> ig_weights(const std::vector<ig_sample>& samples) {
  std::vector<double> logprobs;
  logprobs.reserve(samples.size());
  for (const auto& s : samples) {
    logprobs.push_back(s.mean_logprob);
  }
  const double log_z = log_sum_exp(logprobs, all_indices(logprobs.size()));
  std::vector<double> weights;
  weights.reserve(samples.size());
  for (double m : logprobs) {
    weights.push_back(std::exp(m - log_z));
  }
  return weights;
}

double semantic_entropy_rao(const std::vector<ig_sample>& samples,
                            const std::vector<uint32_t>& cluster_ids) {
  if (samples.size() != cluster_ids.size()) {
    throw std::invalid_argument("semantic_entropy_rao: " + std::to_string(samples.size())
                                + " samples but " + std::to_string(cluster_ids.size())
                                + " cluster ids");
  }
  std::vector<double> normalized;
  normalized.reserve(samples.size());
  for (const auto& s : samples) {
    normalized.push_back(s.mean_logprob);
  }
  const double log_z = log_sum_exp(normalized, all_indices(normalized.size()));
  for (double& l : normalized) {
    l -= log_z;
  }
  double entropy = 0.0;
  for (const auto& cluster : cluster_members(cluster_ids)) {
    if (cluster.empty()) {
      continue;
    }
    const double log_p = log_sum_exp(normalized, cluster);
    entropy -= std::exp(log_p) * log_p;
  }
  return entropy;
}

double semantic_entropy_discrete(const std::vector<uint32_t>& cluster_ids) {
  const auto n = static_cast<double>(cluster_ids.size());
  double entropy = 0.0;
  for (const auto& cluster : cluster_members(cluster_ids)) {
    if (cluster.empty()) {
      continue;
    }
    const double p = static_cast<double>(cluster.size()) / n;
    entropy -= p * std::log(p);
  }
  return entropy;
}

bool ig_equivalent(ig_clustering clustering, double threshold, const nli_probs& forward,
                   const nli_probs& backward) noexcept {
  switch (clustering) {
    case ig_clustering::strict:
      return forward.entailment > threshold && backward.entailment > threshold;
    case ig_clustering::loose: {
      const nli_class f = argmax(forward);
      const nli_class b = argmax(backward);
      return f != nli_class::contradiction && b != nli_class::contradiction
             && !(f == nli_class::neutral && b == nli_class::neutral);
    }
  }
  return false;
}

} // namespace arbiter::backends::rewards
