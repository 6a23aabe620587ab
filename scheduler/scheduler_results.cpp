// How the scheduler's items end (scheduler_core.hpp): the result cache's key, the configured
// fallback, coalesced flights settling their followers, and finished requests with their
// metrics. Submission, completion and timers are in scheduler_core.cpp; dispatch is in
// scheduler_dispatch.cpp.
#include "scheduler/scheduler_core.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>
#include <unordered_set>

namespace arbiter::scheduler {

std::string scheduler_core::cache_key(const score_item& item) const {
  auto joined = [](const std::vector<std::string>& texts) {
    std::string out;
    for (const auto& text : texts) {
      out += std::to_string(text.size());
      out += ':';
      out += text;
    }
    return out;
  };
  if (item.call) {
    // Model calls: the same call to the same sources gives the same answer, whatever reward
    // asked (the capability carries the reward's route suffix, hence its sources).
    const auto& c = *item.call;
    auto number = [](const auto& value) {
      return value ? std::to_string(*value) : std::string{"-"};
    };
    auto thinking = c.enable_thinking ? (*c.enable_thinking ? "1" : "0") : "-";
    auto params = number(c.temperature) + "/" + number(c.top_p) + "/" + number(c.max_tokens)
                  + "/" + std::to_string(c.n) + "/" + thinking + "/" + number(c.seed);
    return make_cache_key({item.kind, item.capability, c.model, c.prompt, c.messages,
                           c.hypothesis, params, joined(c.stop), c.extra_body});
  }
  return make_cache_key({item.reward, item.kind, item.solution_str, joined(item.ground_truth),
                         item.extra_info, item.options});
}

item_result scheduler_core::maybe_fall_back(const score_item& item, item_result result) {
  if (item.fallback.empty() || !fallback_) {
    return result;
  }
  switch (result.code) {
    case errc::deadline_exceeded:
    case errc::no_eligible_source:
    case errc::upstream_failed:
    case errc::upstream_rejected:
    case errc::worker_failed:
    case errc::overloaded:
      break;
    default:
      // The item's own problem: the fallback would not fix it. Nor a drain's end
      // (`shutting_down`): the server that takes over scores it, and the clients send it
      // again; fallen back, a rolling restart scored a whole step lexically (helper-58).
      return result;
  }
  auto why = std::string{to_string(result.code)} + ": " + result.error;
  auto outcome = fallback_(item);
  if (outcome.code != errc::none) {
    result.error += "; the fallback '" + item.fallback + "' failed too: " + outcome.error;
    return result;
  }
  result.code = errc::none;
  result.error.clear();
  result.status = item_status::fallback;
  result.score = outcome.score;
  result.source = item.fallback;
  result.sources.clear();
  result.evidence.clear(); // replay recomputes the fallback from the item alone
  result.fallback_reason = std::move(why);
  return result;
}

void scheduler_core::end_item(request_id id, pending_request& req, uint32_t index,
                              item_result result, bool shareable) {
  if (result.code == errc::none && !std::isfinite(result.score)) {
    // Never an answer without a score: JSON has no NaN, and a trainer would read null or 0.
    result.code = errc::reward_failed;
    result.error = std::string{"the reward computed a score that is not finite ("}
                   + (std::isnan(result.score) ? "NaN" : "infinity") + ")";
    result.score = 0.0;
  }
  if (result.code != errc::none) {
    result = maybe_fall_back(*req.items[index], std::move(result));
  }
  if (result.code != errc::none) {
    result.status = item_status::failed;
    failure_counter(result.code).Increment();
  }
  items_counter(req.items[index]->reward, result.status).Increment();
  if (!req.internal) {
    latency_histogram(req.items[index]->reward)
      .Observe(seconds_between(req.admitted, clock_.now()));
  }
  // Refused after admission (`refuse_doomed`, or a reward graph's calls so refused): its
  // client sends it again, as after a refusal at admission, which no step or group counts.
  const bool refused = result.status == item_status::failed && result.code == errc::overloaded;
  if (!req.internal && !req.items[index]->step.empty() && !refused) {
    steps_.item_ended(req.items[index]->step, result);
  }
  if (!req.internal && !req.items[index]->group.empty()) {
    bool scored = result.status != item_status::failed;
    if (result.code == errc::client_closed || refused) {
      // Nobody reads it; a retry of the same rollout will be the member that counts.
      groups_.withdrawn(req.items[index]->group, clock_.now());
    } else if (auto took = groups_.ended(req.items[index]->group, clock_.now(),
                                         scored ? &result.score : nullptr)) {
      metrics_.group_completion.Observe(std::chrono::duration<double>(*took).count());
    }
  }
  if (!req.ended.empty()) {
    // Its replay record's time: a cached twin answered after this item ended and before its
    // request did must find this record before it (helper-52).
    req.ended[index] = std::chrono::system_clock::now();
  }
  auto was = req.states[index];
  req.results[index] = std::move(result);
  req.states[index] = item_state::done;
  if (--req.remaining == 0) {
    finishing_.push_back(id);
  }
  if (!req.keys[index].empty() && was != item_state::following) {
    // Copy: settling may end other items of this request and touch `req`.
    auto key = req.keys[index];
    auto copy = req.results[index];
    settle_flight(key, {id, index}, copy, shareable);
  }
}

bool scheduler_core::hand_over_calls(item_ref from, item_ref to) {
  auto old = requests_.find(from.first);
  auto next = requests_.find(to.first);
  if (old == requests_.end() || next == requests_.end()) {
    return false;
  }
  auto& slots = old->second.running_in[from.second];
  bool handed = false;
  for (auto b : slots) {
    auto batch = batches_.find(b);
    if (b == 0 || batch == batches_.end()) {
      continue;
    }
    std::replace(batch->second.items.begin(), batch->second.items.end(), from, to);
    handed = true;
  }
  if (!handed) {
    return false;
  }
  next->second.running_in[to.second] = slots;
  next->second.states[to.second] = item_state::running;
  slots = {0, 0};
  return true;
}

void scheduler_core::settle_flight(const std::string& key, item_ref leader,
                                   const item_result& result, bool shareable) {
  if (shareable && result.status == item_status::ok && routing_.cache_capacity > 0) {
    cache_.insert(key, cached_result{result.score, result.source, result.output, result.detail,
                                     result.extra, result.sources});
  }
  auto f = flights_.find(key);
  if (f == flights_.end() || f->second.leader != leader) {
    return;
  }
  auto followers = std::move(f->second.followers);
  flights_.erase(f);
  auto now = clock_.now();
  for (size_t k = 0; k < followers.size(); ++k) {
    auto [rid, index] = followers[k];
    auto req = requests_.find(rid);
    if (req == requests_.end() || req->second.states[index] != item_state::following) {
      continue; // Ended by its own request's deadline meanwhile.
    }
    auto& r = req->second;
    if (!shareable) {
      // The leader ended for reasons of its own request: this follower leads now.
      auto& next = flights_[key];
      next.leader = {rid, index};
      next.followers.assign(followers.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                            followers.end());
      // The call in flight goes on for it: the provider is already working on it.
      if (!hand_over_calls(leader, {rid, index})) {
        requeue({rid, index});
      }
      return;
    }
    item_result copy = result;
    copy.queue_ms = ms_between(r.enqueued[index], now);
    copy.attempts = 0;
    copy.coalesced = true;
    end_item(rid, r, index, std::move(copy));
  }
}

void scheduler_core::fail_remaining(request_id id, errc code, const std::string& reason) {
  auto found = requests_.find(id);
  if (found == requests_.end()) {
    return;
  }
  auto& req = found->second;
  auto now = clock_.now();
  // Per capability, why its sources sent nothing (for items that never got a call).
  std::map<std::string, std::string> unsent;
  for (uint32_t i = 0; i < req.states.size(); ++i) {
    if (req.states[i] == item_state::done) {
      continue;
    }
    item_result r = req.results[i];
    if (req.states[i] == item_state::queued) {
      queues_.remove(req.tasks[i]);
      r.queue_ms = ms_between(req.enqueued[i], now);
    }
    r.code = code;
    r.error = reason;
    if (code == errc::deadline_exceeded && req.states[i] == item_state::queued
        && r.attempts == 0) {
      const auto& capability = req.items[i]->capability;
      auto [why, fresh] = unsent.try_emplace(capability);
      if (fresh) {
        why->second = ejected_sources(capability);
      }
      if (!why->second.empty()) {
        r.error += " (no call was sent: " + why->second + ")";
      }
    }
    if (code == errc::deadline_exceeded && req.states[i] == item_state::running) {
      // Where it ran: a call held by a node that froze said only that the deadline passed
      // (helper-67).
      if (auto batch = batches_.find(req.running_in[i][0]); batch != batches_.end()) {
        r.error += " (it was running on '" + batch->second.source_name + "' for "
                   + std::to_string(static_cast<int64_t>(
                     ms_between(batch->second.dispatched, now)))
                   + " ms)";
      }
    }
    if (req.last_outcome[i] == attempt_outcome_kind::rate_limited
        && req.states[i] != item_state::running) {
      r.error += " (held back by rate limits; last attempt: " + req.last_failure[i] + ")";
    } else if (req.states[i] == item_state::retrying && !req.last_failure[i].empty()) {
      r.error += " (it was waiting to be retried; last attempt: " + req.last_failure[i] + ")";
    }
    end_item(id, req, i, std::move(r), false);
  }
  note_depth(req.priority);
}

std::string scheduler_core::ejected_sources(const std::string& capability) {
  // helper-41: items of a capability whose only source was ejected or being probed failed
  // at their deadline saying nothing of it.
  std::string why;
  for (const auto& info : unclosed_sources(capability)) {
    why += (why.empty() ? "" : "; ") + std::string{"source '"} + info.name + "' "
           + (info.breaker == breaker_state::open ? "was ejected"
                                                  : "was being probed after an ejection")
           + (info.breaker_reason.empty() ? std::string{} : " (" + info.breaker_reason + ")");
  }
  return why;
}

void scheduler_core::flush() {
  while (!finishing_.empty()) {
    auto ids = std::move(finishing_);
    finishing_.clear();
    for (auto id : ids) {
      finish(id);
    }
  }
}

void scheduler_core::finish(request_id id) {
  auto found = requests_.find(id);
  if (found == requests_.end()) {
    return;
  }
  if (!found->second.internal) {
    schedule_histogram_->Observe(seconds_between(found->second.admitted, clock_.now()));
  }
  if (auto caller = found->second.caller; caller != 0) {
    auto [first, last] = callees_.equal_range(caller);
    for (auto it = first; it != last; ++it) {
      if (it->second == id) {
        callees_.erase(it);
        break;
      }
    }
  }
  deadlines_.erase({found->second.deadline, id});
  std::vector<group_summary> groups;
  if (!found->second.internal) {
    std::unordered_set<std::string_view> seen;
    for (const auto& item : found->second.items) {
      if (!item->group.empty() && seen.insert(item->group).second) {
        groups.push_back(groups_.summary(item->group));
      }
    }
  }
  finished_request done;
  done.id = id;
  done.internal = found->second.internal;
  const auto& results = found->second.results;
  done.refused = !results.empty()
                 && std::all_of(results.begin(), results.end(), [](const item_result& r) {
                      return r.status == item_status::failed && r.code == errc::overloaded;
                    });
  if (done.refused) {
    int64_t longest = 0;
    for (const auto& r : results) {
      longest = std::max(longest, r.retry_after_ms);
    }
    done.retry_after_s = std::max<int64_t>(1, (longest + 999) / 1000);
    done.reason = results.front().error;
  }
  done.items = std::move(found->second.items);
  done.results = std::move(found->second.results);
  done.groups = std::move(groups);
  done.ended = std::move(found->second.ended);
  finished_.push_back(std::move(done));
  const bool internal = found->second.internal;
  requests_.erase(found);
  if (!internal) {
    metrics_.requests_pending.Decrement();
  }
}

prometheus::Counter& scheduler_core::items_counter(const std::string& reward,
                                                   item_status status) {
  auto key = std::make_pair(reward, status);
  auto found = item_counters_.find(key);
  if (found == item_counters_.end()) {
    auto& c = metrics_.items.Add({{"reward", reward}, {"status", to_string(status)}});
    found = item_counters_.emplace(key, &c).first;
  }
  return *found->second;
}

prometheus::Histogram& scheduler_core::latency_histogram(const std::string& reward) {
  auto found = latency_histograms_.find(reward);
  if (found == latency_histograms_.end()) {
    auto& h = metrics_.item_latency.Add({{"reward", reward}}, latency_buckets());
    found = latency_histograms_.emplace(reward, &h).first;
  }
  return *found->second;
}

void scheduler_core::note_depth(size_t cls) {
  const size_t depth = queues_.depth(cls);
  if (depth == depth_noted_[cls]) {
    return; // the shared gauge is left alone: no atomic update the other shards contend on
  }
  depth_gauges_[cls]->Increment(static_cast<double>(depth)
                                - static_cast<double>(depth_noted_[cls]));
  depth_noted_[cls] = depth;
}

prometheus::Counter& scheduler_core::failure_counter(errc code) {
  auto found = failure_counters_.find(code);
  if (found == failure_counters_.end()) {
    auto& c = metrics_.failures.Add({{"reason", std::string{to_string(code)}}});
    found = failure_counters_.emplace(code, &c).first;
  }
  return *found->second;
}

} // namespace arbiter::scheduler
