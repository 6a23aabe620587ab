#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/ids.hpp"

namespace arbiter::scheduler {

/// What the registry knows of one source.
struct source_info {
  source_id id = 0;
  /// The name results report in `source`, e.g. "cpu".
  std::string name;
  /// What it serves, e.g. {"cpu"}; later "embed", "nli", "generate", "chat".
  std::vector<std::string> capabilities;
  /// Batches it may have in flight at once.
  uint32_t max_inflight = 1;
  uint32_t inflight = 0;
  /// Dispatches so far (also breaks ties fairly).
  uint64_t dispatched = 0;
};

/// The sources that can run work, by capability. Picks the least-loaded eligible source.
class source_registry {
public:
  /// Adds a source and returns its id (never reused).
  source_id add(std::string name, std::vector<std::string> capabilities, uint32_t max_inflight);

  /// Removes a source. Returns false when it is unknown.
  bool remove(source_id id);

  /// The source with a free slot serving `capability` that has the fewest batches in flight
  /// (ties: the one dispatched to least), or nullopt when every one is busy or none exists.
  std::optional<source_id> pick(const std::string& capability) const;

  /// Whether any source serves `capability`, busy or not.
  bool serves(const std::string& capability) const;

  /// How many sources serve `capability`.
  size_t count(const std::string& capability) const;

  /// Records a batch sent to / finished by `id`.
  void on_dispatch(source_id id);
  void on_complete(source_id id);

  const source_info* find(source_id id) const;

  const std::vector<source_info>& sources() const noexcept {
    return sources_;
  }

private:
  source_info* find_mutable(source_id id);

  std::vector<source_info> sources_;
  source_id next_id_ = 1;
};

} // namespace arbiter::scheduler
