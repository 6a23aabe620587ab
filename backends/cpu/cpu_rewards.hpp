#pragma once

#include "common/score_types.hpp"
#include "config/config.hpp"

namespace arbiter::backends::cpu {

/// Scores one item of a CPU kind: `lexical`, `exact_match` (the best score over its
/// references) or one of verl's rule rewards (`gsm8k`, `math`, `math_dapo`,
/// `search_r1_qa_em`: correct when correct against any reference; math_dapo's `acc` and
/// `pred` in `extra`). An input the reward cannot take (over `max_lexical_chars`, an unknown kind)
/// fails with `errc::reward_failed` and says why. Never throws.
item_outcome evaluate(const score_item& item, const config::cpu_config& cfg);

/// Scores `item` with its reward's fallback kind (`item.fallback`), as the seeds' fallback
/// does: against the references its options keep (target_gt, filter_gt_by_prompt_token), with
/// both texts lower-cased (Python `str.lower()` per code point). Never throws.
item_outcome evaluate_fallback(const score_item& item, const config::cpu_config& cfg);

} // namespace arbiter::backends::cpu
