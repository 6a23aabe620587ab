#include "actors/source_capabilities.hpp"

#include <algorithm>

namespace arbiter::actors {

std::vector<capability> default_capabilities(const std::string& kind) {
  if (kind == "openai") {
    return {capability::chat};
  }
  if (kind == "tei") {
    return {capability::embed};
  }
  if (kind == "ig_service") {
    return {capability::ig};
  }
  return {};
}

std::vector<std::string> keys_of(const std::vector<capability>& capabilities) {
  std::vector<std::string> out;
  for (auto c : capabilities) {
    out.push_back(routing_key(c));
  }
  return out;
}

bool serves(const std::vector<std::string>& keys, capability c) {
  return std::any_of(keys.begin(), keys.end(),
                     [c](const std::string& key) { return keys_capability(key, c); });
}

bool serves(const config::source_config& src, capability c) {
  return src.capabilities.empty() ? serves(keys_of(default_capabilities(src.kind)), c)
                                  : serves(src.capabilities, c);
}

std::vector<capability> model_capabilities(const config::model_config& m) {
  if (m.kind == "generator") {
    return {capability::generate, capability::chat};
  }
  if (m.kind == "nli") {
    return {capability::nli};
  }
  return {capability::embed};
}

std::string served_model(const config::source_config& src) {
  return src.model.empty() ? src.name : src.model;
}

std::string model_route_suffix(const std::string& id) {
  return "@model:" + id;
}

std::vector<std::string> node_routing_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& key : keys) {
    auto at = key.find('@');
    if (at == std::string::npos || key.compare(at, model_route_suffix("").size(),
                                               model_route_suffix("")) == 0) {
      out.push_back(key);
    }
  }
  return out;
}

std::vector<std::pair<capability, std::string>> models_of_keys(
  const std::vector<std::string>& keys) {
  std::vector<std::pair<capability, std::string>> out;
  for (auto cap : {capability::chat, capability::embed}) {
    const std::string prefix = routing_key(cap, model_route_suffix(""));
    for (const auto& key : keys) {
      if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0) {
        out.emplace_back(cap, key.substr(prefix.size()));
      }
    }
  }
  return out;
}

std::vector<std::string> routed_capabilities(const std::string& source,
                                             const std::vector<capability>& base,
                                             const std::string& model,
                                             const config::arbiter_config& cfg) {
  auto out = keys_of(base);
  for (auto cap : base) {
    if (cap == capability::chat || cap == capability::embed) {
      out.push_back(routing_key(cap, model_route_suffix(model)));
    }
  }
  for (const auto& [name, reward] : cfg.rewards) {
    if (std::find(reward.sources.begin(), reward.sources.end(), source)
        == reward.sources.end()) {
      continue;
    }
    for (auto cap : base) {
      out.push_back(routing_key(cap, "@" + name));
    }
  }
  return out;
}

std::vector<std::string> routed_capabilities(const config::source_config& src,
                                             const config::arbiter_config& cfg) {
  std::vector<capability> base;
  for (auto cap : remote_capabilities) {
    if (serves(src, cap)) {
      base.push_back(cap);
    }
  }
  return routed_capabilities(src.name, base, served_model(src), cfg);
}

} // namespace arbiter::actors
