#pragma once

// The replay log's writer (docs/replay.md): an actor on its own thread that appends one JSON
// line per reward item and model call that ended (backends/replay/replay_log.hpp) to
// `[replay] path`, and rotates the file past `max_file_mb`. The scheduler hands it finished
// requests through a `replay_recorder` and never waits for the disk; past `max_backlog`
// records not yet written, new ones are dropped and counted.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>

#include "common/metrics.hpp"
#include "common/score_types.hpp"
#include "config/config.hpp"

namespace arbiter::actors {

/// The writer's metrics.
struct replay_metrics {
  explicit replay_metrics(metrics_registry& registry);
  /// arbiter_replay_records_total{result="written"|"dropped"|"failed"}.
  prometheus::Family<prometheus::Counter>& records;
  /// arbiter_replay_bytes_total: bytes appended to the log.
  prometheus::Counter& bytes;
};

/// One finished request, as the scheduler hands it to the writer.
struct replay_entry {
  bool internal = false;
  std::vector<shared_item> items;
  std::vector<item_result> results;
  /// When each item got its answer, its record's `time` (empty: when it is written).
  std::vector<std::chrono::system_clock::time_point> ended;
};

/// What the recorder and the writer share: the records handed on and not yet written, and
/// those dropped since the writer last said so in the log (a `gap` record).
struct replay_counts {
  std::atomic<uint64_t> backlog{0};
  std::atomic<uint64_t> unlogged{0};
};

/// What the scheduler holds: sends finished requests to the writer, or drops them whole
/// (counted, and marked in the log by the writer's next `gap` record) when the writer is
/// behind and they would put it past `max_backlog` records.
class replay_recorder {
public:
  replay_recorder(caf::actor writer, uint64_t max_backlog,
                  std::shared_ptr<replay_counts> counts, replay_metrics& metrics);

  /// Hands one finished request on (copies its results; the items are shared). `ended`:
  /// when each item got its answer (empty: the records take the time they are written).
  void record(bool internal, const std::vector<shared_item>& items,
              const std::vector<item_result>& results,
              const std::vector<std::chrono::system_clock::time_point>& ended = {});

  /// Waits (up to `timeout`) until everything handed on so far is written; false on timeout.
  /// For shutdown, after the scheduler has drained.
  bool flush(std::chrono::milliseconds timeout);

private:
  caf::actor writer_;
  uint64_t max_backlog_;
  std::shared_ptr<replay_counts> counts_;
  prometheus::Counter& dropped_;
};

/// How the writer writes: `[replay]`, with the rotation size in bytes.
struct replay_settings {
  std::string path;
  /// Rotate once the file reaches this size.
  uint64_t max_file_bytes = uint64_t{256} << 20;
  uint32_t keep_files = 4;
  uint64_t max_backlog = 100000;
  /// How often, at most, the writer checks that `path` still names its file (moved away by
  /// logrotate, removed); 0: before every write.
  std::chrono::milliseconds path_check{1000};

  static replay_settings from(const config::replay_config& cfg);
};

/// Opens `settings.path` for appending (creating it) and spawns the writer. Throws
/// std::runtime_error naming the path and the reason when it cannot be opened. `metrics` must
/// outlive the writer.
std::shared_ptr<replay_recorder> spawn_replay_writer(caf::actor_system& sys,
                                                     const replay_settings& settings,
                                                     replay_metrics& metrics);

} // namespace arbiter::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::actors::replay_entry)
