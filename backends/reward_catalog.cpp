#include "backends/reward_catalog.hpp"

namespace arbiter::backends {

std::string capability_of(std::string_view kind) {
  if (kind == "lexical" || kind == "exact_match") {
    return "cpu";
  }
  if (kind == "judge") {
    return "chat";
  }
  if (kind == "embedding") {
    return "embed";
  }
  if (kind == "info_gain") {
    return "ig";
  }
  return std::string{kind};
}

reward_catalog::reward_catalog(const config::arbiter_config& cfg)
  : data_sources_(cfg.data_sources) {
  for (const auto& kind : config::builtin_reward_kinds()) {
    rewards_[kind] = reward_entry{kind, kind, capability_of(kind)};
  }
  for (const auto& [name, reward] : cfg.rewards) {
    rewards_[name] = reward_entry{name, reward.kind, capability_of(reward.kind)};
  }
}

const reward_entry* reward_catalog::find(std::string_view name) const {
  auto found = rewards_.find(name);
  return found == rewards_.end() ? nullptr : &found->second;
}

const reward_entry* reward_catalog::for_data_source(std::string_view data_source) const {
  const std::string* best = nullptr;
  size_t best_length = 0;
  for (const auto& [prefix, reward] : data_sources_) {
    if (data_source.substr(0, prefix.size()) == prefix && prefix.size() >= best_length) {
      best = &reward;
      best_length = prefix.size();
    }
  }
  return best == nullptr ? nullptr : find(*best);
}

std::vector<reward_entry> reward_catalog::rewards() const {
  std::vector<reward_entry> out;
  for (const auto& entry : rewards_) {
    out.push_back(entry.second);
  }
  return out;
}

} // namespace arbiter::backends
