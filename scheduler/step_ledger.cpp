#include "scheduler/step_ledger.hpp"

#include <algorithm>
#include <atomic>

namespace arbiter::scheduler {

namespace {

/// Uses of steps in this process so far, by any ledger: when a step began, when it was last
/// used.
std::atomic<uint64_t> step_uses{0};

} // namespace

step_account& step_ledger::account(const std::string& step) {
  auto [found, fresh] = steps_.try_emplace(step);
  auto& e = found->second;
  e.account.used = step_uses.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!fresh) {
    order_.splice(order_.end(), order_, e.place);
    return e.account;
  }
  e.account.step = step;
  e.account.begun = e.account.used;
  e.place = order_.insert(order_.end(), step);
  while (order_.size() > max_steps_) {
    steps_.erase(order_.front());
    order_.pop_front();
  }
  return steps_.at(step).account;
}

std::deque<step_account> step_ledger::recent() const {
  std::deque<step_account> out;
  for (const auto& name : order_) {
    out.push_back(steps_.at(name).account);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.begun < b.begun; });
  return out;
}

void step_ledger::call(const std::string& step, const std::string& source, bool hedge) {
  auto& s = this->source(step, source);
  ++s.calls;
  if (hedge) {
    ++s.hedges;
  }
}

void step_ledger::call_ended(const std::string& step, const std::string& source, bool failed,
                             bool rate_limited, double run_ms) {
  auto& s = this->source(step, source);
  if (failed) {
    ++s.failed_calls;
  }
  if (rate_limited) {
    ++s.rate_limited;
  }
  s.run_ms += run_ms;
}

void step_ledger::usage(const std::string& step, const std::string& source,
                        uint64_t prompt_tokens, uint64_t completion_tokens, double cost) {
  auto& s = this->source(step, source);
  s.prompt_tokens += prompt_tokens;
  s.completion_tokens += completion_tokens;
  s.cost += cost;
}

void step_ledger::retry(const std::string& step, const std::string& source) {
  ++this->source(step, source).retries;
}

void step_ledger::call_unsent(const std::string& step, const std::string& source_name,
                              bool hedge) {
  auto found = steps_.find(step);
  if (found == steps_.end()) {
    return;
  }
  auto s = found->second.account.sources.find(source_name);
  if (s == found->second.account.sources.end()) {
    return;
  }
  auto& a = s->second;
  a.calls -= a.calls > 0 ? 1 : 0;
  if (hedge) {
    a.hedges -= a.hedges > 0 ? 1 : 0;
  }
}

void step_ledger::item_ended(const std::string& step, const item_result& result) {
  auto& a = account(step);
  switch (result.status) {
    case item_status::ok:
      ++a.items_ok;
      break;
    case item_status::fallback:
      ++a.items_fallback;
      break;
    case item_status::failed:
      ++a.items_failed;
      ++a.failures[std::string{to_string(result.code)}];
      break;
  }
  if (result.cached || result.coalesced) {
    ++a.cache_hits;
  }
  a.queue_ms += result.queue_ms;
  a.run_ms += result.run_ms;
}

std::optional<step_account> step_ledger::find(const std::string& step) const {
  auto found = steps_.find(step);
  if (found == steps_.end()) {
    return std::nullopt;
  }
  return found->second.account;
}

void add_account(step_account& into, const step_account& from) {
  if (from.begun != 0 && (into.begun == 0 || from.begun < into.begun)) {
    into.begun = from.begun;
  }
  into.used = std::max(into.used, from.used);
  into.items_ok += from.items_ok;
  into.items_fallback += from.items_fallback;
  into.items_failed += from.items_failed;
  into.cache_hits += from.cache_hits;
  for (const auto& [code, n] : from.failures) {
    into.failures[code] += n;
  }
  into.queue_ms += from.queue_ms;
  into.run_ms += from.run_ms;
  for (const auto& [name, s] : from.sources) {
    auto& t = into.sources[name];
    t.calls += s.calls;
    t.hedges += s.hedges;
    t.rate_limited += s.rate_limited;
    t.retries += s.retries;
    t.failed_calls += s.failed_calls;
    t.prompt_tokens += s.prompt_tokens;
    t.completion_tokens += s.completion_tokens;
    t.cost += s.cost;
    t.run_ms += s.run_ms;
  }
}

} // namespace arbiter::scheduler
