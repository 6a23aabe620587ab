#include "scheduler/abandoned_places.hpp"

#include <algorithm>
#include <functional>

namespace arbiter::scheduler {

void abandoned_places::remember(const std::string& key, time_point place, time_point now) {
  if (capacity_ == 0) {
    return;
  }
  auto number = next_entry_++;
  auto hashed = std::hash<std::string>{}(key);
  auto [found, fresh] = places_.try_emplace(hashed, held{place, now, number});
  if (!fresh) {
    found->second.place = std::min(found->second.place, place);
    found->second.remembered = now;
    found->second.entry = number;
  }
  order_.push_back({now, number, hashed});
  forget_old(now);
}

std::optional<time_point> abandoned_places::take(const std::string& key, time_point now) {
  if (places_.empty()) {
    return std::nullopt;
  }
  auto found = places_.find(std::hash<std::string>{}(key));
  if (found == places_.end()) {
    return std::nullopt;
  }
  auto kept = found->second;
  places_.erase(found);
  forget_old(now);
  if (now - kept.remembered > memory_) {
    return std::nullopt;
  }
  return kept.place;
}

void abandoned_places::forget_old(time_point now) {
  while (!order_.empty()
         && (now - order_.front().remembered > memory_ || places_.size() > capacity_
             || order_.size() > 2 * capacity_)) {
    const auto& oldest = order_.front();
    auto found = places_.find(oldest.key);
    if (found != places_.end() && found->second.entry == oldest.number) {
      places_.erase(found);
    }
    order_.pop_front();
  }
}

} // namespace arbiter::scheduler
