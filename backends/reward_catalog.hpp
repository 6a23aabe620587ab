#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/capability.hpp"
#include "config/config.hpp"

namespace arbiter::backends {

/// A reward clients can ask for by name.
struct reward_entry {
  std::string name;
  /// The built-in kind that computes it, e.g. "lexical".
  std::string kind;
  /// What a source must serve to run it, e.g. "cpu"; with `route_suffix` appended when the
  /// reward names its sources.
  std::string capability;
  /// The sources its model calls may use (empty: any).
  std::vector<std::string> sources;
  /// "@NAME" when `sources` is not empty: sources listed get every capability they serve
  /// again under this suffix, and the reward's items and model calls ask for those.
  std::string route_suffix;
  /// The CPU kind that scores its items when no source can (empty: none).
  std::string fallback;
  /// Its configured options (a JSON object's text, or empty).
  std::string options;
};

/// The rewards this server offers: the built-in kinds under their own names plus the ones the
/// configuration names, and the `data_source` prefixes that select them.
class reward_catalog {
public:
  explicit reward_catalog(const config::arbiter_config& cfg);

  /// The reward called `name`, or nullptr.
  const reward_entry* find(std::string_view name) const;

  /// The reward selected by the longest configured prefix of `data_source`, or nullptr.
  const reward_entry* for_data_source(std::string_view data_source) const;

  /// Every reward, sorted by name.
  std::vector<reward_entry> rewards() const;

  /// Prefix -> reward name.
  const std::map<std::string, std::string>& data_sources() const noexcept {
    return data_sources_;
  }

private:
  std::map<std::string, reward_entry, std::less<>> rewards_;
  std::map<std::string, std::string> data_sources_;
};

// Lookups in the reward-kind registry (backends/rewards/reward_kinds.hpp), by kind name.

/// The routing key of the capability a kind's items need ("cpu", "embed", "ig", "judge",
/// "em_ig"); an unknown kind's own name.
std::string capability_of(std::string_view kind);

/// The fallback a kind has unless configured ("lexical" for embedding; none for the others).
std::string default_fallback(std::string_view kind);

/// Whether items of `kind` are computed by a reward graph (judge, info_gain, em_info_gain).
bool runs_as_graph(std::string_view kind);

/// The capabilities a graph kind's model calls need: judge → chat; info_gain (as a local
/// graph) → generate and nli; em_info_gain → ig (an info_gain item). Empty for other kinds.
std::vector<capability> call_capabilities(std::string_view kind);

} // namespace arbiter::backends
