#pragma once

// The information-gain reward's arithmetic (InfoReasoner's ΔIG and the semantic-entropy
// variants; shared/reference/models.md §1.2–1.3). Pure functions: the reward graph samples the
// answers and runs the NLI pairs these functions ask for, then hands the results back.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace arbiter::backends::rewards {

/// Which estimator an info_gain item asks for (option `variant`).
enum class ig_variant : uint8_t {
  /// InfoReasoner's service: IG_side = max_a Σ_r w_r · max(P(r⇒a), P(a⇒r)); ΔIG = with − without.
  /// (With more than one gold answer InfoReasoner's own code computes something else: it
  /// reshapes its answer-major list of pair probabilities as if it were sample-major, which
  /// pairs weights with the wrong samples and mixes answers. This is the formula it intends; the
  /// two agree when there is one gold answer.)
  soft,
  /// IG_side = Σ over clusters with a member equivalent to a gold answer of p(C).
  hard,
  /// ΔIG = SE_rao(without) − SE_rao(with) (needs no gold answers).
  se_rao,
  /// ΔIG = SE_discrete(without) − SE_discrete(with) (needs no gold answers or likelihoods).
  se_discrete,
};

std::optional<ig_variant> parse_ig_variant(std::string_view name);
const char* to_string(ig_variant v) noexcept;

/// How two texts are judged equivalent for clustering (option `clustering`).
enum class ig_clustering : uint8_t {
  /// P(entailment) > threshold in both directions (InfoReasoner).
  strict,
  /// Neither direction's argmax is contradiction, and not both neutral (jlko's non-strict).
  /// Ties in the argmax go to the first class in the model's label order contradiction,
  /// neutral, entailment, as torch.argmax does.
  loose,
};

std::optional<ig_clustering> parse_ig_clustering(std::string_view name);
const char* to_string(ig_clustering c) noexcept;

/// The InfoReasoner defaults.
inline constexpr uint32_t default_ig_samples = 10;
inline constexpr double default_ig_temperature = 1.0;
inline constexpr uint32_t default_ig_max_new_tokens = 128;
inline constexpr size_t default_ig_max_context_words = 4096;
inline constexpr double default_ig_threshold = 0.5;

/// The stop list of the IG generator: "\n\n\n\n", "\n\n\n", "\n\n", "\n", "Question:",
/// "Context:".
const std::vector<std::string>& ig_stop_sequences();

/// The generator's raw completion prompt (no chat template, no few-shot), as InfoReasoner's
/// `make_prompt` builds it: "Answer the following question as briefly as possible.\n", then,
/// when `context` is not empty, "Context: " + the context + "\n", then "Question: " +
/// `question` + "\n" + "Answer:". The context is `context` unchanged while it has at most
/// `max_context_words` whitespace-separated words (Python `str.split()`; newlines stay), else
/// its first `max_context_words` words joined by single spaces. (A whitespace-only context is
/// not empty, so it still gets its "Context: " line, as in InfoReasoner.)
std::string ig_prompt(std::string_view question, std::string_view context,
                      size_t max_context_words);

/// One sampled answer: its text (stop sequence cut, stripped) and the mean log-probability of
/// its tokens.
struct ig_sample {
  std::string text;
  double mean_logprob = 0.0;
  uint32_t tokens = 0;
};

/// An NLI model's class probabilities for one (premise, hypothesis) pair.
struct nli_probs {
  double entailment = 0.0;
  double neutral = 0.0;
  double contradiction = 0.0;
};

/// One pair for the NLI model.
struct nli_pair {
  std::string premise;
  std::string hypothesis;
};

/// What one side (with context, or the baseline) needs and yields.
struct ig_side {
  std::vector<ig_sample> samples;
};

/// The question as the NLI texts use it: with a '?' appended unless it ends with one.
std::string ig_question(std::string_view question);

/// The NLI pairs one side needs, in a fixed order that `ig_side_score` expects back:
/// soft: for each answer a, for each sample r: (q r ⇒ q a), then (q a ⇒ q r);
/// hard: the soft pairs, then for each i < j: (q r_i ⇒ q r_j), (q r_j ⇒ q r_i);
/// se_rao, se_discrete: for each i < j: (q r_i ⇒ q r_j), (q r_j ⇒ q r_i).
/// ("q x" is ig_question(question) + " " + x.)
std::vector<nli_pair> ig_side_pairs(ig_variant variant, std::string_view question,
                                    const std::vector<ig_sample>& samples,
                                    const std::vector<std::string>& answers);

/// One side's result.
struct ig_side_result {
  /// soft/hard: the side's IG; se_*: the side's semantic entropy.
  double value = 0.0;
  /// The side's working, for the reply's details (see `ig_item_detail`):
  /// "samples": [{"text", "mean_loglik", "length" (= tokens)}], as the Python service names
  /// them; "weights": the softmax weights; "value";
  /// (soft, hard) "entailment": {"n_responses", "n_answers", "resp_entails_ans",
  /// "ans_entails_resp"}, the matrices P(q r ⇒ q a) and P(q a ⇒ q r) flattened row-major
  /// n_responses × n_answers (row = sample), so that
  /// value = max_a Σ_r weights[r] · max(resp_entails_ans[r·A+a], ans_entails_resp[r·A+a]);
  /// (hard, se_*) "cluster_ids".
  nlohmann::json detail;
};

/// Computes one side from `probs`, aligned with `ig_side_pairs(variant, question, samples,
/// answers)` for the same inputs. soft: the formula of `ig_variant::soft`. hard: the samples
/// clustered by `connected_components` with `ig_equivalent` on each sample pair's two
/// probabilities; a cluster counts when one of its samples r and a gold answer a are
/// equivalent (`ig_equivalent` on the (q r ⇒ q a), (q a ⇒ q r) probabilities); value = Σ over
/// counting clusters of Σ_{r∈C} w_r. se_rao / se_discrete: the same clustering, then
/// `semantic_entropy_rao` / `semantic_entropy_discrete`.
/// `question` takes no part in the arithmetic (the pairs carried it); it keeps the call
/// parallel to `ig_side_pairs`.
/// Throws std::invalid_argument when `samples` is empty, a sample's mean log-probability is
/// not finite, `probs` has the wrong length, or a soft/hard variant has no answers.
ig_side_result ig_side_score(ig_variant variant, ig_clustering clustering, double threshold,
                             std::string_view question, const std::vector<ig_sample>& samples,
                             const std::vector<std::string>& answers,
                             const std::vector<nli_probs>& probs);

/// One item's entry of the /compute_info_gain reply's "details", shaped as InfoReasoner's
/// service shapes it (IG/service/IG_server.py, `ItemDetail`):
/// {"with_context": [samples], "no_context": [samples],
///  "entailment_with_context": {...} or null, "entailment_no_context": {...} or null}
/// (the "samples" and "entailment" of each side's detail; entailment is null for se_*), plus
/// what the service does not send: "sides": {"with_context": {"value", "weights",
/// "cluster_ids"?}, "no_context": {...}}.
nlohmann::json ig_item_detail(const ig_side_result& with_context,
                              const ig_side_result& without_context);

/// ΔIG from the two sides: soft/hard: with − without; se_*: without − with.
double ig_delta(ig_variant variant, double with_context, double without_context) noexcept;

/// Softmax over the samples' mean log-probabilities (stable: max subtracted).
std::vector<double> ig_weights(const std::vector<ig_sample>& samples);

/// Cluster ids (0, 1, ...; in order of first member) of the connected components of the
/// equivalence graph: i ~ j when `equivalent(i, j)` for i < j.
template <typename Equivalent>
std::vector<uint32_t> connected_components(size_t n, Equivalent equivalent);

/// Semantic entropy, rao estimator: −Σ_C p(C) log p(C) with p(C) = Σ_{i∈C} softmax(mean
/// log-probs)_i, in log space: ℓ_i = m_i − logsumexp(m), log p(C) = logsumexp_{i∈C} ℓ_i,
/// SE = −Σ_C exp(log p(C)) · log p(C). 0 for no samples. Throws std::invalid_argument when
/// the sizes differ.
double semantic_entropy_rao(const std::vector<ig_sample>& samples,
                            const std::vector<uint32_t>& cluster_ids);

/// Discrete semantic entropy: −Σ_C (|C|/N) log(|C|/N). 0 for no samples.
double semantic_entropy_discrete(const std::vector<uint32_t>& cluster_ids);

/// Whether the pair is equivalent under `clustering`, given both directions' probabilities:
/// strict: forward.entailment > threshold and backward.entailment > threshold; loose: neither
/// direction's argmax is contradiction and not both are neutral (argmax ties as in
/// `ig_clustering::loose`; `threshold` is unused).
bool ig_equivalent(ig_clustering clustering, double threshold, const nli_probs& forward,
                   const nli_probs& backward) noexcept;

// ---- implementation of the template ---------------------------------------------------

template <typename Equivalent>
std::vector<uint32_t> connected_components(size_t n, Equivalent equivalent) {
  std::vector<uint32_t> parent(n);
  for (size_t i = 0; i < n; ++i) {
    parent[i] = static_cast<uint32_t>(i);
  }
  auto find = [&parent](uint32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  };
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (equivalent(i, j)) {
        auto a = find(static_cast<uint32_t>(i));
        auto b = find(static_cast<uint32_t>(j));
        if (a != b) {
          parent[std::max(a, b)] = std::min(a, b);
        }
      }
    }
  }
  std::vector<uint32_t> ids(n);
  std::vector<int64_t> label(n, -1);
  uint32_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    auto root = find(static_cast<uint32_t>(i));
    if (label[root] < 0) {
      label[root] = next++;
    }
    ids[i] = static_cast<uint32_t>(label[root]);
  }
  return ids;
}

} // namespace arbiter::backends::rewards
