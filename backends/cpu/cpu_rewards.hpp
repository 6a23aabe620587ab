#pragma once

#include "common/score_types.hpp"
#include "config/config.hpp"

namespace arbiter::backends::cpu {

/// Scores one item of a CPU kind (`lexical`, `exact_match`): the best score over its
/// references. An input the reward cannot take (over `max_lexical_chars`, an unknown kind)
/// fails with `errc::reward_failed` and says why. Never throws.
item_outcome evaluate(const score_item& item, const config::cpu_config& cfg);

} // namespace arbiter::backends::cpu
