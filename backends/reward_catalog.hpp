#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace arbiter::backends {

/// A reward clients can ask for by name.
struct reward_entry {
  std::string name;
  /// The built-in kind that computes it, e.g. "lexical".
  std::string kind;
  /// What a source must serve to run it, e.g. "cpu".
  std::string capability;
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

/// The capability a built-in kind needs ("cpu" for lexical and exact_match).
std::string capability_of(std::string_view kind);

} // namespace arbiter::backends
