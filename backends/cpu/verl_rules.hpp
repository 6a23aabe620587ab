#pragma once

// verl 0.9.1's rule rewards (verl/utils/reward_score), ported to give the same score as the
// Python functions on every input: the same extraction, normalisation, slicing on code points,
// exceptions swallowed where verl swallows them. tests/backends/make_rule_reward_corpus.py
// records verl's own results; tests/backends/verl_rules_test.cpp requires equality.
//
// verl passes one ground truth (search_r1: a list of targets). Each function here takes a
// list: an answer is correct when it is correct against any of them, as search_r1's em_check
// does; with one reference that is verl's function exactly.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::backends::cpu::verl {

/// `gsm8k.compute_score` options.
struct gsm8k_options {
  /// "strict" (the last "#### N") or "flexible" (the last number anywhere).
  bool flexible = false;
  double format_score = 0.0;
  double score = 1.0;
};

/// `gsm8k.compute_score(solution_str, ground_truth, method, format_score, score)`: 0 when no
/// answer is found in the last 300 characters, `score` when it equals `ground_truth`, else
/// `format_score`.
double gsm8k(std::string_view solution_str, const std::vector<std::string>& ground_truth,
             const gsm8k_options& options);

/// `math_reward.compute_score(solution_str, ground_truth)`: 1.0 when the last `\boxed{...}`
/// (or `\boxed ...`) is equivalent to `ground_truth` after `strip_string`, else 0.0.
double math(std::string_view solution_str, const std::vector<std::string>& ground_truth);

/// `math_reward.strip_string`, or nullopt where Python raises (is_equiv then compares the raw
/// strings).
std::optional<std::string> math_strip_string(std::string_view text);

/// What `math_dapo.compute_score` returns.
struct math_dapo_result {
  /// 1.0 when correct, -1.0 when not.
  double score = -1.0;
  bool acc = false;
  /// The normalised prediction; nullopt for Python's None (strict box mode, no box).
  std::optional<std::string> pred;
};

/// `math_dapo.compute_score(solution_str, ground_truth, strict_box_verify)`: the last
/// "Answer: ..." line of the last 300 characters, normalised, against the normalised
/// `ground_truth`; when there is none, the last `\boxed{}` of the last 100 characters against
/// `ground_truth` as it is. `strict_box_verify` uses only the box.
math_dapo_result math_dapo(std::string_view solution_str,
                           const std::vector<std::string>& ground_truth, bool strict_box_verify);

/// `math_dapo.normalize_final_answer`.
std::string normalize_final_answer(std::string_view final_answer);

/// `search_r1_like_qa_em.compute_score` options.
struct search_r1_options {
  double format_score = 0.0;
  double score = 1.0;
};

/// `search_r1_like_qa_em.compute_score(solution_str, {"target": targets})`: the last
/// `<answer>...</answer>` against each target, both SQuAD-normalised; `score` (a quarter of it
/// when there are more than ten opening or closing tags) on a match, `format_score` when the
/// answer matches none, 0 when there is no answer.
double search_r1_qa_em(std::string_view solution_str, const std::vector<std::string>& targets,
                       const search_r1_options& options);

} // namespace arbiter::backends::cpu::verl
