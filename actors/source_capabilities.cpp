#include "actors/source_capabilities.hpp"

#include <algorithm>

namespace arbiter::actors {

std::vector<std::string> default_capabilities(const std::string& kind) {
  if (kind == "openai") {
    return {"chat"};
  }
  if (kind == "tei") {
    return {"embed"};
  }
  if (kind == "ig_service") {
    return {"ig"};
  }
  return {};
}

bool serves(const std::vector<std::string>& capabilities, std::string_view name) {
  return std::any_of(capabilities.begin(), capabilities.end(), [name](const std::string& c) {
    return c.size() >= name.size() && c.compare(0, name.size(), name) == 0
           && (c.size() == name.size() || c[name.size()] == '@');
  });
}

bool serves(const config::source_config& src, const std::string& capability) {
  return serves(src.capabilities.empty() ? default_capabilities(src.kind) : src.capabilities,
                capability);
}

std::vector<std::string> model_capabilities(const config::model_config& m) {
  if (m.kind == "generator") {
    return {"generate", "chat"};
  }
  if (m.kind == "nli") {
    return {"nli"};
  }
  return {"embed"};
}

std::string served_model(const config::source_config& src) {
  return src.model.empty() ? src.name : src.model;
}

std::string model_route_suffix(const std::string& id) {
  return "@model:" + id;
}

std::vector<std::string> routed_capabilities(const std::string& source,
                                             const std::vector<std::string>& base,
                                             const std::string& model,
                                             const config::arbiter_config& cfg) {
  auto out = base;
  for (const auto& cap : base) {
    if (cap == "chat" || cap == "embed") {
      out.push_back(cap + model_route_suffix(model));
    }
  }
  for (const auto& [name, reward] : cfg.rewards) {
    if (std::find(reward.sources.begin(), reward.sources.end(), source)
        == reward.sources.end()) {
      continue;
    }
    for (const auto& cap : base) {
      out.push_back(cap + "@" + name);
    }
  }
  return out;
}

std::vector<std::string> routed_capabilities(const config::source_config& src,
                                             const config::arbiter_config& cfg) {
  std::vector<std::string> base;
  for (const char* cap : {"chat", "generate", "embed", "nli", "ig"}) {
    if (serves(src, cap)) {
      base.emplace_back(cap);
    }
  }
  return routed_capabilities(src.name, base, served_model(src), cfg);
}

} // namespace arbiter::actors
