#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace arbiter::scheduler {

/// Weighted fair queuing across priority classes (start-time fair queuing), kept apart for
/// each capability, since each capability's sources are a resource of their own. While several
/// classes have work waiting, each is served in proportion to its weight: with weights 16, 4
/// and 1, `high` gets 16 items for each `low` one, so high goes first but low is never
/// starved. A class that was idle starts level with the others (it banks no credit while it
/// waits for nothing). Not thread-safe: one owner (the scheduler core).
class fair_share {
public:
  /// One weight per class, highest class first; weights below a small positive floor are
  /// raised to it.
  explicit fair_share(std::vector<double> weights);

  /// The class to serve next for `key` among those with `waiting[cls]` true: the one whose
  /// next item starts earliest in virtual time (ties: the higher class). Nullopt when none
  /// waits.
  std::optional<size_t> next(const std::string& key, const std::vector<bool>& waiting);

  /// Records `items` dispatched from `cls` for `key` (after `next` chose it).
  void charge(const std::string& key, size_t cls, size_t items);

  /// The share of `key`'s service class `cls` gets at least while the classes in `waiting`
  /// (and `cls`) have work: its weight over theirs.
  double share(size_t cls, const std::vector<bool>& waiting) const;

  const std::vector<double>& weights() const noexcept {
    return weights_;
  }

private:
  struct lane {
    /// Virtual time: the start tag of the last item served.
    double now = 0.0;
    std::vector<double> start;
    std::vector<bool> active;
  };

  lane& lane_of(const std::string& key);

  std::vector<double> weights_;
  std::unordered_map<std::string, lane> lanes_;
};

} // namespace arbiter::scheduler
