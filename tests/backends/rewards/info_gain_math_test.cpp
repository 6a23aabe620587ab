#include "backends/rewards/info_gain_math.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::rewards;
using json = nlohmann::json;

namespace {

constexpr double tolerance = 1e-9;

/// NLI results for one direction: {entailment, neutral, contradiction}.
using triple = nli_probs;

/// One side's fixed inputs and NLI results, written as tables.
struct side_fixture {
  std::vector<ig_sample> samples;
  /// answer_forward[r][a]: (q r ⇒ q a); answer_backward[r][a]: (q a ⇒ q r).
  std::vector<std::vector<triple>> answer_forward;
  std::vector<std::vector<triple>> answer_backward;
  /// sample_pairs[{i, j}] for i < j: {(q r_i ⇒ q r_j), (q r_j ⇒ q r_i)}.
  std::map<std::pair<size_t, size_t>, std::pair<triple, triple>> sample_pairs;
};

const std::vector<std::string> answers = {"Paris", "City of Paris"};
const std::string question = "What is the capital of France";

/// With context: strict clusters {0,1,3} (0~1 and 1~3 but not 0~3), {2}, {4}; loose clusters
/// {0,1,3,4}, {2}.
side_fixture with_context_side() {
  side_fixture s;
  s.samples = {{"Paris", -0.21, 1},
               {"paris, France", -0.93, 3},
               {"Lyon", -1.7, 1},
               {"The city of Paris", -0.48, 4},
               {"Marseille", -2.6, 2}};
  s.answer_forward = {
    {{0.97, 0.02, 0.01}, {0.62, 0.33, 0.05}},
    {{0.70, 0.25, 0.05}, {0.40, 0.50, 0.10}},
    {{0.01, 0.04, 0.95}, {0.02, 0.08, 0.90}},
    {{0.55, 0.40, 0.05}, {0.93, 0.05, 0.02}},
    {{0.03, 0.07, 0.90}, {0.04, 0.06, 0.90}},
  };
  s.answer_backward = {
    {{0.96, 0.03, 0.01}, {0.44, 0.50, 0.06}},
    {{0.35, 0.60, 0.05}, {0.30, 0.62, 0.08}},
    {{0.02, 0.05, 0.93}, {0.03, 0.07, 0.90}},
    {{0.85, 0.10, 0.05}, {0.90, 0.07, 0.03}},
    {{0.05, 0.10, 0.85}, {0.06, 0.09, 0.85}},
  };
  s.sample_pairs = {
    {{0, 1}, {{0.91, 0.06, 0.03}, {0.72, 0.20, 0.08}}},
    {{0, 2}, {{0.02, 0.08, 0.90}, {0.05, 0.15, 0.80}}},
    {{0, 3}, {{0.45, 0.50, 0.05}, {0.81, 0.14, 0.05}}},
    {{0, 4}, {{0.10, 0.60, 0.30}, {0.20, 0.55, 0.25}}},
    {{1, 2}, {{0.03, 0.17, 0.80}, {0.04, 0.16, 0.80}}},
    {{1, 3}, {{0.66, 0.30, 0.04}, {0.58, 0.32, 0.10}}},
    {{1, 4}, {{0.30, 0.30, 0.40}, {0.52, 0.40, 0.08}}},
    {{2, 3}, {{0.05, 0.25, 0.70}, {0.02, 0.18, 0.80}}},
    {{2, 4}, {{0.40, 0.55, 0.05}, {0.35, 0.60, 0.05}}},
    {{3, 4}, {{0.12, 0.80, 0.08}, {0.50, 0.45, 0.05}}},
  };
  return s;
}

/// Without context: clusters {0,2}, {1}, {3} under both rules.
side_fixture without_context_side() {
  side_fixture s;
  s.samples = {{"London", -0.35, 1},
               {"Paris", -1.2, 1},
               {"I think London", -0.9, 3},
               {"Berlin", -1.05, 1}};
  s.answer_forward = {
    {{0.02, 0.08, 0.90}, {0.02, 0.10, 0.88}},
    {{0.95, 0.04, 0.01}, {0.58, 0.38, 0.04}},
    {{0.03, 0.10, 0.87}, {0.02, 0.11, 0.87}},
    {{0.01, 0.09, 0.90}, {0.02, 0.08, 0.90}},
  };
  s.answer_backward = {
    {{0.03, 0.07, 0.90}, {0.03, 0.09, 0.88}},
    {{0.94, 0.05, 0.01}, {0.47, 0.48, 0.05}},
    {{0.04, 0.09, 0.87}, {0.03, 0.10, 0.87}},
    {{0.02, 0.08, 0.90}, {0.03, 0.07, 0.90}},
  };
  s.sample_pairs = {
    {{0, 1}, {{0.03, 0.12, 0.85}, {0.02, 0.10, 0.88}}},
    {{0, 2}, {{0.77, 0.20, 0.03}, {0.88, 0.10, 0.02}}},
    {{0, 3}, {{0.02, 0.13, 0.85}, {0.04, 0.16, 0.80}}},
    {{1, 2}, {{0.04, 0.16, 0.80}, {0.03, 0.12, 0.85}}},
    {{1, 3}, {{0.10, 0.75, 0.15}, {0.20, 0.50, 0.30}}},
    {{2, 3}, {{0.05, 0.15, 0.80}, {0.03, 0.17, 0.80}}},
  };
  return s;
}

bool uses_answers(ig_variant v) {
  return v == ig_variant::soft || v == ig_variant::hard;
}

bool clusters(ig_variant v) {
  return v != ig_variant::soft;
}

/// The NLI results in the order the header documents for `ig_side_pairs`.
std::vector<nli_probs> probs_in_pair_order(ig_variant v, const side_fixture& s) {
  std::vector<nli_probs> probs;
  const size_t n = s.samples.size();
  if (uses_answers(v)) {
    for (size_t a = 0; a < answers.size(); ++a) {
      for (size_t r = 0; r < n; ++r) {
        probs.push_back(s.answer_forward[r][a]);
        probs.push_back(s.answer_backward[r][a]);
      }
    }
  }
  if (clusters(v)) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        probs.push_back(s.sample_pairs.at({i, j}).first);
        probs.push_back(s.sample_pairs.at({i, j}).second);
      }
    }
  }
  return probs;
}

// ---- the reference, straight from the formulas ---------------------------------------------

std::vector<double> reference_weights(const side_fixture& s) {
  double z = 0.0;
  for (const auto& sample : s.samples) {
    z += std::exp(sample.mean_logprob);
  }
  std::vector<double> w;
  for (const auto& sample : s.samples) {
    w.push_back(std::exp(sample.mean_logprob) / z);
  }
  return w;
}

bool reference_equivalent(ig_clustering c, const triple& f, const triple& b) {
  if (c == ig_clustering::strict) {
    return f.entailment > 0.5 && b.entailment > 0.5;
  }
  // Written for the fixtures, which have no ties.
  auto is_contradiction = [](const triple& t) {
    return t.contradiction > t.neutral && t.contradiction > t.entailment;
  };
  auto is_neutral = [](const triple& t) {
    return t.neutral > t.contradiction && t.neutral > t.entailment;
  };
  return !is_contradiction(f) && !is_contradiction(b) && !(is_neutral(f) && is_neutral(b));
}

/// Each sample's cluster, as the smallest index it is connected to (label propagation).
std::vector<size_t> reference_labels(ig_clustering c, const side_fixture& s) {
  const size_t n = s.samples.size();
  std::vector<size_t> label(n);
  for (size_t i = 0; i < n; ++i) {
    label[i] = i;
  }
  bool changed = true;
  while (changed) {
    changed = false;
    for (const auto& [ij, fb] : s.sample_pairs) {
      if (!reference_equivalent(c, fb.first, fb.second)) {
        continue;
      }
      size_t low = std::min(label[ij.first], label[ij.second]);
      for (size_t k : {ij.first, ij.second}) {
        if (label[k] != low) {
          label[k] = low;
          changed = true;
        }
      }
    }
  }
  return label;
}

/// p(C) for each cluster label.
std::map<size_t, double> reference_cluster_mass(ig_clustering c, const side_fixture& s) {
  auto label = reference_labels(c, s);
  auto w = reference_weights(s);
  std::map<size_t, double> mass;
  for (size_t i = 0; i < w.size(); ++i) {
    mass[label[i]] += w[i];
  }
  return mass;
}

double reference_side(ig_variant v, ig_clustering c, const side_fixture& s) {
  const size_t n = s.samples.size();
  auto w = reference_weights(s);
  switch (v) {
    case ig_variant::soft: {
      double best = -1.0;
      for (size_t a = 0; a < answers.size(); ++a) {
        double sum = 0.0;
        for (size_t r = 0; r < n; ++r) {
          sum += w[r] * std::max(s.answer_forward[r][a].entailment,
                                 s.answer_backward[r][a].entailment);
        }
        best = std::max(best, sum);
      }
      return best;
    }
    case ig_variant::hard: {
      auto label = reference_labels(c, s);
      std::map<size_t, bool> correct;
      for (size_t r = 0; r < n; ++r) {
        for (size_t a = 0; a < answers.size(); ++a) {
          if (reference_equivalent(c, s.answer_forward[r][a], s.answer_backward[r][a])) {
            correct[label[r]] = true;
          }
        }
      }
      double value = 0.0;
      for (size_t r = 0; r < n; ++r) {
        if (correct[label[r]]) {
          value += w[r];
        }
      }
      return value;
    }
    case ig_variant::se_rao: {
      double entropy = 0.0;
      for (const auto& [label, p] : reference_cluster_mass(c, s)) {
        entropy -= p * std::log(p);
      }
      return entropy;
    }
    case ig_variant::se_discrete: {
      std::map<size_t, double> count;
      for (size_t label : reference_labels(c, s)) {
        count[label] += 1.0;
      }
      double entropy = 0.0;
      for (const auto& [label, k] : count) {
        double p = k / static_cast<double>(n);
        entropy -= p * std::log(p);
      }
      return entropy;
    }
  }
  return 0.0;
}

ig_side_result score(ig_variant v, ig_clustering c, const side_fixture& s) {
  return ig_side_score(v, c, default_ig_threshold, question, s.samples, answers,
                       probs_in_pair_order(v, s));
}

double delta(ig_variant v, ig_clustering c) {
  return ig_delta(v, score(v, c, with_context_side()).value,
                  score(v, c, without_context_side()).value);
}

void expect_delta_matches_reference(ig_variant v, ig_clustering c) {
  SCOPED_TRACE(std::string{to_string(v)} + ", " + to_string(c));
  const auto with = with_context_side();
  const auto without = without_context_side();
  const double ref_with = reference_side(v, c, with);
  const double ref_without = reference_side(v, c, without);
  EXPECT_NEAR(score(v, c, with).value, ref_with, tolerance);
  EXPECT_NEAR(score(v, c, without).value, ref_without, tolerance);
  const double ref_delta = uses_answers(v) ? ref_with - ref_without : ref_without - ref_with;
  EXPECT_NEAR(delta(v, c), ref_delta, tolerance);
}

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no throw";
}

} // namespace

// ---- names and constants ------------------------------------------------------------------

TEST(InfoGainMath, NamesRoundTrip) {
  for (auto v : {ig_variant::soft, ig_variant::hard, ig_variant::se_rao,
                 ig_variant::se_discrete}) {
    EXPECT_EQ(parse_ig_variant(to_string(v)), v);
  }
  for (auto c : {ig_clustering::strict, ig_clustering::loose}) {
    EXPECT_EQ(parse_ig_clustering(to_string(c)), c);
  }
  EXPECT_EQ(parse_ig_variant("SE_RAO"), std::nullopt);
  EXPECT_EQ(parse_ig_clustering("bi"), std::nullopt);
}

TEST(InfoGainMath, StopSequencesAreTheGenerators) {
  const std::vector<std::string> want = {"\n\n\n\n", "\n\n\n", "\n\n", "\n", "Question:",
                                         "Context:"};
  EXPECT_EQ(ig_stop_sequences(), want);
}

// ---- the prompt and the question ----------------------------------------------------------

TEST(IgPrompt, WithContext) {
  EXPECT_EQ(ig_prompt("Who wrote Hamlet", "Doc 1: Hamlet is a play.\nDoc 2: by Shakespeare", 4096),
            "Answer the following question as briefly as possible.\n"
            "Context: Doc 1: Hamlet is a play.\nDoc 2: by Shakespeare\n"
            "Question: Who wrote Hamlet\n"
            "Answer:");
}

TEST(IgPrompt, BaselineHasNoContextLine) {
  EXPECT_EQ(ig_prompt("Who wrote Hamlet?", "", 4096),
            "Answer the following question as briefly as possible.\n"
            "Question: Who wrote Hamlet?\n"
            "Answer:");
}

TEST(IgPrompt, LongContextIsCutToItsFirstWords) {
  const std::string context = "alpha  beta\ngamma\tdelta epsilon";
  auto with_words = [&](size_t k) { return ig_prompt("q", context, k); };
  EXPECT_EQ(with_words(2), "Answer the following question as briefly as possible.\n"
                           "Context: alpha beta\nQuestion: q\nAnswer:");
  EXPECT_EQ(with_words(4), "Answer the following question as briefly as possible.\n"
                           "Context: alpha beta gamma delta\nQuestion: q\nAnswer:");
  // At most k words: the context as it is, its own spacing kept.
  EXPECT_EQ(with_words(5), "Answer the following question as briefly as possible.\n"
                           "Context: " + context + "\nQuestion: q\nAnswer:");
  EXPECT_EQ(with_words(0), "Answer the following question as briefly as possible.\n"
                           "Context: \nQuestion: q\nAnswer:");
}

TEST(IgPrompt, WhitespaceOnlyContextStillGetsItsLine) {
  EXPECT_EQ(ig_prompt("q", " \n", 4096), "Answer the following question as briefly as possible.\n"
                                         "Context:  \n\nQuestion: q\nAnswer:");
}

TEST(IgQuestion, AppendsAQuestionMarkUnlessThereIsOne) {
  EXPECT_EQ(ig_question("Who wrote Hamlet"), "Who wrote Hamlet?");
  EXPECT_EQ(ig_question("Who wrote Hamlet?"), "Who wrote Hamlet?");
  EXPECT_EQ(ig_question("Who? "), "Who? ?");
  EXPECT_EQ(ig_question(""), "?");
  EXPECT_EQ(ig_question("Qui a écrit « Hamlet »"), "Qui a écrit « Hamlet »?");
}

// ---- the pairs ----------------------------------------------------------------------------

TEST(IgSidePairs, SoftPairsAreAnswerMajorWithBothDirections) {
  const std::vector<ig_sample> samples = {{"r0", -1.0, 1}, {"r1", -2.0, 1}};
  auto pairs = ig_side_pairs(ig_variant::soft, "Q", samples, {"a0", "a1"});
  const std::vector<std::pair<std::string, std::string>> want = {
    {"Q? r0", "Q? a0"}, {"Q? a0", "Q? r0"}, {"Q? r1", "Q? a0"}, {"Q? a0", "Q? r1"},
    {"Q? r0", "Q? a1"}, {"Q? a1", "Q? r0"}, {"Q? r1", "Q? a1"}, {"Q? a1", "Q? r1"},
  };
  ASSERT_EQ(pairs.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(pairs[k].premise, want[k].first) << k;
    EXPECT_EQ(pairs[k].hypothesis, want[k].second) << k;
  }
}

TEST(IgSidePairs, ClusteringPairsFollowTheSoftOnesForHard) {
  const std::vector<ig_sample> samples = {{"r0", 0, 1}, {"r1", 0, 1}, {"r2", 0, 1}};
  const std::vector<std::pair<std::string, std::string>> sample_pairs = {
    {"Q? r0", "Q? r1"}, {"Q? r1", "Q? r0"}, {"Q? r0", "Q? r2"},
    {"Q? r2", "Q? r0"}, {"Q? r1", "Q? r2"}, {"Q? r2", "Q? r1"},
  };
  auto soft = ig_side_pairs(ig_variant::soft, "Q?", samples, {"a"});
  auto hard = ig_side_pairs(ig_variant::hard, "Q?", samples, {"a"});
  ASSERT_EQ(soft.size(), 6u);
  ASSERT_EQ(hard.size(), soft.size() + sample_pairs.size());
  for (size_t k = 0; k < soft.size(); ++k) {
    EXPECT_EQ(hard[k].premise, soft[k].premise);
    EXPECT_EQ(hard[k].hypothesis, soft[k].hypothesis);
  }
  for (auto v : {ig_variant::se_rao, ig_variant::se_discrete}) {
    auto pairs = ig_side_pairs(v, "Q?", samples, {"a"});
    ASSERT_EQ(pairs.size(), sample_pairs.size());
    for (size_t k = 0; k < pairs.size(); ++k) {
      EXPECT_EQ(pairs[k].premise, sample_pairs[k].first);
      EXPECT_EQ(pairs[k].hypothesis, sample_pairs[k].second);
      EXPECT_EQ(hard[soft.size() + k].premise, sample_pairs[k].first);
      EXPECT_EQ(hard[soft.size() + k].hypothesis, sample_pairs[k].second);
    }
  }
}

TEST(IgSidePairs, CountsForTheFixtures) {
  for (auto v : {ig_variant::soft, ig_variant::hard, ig_variant::se_rao,
                 ig_variant::se_discrete}) {
    for (const auto& side : {with_context_side(), without_context_side()}) {
      EXPECT_EQ(ig_side_pairs(v, question, side.samples, answers).size(),
                probs_in_pair_order(v, side).size())
        << to_string(v);
    }
  }
}

// ---- ΔIG against the formulas -------------------------------------------------------------

TEST(IgSideScore, SoftDeltaMatchesTheFormula) {
  expect_delta_matches_reference(ig_variant::soft, ig_clustering::strict);
  // Clustering does not enter the soft variant.
  EXPECT_EQ(delta(ig_variant::soft, ig_clustering::strict),
            delta(ig_variant::soft, ig_clustering::loose));
}

TEST(IgSideScore, HardDeltaMatchesTheFormula) {
  expect_delta_matches_reference(ig_variant::hard, ig_clustering::strict);
  expect_delta_matches_reference(ig_variant::hard, ig_clustering::loose);
  EXPECT_NE(delta(ig_variant::hard, ig_clustering::strict),
            delta(ig_variant::hard, ig_clustering::loose));
}

TEST(IgSideScore, SemanticEntropyDeltasMatchTheFormulas) {
  for (auto v : {ig_variant::se_rao, ig_variant::se_discrete}) {
    expect_delta_matches_reference(v, ig_clustering::strict);
    expect_delta_matches_reference(v, ig_clustering::loose);
  }
}

TEST(IgSideScore, ClustersAreConnectedComponents) {
  const auto with = with_context_side();
  // Strict: 0~1 and 1~3 join 0 and 3 although 0 and 3 are not equivalent.
  EXPECT_EQ(score(ig_variant::se_discrete, ig_clustering::strict, with).detail["cluster_ids"],
            json({0, 0, 1, 0, 2}));
  // Loose also joins 0~3 (neutral + entailment) and 3~4.
  EXPECT_EQ(score(ig_variant::se_discrete, ig_clustering::loose, with).detail["cluster_ids"],
            json({0, 0, 1, 0, 0}));
  EXPECT_EQ(score(ig_variant::hard, ig_clustering::strict, without_context_side())
              .detail["cluster_ids"],
            json({0, 1, 0, 2}));
}

TEST(IgSideScore, SoftDetailIsTheServicesMatrices) {
  const auto with = with_context_side();
  auto result = score(ig_variant::soft, ig_clustering::strict, with);
  const json& d = result.detail;
  ASSERT_EQ(d["samples"].size(), 5u);
  EXPECT_EQ(d["samples"][3], json({{"text", "The city of Paris"}, {"mean_loglik", -0.48},
                                   {"length", 4}}));
  EXPECT_EQ(d["entailment"]["n_responses"], 5);
  EXPECT_EQ(d["entailment"]["n_answers"], 2);
  for (size_t r = 0; r < 5; ++r) {
    for (size_t a = 0; a < 2; ++a) {
      EXPECT_EQ(d["entailment"]["resp_entails_ans"][r * 2 + a].get<double>(),
                with.answer_forward[r][a].entailment);
      EXPECT_EQ(d["entailment"]["ans_entails_resp"][r * 2 + a].get<double>(),
                with.answer_backward[r][a].entailment);
    }
  }
  auto w = reference_weights(with);
  ASSERT_EQ(d["weights"].size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(d["weights"][i].get<double>(), w[i], tolerance);
  }
  EXPECT_EQ(d["value"].get<double>(), result.value);
  EXPECT_FALSE(d.contains("cluster_ids"));
  EXPECT_FALSE(score(ig_variant::se_rao, ig_clustering::strict, with).detail.contains("entailment"));
}

TEST(IgItemDetail, HasTheServicesShape) {
  auto with = score(ig_variant::hard, ig_clustering::strict, with_context_side());
  auto without = score(ig_variant::hard, ig_clustering::strict, without_context_side());
  auto d = ig_item_detail(with, without);
  EXPECT_EQ(d["with_context"], with.detail["samples"]);
  EXPECT_EQ(d["no_context"], without.detail["samples"]);
  EXPECT_EQ(d["entailment_with_context"], with.detail["entailment"]);
  EXPECT_EQ(d["entailment_no_context"], without.detail["entailment"]);
  EXPECT_EQ(d["sides"]["with_context"],
            json({{"value", with.value}, {"weights", with.detail["weights"]},
                  {"cluster_ids", with.detail["cluster_ids"]}}));
  EXPECT_EQ(d["sides"]["no_context"]["value"], without.value);
  EXPECT_EQ(d.size(), 5u);

  auto se_with = score(ig_variant::se_rao, ig_clustering::strict, with_context_side());
  auto se_without = score(ig_variant::se_rao, ig_clustering::strict, without_context_side());
  auto se = ig_item_detail(se_with, se_without);
  EXPECT_TRUE(se["entailment_with_context"].is_null());
  EXPECT_TRUE(se["entailment_no_context"].is_null());
  EXPECT_EQ(se["no_context"].size(), 4u);
}

// ---- errors -------------------------------------------------------------------------------

TEST(IgSideScore, RefusesProbabilitiesOfTheWrongLength) {
  const auto side = with_context_side();
  for (auto v : {ig_variant::soft, ig_variant::hard, ig_variant::se_rao,
                 ig_variant::se_discrete}) {
    auto probs = probs_in_pair_order(v, side);
    probs.pop_back();
    EXPECT_THROW(ig_side_score(v, ig_clustering::strict, 0.5, question, side.samples, answers,
                               probs),
                 std::invalid_argument)
      << to_string(v);
    probs.resize(probs.size() + 2);
    EXPECT_THROW(ig_side_score(v, ig_clustering::strict, 0.5, question, side.samples, answers,
                               probs),
                 std::invalid_argument)
      << to_string(v);
  }
  // Soft probabilities handed to hard (the clustering block is missing).
  EXPECT_EQ(invalid_argument_message([&] {
              ig_side_score(ig_variant::hard, ig_clustering::strict, 0.5, question, side.samples,
                            answers, probs_in_pair_order(ig_variant::soft, side));
            }),
            "info_gain: 20 NLI results for hard with 5 samples and 2 answers; expected 40");
}

TEST(IgSideScore, RefusesMissingSamplesAnswersAndBadLikelihoods) {
  EXPECT_EQ(invalid_argument_message([] {
              ig_side_score(ig_variant::se_rao, ig_clustering::strict, 0.5, "q", {}, {}, {});
            }),
            "info_gain: no samples");
  const std::vector<ig_sample> one = {{"x", -1.0, 1}};
  EXPECT_EQ(invalid_argument_message([&] {
              ig_side_score(ig_variant::soft, ig_clustering::strict, 0.5, "q", one, {}, {});
            }),
            "info_gain: variant soft needs at least one gold answer");
  EXPECT_THROW(ig_side_score(ig_variant::hard, ig_clustering::strict, 0.5, "q", one, {}, {}),
               std::invalid_argument);
  // The entropies need no answers; one sample has no pairs and zero entropy.
  auto single = ig_side_score(ig_variant::se_rao, ig_clustering::strict, 0.5, "q", one, {}, {});
  EXPECT_EQ(single.value, 0.0);
  const std::vector<ig_sample> bad = {{"x", -1.0, 1},
                                      {"y", std::numeric_limits<double>::quiet_NaN(), 1}};
  EXPECT_THROW(ig_side_score(ig_variant::se_discrete, ig_clustering::strict, 0.5, "q", bad, {},
                             {{}, {}}),
               std::invalid_argument);
}

// ---- equivalence --------------------------------------------------------------------------

TEST(IgEquivalent, StrictNeedsEntailmentAboveTheThresholdBothWays) {
  const nli_probs yes{0.8, 0.1, 0.1};
  const nli_probs no{0.3, 0.6, 0.1};
  const nli_probs edge{0.5, 0.25, 0.25};
  EXPECT_TRUE(ig_equivalent(ig_clustering::strict, 0.5, yes, yes));
  EXPECT_FALSE(ig_equivalent(ig_clustering::strict, 0.5, yes, no));
  EXPECT_FALSE(ig_equivalent(ig_clustering::strict, 0.5, no, yes));
  EXPECT_FALSE(ig_equivalent(ig_clustering::strict, 0.5, edge, yes)); // > not >=
  EXPECT_TRUE(ig_equivalent(ig_clustering::strict, 0.25, no, yes));
  EXPECT_FALSE(ig_equivalent(ig_clustering::strict, 0.9, yes, yes));
}

TEST(IgEquivalent, LooseRefusesContradictionAndDoubleNeutral) {
  const nli_probs entails{0.45, 0.35, 0.20};
  const nli_probs neutral{0.30, 0.50, 0.20};
  const nli_probs contradicts{0.30, 0.30, 0.40};
  EXPECT_TRUE(ig_equivalent(ig_clustering::loose, 0.5, entails, entails));
  EXPECT_TRUE(ig_equivalent(ig_clustering::loose, 0.5, entails, neutral));
  EXPECT_TRUE(ig_equivalent(ig_clustering::loose, 0.5, neutral, entails));
  EXPECT_FALSE(ig_equivalent(ig_clustering::loose, 0.5, neutral, neutral));
  EXPECT_FALSE(ig_equivalent(ig_clustering::loose, 0.5, entails, contradicts));
  EXPECT_FALSE(ig_equivalent(ig_clustering::loose, 0.5, contradicts, entails));
  // The threshold plays no part: 0.45 entailment is below it, yet the argmax is entailment.
  EXPECT_FALSE(ig_equivalent(ig_clustering::strict, 0.5, entails, entails));
}

TEST(IgEquivalent, LooseArgmaxTiesGoToTheEarlierLabel) {
  const nli_probs entails{0.6, 0.2, 0.2};
  // Label order contradiction, neutral, entailment (torch.argmax returns the first maximum).
  const nli_probs neutral_entailment_tie{0.4, 0.4, 0.2};       // neutral
  const nli_probs contradiction_entailment_tie{0.45, 0.1, 0.45}; // contradiction
  const nli_probs three_way_tie{1.0 / 3, 1.0 / 3, 1.0 / 3};     // contradiction
  EXPECT_TRUE(ig_equivalent(ig_clustering::loose, 0.5, neutral_entailment_tie, entails));
  EXPECT_FALSE(ig_equivalent(ig_clustering::loose, 0.5, neutral_entailment_tie,
                             neutral_entailment_tie));
  EXPECT_FALSE(ig_equivalent(ig_clustering::loose, 0.5, contradiction_entailment_tie, entails));
  EXPECT_FALSE(ig_equivalent(ig_clustering::loose, 0.5, three_way_tie, entails));
}

TEST(ConnectedComponents, IdsInOrderOfFirstMember) {
  // 0~3, 3~1 (a chain through a later index), 2 alone, 4~5.
  auto equivalent = [](size_t i, size_t j) {
    return (i == 0 && j == 3) || (i == 1 && j == 3) || (i == 4 && j == 5);
  };
  EXPECT_EQ(connected_components(6, equivalent), (std::vector<uint32_t>{0, 0, 1, 0, 2, 2}));
  EXPECT_EQ(connected_components(3, [](size_t, size_t) { return false; }),
            (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(connected_components(3, [](size_t, size_t) { return true; }),
            (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_TRUE(connected_components(0, [](size_t, size_t) { return true; }).empty());
}

// ---- weights and entropies ----------------------------------------------------------------

TEST(IgWeights, SoftmaxOfMeanLogProbabilitiesIsStable) {
  auto w = ig_weights({{"a", -1000.0, 1}, {"b", -1001.0, 1}, {"c", -1000.0, 1}});
  const double e = std::exp(-1.0);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NEAR(w[0], 1.0 / (2.0 + e), tolerance);
  EXPECT_NEAR(w[1], e / (2.0 + e), tolerance);
  EXPECT_NEAR(w[2], 1.0 / (2.0 + e), tolerance);
  EXPECT_TRUE(ig_weights({}).empty());
}

TEST(SemanticEntropy, RaoIsTheEntropyOfTheClusterMasses) {
  const std::vector<ig_sample> samples = {{"a", -0.5, 1}, {"b", -1.5, 1}, {"c", -0.5, 1},
                                          {"d", -3.0, 1}};
  const double z = 2 * std::exp(-0.5) + std::exp(-1.5) + std::exp(-3.0);
  const double p0 = (std::exp(-0.5) + std::exp(-1.5)) / z;
  const double p1 = (std::exp(-0.5) + std::exp(-3.0)) / z;
  EXPECT_NEAR(semantic_entropy_rao(samples, {0, 0, 1, 1}),
              -(p0 * std::log(p0) + p1 * std::log(p1)), tolerance);
  EXPECT_NEAR(semantic_entropy_rao(samples, {0, 0, 0, 0}), 0.0, tolerance);
  // Equal likelihoods in singleton clusters: log N.
  const std::vector<ig_sample> equal = {{"a", -2.0, 1}, {"b", -2.0, 1}, {"c", -2.0, 1}};
  EXPECT_NEAR(semantic_entropy_rao(equal, {0, 1, 2}), std::log(3.0), tolerance);
  EXPECT_EQ(semantic_entropy_rao({}, {}), 0.0);
  EXPECT_THROW(semantic_entropy_rao(samples, {0, 1}), std::invalid_argument);
}

TEST(SemanticEntropy, DiscreteIsTheEntropyOfTheClusterSizes) {
  EXPECT_NEAR(semantic_entropy_discrete({0, 0, 1, 2}),
              -(0.5 * std::log(0.5) + 2 * 0.25 * std::log(0.25)), tolerance);
  EXPECT_NEAR(semantic_entropy_discrete({0, 0, 0}), 0.0, tolerance);
  EXPECT_NEAR(semantic_entropy_discrete({0, 1, 2, 3, 4}), std::log(5.0), tolerance);
  EXPECT_EQ(semantic_entropy_discrete({}), 0.0);
}

TEST(IgDelta, SignsByVariant) {
  EXPECT_EQ(ig_delta(ig_variant::soft, 0.75, 0.25), 0.5);
  EXPECT_EQ(ig_delta(ig_variant::hard, 0.25, 0.75), -0.5);
  EXPECT_EQ(ig_delta(ig_variant::se_rao, 0.25, 0.75), 0.5);
  EXPECT_EQ(ig_delta(ig_variant::se_discrete, 0.75, 0.25), -0.5);
}
