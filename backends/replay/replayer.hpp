#pragma once

// Recomputes a logged reward item from what the log recorded (docs/replay.md): CPU rewards
// (and fallbacks) from the item alone, embedding rewards from the recorded vectors, reward
// graphs (judge, info_gain, em_info_gain) from their calls' recorded answers. No provider, no
// model, no actors: `arbiter replay` runs it over a log.

#include <cstdint>
#include <string>

#include "backends/replay/replay_log.hpp"
#include "backends/reward_catalog.hpp"
#include "backends/rewards/reward_kinds.hpp"

namespace arbiter::backends::replay {

/// How a replayed item compares with what was returned at the time.
enum class verdict : uint8_t {
  /// The same status, the same score bit for bit and the same extra fields (math_dapo's
  /// `acc` and `pred`), or, for a failure, the same error code.
  identical,
  /// Something differs; `reason` says what.
  differs,
  /// Nothing was recorded to recompute it from: it failed before its reward ran (a deadline,
  /// no source) or a source computed it whole (an IG service); `reason` says which.
  not_replayable,
};

/// "identical", "differs" or "not_replayable".
const char* to_string(verdict v) noexcept;

struct replay_result {
  verdict outcome = verdict::identical;
  /// What replaying gave.
  item_outcome recomputed;
  std::string reason;
};

/// Replays item record `r` (type `item`). `catalog` resolves em_info_gain's info_gain reward;
/// `limits` are the CPU rewards'. Never throws: a record that cannot be replayed says why.
replay_result replay_item(const record& r, const reward_catalog& catalog,
                          const cpu_limits& limits);

} // namespace arbiter::backends::replay
