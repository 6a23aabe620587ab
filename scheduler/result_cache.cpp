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

size_t cached_bytes(std::string_view key, const cached_result& value) noexcept {
  // A list node and an index slot with their allocations, and each string's own.
  constexpr size_t entry_overhead = 256;
  constexpr size_t per_string = 32;
  size_t bytes = entry_overhead + key.size() + value.source.size() + value.detail.size()
                 + value.extra.size();
  for (const auto& source : value.sources) {
    bytes += per_string + source.size();
  }
  if (value.output) {
    const auto& out = *value.output;
    bytes += sizeof(model_output) + out.model.size() + out.embedding.size() * sizeof(float);
    for (const auto& text : out.texts) {
      bytes += sizeof(generated_text) + text.text.size() + text.finish_reason.size()
               + text.reasoning.size() + text.refusal.size();
    }
  }
  return bytes;
}

result_cache::result_cache(size_t capacity) : capacity_(capacity) {
}

result_cache::result_cache(size_t capacity, nanoseconds ttl, const time_source& clock,
                           size_t max_bytes)
  : capacity_(capacity), max_bytes_(max_bytes), ttl_(ttl), clock_(&clock) {
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
    drop(it);
    ++expirations_;
    ++misses_;
    return std::nullopt;
  }
  entries_.splice(entries_.begin(), entries_, it->second);
  ++hits_;
  return it->second->value;
}

bool result_cache::holds(std::string_view key) const {
  auto it = index_.find(key);
  return it != index_.end() && !expired(*it->second);
}

void result_cache::insert(std::string key, cached_result value) {
  if (capacity_ == 0) {
    return;
  }
  time_point now = clock_ != nullptr ? clock_->now() : time_point{};
  auto bytes = cached_bytes(key, value);
  if (auto it = index_.find(key); it != index_.end()) {
    drop(it); // replaced: its bytes may differ, so it goes in again as new
  }
  if (max_bytes_ > 0 && bytes > max_bytes_) {
    return;
  }
  while (!entries_.empty()
         && (index_.size() >= capacity_ || (max_bytes_ > 0 && bytes_ + bytes > max_bytes_))) {
    drop_last();
  }
  entries_.push_front(entry{std::move(key), std::move(value), now, bytes});
  index_.emplace(std::string_view{entries_.front().key}, entries_.begin());
  bytes_ += bytes;
}

void result_cache::drop_last() {
  const entry& last = entries_.back();
  if (expired(last)) {
    ++expirations_;
  } else {
    ++evictions_;
  }
  bytes_ -= last.bytes;
  index_.erase(std::string_view{last.key});
  entries_.pop_back();
}

void result_cache::drop(
    std::unordered_map<std::string_view, std::list<entry>::iterator>::iterator it) {
  auto node = it->second;
  bytes_ -= node->bytes;
  index_.erase(it);
  entries_.erase(node);
}

bool result_cache::erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    return false;
  }
  drop(it);
  return true;
}

void result_cache::clear() noexcept {
  index_.clear();
  entries_.clear();
  bytes_ = 0;
}

} // namespace arbiter::scheduler
