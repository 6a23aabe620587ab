#pragma once

// The rollout parsing of the InfoReasoner / Search-R1 exact-match reward and its `em_info_gain`
// composite (verl/utils/reward_score/qa_em.py in dl-m9/InfoReasoner: extract_solution,
// extract_question_information, compute_score_em).
//
// The exact-match check itself is `backends::cpu::normalize_answer` / `cpu::exact_match`
// (backends/cpu/exact_match.hpp): qa_em.py's normalize_answer is the SQuAD function that file
// already ports with Python `str` semantics, and em_check scores 1 when the normalized answer
// equals some normalized gold answer.
//
// Python semantics reproduced here: "whitespace" is Python's (`python_space_at` in
// text_similarity.hpp), which is also what `re`'s \s matches; stripping is `str.strip()`.
// Case-insensitive matching of the tags and of "Question:" is ASCII-only (Python's IGNORECASE
// would also let U+017F LONG S stand for 's'; no real rollout writes that).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::backends::rewards {

/// What the composite reads from a rollout (the whole decoded sequence, prompt included).
struct search_rollout {
  /// The question, as extract_question_information finds it:
  /// 1. The user block is the text between the first "<|im_start|>user" and the first
  ///    "<|im_end|>" after it (both any case). When there is one, the question follows the
  ///    first "Question:" (any case) in it: whitespace (newlines included) after the colon is
  ///    skipped, and the question runs to the next '\n' or the end of the block. No
  ///    "Question:" in the block: nullopt (the rest of the rollout is not searched).
  /// 2. With no user block, the same after the first "Question:" (any case) anywhere, running
  ///    to the next '\n', "<|im_end|>" (any case) or the end.
  /// The question is stripped; it may be empty.
  std::optional<std::string> question;
  /// The <information>...</information> blocks (tags exact case; the first "</information>"
  /// after each opening tag closes it; blocks do not overlap), in order, each stripped; blocks
  /// that are then empty or read "and" in any case (the Search-R1 prompt's own "between
  /// <information> and </information>") are dropped. Empty: qa_em.py gives ΔIG no weight.
  std::vector<std::string> information;
  /// The text of the LAST <answer>...</answer> block (tags exact case, matched as the
  /// information blocks are), stripped; nullopt when there is none. InfoReasoner takes the
  /// last of any number of matches; Search-R1's original ignored a single match. Since the
  /// matches include the prompt's own instructions ("inside <answer> and </answer>... For
  /// example, <answer> Beijing </answer>"), a rollout that never answers gets the prompt's
  /// example ("Beijing") as its answer, as it does in InfoReasoner.
  std::optional<std::string> answer;
};

search_rollout parse_search_rollout(std::string_view solution_str);

/// The information blocks joined as compute_score_em joins them for the IG service's context:
/// with "\n" between blocks.
std::string join_information(const std::vector<std::string>& blocks);

} // namespace arbiter::backends::rewards
