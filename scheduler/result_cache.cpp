#include "scheduler/result_cache.hpp"

namespace arbiter::scheduler {

std::string make_cache_key(std::initializer_list<std::string_view> parts) {
  size_t total = 0;
  for (auto part : parts) {
    total += part.size() + 21; // up to 20 digits and ':'
  }
  std::string key;
  key.reserve(total);
  for (auto part : parts) {
    key += std::to_string(part.size());
    key += ':';
    key.append(part.data(), part.size());
  }
  return key;
}

result_cache::result_cache(size_t capacity) : capacity_(capacity) {
}

result_cache::result_cache(size_t capacity, nanoseconds ttl, const time_source& clock)
  : capacity_(capacity), ttl_(ttl), clock_(&clock) {
}

bool result_cache::expired(const entry& e) const noexcept {
  if (clock_ == nullptr || ttl_ <= nanoseconds{0}) {
    return false;
  }
  return clock_->now() - e.inserted >= ttl_;
}

std::optional<cached_result> result_cache::lookup(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return std::nullopt;
  }
  if (expired(*it->second)) {
    auto node = it->second;
    index_.erase(it);
    entries_.erase(node);
    ++expirations_;
    ++misses_;
    return std::nullopt;
  }
  entries_.splice(entries_.begin(), entries_, it->second);
  ++hits_;
  return it->second->value;
}

void result_cache::insert(std::string key, cached_result value) {
  if (capacity_ == 0) {
    return;
  }
  time_point now = clock_ != nullptr ? clock_->now() : time_point{};
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->value = std::move(value);
    it->second->inserted = now;
    entries_.splice(entries_.begin(), entries_, it->second);
    return;
  }
  while (index_.size() >= capacity_) {
    const entry& last = entries_.back();
    if (expired(last)) {
      ++expirations_;
    } else {
      ++evictions_;
    }
    index_.erase(std::string_view{last.key});
    entries_.pop_back();
  }
  entries_.push_front(entry{std::move(key), std::move(value), now});
  index_.emplace(std::string_view{entries_.front().key}, entries_.begin());
}

bool result_cache::erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    return false;
  }
  auto node = it->second;
  index_.erase(it);
  entries_.erase(node);
  return true;
}

void result_cache::clear() noexcept {
  index_.clear();
  entries_.clear();
}

} // namespace arbiter::scheduler
