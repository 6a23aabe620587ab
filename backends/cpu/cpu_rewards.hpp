#pragma once

#include "backends/rewards/reward_kinds.hpp"
#include "common/score_types.hpp"

namespace arbiter::backends::cpu {

/// Scores one item of a CPU kind with its registry entry's function
/// (backends/rewards/reward_kinds.hpp): `lexical`, `exact_match` (the best score over its
/// references) or one of verl's rule rewards (`gsm8k`, `math`, `math_dapo`,
/// `search_r1_qa_em`: correct when correct against any reference; math_dapo's `acc` and
/// `pred` in `extra`). An input the reward cannot take (over `max_lexical_chars`, an unknown
/// kind, empty `ground_truth`) fails with `errc::reward_failed` and says why. Never throws.
item_outcome evaluate(const score_item& item, const cpu_limits& limits);

/// Scores `item` with its reward's fallback kind (`item.fallback`), as the seeds' fallback
/// does: against the references its options keep (target_gt, filter_gt_by_prompt_token), with
/// both texts lower-cased (Python `str.lower()` per code point). Never throws.
item_outcome evaluate_fallback(const score_item& item, const cpu_limits& limits);

// ---- the CPU kinds' functions (registered in reward_kinds.cpp) ------------------------------

/// difflib's SequenceMatcher ratio, the best over the references.
item_outcome score_lexical(const score_item& item, const cpu_limits& limits);
/// SQuAD-normalized exact match, the best over the references.
item_outcome score_exact_match(const score_item& item, const cpu_limits& limits);
/// verl's rule rewards with the item's options (reward options under extra_info).
item_outcome score_gsm8k(const score_item& item, const cpu_limits& limits);
item_outcome score_math(const score_item& item, const cpu_limits& limits);
item_outcome score_math_dapo(const score_item& item, const cpu_limits& limits);
item_outcome score_search_r1_qa_em(const score_item& item, const cpu_limits& limits);

} // namespace arbiter::backends::cpu
