#include "scheduler/source_registry.hpp"

#include <algorithm>

namespace arbiter::scheduler {

namespace {

bool has_capability(const source_info& s, const std::string& capability) {
  return std::find(s.capabilities.begin(), s.capabilities.end(), capability)
         != s.capabilities.end();
}

} // namespace

source_id source_registry::add(std::string name, std::vector<std::string> capabilities,
                               uint32_t max_inflight) {
  source_info info;
  info.id = next_id_++;
  info.name = std::move(name);
  info.capabilities = std::move(capabilities);
  info.max_inflight = std::max<uint32_t>(max_inflight, 1);
  sources_.push_back(std::move(info));
  return sources_.back().id;
}

bool source_registry::remove(source_id id) {
  auto i = std::find_if(sources_.begin(), sources_.end(),
                        [id](const source_info& s) { return s.id == id; });
  if (i == sources_.end()) {
    return false;
  }
  sources_.erase(i);
  return true;
}

std::optional<source_id> source_registry::pick(const std::string& capability) const {
  const source_info* best = nullptr;
  for (const auto& s : sources_) {
    if (s.inflight >= s.max_inflight || !has_capability(s, capability)) {
      continue;
    }
    if (best == nullptr || s.inflight < best->inflight
        || (s.inflight == best->inflight && s.dispatched < best->dispatched)) {
      best = &s;
    }
  }
  if (best == nullptr) {
    return std::nullopt;
  }
  return best->id;
}

bool source_registry::serves(const std::string& capability) const {
  return count(capability) > 0;
}

size_t source_registry::count(const std::string& capability) const {
  return static_cast<size_t>(std::count_if(sources_.begin(), sources_.end(),
                                           [&](const source_info& s) {
                                             return has_capability(s, capability);
                                           }));
}

void source_registry::on_dispatch(source_id id) {
  if (auto* s = find_mutable(id)) {
    ++s->inflight;
    ++s->dispatched;
  }
}

void source_registry::on_complete(source_id id) {
  if (auto* s = find_mutable(id); s != nullptr && s->inflight > 0) {
    --s->inflight;
  }
}

const source_info* source_registry::find(source_id id) const {
  for (const auto& s : sources_) {
    if (s.id == id) {
      return &s;
    }
  }
  return nullptr;
}

source_info* source_registry::find_mutable(source_id id) {
  return const_cast<source_info*>(static_cast<const source_registry*>(this)->find(id));
}

} // namespace arbiter::scheduler
