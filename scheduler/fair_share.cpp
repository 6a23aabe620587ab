#include "scheduler/fair_share.hpp"

#include <algorithm>

namespace arbiter::scheduler {

namespace {

constexpr double min_weight = 1e-6;

} // namespace

fair_share::fair_share(std::vector<double> weights) : weights_(std::move(weights)) {
  for (auto& w : weights_) {
    w = std::max(w, min_weight);
  }
}

fair_share::lane& fair_share::lane_of(const std::string& key) {
  auto& l = lanes_[key];
  if (l.start.size() != weights_.size()) {
    l.start.assign(weights_.size(), 0.0);
    l.active.assign(weights_.size(), false);
  }
  return l;
}

std::optional<size_t> fair_share::next(const std::string& key, const std::vector<bool>& waiting) {
  auto& l = lane_of(key);
  std::optional<size_t> best;
  for (size_t cls = 0; cls < weights_.size(); ++cls) {
    bool has = cls < waiting.size() && waiting[cls];
    if (!has) {
      l.active[cls] = false;
      continue;
    }
    if (!l.active[cls]) {
      // Newly backlogged: it starts now in virtual time, with no credit for its idle spell.
      l.active[cls] = true;
      l.start[cls] = std::max(l.start[cls], l.now);
    }
    if (!best || l.start[cls] < l.start[*best]) {
      best = cls;
    }
  }
  return best;
}

void fair_share::charge(const std::string& key, size_t cls, size_t items) {
  if (cls >= weights_.size()) {
    return;
  }
  auto& l = lane_of(key);
  l.now = std::max(l.now, l.start[cls]);
  l.start[cls] += static_cast<double>(items) / weights_[cls];
}

double fair_share::share(size_t cls, const std::vector<bool>& waiting) const {
  if (cls >= weights_.size()) {
    return 1.0;
  }
  double total = 0.0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (i == cls || (i < waiting.size() && waiting[i])) {
      total += weights_[i];
    }
  }
  return weights_[cls] / total;
}

} // namespace arbiter::scheduler
