// The scheduler's bookkeeping (scheduler_core.hpp): sources coming and going, admission, batches
// starting and completing, retries after failures, stragglers and timers. Dispatch is in
// scheduler_dispatch.cpp; how items end (cache, fallback, coalescing, finished requests) is in
// scheduler_results.cpp.
#include "scheduler/scheduler_core.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "common/token_estimate.hpp"

namespace arbiter::scheduler {

namespace {

/// How long admitted items wait for a capability whose last source was lost (a worker node
/// restarting, a coordinator that paused past the heartbeat timeout) before they fail.
constexpr nanoseconds lost_capability_grace = std::chrono::seconds{10};

/// Calls `f` once for each distinct non-empty step among a batch's items' steps.
template <class F>
void for_each_step(const std::vector<std::string>& steps, F&& f) {
  for (size_t i = 0; i < steps.size(); ++i) {
    auto first = steps.begin();
    auto here = first + static_cast<std::ptrdiff_t>(i);
    if (!steps[i].empty() && std::find(first, here, steps[i]) == here) {
      f(steps[i]);
    }
  }
}

/// Of the `count` items of `capability` among `items` that `candidate(i)` names, keeps (marks in
/// `kept`) whole groups, in the order they first appear, as many items as `fits(k)` allows at
/// most (searched over 1 to `count` - 1): a request too slow for its deadline keeps what its
/// sources can answer in time, and the rest takes its fallback. A group is never split (a
/// cosine score beside lexical ones in one group makes its advantages noise). Returns how
/// many items it kept.
template <class Fits, class Candidate>
size_t groups_in_time(const std::string& capability, const std::vector<shared_item>& items,
                      size_t count, Fits&& fits, Candidate&& candidate, std::vector<bool>& kept) {
  size_t most = 0;
  for (size_t hi = count - 1; most < hi;) {
    auto mid = most + (hi - most + 1) / 2;
    if (fits(mid)) {
      most = mid;
    } else {
      hi = mid - 1;
    }
  }
  auto mine = [&](size_t i) { return items[i]->capability == capability && candidate(i); };
  std::unordered_map<std::string_view, size_t> sizes;
  for (size_t i = 0; most > 0 && i < items.size(); ++i) {
    if (mine(i)) {
      ++sizes[items[i]->group];
    }
  }
  std::unordered_map<std::string_view, bool> chosen;
  size_t total = 0;
  for (size_t i = 0; most > 0 && i < items.size(); ++i) {
    if (!mine(i)) {
      continue;
    }
    auto [it, first] = chosen.try_emplace(items[i]->group, false);
    if (first && total + sizes[items[i]->group] <= most) {
      it->second = true;
      total += sizes[items[i]->group];
    }
    if (it->second) {
      kept.resize(items.size(), false);
      kept[i] = true;
    }
  }
  return total;
}

retry_budget_config budget_of(double ratio, uint32_t min_retries) {
  retry_budget_config cfg;
  cfg.retry_ratio = ratio;
  cfg.min_retries = min_retries;
  return cfg;
}

retry_policy_config policy_of(const config::routing_config& r) {
  retry_policy_config cfg;
  cfg.max_attempts = std::max<uint32_t>(r.max_attempts, 1);
  cfg.backoff_base = r.retry_backoff_base;
  cfg.backoff_cap = r.retry_backoff_cap;
  cfg.max_retry_after = r.max_retry_after;
  return cfg;
}

double breaker_gauge(breaker_state state) {
  switch (state) {
  case breaker_state::open:
    return 2.0;
  case breaker_state::half_open:
    return 1.0;
  case breaker_state::closed:
    return 0.0;
  }
  return 0.0;
}

} // namespace

scheduler_core::scheduler_core(const config::scheduler_config& cfg, const time_source& clock,
                               scheduler_metrics& metrics, const config::routing_config& routing,
                               uint64_t seed)
  : cfg_(cfg),
    routing_(routing),
    clock_(clock),
    metrics_(metrics),
    queues_(cfg.priorities),
    sources_(clock),
    random_(seed),
    retry_budget_(budget_of(routing.retry_budget_ratio, routing.retry_budget_min), clock),
    retry_policy_(policy_of(routing), retry_budget_, random_),
    hedge_budget_(budget_of(routing.hedge_budget_ratio, 1), clock),
    cache_(routing.cache_capacity, routing.cache_ttl, clock,
           static_cast<size_t>(routing.cache_max_bytes)),
    fair_(config::class_weights(cfg.priorities)),
    groups_(cfg.group_memory, static_cast<size_t>(cfg.max_groups)),
    abandoned_places_(std::chrono::minutes{1}, 65536) {
  for (size_t i = 0; i < queues_.class_count(); ++i) {
    depth_gauges_.push_back(&metrics_.depth_of(queues_.class_name(i)));
    depth_noted_.push_back(0);
    wait_histograms_.push_back(&metrics_.wait_of(queues_.class_name(i)));
  }
  run_histogram_ = &metrics_.stage("run");
  schedule_histogram_ = &metrics_.stage("schedule");
}

scheduler_core::~scheduler_core() {
  for (size_t cls = 0; cls < depth_gauges_.size(); ++cls) {
    depth_gauges_[cls]->Decrement(static_cast<double>(depth_noted_[cls]));
  }
}

source_id scheduler_core::add_source(std::string name, std::vector<std::string> capabilities) {
  source_spec spec;
  spec.name = std::move(name);
  spec.capabilities = std::move(capabilities);
  spec.max_batch_items = cfg_.dispatch_batch_items;
  spec.max_inflight = cfg_.max_inflight_batches_per_source;
  return add_source(std::move(spec));
}

source_id scheduler_core::add_source(source_spec spec) {
  for (const auto& capability : spec.capabilities) {
    orphaned_.erase(capability); // its items waiting for a source have one again
  }
  if (spec.remote) {
    remote_capabilities_.insert(spec.capabilities.begin(), spec.capabilities.end());
  } else if (spec.local_model) {
    local_model_capabilities_.insert(spec.capabilities.begin(), spec.capabilities.end());
  }
  auto name = spec.name;
  auto id = sources_.add(std::move(spec));
  auto info = sources_.describe(id);
  metrics_.source_added(name);
  metrics_.of_source(metrics_.source_inflight, name).Set(0);
  metrics_.of_source(metrics_.source_limit, name).Set(info.max_inflight);
  metrics_.of_source(metrics_.source_breaker, name).Set(0);
  return id;
}

void scheduler_core::remove_source(source_id id, const std::string& reason) {
  breaker_shown_.erase(id);
  for (auto it = given_up_calls_.begin(); it != given_up_calls_.end();) {
    it = it->second.source == id ? given_up_calls_.erase(it) : std::next(it);
  }
  // What the lost source held goes back through the retry path as a failed attempt: retried
  // on another source while attempts and time are left. Its batches are forgotten, so a late
  // answer from it (a node that comes back) finds nothing and is ignored.
  std::vector<batch_id> lost;
  for (const auto& [bid, batch] : batches_) {
    if (batch.source == id) {
      lost.push_back(bid);
    }
  }
  attempt_report report;
  report.kind = attempt_outcome_kind::connect_failure;
  report.detail = reason;
  sources_.retire(id);
  for (auto bid : lost) {
    complete(bid, report, {});
  }
  auto capabilities = sources_.describe(id).capabilities;
  metrics_.source_removed(sources_.name(id));
  sources_.remove(id);
  // A capability left with no source: its items, queued or waiting to be retried, wait up to
  // `lost_capability_grace` for one to join (a node restarting), then fail together.
  for (const auto& capability : capabilities) {
    if (!sources_.serves(capability)) {
      orphaned_.try_emplace(capability, lost_capability{clock_.now(), reason});
    }
  }
  std::vector<retry_entry> waiting;
  for (auto& entry : retries_) {
    auto req = requests_.find(entry.item.first);
    if (req == requests_.end() || req->second.states[entry.item.second] != item_state::retrying) {
      continue;
    }
    auto& r = req->second;
    auto index = entry.item.second;
    if (sources_.serves(r.items[index]->capability)
        || orphaned_.count(r.items[index]->capability) > 0) {
      waiting.push_back(entry);
      continue;
    }
    item_result result = r.results[index];
    result.code = errc::worker_failed;
    result.error = r.last_failure[index] + "; no other source serves "
                   + r.items[index]->capability;
    end_item(entry.item.first, r, index, std::move(result));
  }
  retries_ = std::move(waiting);
  flush();
}

bool scheduler_core::remote_capability(const std::string& capability) const {
  return remote_capabilities_.count(capability) > 0;
}

bool scheduler_core::shares_answers(const score_item& item) const {
  if (remote_capability(item.capability)) {
    return true; // documented: a sampled remote call is cached too; a new seed asks afresh
  }
  if (local_model_capabilities_.count(item.capability) == 0) {
    return false; // CPU rewards cost less than the key; a graph's calls are shared instead
  }
  const auto* call = item.call.get();
  if (call == nullptr || (item.kind != "generate" && item.kind != "chat")) {
    return true; // an embedding or an NLI pair: the same input gives the same output
  }
  // A local generator draws a fresh seed for a call without one (temperature 1 when unset).
  return call->seed.has_value() || (call->temperature && *call->temperature == 0.0);
}

admission_result scheduler_core::submit(request_id id, size_t priority, time_point deadline,
                                        std::vector<shared_item> items, bool internal) {
  auto now = clock_.now();
  // Items that end at once, failed, whatever the sources do (sized at the first: most requests
  // have none), and how. A group deadline counts from the group's first arrival: it may leave
  // this request less time than its own. A member whose group's deadline has passed fails at
  // once (not refused); the request's other items keep the earliest deadline still ahead. An
  // item its reward cannot score (`set_item_check`) fails as reward_failed, making no call.
  std::vector<std::string> ends_now;
  std::vector<errc> ends_now_code;
  size_t ending_now = 0;
  auto end_at_once = [&](size_t i, errc code, std::string why) {
    ends_now.resize(items.size());
    ends_now_code.resize(items.size(), errc::none);
    ends_now[i] = std::move(why);
    ends_now_code[i] = code;
    ++ending_now;
  };
  // Prompt tokens, estimated once (admission's token pacing, then the sources' buckets) for the
  // items of remote capabilities and reward graphs; `no_estimate` for the others.
  constexpr uint64_t no_estimate = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> estimated;
  // Work, for the items of sources that weigh items by it (`estimate_work`). The rule is
  // looked up once per run of items of one capability (a request of 10,000 rule-reward items
  // goes through this thread).
  std::vector<uint64_t> work(items.size(), 0);
  const std::string* ruled = nullptr;
  work_rule rule;
  for (size_t i = 0; i < items.size(); ++i) {
    if (ruled == nullptr || *ruled != items[i]->capability) {
      ruled = &items[i]->capability;
      rule = sources_.work_rule_of(*ruled);
    }
    work[i] = estimate_work(*items[i], rule);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& item = *items[i];
    if (item_check_) {
      if (auto why = item_check_(item); !why.empty()) {
        end_at_once(i, errc::reward_failed, std::move(why));
        continue;
      }
    }
    if (item.group.empty() || item.group_deadline_ms == 0) {
      continue;
    }
    auto due = groups_.first_arrival(item.group, now).value_or(now)
               + std::chrono::milliseconds{item.group_deadline_ms};
    if (due <= now) {
      end_at_once(i, errc::deadline_exceeded,
                  "the deadline of group '" + item.group + "' ("
                    + std::to_string(item.group_deadline_ms)
                    + " ms after its first member arrived) passed before this request arrived");
    } else {
      deadline = std::min(deadline, due);
    }
  }
  admission_result decision;
  // The capability whose sources decide the request's wait (the slowest), if any.
  std::string binding;
  // Capabilities whose sources are expected to answer only after the deadline, for items
  // that all have a fallback: their expected wait.
  std::map<std::string, nanoseconds> too_slow;
  // Of those, items kept for their sources: whole groups that fit (empty: none), and the
  // capabilities some were kept of.
  std::vector<bool> kept;
  std::set<std::string> split;
  // Capabilities whose batching sources have answered no full call, that this request's items
  // will call several at once: admitted, it teaches their full pace (`full_pace_probes_`).
  std::vector<std::string> teaches;
  // Items the cache answers at once take no room and no time: the retry of a call that ran
  // past its deadline was refused on that call's pace though its answer was waiting for it.
  // The keys looked up are kept for below (empty: not looked up).
  const bool use_cache = routing_.cache_capacity > 0;
  std::vector<std::string> keys;
  std::vector<bool> held;
  size_t cached_now = 0;
  if (use_cache && !internal) {
    for (size_t i = 0; i < items.size(); ++i) {
      if ((ends_now.empty() || ends_now[i].empty()) && shares_answers(*items[i])) {
        keys.resize(items.size());
        held.resize(items.size(), false);
        keys[i] = cache_key(*items[i]);
        held[i] = cache_.holds(keys[i]);
        cached_now += held[i] ? 1 : 0;
      }
    }
  }
  auto cached = [&held](size_t i) { return i < held.size() && held[i]; };
  if (!internal && ending_now + cached_now < items.size()) {
    admission_input in;
    in.draining = draining_;
    in.items = items.size() - ending_now - cached_now;
    in.priority = queues_.class_name(priority);
    in.free_capacity = queues_.free_capacity(priority);
    in.capacity = queues_.capacity(priority);
    in.time_left = deadline - now;
    if (!draining_ && in.items <= in.free_capacity) {
      // The request's items by capability (most requests need one).
      // Per capability: its items, whether every one of them has a fallback and a group.
      // Their prompt tokens, summed, and one of them, for token pacing.
      struct need {
        size_t count = 0;
        bool all_fall_back = true;
        bool all_grouped = true;
        token_demand tokens;
        uint64_t work = 0;
      };
      std::map<std::string, need> needs;
      for (size_t i = 0; i < items.size(); ++i) {
        if ((ends_now.empty() || ends_now[i].empty()) && !cached(i)) {
          auto& n = needs[items[i]->capability];
          ++n.count;
          n.all_fall_back = n.all_fall_back && !items[i]->fallback.empty() && fallback_;
          n.all_grouped = n.all_grouped && !items[i]->group.empty();
          n.work += work[i];
          const auto& capability = items[i]->capability;
          if (remote_capability(capability) || sources_.feeds(capability) != nullptr) {
            estimated.resize(items.size(), no_estimate);
            estimated[i] = estimate_prompt_tokens(*items[i]);
            n.tokens.prompt += estimated[i];
            n.tokens.item = items[i].get();
          }
        }
      }
      for (const auto& [capability, n] : needs) {
        // A reward graph's calls must end that much before its item's deadline (at most a
        // tenth of the time left): a call whose turn came just before the deadline was
        // admitted, then failed unsent.
        const nanoseconds margin = sources_.feeds(capability) != nullptr
                                     ? std::min<nanoseconds>(graph_call_margin, in.time_left / 10)
                                     : nanoseconds{0};
        auto with_margin = [margin](std::optional<nanoseconds> w) {
          return w ? std::optional{*w + margin} : std::nullopt;
        };
        auto wait = with_margin(
          expected_wait(capability, priority, n.count, 0, false, 0.0, n.tokens, n.work));
        if (wait && *wait <= in.time_left && n.count > 1
            && sources_under(capability, &source_registry::full_pace_unknown)) {
          teaches.push_back(capability);
        }
        if (wait && *wait > in.time_left && stale_estimate(capability)) {
          // Refused on what idle sources took long ago, they would never be asked again to
          // correct it: this request goes as a probe instead.
          continue;
        }
        if (wait && *wait > in.time_left && full_pace_probe(capability)) {
          // Refused on the pace of calls that were not full, while a trickle of single items
          // kept teaching it, a 16-item request due in 4 s was refused on an idle server as
          // long as the trickle lasted, though one call takes 16 (helper-63's bl63.py): it
          // goes as a probe when it fits at the least full calls can cost, a tenth to spare,
          // one at a time.
          auto soonest = with_margin(expected_wait(capability, priority, n.count, 0, false, 0.0,
                                                   n.tokens, n.work, /*soonest=*/true));
          if (soonest && *soonest <= in.time_left - in.time_left / 10) {
            teaches.push_back(capability);
            continue;
          }
        }
        if (wait && *wait > in.time_left && n.all_fall_back) {
          // Too slow for this deadline, but each of these items has a fallback: they take it
          // at once (below) rather than the request being refused. Grouped items keep the
          // whole groups that fit (`groups_in_time`): 3,000 long texts took the lexical
          // fallback though 800 could have been embedded (helper-58).
          too_slow.emplace(capability, *wait);
          if (n.all_grouped && n.count > 1) {
            // Named apart: a lambda may not capture a structured binding before C++20.
            const std::string& cap = capability;
            const need& all = n;
            auto fits = [&](size_t k) {
              auto share = static_cast<double>(k) / static_cast<double>(all.count);
              token_demand part{
                static_cast<uint64_t>(static_cast<double>(all.tokens.prompt) * share),
                all.tokens.item};
              auto w = with_margin(expected_wait(
                cap, priority, k, 0, false, 0.0, part,
                static_cast<uint64_t>(static_cast<double>(all.work) * share)));
              // A tenth to spare: a kept item that misses its deadline falls back alone,
              // splitting its group.
              return w && *w <= in.time_left - in.time_left / 10;
            };
            auto open = [&](size_t i) {
              return (ends_now.empty() || ends_now[i].empty()) && !cached(i);
            };
            if (groups_in_time(capability, items, n.count, fits, open, kept) > 0) {
              split.insert(capability);
            }
          }
          continue;
        }
        if (wait && (!in.expected_wait || *wait > *in.expected_wait)) {
          in.expected_wait = wait;
          binding = capability;
        }
        if (wait && *wait > in.time_left) {
          auto least = with_margin(expected_wait(capability, priority, n.count, 0,
                                                 /*alone=*/true, 0.0, n.tokens, n.work));
          if (least && (!in.alone_wait || *least > *in.alone_wait)) {
            in.alone_wait = least;
          }
          auto soonest = with_margin(expected_wait(capability, priority, n.count, 0, false, 0.0,
                                                   n.tokens, n.work, /*soonest=*/true));
          if (soonest && (!in.soonest_wait || *soonest > *in.soonest_wait)) {
            in.soonest_wait = soonest;
          }
        }
      }
    } else if (!items.empty()) {
      // A judge item's room comes back at the pace of its chat calls: the graph itself has no
      // rate, so a full class said Retry-After: 1 every time and clients gave up. A full
      // class drains in full calls.
      in.items_per_second = capacity_through(items.front()->capability, /*full_calls=*/true);
      binding = items.front()->capability;
    }
    // Requests refused before this one and told to come back no later than it come back
    // before it, together: their items queue, and go in full calls.
    auto rate_of = [this, &in, &binding] {
      return in.items_per_second ? in.items_per_second
                                 : capacity_through(binding, /*full_calls=*/true);
    };
    if (!binding.empty() && refused_.holds(binding)) {
      in.refused = refused_.pending(binding, priority, now);
      in.refused_rate = rate_of().value_or(0.0);
    }
    decision = decide_admission(in);
    if (!decision.admitted()) {
      if (!binding.empty()
          && (decision.decision == admission_decision::reject_queue_full
              || decision.decision == admission_decision::reject_deadline_unmeetable)) {
        refused_.add(binding, priority, static_cast<double>(in.items),
                     now + decision.retry_after, now);
      }
      return decision;
    }
  }
  for (const auto& capability : teaches) {
    full_pace_probes_[capability] = id;
  }
  auto& req = requests_[id];
  req.priority = priority;
  req.internal = internal;
  req.deadline = deadline;
  req.admitted = now;
  req.items = std::move(items);
  auto n = req.items.size();
  req.results.resize(n);
  req.states.assign(n, item_state::queued);
  req.tasks.assign(n, 0);
  req.enqueued.assign(n, now);
  if (recording_) {
    req.ended.assign(n, {});
  }
  req.order_at.assign(n, std::nullopt);
  req.keys.assign(n, std::string{});
  req.last_failure.assign(n, std::string{});
  req.last_outcome.assign(n, std::nullopt);
  req.tokens.assign(n, 0);
  req.work = std::move(work);
  req.failures.assign(n, 0);
  req.running_in.assign(n, {0, 0});
  req.remaining = n;
  deadlines_.emplace(deadline, id);
  if (!internal) {
    // A reward graph's model calls are part of the request that holds their item.
    metrics_.requests_pending.Increment();
  }
  groups_.prune(now);
  bool edf = cfg_.priorities.at(priority).order == config::queue_order::edf;
  for (uint32_t i = 0; i < n; ++i) {
    // Every member is noted before any can end, so that the group's pending count balances.
    const auto& group = req.items[i]->group;
    if (!group.empty()) {
      auto order = groups_.admit(group, now, deadline, !internal);
      if (cfg_.group_order) {
        req.order_at[i] = edf ? order.earliest_deadline : order.first_arrival;
      }
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    const auto& item = *req.items[i];
    if (!ends_now.empty() && !ends_now[i].empty()) {
      item_result r;
      r.code = ends_now_code[i];
      r.error = std::move(ends_now[i]);
      end_item(id, req, i, std::move(r), false);
      continue;
    }
    if (auto slow = too_slow.find(item.capability);
        slow != too_slow.end() && (kept.empty() || !kept[i])) {
      item_result r;
      r.code = errc::overloaded;
      r.error = "expected to be answered in "
                + std::to_string(std::chrono::duration_cast<milliseconds>(slow->second).count())
                + " ms, after its deadline ("
                + std::to_string(std::chrono::duration_cast<milliseconds>(deadline - now).count())
                + " ms left), at the pace its sources allow";
      if (split.count(item.capability) > 0) {
        r.error += " (the request's groups that fit in time were kept for them)";
      }
      end_item(id, req, i, std::move(r), false);
      continue;
    }
    // A capability that lost its last source a moment ago (a node restarting) is waited for,
    // as its admitted items are (`remove_source`).
    if (!sources_.serves(item.capability) && orphaned_.count(item.capability) == 0) {
      item_result r;
      r.code = errc::no_eligible_source;
      r.error = "no source serves '" + item.capability + "' (needed by reward '" + item.reward
                + "')";
      end_item(id, req, i, std::move(r));
      continue;
    }
    if (remote_capability(item.capability)) {
      // Estimated once; each source scales it by what its usage reports taught.
      req.tokens[i] = i < estimated.size() && estimated[i] != no_estimate
                        ? estimated[i]
                        : estimate_prompt_tokens(item);
    }
    if ((use_cache || routing_.coalesce) && shares_answers(item)) {
      auto key = i < keys.size() && !keys[i].empty() ? std::move(keys[i]) : cache_key(item);
      if (use_cache) {
        auto hit = cache_.lookup(key);
        metrics_.cache_lookups.Add({{"result", hit ? "hit" : "miss"}}).Increment();
        if (hit) {
          item_result r;
          r.score = hit->score;
          r.status = item_status::ok;
          r.source = hit->source;
          r.cached = true;
          r.output = hit->output;
          r.detail = hit->detail;
          r.extra = hit->extra;
          r.sources = hit->sources;
          end_item(id, req, i, std::move(r));
          continue;
        }
      }
      if (routing_.coalesce) {
        auto [f, fresh] = flights_.try_emplace(key);
        if (!fresh && !waits_behind(f->second.leader, priority, deadline)) {
          f->second.followers.emplace_back(id, i);
          req.states[i] = item_state::following;
          req.keys[i] = std::move(key);
          metrics_.coalesced_items.Increment();
          continue;
        }
        if (fresh) {
          f->second.leader = {id, i};
        }
      }
      if (auto place = abandoned_places_.take(key, now)) {
        // Sent again by a client that hung up on it: back to where it was.
        auto own = req.order_at[i].value_or(edf ? deadline : now);
        req.order_at[i] = std::min(own, *place);
      }
      req.keys[i] = std::move(key);
      if (adopt_late_call(id, i)) {
        continue;
      }
    }
    queued_task task{next_task_++, id, i, deadline, now, req.order_at[i], req.tokens[i],
                     req.work[i]};
    req.tasks[i] = task.id;
    // Admission checked the capacity, so the push cannot fail. A reward graph's model calls
    // (internal) pass no admission: their item was admitted, and left the class's queue when
    // it went to the graph, so new requests may have filled its room since. They are that
    // item's own work, and go in beyond the capacity rather than fail it.
    if (!queues_.push(priority, item.capability, task, internal)) {
      item_result r;
      r.code = errc::overloaded;
      r.error = "priority class '" + queues_.class_name(priority) + "' is full";
      end_item(id, req, i, std::move(r));
    }
  }
  note_depth(priority);
  flush();
  return decision;
}

std::string scheduler_core::source_name(source_id id) const {
  return sources_.name(id);
}

bool scheduler_core::waits_behind(item_ref leader, size_t priority, time_point deadline) const {
  // An identical item still queued in a lower class (or due later) would hold this one to its
  // place: a high class's item that followed a low class's flood missed its deadline. It
  // queues on its own then; the cache takes whichever answer comes first.
  auto found = requests_.find(leader.first);
  if (found == requests_.end()) {
    return false;
  }
  const auto& r = found->second;
  auto state = r.states[leader.second];
  return (state == item_state::queued || state == item_state::retrying)
         && (priority < r.priority || deadline < r.deadline);
}

void scheduler_core::start_batch(source_id source, std::vector<item_ref> items, uint64_t tokens,
                                 bool hedge, std::vector<dispatch_batch>& out, bool full) {
  auto now = clock_.now();
  dispatch_batch batch;
  batch.id = next_batch_++;
  batch.source = source;
  batch.hedge = hedge;
  batch.record = recording_;
  batch.priority = queues_.class_count();
  batch.deadline = time_point::max();
  inflight_batch record;
  record.source = source;
  record.source_name = sources_.name(source);
  record.dispatched = now;
  record.hedge = hedge;
  record.full = full;
  // An item sent to a reward graph waits on in its model calls' queues: they are observed.
  const bool observe_wait =
    items.empty() || sources_.feeds(requests_.at(items.front().first)
                                      .items[items.front().second]->capability) == nullptr;
  for (auto [rid, index] : items) {
    auto& req = requests_.at(rid);
    if (req.states[index] != item_state::running) {
      req.results[index].queue_ms = ms_between(req.enqueued[index], now);
      if (observe_wait) {
        wait_histograms_[req.priority]->Observe(seconds_between(req.enqueued[index], now));
      }
    }
    req.states[index] = item_state::running;
    req.results[index].attempts += 1;
    auto& slots = req.running_in[index];
    (slots[0] == 0 ? slots[0] : slots[1]) = batch.id;
    batch.items.push_back(req.items[index]);
    batch.priority = std::min(batch.priority, req.priority);
    batch.deadline = std::min(batch.deadline, req.deadline);
  }
  // Once per batch: each call reads the clock.
  retry_budget_.on_request(items.size());
  hedge_budget_.on_request(items.size());
  const bool count_inputs = sources_.max_batch_inputs(source) > 0;
  uint64_t inputs = 0;
  for (auto [rid, index] : items) {
    const auto& req = requests_.at(rid);
    if (count_inputs) {
      inputs += inputs_of({rid, index});
    }
    record.prompt_tokens += req.tokens[index];
    record.work += req.work[index];
    record.steps.push_back(req.items[index]->step);
    record.estimate = estimate_of(*req.items[index]);
  }
  for_each_step(record.steps,
                [&](const std::string& step) { steps_.call(step, record.source_name, hedge); });
  record.items = std::move(items);
  record.remote = sources_.remote(source);
  if (record.remote) {
    if (auto p95 = sources_.straggler_after(source)) {
      if (routing_.hedge && !hedge) {
        record.hedge_at = now + std::max<nanoseconds>(*p95, routing_.hedge_min_delay);
        // At the tail of the work (nothing more waits for these sources), a call that has run
        // past its source's typical latency is hedged to a faster source already.
        record.tail_hedge_at =
          now + std::max<nanoseconds>(sources_.latency_of(source), routing_.hedge_min_delay);
      }
    }
  }
  sources_.acquire(source, tokens, batch.items.size(), record.work, inputs);
  record.charged_tokens = tokens;
  if (tokens > 0) {
    record.charged_prompt_tokens =
      sources_.prompt_tokens_for(source, record.prompt_tokens, record.estimate);
  }
  metrics_.of_source(metrics_.source_inflight, record.source_name).Increment();
  metrics_.dispatch_batch_items.Observe(static_cast<double>(batch.items.size()));
  if (hedge) {
    metrics_.of_source(metrics_.source_hedges, record.source_name).Increment();
  }
  batches_.emplace(batch.id, std::move(record));
  out.push_back(std::move(batch));
}

void scheduler_core::bill_tokens(const inflight_batch& batch, uint64_t prompt,
                                 uint64_t completion) {
  if (prompt + completion == 0) {
    return;
  }
  const auto& name = batch.source_name;
  metrics_.of_source(metrics_.source_tokens, name, {{"kind", "prompt"}})
    .Increment(static_cast<double>(prompt));
  metrics_.of_source(metrics_.source_tokens, name, {{"kind", "completion"}})
    .Increment(static_cast<double>(completion));
  metrics_.of_source(metrics_.source_cost, name)
    .Increment(sources_.cost(batch.source, prompt, completion));
}

std::optional<scheduler_core::inflight_batch>
scheduler_core::take_batch(batch_id id, attempt_report& report) {
  auto node = batches_.extract(id);
  if (node.empty()) {
    return std::nullopt;
  }
  auto batch = std::move(node.mapped());
  for (const auto& key : batch.late_keys) {
    if (auto late = late_calls_.find(key); late != late_calls_.end() && late->second.first == id) {
      late_calls_.erase(late);
    }
  }
  // The call's size: what its bucket was charged, or for a call sent before the endpoint's
  // limits were known, what it would be charged now (prompt and completion). Only a 429
  // asks: every other answer (a CPU batch's, a model's) skips the estimate.
  uint64_t size = batch.charged_tokens;
  if (size == 0 && report.kind == attempt_outcome_kind::rate_limited && !report.cancelled) {
    for (const auto& ref : batch.items) {
      if (requests_.count(ref.first) > 0) {
        size += sources_.tokens_for(batch.source, demand_of(ref));
      }
    }
  }
  if (auto burst = sources_.release(batch.source, report, routing_.auth_ejection,
                                    batch.items.size(), batch.charged_tokens, size,
                                    batch.work, batch.full)) {
    // A 429 for a call larger than all the endpoint takes at once: not retried after the
    // Retry-After. Several items go again one by one (as for a 400); one goes to a source
    // it fits, or fails saying so.
    report.kind = batch.items.size() > 1 ? attempt_outcome_kind::bad_request
                                         : attempt_outcome_kind::unsupported;
    report.retry_after.reset();
    report.detail = "its estimated " + std::to_string(size)
                    + " tokens exceed the " + std::to_string(*burst) + " that source '"
                    + batch.source_name + "' takes at once (" + report.detail + ")";
  }
  const auto& name = batch.source_name;
  metrics_.of_source(metrics_.source_inflight, name).Decrement();
  metrics_
    .of_source(metrics_.source_attempts, name,
               {{"outcome", report.cancelled ? "cancelled" : to_string(report.kind)}})
    .Increment();
  if (report.extra_requests > 0) {
    // An embedding call cut into parts (a TEI endpoint's batch limit): the provider saw each.
    for_each_step(batch.steps, [&](const std::string& step) {
      for (uint32_t k = 0; k < report.extra_requests; ++k) {
        steps_.call(step, name, false);
      }
    });
  }
  if (report.resent) {
    // The request went out once more than the scheduler sent it (a stale connection's resend).
    // The second write counts as a call here; the unsent branch below takes it back off when
    // no fresh connection could be made for it.
    count_resend(name, batch.steps, true);
  }
  if (!report.cancelled) {
    metrics_.of_source(metrics_.source_latency, name, {}, latency_buckets())
      .Observe(std::chrono::duration<double>(report.latency).count());
    if (report.kind == attempt_outcome_kind::rate_limited) {
      metrics_.of_source(metrics_.source_rate_limited, name).Increment();
    }
  }
  if (!report.cancelled && report.unsent) {
    // No connection could be made: the provider never saw it (helper-62: 6 calls to a port
    // nothing listened on were in the step's account).
    for_each_step(batch.steps, [&](const std::string& step) {
      steps_.call_unsent(step, name, batch.hedge);
    });
  } else if (!report.cancelled) {
    bool failed = report.kind != attempt_outcome_kind::ok;
    bool limited = report.kind == attempt_outcome_kind::rate_limited;
    double ms = std::chrono::duration<double, std::milli>(report.latency).count();
    for_each_step(batch.steps, [&](const std::string& step) {
      steps_.call_ended(step, name, failed, limited, ms);
    });
  }
  if (sources_.remote(batch.source)) {
    // Local workers have a fixed limit and no breaker: nothing changes there per batch.
    auto info = sources_.describe(batch.source);
    metrics_.of_source(metrics_.source_limit, name).Set(info.max_inflight);
    show_breaker(batch.source, info.breaker);
  }
  return batch;
}

void scheduler_core::show_breaker(source_id id, breaker_state state) {
  auto [shown, added] = breaker_shown_.try_emplace(id, state);
  if (added || shown->second != state) {
    shown->second = state;
    metrics_.of_source(metrics_.source_breaker, sources_.name(id)).Set(breaker_gauge(state));
  }
}

void scheduler_core::detach(item_ref ref, batch_id batch, bool item_done) {
  auto req = requests_.find(ref.first);
  if (req == requests_.end()) {
    return;
  }
  auto& slots = req->second.running_in[ref.second];
  batch_id other = slots[0] == batch ? slots[1] : slots[0];
  slots = {0, 0};
  if (!item_done) {
    slots[0] = other;
    return;
  }
  if (other == 0) {
    return;
  }
  // The item is answered; the other attempt at it is a loser unless it carries other items
  // still waiting for an answer.
  give_up_if_unneeded(other);
}

void scheduler_core::give_up_if_unneeded(batch_id id, bool run_on) {
  auto found = batches_.find(id);
  if (found == batches_.end()) {
    return;
  }
  for (auto [rid, index] : found->second.items) {
    auto r = requests_.find(rid);
    if (r != requests_.end() && r->second.states[index] == item_state::running) {
      return;
    }
  }
  auto& batch = found->second;
  if (batch.given_up) {
    note_late_calls(id); // a retry that took an ended item's place has ended too
    return;
  }
  auto source = batch.source;
  const bool local = sources_.local_model(source);
  if (local || (run_on && sources_.remote(source))) {
    // A local model runs a batch as one message, whatever it is told: the model stays busy
    // with it, so it keeps its slot (a retry waits here, not behind it in the worker's
    // mailbox), and its answers are kept when they come (`keep_late_answer`). A remote call
    // past its items' deadline is left to answer likewise: its provider has done most of
    // the work, and a client that retries it would otherwise pay for all of it again.
    batch.given_up = true;
    for (auto [rid, index] : batch.items) {
      auto r = requests_.find(rid);
      batch.late_keys.push_back(r != requests_.end() ? r->second.keys[index] : std::string{});
    }
    note_late_calls(id);
    if (!local) {
      return; // not cancelled, nor its graph's calls: it has none
    }
  } else {
    note_given_up(id);
    attempt_report cancelled;
    cancelled.cancelled = true;
    take_batch(id, cancelled);
  }
  cancelled_.push_back({id, source});
  // The model calls of a graph given up end with it, before a free slot could send them.
  auto [first, last] = callees_.equal_range(id);
  std::vector<request_id> callees;
  for (auto it = first; it != last; ++it) {
    callees.push_back(it->second);
  }
  callees_.erase(id);
  for (auto callee : callees) {
    drop(callee, "the reward graph that made this call was given up (its client hung up)");
  }
}

void scheduler_core::note_late_calls(batch_id id) {
  const auto& batch = batches_.at(id);
  for (size_t pos = 0; pos < batch.items.size() && pos < batch.late_keys.size(); ++pos) {
    const auto& key = batch.late_keys[pos];
    auto [rid, index] = batch.items[pos];
    auto r = requests_.find(rid);
    if (!key.empty()
        && (r == requests_.end() || r->second.states[index] != item_state::running)) {
      late_calls_[key] = {id, pos};
    }
  }
}

bool scheduler_core::adopt_late_call(request_id id, uint32_t index) {
  auto& req = requests_.at(id);
  auto late = late_calls_.find(req.keys[index]);
  if (late == late_calls_.end()) {
    return false;
  }
  auto [bid, pos] = late->second;
  late_calls_.erase(late); // one item takes a place
  auto b = batches_.find(bid);
  if (b == batches_.end() || pos >= b->second.items.size()) {
    return false;
  }
  auto& batch = b->second;
  auto [rid, was] = batch.items[pos];
  if (auto r = requests_.find(rid);
      r != requests_.end() && r->second.states[was] == item_state::running) {
    return false;
  }
  // Its answer is then one computed for the request that ended (`cached`, in `complete`, as
  // `keep_late_answer` says of one that comes while the retry waits): the call, its tokens
  // and cost count where it was made.
  batch.items[pos] = {id, index};
  req.states[index] = item_state::running;
  req.running_in[index] = {bid, 0};
  return true;
}

void scheduler_core::keep_late_answer(const std::string& key, const std::string& source,
                                     const item_outcome& o) {
  auto f = flights_.find(key);
  auto found = f != flights_.end() ? requests_.find(f->second.leader.first) : requests_.end();
  if (found == requests_.end() || found->second.states[f->second.leader.second]
                                    != item_state::queued) {
    // No retry waits for it (one sent already, elsewhere or again, runs its course).
    if (routing_.cache_capacity > 0) {
      cache_.insert(key, cached_result{o.score, source, o.output, o.detail, o.extra, o.sources});
    }
    return;
  }
  auto [rid, index] = f->second.leader;
  auto& req = found->second;
  queues_.remove(req.tasks[index]);
  item_result r = req.results[index];
  r.queue_ms = ms_between(req.enqueued[index], clock_.now());
  r.score = o.score;
  r.status = item_status::ok;
  r.source = source;
  r.cached = true; // computed for the request that hung up
  r.output = o.output;
  r.detail = o.detail;
  r.extra = o.extra;
  r.sources = o.sources;
  r.evidence = o.evidence;
  end_item(rid, req, index, std::move(r)); // caches it; its followers get it too
  note_depth(req.priority);
}

void scheduler_core::follow_caller(request_id callee, batch_id caller) {
  auto found = requests_.find(callee);
  if (found == requests_.end() || caller == 0) {
    return;
  }
  found->second.caller = caller;
  callees_.emplace(caller, callee);
}

void scheduler_core::complete(batch_id id, const std::vector<item_outcome>& outcomes) {
  complete(id, attempt_report{}, outcomes);
}

void scheduler_core::note_given_up(batch_id id) {
  auto found = batches_.find(id);
  if (found == batches_.end() || !found->second.remote) {
    return;
  }
  // Bounded: a source that never answers its cancels (it is removed, which clears its own).
  constexpr size_t most = 65536;
  if (given_up_calls_.size() >= most) {
    given_up_calls_.erase(given_up_calls_.begin());
  }
  const auto& b = found->second;
  given_up_calls_[id] = {b.source, b.source_name, b.steps, b.hedge};
}

void scheduler_core::count_resend(const std::string& source_name,
                                  const std::vector<std::string>& steps, bool second_sent) {
  metrics_.of_source(metrics_.source_attempts, source_name, {{"outcome", "connect_failure"}})
    .Increment();
  for_each_step(steps, [&](const std::string& step) {
    if (second_sent) {
      steps_.call(step, source_name, false);
    }
    steps_.call_ended(step, source_name, true, false, 0.0);
  });
}

void scheduler_core::settle_given_up(batch_id id, const attempt_report& report) {
  auto found = given_up_calls_.find(id);
  if (found == given_up_calls_.end()) {
    return;
  }
  const auto& call = found->second;
  if (report.resent) {
    // Counted as `take_batch` counts a resend, the second write only where it went out before
    // the call was given up (helper-68: a step counted 18 calls of the provider's 24).
    count_resend(call.source_name, call.steps, !report.unsent);
  } else if (report.cancelled && report.unsent) {
    for_each_step(call.steps, [&](const std::string& step) {
      steps_.call_unsent(step, call.source_name, call.hedge);
    });
  }
  given_up_calls_.erase(found);
}

void scheduler_core::complete(batch_id id, attempt_report report,
                              const std::vector<item_outcome>& outcomes) {
  bool ok = report.kind == attempt_outcome_kind::ok;
  if (batches_.count(id) == 0) {
    settle_given_up(id, report);
  }
  if (auto found = batches_.find(id); found != batches_.end()) {
    const auto& sent = found->second;
    if (report.latency.count() == 0) {
      report.latency = clock_.now() - sent.dispatched;
    }
    if (ok && sent.prompt_tokens > 0) {
      // What the provider counted, where it said: teaches the source's token pacing, and
      // settles the call's charge when every item's count is known. Before the answer's
      // headers correct the bucket (in take_batch), which then has the last word.
      uint64_t reported = 0;
      bool every = true;
      for (const auto& o : outcomes) {
        if (o.output && o.output->prompt_tokens > 0) {
          reported += o.output->prompt_tokens;
        } else {
          every = false;
        }
      }
      sources_.observe_usage(sent.source, sent.prompt_tokens, reported,
                             every ? sent.charged_prompt_tokens : 0, sent.estimate);
    }
  }
  auto taken = take_batch(id, report);
  if (!taken) {
    return;
  }
  const auto& batch = *taken;
  if (ok) {
    // The tokens the source reported, and their cost: per step, and the running totals.
    uint64_t prompt = 0;
    uint64_t completion = 0;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const auto& out = outcomes[i].output;
      if (!out || (out->prompt_tokens == 0 && out->completion_tokens == 0)) {
        continue;
      }
      prompt += out->prompt_tokens;
      completion += out->completion_tokens;
      if (i < batch.steps.size() && !batch.steps[i].empty()) {
        steps_.usage(batch.steps[i], batch.source_name, out->prompt_tokens,
                     out->completion_tokens,
                     sources_.cost(batch.source, out->prompt_tokens, out->completion_tokens));
      }
    }
    bill_tokens(batch, prompt, completion);
  } else if (report.prompt_tokens + report.completion_tokens > 0 && !batch.steps.empty()) {
    // An answer the call could not use, billed all the same (helper-62: two replies with
    // fewer choices than n, 304 tokens at the provider, none in the step): its steps share
    // it by item, the first item taking what does not divide.
    const auto n = static_cast<uint64_t>(batch.steps.size());
    for (uint64_t i = 0; i < n; ++i) {
      auto prompt = report.prompt_tokens / n + (i == 0 ? report.prompt_tokens % n : 0);
      auto completion =
        report.completion_tokens / n + (i == 0 ? report.completion_tokens % n : 0);
      if (!batch.steps[i].empty() && prompt + completion > 0) {
        steps_.usage(batch.steps[i], batch.source_name, prompt, completion,
                     sources_.cost(batch.source, prompt, completion));
      }
    }
    bill_tokens(batch, report.prompt_tokens, report.completion_tokens);
  }
  for (size_t i = 0; i < batch.items.size(); ++i) {
    auto ref = batch.items[i];
    auto req = requests_.find(ref.first);
    if (req == requests_.end() || req->second.states[ref.second] != item_state::running) {
      // The item already ended (deadline, drain, a hedge won, its client hung up): a late
      // answer, kept when a local model computed it for a key.
      if (ok && batch.given_up && i < outcomes.size() && i < batch.late_keys.size()
          && !batch.late_keys[i].empty() && outcomes[i].code == errc::none) {
        keep_late_answer(batch.late_keys[i], batch.source_name, outcomes[i]);
      }
      continue;
    }
    if (!ok) {
      detach(ref, id, false);
      if (req->second.running_in[ref.second][0] != 0) {
        continue; // Another attempt at it (a hedge) is still out.
      }
      after_failure(ref, batch, report);
      continue;
    }
    auto& r = req->second;
    item_result result = r.results[ref.second];
    result.source = batch.source_name;
    // Running in a call given up on: it took the place of an item that ended
    // (`adopt_late_call`).
    result.cached = result.cached || batch.given_up;
    if (i >= outcomes.size()) {
      result.code = errc::internal;
      result.error = "the source answered " + std::to_string(outcomes.size())
                     + " outcomes for a larger batch";
    } else {
      const auto& o = outcomes[i];
      result.run_ms = o.run_ms > 0.0 ? o.run_ms
                                     : std::chrono::duration<double, std::milli>(report.latency)
                                         .count();
      // A reward graph's calls waited in the queues while it ran: queue time, not run time.
      result.queue_ms += o.queue_ms;
      result.run_ms = std::max(0.0, result.run_ms - o.queue_ms);
      run_histogram_->Observe(result.run_ms / 1000.0);
      if (o.code == errc::none) {
        result.score = o.score;
        result.status = item_status::ok;
        result.output = o.output;
        result.detail = o.detail;
        result.extra = o.extra;
      } else {
        result.code = o.code;
        result.error = o.error;
        result.retry_after_ms = o.retry_after_ms;
      }
      result.evidence = o.evidence; // a failed reward's too: replay reproduces the failure
      if (!o.sources.empty()) {
        // A reward graph: its model calls' provenance replaces the graph's own.
        result.sources = o.sources;
        result.cached = o.cached;
        result.coalesced = o.coalesced;
        result.attempts = o.attempts;
        if (o.sources.size() == 1) {
          result.source = o.sources.front();
        }
      }
    }
    end_item(ref.first, r, ref.second, std::move(result));
    detach(ref, id, true);
  }
  flush();
}

void scheduler_core::after_failure(item_ref ref, const inflight_batch& batch,
                                   const attempt_report& report) {
  auto& req = requests_.at(ref.first);
  auto index = ref.second;
  const auto& item = *req.items[index];
  auto now = clock_.now();
  auto attempts = req.results[index].attempts;
  if (counts_as_attempt(report.kind)) {
    req.failures[index] += 1;
  }
  if (report.kind == attempt_outcome_kind::bad_request && batch.items.size() > 1) {
    // A refused call that carried several items may be one item's doing (an empty text, one
    // over the model's length) or the call's size (TEI's --max-client-batch-size): each item
    // goes again alone, using up no attempt, and a refusal then is its own.
    req.last_failure[index] = "source '" + batch.source_name + "' refused a call of "
                              + std::to_string(batch.items.size()) + " items ("
                              + report.detail + "); sent again alone";
    req.last_outcome[index] = report.kind;
    req.states[index] = item_state::retrying;
    retries_.push_back({now, ref, std::nullopt});
    return;
  }
  auto others = sources_.has_alternative(item.capability, batch.source) ? other_sources::available
                                                                        : other_sources::none;
  auto d = retry_policy_.decide(report.kind, req.failures[index], req.deadline - now, others,
                                report.retry_after);
  metrics_
    .of_source(metrics_.source_retries, batch.source_name,
               {{"decision", to_string(d.kind)}, {"reason", d.reason}})
    .Increment();
  std::string failure = "source '" + batch.source_name + "' answered "
                        + to_string(report.kind)
                        + (report.detail.empty() ? "" : " (" + report.detail + ")")
                        + " on attempt " + std::to_string(attempts);
  if (report.unsent && !report.cancelled && attempts > 0) {
    req.results[index].attempts -= 1; // never sent: not an attempt the item's result counts
  }
  if (d.kind != retry_decision_kind::no_retry) {
    if (!item.step.empty() && !report.unsent) {
      steps_.retry(item.step, batch.source_name);
    }
    req.last_failure[index] = std::move(failure);
    req.last_outcome[index] = report.kind;
    if (report.kind == attempt_outcome_kind::rate_limited) {
      // "Not now": back in its place in the queue; the endpoint's shared backoff and the
      // pacing buckets say when it goes, and to which source.
      requeue(ref);
      return;
    }
    req.states[index] = item_state::retrying;
    auto avoid = d.kind == retry_decision_kind::retry_elsewhere ? std::optional{batch.source}
                                                                : std::nullopt;
    retries_.push_back({now + d.delay, ref, avoid, d.awaits_budget});
    return;
  }
  item_result r = req.results[index];
  r.source = batch.source_name;
  r.code = d.reason == "fatal_status" ? errc::upstream_rejected : errc::upstream_failed;
  std::string why;
  if (d.reason == "max_attempts") {
    why = "no attempts left (" + std::to_string(req.failures[index]) + " failures that may repeat)";
  } else if (d.reason == "deadline") {
    why = report.kind == attempt_outcome_kind::rate_limited
            ? "rate limited until after the deadline, and no other source serves it"
            : "no time left before the deadline";
  } else if (d.reason == "budget_exhausted") {
    why = "the retry budget is spent";
  } else if (report.kind == attempt_outcome_kind::bad_request) {
    why = "the source refused the request itself; any source would";
  } else {
    why = "no other source serves '" + item.capability + "'";
  }
  if (r.code == errc::upstream_failed) {
    // When a source takes calls again (the answer's Retry-After), or else when the provider
    // said to come back: a 503 saying "Retry-After: 2" was passed on as 1.
    if (auto pick = sources_.pick(item.capability, demand_of(ref));
        !pick.source && pick.retry_at && *pick.retry_at > now) {
      r.retry_after_ms = std::chrono::ceil<std::chrono::milliseconds>(*pick.retry_at - now)
                           .count();
    } else if (report.retry_after) {
      r.retry_after_ms = std::chrono::ceil<std::chrono::milliseconds>(*report.retry_after)
                           .count();
    }
  }
  r.error = failure + "; " + why;
  end_item(ref.first, req, index, std::move(r));
}

void scheduler_core::requeue(item_ref ref) {
  auto& req = requests_.at(ref.first);
  auto index = ref.second;
  req.states[index] = item_state::queued;
  queued_task task{next_task_++, ref.first, index, req.deadline,
                   req.enqueued[index], req.order_at[index], req.tokens[index], req.work[index]};
  req.tasks[index] = task.id;
  if (!queues_.push(req.priority, req.items[index]->capability, task)) {
    // The class is full: the retry lane takes it instead.
    req.states[index] = item_state::retrying;
    retries_.push_back({clock_.now(), ref, std::nullopt});
  }
}

void scheduler_core::fail_batch(batch_id id, errc code, const std::string& reason) {
  attempt_report report;
  report.kind = attempt_outcome_kind::connect_failure;
  report.detail = reason;
  auto taken = take_batch(id, report);
  if (!taken) {
    return;
  }
  for (auto ref : taken->items) {
    auto req = requests_.find(ref.first);
    if (req == requests_.end() || req->second.states[ref.second] != item_state::running) {
      continue;
    }
    detach(ref, id, false);
    if (req->second.running_in[ref.second][0] != 0) {
      continue;
    }
    item_result r = req->second.results[ref.second];
    r.source = taken->source_name;
    r.code = code;
    r.error = reason;
    end_item(ref.first, req->second, ref.second, std::move(r));
  }
  flush();
}

std::optional<time_point> scheduler_core::straggler_deadline(const inflight_batch& batch) const {
  if (!batch.remote || routing_.straggler_timeout_factor <= 0.0) {
    return std::nullopt;
  }
  auto basis = sources_.timeout_basis(batch.source);
  if (!basis) {
    return std::nullopt;
  }
  auto after = std::chrono::duration_cast<nanoseconds>(std::chrono::duration<double, std::nano>(
    static_cast<double>(basis->count()) * routing_.straggler_timeout_factor));
  return batch.dispatched + std::max<nanoseconds>(after, routing_.straggler_timeout_min);
}

void scheduler_core::expire_stragglers() {
  auto now = clock_.now();
  std::vector<batch_id> due;
  for (const auto& [bid, batch] : batches_) {
    if (auto at = straggler_deadline(batch); at && *at <= now) {
      due.push_back(bid);
    }
  }
  std::sort(due.begin(), due.end());
  for (auto bid : due) {
    auto found = batches_.find(bid);
    if (found == batches_.end()) {
      continue;
    }
    const auto& batch = found->second;
    auto basis = sources_.timeout_basis(batch.source).value_or(nanoseconds{0});
    attempt_report report;
    report.kind = attempt_outcome_kind::timeout;
    report.abandoned = true;
    report.latency = now - batch.dispatched;
    report.detail = "no answer after "
                    + std::to_string(static_cast<int64_t>(ms_between(batch.dispatched, now)))
                    + " ms, past the straggler timeout (the source's recent p95 latency is "
                    + std::to_string(static_cast<int64_t>(
                      std::chrono::duration<double, std::milli>(basis).count()))
                    + " ms)";
    cancelled_.push_back({bid, batch.source});
    note_given_up(bid);
    complete(bid, std::move(report), {});
  }
}

void scheduler_core::cancel(request_id id, const std::string& reason) {
  drop(id, reason);
  flush();
}

void scheduler_core::drop(request_id id, const std::string& reason) {
  auto found = requests_.find(id);
  if (found == requests_.end()) {
    return;
  }
  auto& req = found->second;
  std::vector<batch_id> running;
  for (const auto& slots : req.running_in) {
    for (auto b : slots) {
      if (b != 0) {
        running.push_back(b);
      }
    }
  }
  // Where the request's own calls stood (not those following another's): its client may send
  // them again after a timeout.
  bool edf = cfg_.priorities.at(req.priority).order == config::queue_order::edf;
  auto now = clock_.now();
  for (uint32_t i = 0; i < req.states.size(); ++i) {
    auto state = req.states[i];
    if (!req.keys[i].empty() && state != item_state::done && state != item_state::following) {
      auto place = req.order_at[i].value_or(edf ? req.deadline : req.enqueued[i]);
      abandoned_places_.remember(req.keys[i], place, now);
    }
  }
  fail_remaining(id, errc::client_closed, reason);
  // A call still carrying another request's item goes on; one that carries only ended items
  // is given up like a hedge that lost, at no cost to its source's standing. (A call that
  // held several of the request's items is taken at the first.)
  for (auto b : running) {
    give_up_if_unneeded(b);
  }
}

void scheduler_core::fail_orphaned(const std::string& capability, const lost_capability& lost) {
  auto error = "every source serving '" + capability + "' was lost "
               + std::to_string(static_cast<int64_t>(ms_between(lost.since, clock_.now())))
               + " ms ago and none has joined since (the last one: " + lost.reason + ")";
  auto fail = [&](request_id id, uint32_t index) {
    auto req = requests_.find(id);
    if (req == requests_.end()) {
      return;
    }
    auto& r = req->second;
    item_result result = r.results[index];
    result.queue_ms = ms_between(r.enqueued[index], clock_.now());
    result.code = errc::worker_failed;
    result.error = r.last_failure[index].empty() ? error
                                                 : error + "; last attempt: "
                                                     + r.last_failure[index];
    end_item(id, r, index, std::move(result));
  };
  for (size_t cls = 0; cls < queues_.class_count(); ++cls) {
    while (auto task = queues_.pop(cls, capability)) {
      fail(task->request, task->index);
    }
    note_depth(cls);
  }
  std::vector<retry_entry> waiting;
  for (auto& entry : retries_) {
    auto req = requests_.find(entry.item.first);
    if (req != requests_.end() && req->second.states[entry.item.second] == item_state::retrying
        && req->second.items[entry.item.second]->capability == capability) {
      fail(entry.item.first, entry.item.second);
    } else {
      waiting.push_back(entry);
    }
  }
  retries_ = std::move(waiting);
  flush();
}

void scheduler_core::on_timer() {
  expire_stragglers();
  auto now = clock_.now();
  for (auto it = orphaned_.begin(); it != orphaned_.end();) {
    if (now - it->second.since < lost_capability_grace) {
      ++it;
      continue;
    }
    auto [capability, lost] = *it;
    it = orphaned_.erase(it);
    fail_orphaned(capability, lost);
  }
  // An ejection that ended with no call to say so: the gauge follows the breaker's clock.
  for (auto [id, state] : sources_.breakers(now)) {
    show_breaker(id, state);
  }
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto [deadline, id] = *deadlines_.begin();
    const auto& req = requests_.at(id);
    auto budget_ms = static_cast<int64_t>(ms_between(req.admitted, deadline));
    // A local model and a remote source run on with the calls they hold: their answers are
    // kept (the cache, or a retry waiting for them). A request of long texts failed at its
    // deadline while its batch ran 17 s more; the client's retry queued behind it computed
    // them all again. (A reward graph's item runs on as before: its calls end at this
    // deadline too.)
    std::vector<batch_id> on_models;
    for (const auto& slots : req.running_in) {
      for (auto b : slots) {
        if (auto batch = batches_.find(b); batch != batches_.end()
                                           && (sources_.local_model(batch->second.source)
                                               || sources_.remote(batch->second.source))) {
          on_models.push_back(b);
        }
      }
    }
    fail_remaining(id, errc::deadline_exceeded,
                   "the request's deadline (" + std::to_string(budget_ms)
                     + " ms after admission) passed before this item was scored");
    for (auto b : on_models) {
      give_up_if_unneeded(b, /*run_on=*/true);
    }
    flush();
  }
  if (draining_ && now >= drain_deadline_) {
    std::vector<request_id> ids;
    for (const auto& entry : requests_) {
      ids.push_back(entry.first);
    }
    for (auto id : ids) {
      fail_remaining(id, errc::shutting_down,
                     "the server shut down before this item was scored (drain deadline)");
    }
    flush();
  }
}

std::optional<time_point> scheduler_core::next_wakeup() const {
  std::optional<time_point> next;
  auto consider = [&](time_point t) {
    if (!next || t < *next) {
      next = t;
    }
  };
  if (!deadlines_.empty()) {
    consider(deadlines_.begin()->first);
  }
  if (draining_ && !requests_.empty()) {
    consider(drain_deadline_);
  }
  if (pacing_wakeup_) {
    consider(*pacing_wakeup_);
  }
  if (auto at = sources_.next_breaker_change(clock_.now())) {
    consider(*at);
  }
  for (const auto& [capability, lost] : orphaned_) {
    consider(lost.since + lost_capability_grace);
  }
  // Retries that are due wait for a slot (a completion wakes the scheduler) or for pacing
  // (`pacing_wakeup_`).
  auto now = clock_.now();
  for (const auto& entry : retries_) {
    if (entry.ready_at > now) {
      consider(entry.ready_at);
    }
  }
  for (const auto& [bid, batch] : batches_) {
    if (auto at = straggler_deadline(batch)) {
      consider(*at);
    }
    // Hedge times already passed are looked at again on every pump (an answer, pacing room);
    // only future ones need the timer.
    for (const auto& at : {batch.hedge_at, batch.tail_hedge_at}) {
      if (at && *at > now) {
        consider(*at);
      }
    }
  }
  return next;
}

void scheduler_core::begin_drain(time_point drain_deadline) {
  draining_ = true;
  drain_deadline_ = drain_deadline;
}

std::vector<finished_request> scheduler_core::take_finished() {
  std::vector<finished_request> out;
  out.swap(finished_);
  return out;
}

std::vector<cancelled_batch> scheduler_core::take_cancelled() {
  std::vector<cancelled_batch> out;
  out.swap(cancelled_);
  return out;
}

scheduler_snapshot scheduler_core::snapshot() {
  scheduler_snapshot snap;
  for (size_t i = 0; i < queues_.class_count(); ++i) {
    snap.queues.push_back({queues_.class_name(i), queues_.depth(i), cfg_.priorities[i].capacity});
  }
  snap.sources = sources_.sources();
  snap.pending_requests = static_cast<size_t>(
    std::count_if(requests_.begin(), requests_.end(),
                  [](const auto& entry) { return !entry.second.internal; }));
  snap.draining = draining_;
  return snap;
}

} // namespace arbiter::scheduler
