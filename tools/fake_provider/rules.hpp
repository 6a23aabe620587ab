#pragma once

/// Deterministic "model" rules of the fake provider. Every function here is pure: the same
/// input gives the same output in every process, so tests can assert exact values.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::fake_provider {

/// 64-bit FNV-1a of `text`, continuing from `seed`.
[[nodiscard]] std::uint64_t fnv1a(std::string_view text,
                                  std::uint64_t seed = 14695981039346656037ULL);

/// Lower-cased ASCII alphanumeric runs of `text`; everything else separates words.
[[nodiscard]] std::vector<std::string> tokenize(std::string_view text);

/// Number of whitespace-separated words (the "token" count used by the TPM limit).
[[nodiscard]] std::size_t count_words(std::string_view text);

/// `text` up to the end of its `n`th whitespace-separated word (all of it when it has fewer).
[[nodiscard]] std::string_view first_words(std::string_view text, std::size_t n);

/// Jaccard similarity of the token sets of `a` and `b`; 1.0 when both are empty.
[[nodiscard]] double jaccard(std::string_view a, std::string_view b);

/// Fraction of the distinct tokens of `part` found in `whole`; 1.0 when `part` has none.
[[nodiscard]] double containment(std::string_view part, std::string_view whole);

/// Unit vector of dimension `dim`: signed hashed bag of the character trigrams of the
/// lower-cased, whitespace-collapsed text padded with one space each side. Texts sharing
/// trigrams have a high cosine; unrelated texts have a cosine near 0. Empty text gives e0.
[[nodiscard]] std::vector<float> embed(std::string_view text, std::size_t dim);

/// The "Reference:" and "Candidate:" sections of a judge prompt (labels matched without
/// regard to case; each section runs to the other label or to the end of the text).
struct judge_sections {
  bool has_reference = false;
  bool has_candidate = false;
  std::string reference;
  std::string candidate;
};

[[nodiscard]] judge_sections find_sections(std::string_view text);

/// "REWARD: 0.750" for `reward` = 0.75.
[[nodiscard]] std::string format_reward(double reward);

/// `count` words drawn from a fixed vocabulary, chained from the hash of `prompt`.
[[nodiscard]] std::vector<std::string> completion_words(std::string_view prompt,
                                                        std::size_t count);

/// The words of completion choice `choice` of `prompt` (a request's `seed`, when it has one).
/// Choice 0 without a seed is `completion_words(prompt, count)`. Otherwise the words are
/// chained from prompt + "\x1f" + ("seed=S;" when seeded) + "choice=J", and choice J > 0
/// starts with the vocabulary word J places after choice 0's first word: the first 32
/// choices of a prompt always differ, and a seed changes every choice.
[[nodiscard]] std::vector<std::string> sample_words(std::string_view prompt,
                                                    std::optional<std::uint64_t> seed,
                                                    std::size_t choice, std::size_t count);

/// Log-probability in [-0.5, 0] of `token` at `position` after `context`.
[[nodiscard]] double token_logprob(std::string_view context, std::string_view token,
                                   std::size_t position);

/// Splits generated text into logprob tokens: each piece keeps its leading space.
[[nodiscard]] std::vector<std::string> split_tokens(std::string_view text);

/// NLI class probabilities for a (premise, hypothesis) pair; they sum to 1.
struct nli_scores {
  double entailment = 0;
  double neutral = 0;
  double contradiction = 0;
};

/// c = containment(hypothesis, premise); negation mismatch = exactly one side holds one of
/// {not, no, never, none, nobody, nothing, cannot, nor, without}. Logits:
/// entailment = mismatch ? -3 : 6c - 3, neutral = 0, contradiction = mismatch ? 6c - 1 : -2;
/// probabilities are their softmax.
[[nodiscard]] nli_scores nli(std::string_view premise, std::string_view hypothesis);

/// Information gain of `context` for answering `question` with `answers`:
/// with = mean over answers of containment(answer, question + " " + context),
/// without = mean of containment(answer, question), score = max(0, with - without).
struct info_gain {
  double score = 0;
  double with_context = 0;
  double without_context = 0;
};

[[nodiscard]] info_gain compute_info_gain(std::string_view question, std::string_view context,
                                          const std::vector<std::string>& answers);

/// Go-style duration as OpenAI writes it in x-ratelimit-reset-*: "20ms", "1s", "1.5s",
/// "6m0s", "1h2m3s".
[[nodiscard]] std::string go_duration(std::chrono::milliseconds duration);

}  // namespace arbiter::fake_provider
