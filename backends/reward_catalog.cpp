#include "backends/reward_catalog.hpp"

#include "backends/rewards/reward_kinds.hpp"

namespace arbiter::backends {

std::string capability_of(std::string_view kind) {
  const auto* found = find_reward_kind(kind);
  return found == nullptr ? std::string{kind} : routing_key(found->needs);
}

std::string default_fallback(std::string_view kind) {
  const auto* found = find_reward_kind(kind);
  return found == nullptr ? "" : found->default_fallback;
}

bool runs_as_graph(std::string_view kind) {
  const auto* found = find_reward_kind(kind);
  return found != nullptr && found->runner == reward_runner::graph;
}

std::vector<capability> call_capabilities(std::string_view kind) {
  const auto* found = find_reward_kind(kind);
  return found == nullptr ? std::vector<capability>{} : found->calls;
}

reward_catalog::reward_catalog(const config::arbiter_config& cfg)
  : data_sources_(cfg.data_sources) {
  for (const auto& kind : reward_kind_names()) {
    reward_entry entry;
    entry.name = kind;
    entry.kind = kind;
    entry.capability = capability_of(kind);
    entry.fallback = default_fallback(kind);
    rewards_[kind] = std::move(entry);
  }
  for (const auto& [name, reward] : cfg.rewards) {
    reward_entry entry;
    entry.name = name;
    entry.kind = reward.kind;
    entry.sources = reward.sources;
    if (!reward.sources.empty()) {
      entry.route_suffix = "@" + name;
    }
    entry.capability = capability_of(reward.kind) + entry.route_suffix;
    entry.fallback = reward.fallback ? (*reward.fallback == "none" ? "" : *reward.fallback)
                                     : default_fallback(reward.kind);
    entry.options = reward.options;
    rewards_[name] = std::move(entry);
  }
}

const reward_entry* reward_catalog::find(std::string_view name) const {
  auto found = rewards_.find(name);
  return found == rewards_.end() ? nullptr : &found->second;
}

const reward_entry* reward_catalog::for_data_source(std::string_view data_source) const {
  // A name matches itself; a key ending in '*' matches every name that starts with the rest.
  const std::string* best = nullptr;
  size_t best_length = 0;
  for (const auto& [key, reward] : data_sources_) {
    if (key.empty() || key.back() != '*') {
      if (key == data_source) {
        return find(reward);
      }
      continue;
    }
    auto prefix = std::string_view{key}.substr(0, key.size() - 1);
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
