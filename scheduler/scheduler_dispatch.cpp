// The scheduler's dispatch half (scheduler_core.hpp): which queued items go where, now. Retries
// first, then each capability's queues by class weight and deadline onto the source with the
// fastest expected completion, holding work back for a faster source when waiting beats
// starting; then hedges. Submission, completion and timers are in scheduler_core.cpp.
#include "scheduler/scheduler_core.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "common/capability.hpp"

namespace arbiter::scheduler {

namespace {

/// Beyond twice a capability's latency, how close to its deadline an item must be to go ahead
/// of other classes.
constexpr nanoseconds urgent_margin = std::chrono::milliseconds{100};

/// The fair-share lane (fair_share's key) that orders the capabilities' turns at dispatch by
/// their classes; no capability is named so.
const std::string across_capabilities = "(across capabilities)";

/// How many starts at a capability come before an item with `place` items ahead of it in its
/// class and `higher` waiting in the classes above: all of those first (strict priority), or
/// the class's fair `share` of the starts while the classes it shares with wait too,
/// whichever lets it go sooner. Admission (`expected_wait`) and the late refusal
/// (`refuse_doomed`) reckon a wait so.
double starts_before(double higher, double place, double share) {
  return std::min(higher + place, place / std::max(share, 1e-9));
}

} // namespace

void scheduler_core::note_wait(const pick_result& pick, const std::string& capability) {
  if (!pick.retry_at) {
    return;
  }
  metrics_.source_pacing_waits
    .Add({{"capability", capability}, {"reason", to_string(pick.waiting_on)}})
    .Increment();
  if (!pacing_wakeup_ || *pick.retry_at < *pacing_wakeup_) {
    pacing_wakeup_ = pick.retry_at;
  }
}

std::vector<dispatch_batch> scheduler_core::dispatch() {
  std::vector<dispatch_batch> out;
  pacing_wakeup_.reset();
  dispatch_retries(out);
  dispatch_queues(out);
  dispatch_hedges(out);
  return out;
}

void scheduler_core::dispatch_retries(std::vector<dispatch_batch>& out) {
  auto now = clock_.now();
  std::vector<retry_entry> waiting;
  for (auto& entry : retries_) {
    auto req = requests_.find(entry.item.first);
    if (req == requests_.end() || req->second.states[entry.item.second] != item_state::retrying) {
      continue; // Ended meanwhile (deadline, drain).
    }
    if (entry.ready_at > now) {
      if (!pacing_wakeup_ || entry.ready_at < *pacing_wakeup_) {
        pacing_wakeup_ = entry.ready_at;
      }
      waiting.push_back(entry);
      continue;
    }
    const auto& item = *req->second.items[entry.item.second];
    if (entry.awaits_budget) {
      // The budget keeps retries from crowding out fresh work at a failing backend. With
      // nothing fresh waiting for the capability, a retry takes a slot no other item wants,
      // and holding it only slows a trainer that waits for this item before it sends more:
      // one sample a request, 32 at once, an only source failing 40 % of calls, and 600 judge
      // items took 71 s, against 22 s with no budget (`bench/flaky_source.py`).
      if (!retry_budget_.can_retry() && waiting_for(item.capability) > 0) {
        entry.ready_at = now + retry_budget_.slice();
        if (!pacing_wakeup_ || entry.ready_at < *pacing_wakeup_) {
          pacing_wakeup_ = entry.ready_at;
        }
        waiting.push_back(entry);
        continue;
      }
      retry_budget_.on_retry();
      entry.awaits_budget = false;
    }
    auto demand = demand_of(entry.item);
    auto pick = sources_.pick(item.capability, demand, entry.avoid);
    if (!pick.source) {
      if (waits_past(pick, req->second.deadline)) {
        auto& r = req->second;
        end_unsent(entry.item, r, errc::upstream_failed,
                   ejected_reason(item.capability, pick, r.last_failure[entry.item.second]),
                   false, ms_until(*pick.retry_at));
        continue;
      }
      note_wait(pick, item.capability);
      waiting.push_back(entry);
      continue;
    }
    if (auto why = past_hope(*pick.source, req->second.deadline)) {
      auto& r = req->second;
      const auto& last = r.last_failure[entry.item.second];
      end_unsent(entry.item, r, errc::deadline_exceeded,
                 *why + (last.empty() ? std::string{} : "; last attempt: " + last), false);
      continue;
    }
    start_batch(*pick.source, {entry.item}, sources_.tokens_for(*pick.source, demand), false,
                out);
  }
  retries_ = std::move(waiting);
}

size_t scheduler_core::waiting_for(const std::string& capability) const {
  size_t waiting = 0;
  for (size_t cls = 0; cls < queues_.class_count(); ++cls) {
    waiting += queues_.waiting(cls, capability);
  }
  return waiting;
}

const std::string& scheduler_core::batch_capability(const inflight_batch& batch) const {
  static const std::string none;
  for (auto [rid, index] : batch.items) {
    if (auto req = requests_.find(rid); req != requests_.end()) {
      return req->second.items[index]->capability;
    }
  }
  return none;
}

uint64_t scheduler_core::inputs_of(item_ref ref) const {
  const auto& item = *requests_.at(ref.first).items[ref.second];
  // An embedding item sends its candidate and each reference (a pass-through call, its text).
  // The capability may be a routing key narrowed by a suffix ("embed@model:ID").
  const std::string_view embed = name_of(capability::embed);
  const std::string_view key = item.capability;
  if (key.substr(0, key.find('@')) == embed && !item.call) {
    return 1 + item.ground_truth.size();
  }
  return 1;
}

token_demand scheduler_core::demand_of(item_ref ref) const {
  const auto& req = requests_.at(ref.first);
  return token_demand{req.tokens[ref.second], req.items[ref.second].get()};
}

void scheduler_core::dispatch_queues(std::vector<dispatch_batch>& out) {
  // One batch at a time, from the capability whose next class comes first across all of
  // them: one source may serve several (a provider's chat and embed, a vLLM's chat and
  // generate). Each capability used to dispatch all it could in turn, so the class whose
  // items were listed first took every token of a source it shared with another class's
  // capability, whatever the weights: 11 s without a single call for the other class.
  struct turn {
    std::string capability;
    size_t cls = 0;
    bool urgent = false;
  };
  std::vector<turn> turns;
  for (auto& capability : queues_.waiting_capabilities()) {
    turns.push_back({std::move(capability), 0, false});
  }
  std::vector<bool> waiting(queues_.class_count(), false);
  while (!turns.empty()) {
    std::fill(waiting.begin(), waiting.end(), false);
    for (size_t k = 0; k < turns.size();) {
      auto cls = choose_class(turns[k].capability, &turns[k].urgent);
      if (!cls) {
        turns.erase(turns.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      turns[k].cls = *cls;
      waiting[*cls] = true;
      ++k;
    }
    if (turns.empty()) {
      break;
    }
    // An item about to miss its deadline goes first, as within a capability; then the class
    // the fair share across capabilities says; among capabilities serving the same class, the
    // one whose turn is longest ago (a capability that took one goes to the back).
    auto next = std::find_if(turns.begin(), turns.end(), [](const turn& t) { return t.urgent; });
    if (next == turns.end()) {
      auto cls = fair_.next(across_capabilities, waiting);
      next = std::find_if(turns.begin(), turns.end(), [&](const turn& t) { return t.cls == cls; });
    }
    turn taken = std::move(*next);
    turns.erase(next);
    size_t dispatched = 0;
    const bool more = dispatch_step(taken.capability, taken.cls, out, dispatched);
    if (dispatched > 0) {
      fair_.charge(across_capabilities, taken.cls, dispatched);
    }
    if (more) {
      turns.push_back(std::move(taken));
    }
  }
  for (size_t cls = 0; cls < queues_.class_count(); ++cls) {
    note_depth(cls);
  }
}

std::optional<size_t> scheduler_core::choose_class(const std::string& capability,
                                                   bool* urgent_out) {
  auto now = clock_.now();
  std::vector<bool> waiting(queues_.class_count(), false);
  bool any = false;
  // Deadlines win: an item that would miss its deadline if it waited out another round or
  // two of its sources goes first, whatever its class.
  auto horizon = 2 * sources_.latency(capability) + urgent_margin;
  std::optional<size_t> urgent;
  for (size_t cls = 0; cls < waiting.size(); ++cls) {
    const auto* head = queues_.peek(cls, capability);
    if (head == nullptr) {
      continue;
    }
    waiting[cls] = true;
    any = true;
    if (head->deadline - now <= horizon
        && (!urgent || head->deadline < queues_.peek(*urgent, capability)->deadline)) {
      urgent = cls;
    }
  }
  if (!any) {
    return std::nullopt;
  }
  if (urgent_out != nullptr) {
    *urgent_out = urgent.has_value();
  }
  return urgent ? urgent : fair_.next(capability, waiting);
}

bool scheduler_core::hold_for_faster(const std::string& capability, source_id source) {
  if (!sources_.remote(source)) {
    return false;
  }
  // This source judged by its latency tail (a slow endpoint's answers spread widely), the
  // others by their typical latency.
  auto latency = sources_.straggler_after(source).value_or(sources_.latency_of(source));
  if (latency.count() == 0) {
    return false;
  }
  // The tail of a queue: if the other sources, taking work as soon as they may, would answer
  // everything still waiting before this one could be expected to answer its first item,
  // sending it here would only make the last answer later.
  auto waiting = waiting_for(capability);
  auto now = clock_.now();
  if (sources_.answers_by(capability, now + latency, source) < static_cast<double>(waiting)) {
    return false;
  }
  // Look again when something changes: an answer comes back (the actor pumps) or the faster
  // sources' pacing lets them take the next item.
  auto again = now + latency / 4;
  if (!pacing_wakeup_ || again < *pacing_wakeup_) {
    pacing_wakeup_ = again;
  }
  return true;
}

std::optional<double> scheduler_core::capacity_through(const std::string& capability,
                                                       bool full_calls, int depth) {
  const auto* fed = sources_.feeds(capability);
  if (fed == nullptr) {
    return sources_.capacity(capability, full_calls);
  }
  std::optional<double> least;
  for (const auto& under : *fed) {
    auto rate = depth < 4 ? capacity_through(under, full_calls, depth + 1) : std::nullopt;
    if (rate && (!least || *rate < *least)) {
      least = rate;
    }
  }
  return least;
}

double scheduler_core::graph_items_ahead(const std::string& capability, size_t cls) const {
  double ahead = 0.0;
  for (size_t q = 0; q <= cls && q < queues_.class_count(); ++q) {
    ahead += static_cast<double>(queues_.waiting(q, capability));
  }
  // Running at the graph, with no model call of theirs waiting yet (the calls of items
  // admitted in the same instant come a message later: a herd of single-item requests saw
  // none of the others and was admitted whole, to fail at its deadline).
  for (const auto& [id, batch] : batches_) {
    if (batch.items.empty()) {
      continue;
    }
    auto r = requests_.find(batch.items.front().first);
    if (r != requests_.end() && r->second.items[batch.items.front().second]->capability
                                  == capability) {
      // The graph sends each item's calls as a request of their own: a batch's items whose
      // requests have not come yet (a herd admitted in one instant counted none of them once
      // the first had come, and over-admitted what the buckets hold).
      auto calling = callees_.count(id);
      if (calling < batch.items.size()) {
        ahead += static_cast<double>(batch.items.size() - calling);
      }
    }
  }
  return ahead;
}

bool scheduler_core::sources_under(const std::string& capability, sources_say say,
                                   bool unqueued, int depth) const {
  for (size_t q = 0; unqueued && q < queues_.class_count(); ++q) {
    if (queues_.waiting(q, capability) > 0) {
      return false;
    }
  }
  if (const auto* fed = sources_.feeds(capability)) {
    return depth < 4 && std::any_of(fed->begin(), fed->end(), [&](const std::string& under) {
             return sources_under(under, say, unqueued, depth + 1);
           });
  }
  return (sources_.*say)(capability);
}

bool scheduler_core::stale_estimate(const std::string& capability) const {
  return sources_under(capability, &source_registry::stale, /*unqueued=*/true);
}

bool scheduler_core::full_pace_probe(const std::string& capability) const {
  auto probe = full_pace_probes_.find(capability);
  if (probe != full_pace_probes_.end() && requests_.count(probe->second) > 0) {
    return false;
  }
  return sources_under(capability, &source_registry::full_pace_unknown, /*unqueued=*/true);
}

std::optional<nanoseconds> scheduler_core::expected_wait(const std::string& capability,
                                                         size_t cls, size_t items, int depth,
                                                         bool alone, double calls_ahead,
                                                         const token_demand& tokens,
                                                         uint64_t work, bool soonest) {
  // A reward graph runs each item as model calls on the capabilities under it: its items wait
  // as long as the slowest of those (a graph of graphs is followed a few levels down). Its
  // items admitted but not yet calling will each make a call there, ahead of these.
  if (const auto* fed = sources_.feeds(capability)) {
    std::optional<nanoseconds> longest;
    if (depth < 4) {
      const double pending = alone ? 0.0 : calls_ahead + graph_items_ahead(capability, cls);
      for (const auto& under : *fed) {
        auto wait =
          expected_wait(under, cls, items, depth + 1, alone, pending, tokens, 0, soonest);
        if (wait && (!longest || *wait > *longest)) {
          longest = wait;
        }
      }
    }
    return longest;
  }
  auto rate = sources_.capacity(capability);
  if (!rate || *rate <= 0.0) {
    return std::nullopt;
  }
  std::vector<bool> waiting(queues_.class_count(), false);
  double ahead = 0.0;
  source_registry::own_items mine{static_cast<double>(items), tokens};
  mine.work = work;
  for (size_t q = 0; q < waiting.size(); ++q) {
    auto n = queues_.waiting(q, capability);
    waiting[q] = n > 0;
    if (q <= cls) {
      ahead += static_cast<double>(n);
      // What the queued items ahead hold: after a switch to long prompts, the short ones'
      // cost admitted a herd of single long items that then failed at their deadline.
      mine.queued += static_cast<double>(n);
      mine.queued_prompt += queues_.waiting_tokens(q, capability);
      mine.queued_work += queues_.waiting_work(q, capability);
    }
  }
  ahead += calls_ahead;
  auto in_class = static_cast<double>(queues_.waiting(cls, capability)) + calls_ahead;
  // The last of the request's items starts once everything before it has. What the sources'
  // buckets and free slots hold goes at once, the rest at their pace.
  auto count = static_cast<double>(items);
  const auto* own = mine.demand.item != nullptr || mine.work > 0 ? &mine : nullptr;
  auto start = [this, &capability, rate, alone, own, soonest](double n) {
    return sources_.seconds_to_start(capability, n, alone, own, soonest)
      .value_or(std::max(n - 1.0, 0.0) / *rate);
  };
  if (alone) {
    auto seconds = std::chrono::duration<double>(start(count));
    return std::chrono::duration_cast<nanoseconds>(seconds)
           + sources_.latency(capability, count, own);
  }
  auto latency = sources_.latency(capability, ahead + count, own);
  // The last item starts after those before it (`starts_before`): `ahead` holds the higher
  // classes' items and those of its own class.
  auto before = starts_before(ahead - in_class, in_class + count - 1.0, fair_.share(cls, waiting));
  auto seconds = std::chrono::duration<double>(start(1.0 + before));
  return std::chrono::duration_cast<nanoseconds>(seconds) + latency;
}

bool scheduler_core::dispatch_step(const std::string& capability, size_t cls,
                                   std::vector<dispatch_batch>& out, size_t& dispatched) {
  dispatched = 0;
  const auto* head = queues_.peek(cls, capability);
  auto head_ref = item_ref{head->request, head->index};
  auto pick = sources_.pick(capability, demand_of(head_ref));
  if (!pick.source) {
    if (fail_ejected(cls, capability, pick)) {
      return true;
    }
    refuse_doomed(cls, capability, pick);
    note_wait(pick, capability);
    return false;
  }
  auto source = *pick.source;
  if (hold_for_faster(capability, source)) {
    return false;
  }
  auto limit = sources_.max_batch_items(source, capability);
  if (auto wait = sources_.batch_wait(source);
      wait.count() > 0 && (sources_.busy(source) || sources_.waits_when_idle(source))
      && queues_.waiting(cls, capability) < limit) {
    // Micro-batching: items that trickle in while the source works share its next call.
    auto due = head->enqueued + wait;
    if (clock_.now() < due) {
      if (!pacing_wakeup_ || due < *pacing_wakeup_) {
        pacing_wakeup_ = due;
      }
      return false;
    }
  }
  bool count_tokens = sources_.paces_tokens(source);
  double allowance = count_tokens ? sources_.token_allowance(source) : 0.0;
  const uint32_t max_inputs = sources_.max_batch_inputs(source);
  std::vector<item_ref> items;
  uint64_t tokens = 0;
  uint64_t inputs = 0;
  while (items.size() < limit) {
    const auto* next = queues_.peek(cls, capability);
    if (next == nullptr) {
      break;
    }
    if (auto why = past_hope(source, next->deadline)) {
      fail_hopeless(cls, capability, std::move(*why));
      continue;
    }
    item_ref ref{next->request, next->index};
    uint64_t t = count_tokens ? sources_.tokens_for(source, demand_of(ref)) : 0;
    if (!items.empty() && count_tokens && static_cast<double>(tokens + t) > allowance) {
      break;
    }
    uint64_t n = max_inputs > 0 ? inputs_of(ref) : 0;
    if (!items.empty() && max_inputs > 0 && inputs + n > max_inputs) {
      break;
    }
    queues_.pop(cls, capability);
    tokens += t;
    inputs += n;
    items.push_back(ref);
  }
  if (items.empty()) {
    return true; // each was past hope
  }
  fair_.charge(capability, cls, items.size());
  dispatched = items.size();
  const bool full = queues_.peek(cls, capability) != nullptr;
  start_batch(source, std::move(items), tokens, false, out, full);
  return true;
}

bool scheduler_core::waits_past(const pick_result& pick, time_point deadline) {
  // Pacing counts too: a provider allowing one call a minute (learned from its headers) held
  // an item to its deadline, to fail it there as deadline_exceeded.
  return !pick.busy && pick.retry_at && *pick.retry_at > deadline
         && pick.waiting_on != wait_cause::none;
}

std::string scheduler_core::ejected_reason(const std::string& capability,
                                           const pick_result& pick,
                                           const std::string& last_failure) {
  const bool limited = pick.waiting_on != wait_cause::breaker;
  const char* holds = pick.waiting_on == wait_cause::backoff
                      ? "rate-limited (a 429's Retry-After, or the backoff after 429s)"
                    : pick.waiting_on == wait_cause::requests
                      ? "rate-limited (paced to its requests per minute)"
                    : pick.waiting_on == wait_cause::tokens
                      ? "rate-limited (paced to its tokens per minute)"
                      : "ejected (circuit breaker open)";
  std::string reason = "every source serving '" + capability + "' is " + holds + " for another "
    + std::to_string(static_cast<int64_t>(ms_between(clock_.now(), *pick.retry_at)))
    + " ms, past this item's deadline";
  if (!last_failure.empty() || limited) {
    if (!last_failure.empty()) {
      reason += "; last attempt: " + last_failure;
    }
    return reason;
  }
  // An item that never got an attempt: why its sources were ejected, as /info says.
  std::string why;
  for (const auto& info : unclosed_sources(capability)) {
    if (info.breaker == breaker_state::open && !info.breaker_reason.empty()) {
      why += (why.empty() ? "; ejected: '" : ", '") + info.name + "' (" + info.breaker_reason
             + ")";
    }
  }
  return reason + why;
}

std::vector<source_info> scheduler_core::unclosed_sources(const std::string& capability) {
  auto all = sources_.sources();
  std::vector<source_info> out;
  for (auto& info : all) {
    if (info.breaker != breaker_state::closed
        && std::find(info.capabilities.begin(), info.capabilities.end(), capability)
             != info.capabilities.end()) {
      out.push_back(std::move(info));
    }
  }
  return out;
}

bool scheduler_core::fail_ejected(size_t cls, const std::string& capability,
                                  const pick_result& pick) {
  const auto* head = queues_.peek(cls, capability);
  if (head == nullptr || !waits_past(pick, head->deadline)) {
    return false;
  }
  // Every source that serves the capability is ejected, or holds back after a 429, past this
  // item's deadline: waiting cannot help, so it fails now (and its reward's fallback, if any,
  // answers at once).
  auto task = *queues_.pop(cls, capability);
  if (auto req = requests_.find(task.request); req != requests_.end()) {
    auto& r = req->second;
    end_unsent({task.request, task.index}, r, errc::upstream_failed,
               ejected_reason(capability, pick, r.last_failure[task.index]), true,
               ms_until(*pick.retry_at));
  }
  return true;
}

namespace {

/// How often `refuse_doomed` looks at one capability's queues, and how many items from the
/// back of one queue it looks at.
constexpr auto doom_scan_interval = std::chrono::milliseconds{100};
constexpr size_t doom_scan_items = 4096;

} // namespace

void scheduler_core::refuse_doomed(size_t cls, const std::string& capability,
                                   const pick_result& pick) {
  // Only an empty bucket: then each start waits for the pace (after a 429's backoff, a
  // bucket may hold calls that go at once). Calls in flight (`pick.busy`) do not matter: their
  // answers' headers never raise a bucket's level.
  if (!pick.retry_at
      || (pick.waiting_on != wait_cause::requests && pick.waiting_on != wait_cause::tokens)) {
    return;
  }
  auto now = clock_.now();
  auto [scanned, fresh] = doom_scanned_.try_emplace(capability, now);
  if (!fresh && now - scanned->second < doom_scan_interval) {
    return;
  }
  scanned->second = now;
  // Items per second the limits let through at most: however many calls go at once, the
  // k-th item waiting starts no sooner than k of them after the next call may go.
  auto rate = sources_.paced_rate(capability);
  if (!rate || *rate <= 0.0) {
    return;
  }
  std::vector<bool> waiting(queues_.class_count(), false);
  double higher = 0.0;
  for (size_t q = 0; q < waiting.size(); ++q) {
    auto n = queues_.waiting(q, capability);
    waiting[q] = n > 0;
    if (q < cls) {
      higher += static_cast<double>(n);
    }
  }
  const double share = fair_.share(cls, waiting);
  // A call that starts must also end before the deadline: no sooner than the quickest answer.
  const auto quickest = sources_.quickest_answer(capability);
  auto tail = queues_.last(cls, capability, doom_scan_items);
  auto place = static_cast<double>(queues_.waiting(cls, capability));
  std::vector<std::pair<request_id, std::string>> doomed;
  std::unordered_set<request_id> seen;
  for (const auto& task : tail) {
    place -= 1.0; // items ahead of this one in its class
    double ahead = starts_before(higher, place, share);
    auto start = *pick.retry_at + std::chrono::duration_cast<nanoseconds>(
                                    std::chrono::duration<double>(ahead / *rate));
    if (start + quickest <= task.deadline) {
      break; // this one may make it, and those ahead of it start sooner
    }
    auto req = requests_.find(task.request);
    if (req == requests_.end() || !seen.insert(task.request).second) {
      continue;
    }
    auto& r = req->second;
    const bool untouched = std::all_of(r.states.begin(), r.states.end(), [](item_state st) {
      return st == item_state::queued;
    }) && std::all_of(r.failures.begin(), r.failures.end(), [](uint32_t f) { return f == 0; });
    if (!untouched) {
      continue; // part of it has run: it waits, and fails at its deadline if it must
    }
    auto late = std::chrono::duration<double>(start + quickest - task.deadline).count();
    auto reason = "expected to be answered in "
                  + std::to_string(static_cast<int64_t>(ms_between(now, start + quickest)))
                  + " ms at the soonest, after its deadline ("
                  + std::to_string(static_cast<int64_t>(ms_between(now, task.deadline)))
                  + " ms left), at the pace the rate limits of the sources serving '"
                  + capability + "' allow (learned after it was admitted)";
    auto retry_after_ms = static_cast<int64_t>(std::ceil(std::max(late, 1.0))) * 1000;
    // Admission counts the refused coming back ahead of later arrivals (a reward graph's
    // calls: their item's request, refused in turn, comes back).
    refused_.add(capability, r.priority, static_cast<double>(r.states.size()),
                 now + std::chrono::milliseconds{retry_after_ms}, now);
    for (auto& result : r.results) {
      result.retry_after_ms = retry_after_ms;
    }
    doomed.emplace_back(task.request, std::move(reason));
  }
  for (const auto& [id, reason] : doomed) {
    fail_remaining(id, errc::overloaded, reason);
  }
  flush();
}

int64_t scheduler_core::ms_until(time_point at) const {
  auto now = clock_.now();
  return at > now ? static_cast<int64_t>(std::ceil(ms_between(now, at))) : 0;
}

std::optional<std::string> scheduler_core::past_hope(source_id source,
                                                     time_point deadline) const {
  // A remote call that could only answer after its item's deadline is not sent: the provider
  // would be paid (and its limits spent) for an answer nobody reads.
  // (A source whose answers are too old to judge by gets the call: see `stale`.)
  auto fastest = sources_.remote(source) && !sources_.stale(source)
                   ? sources_.fastest_answer(source)
                   : std::nullopt;
  auto now = clock_.now();
  if (!fastest || deadline - now >= *fastest) {
    return std::nullopt;
  }
  auto left = deadline > now ? ms_between(now, deadline) : 0.0;
  return "not sent: " + std::to_string(static_cast<int64_t>(left))
         + " ms were left before the request's deadline, and none of the recent answers of"
           " source '"
         + sources_.name(source) + "' came in less than "
         + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(*fastest).count())
         + " ms";
}

void scheduler_core::fail_hopeless(size_t cls, const std::string& capability,
                                   std::string why) {
  auto task = *queues_.pop(cls, capability);
  if (auto req = requests_.find(task.request); req != requests_.end()) {
    end_unsent({task.request, task.index}, req->second, errc::deadline_exceeded, std::move(why),
               true);
  }
}

void scheduler_core::end_unsent(const item_ref& item, pending_request& r, errc code,
                                std::string error, bool queued, int64_t retry_after_ms) {
  item_result result = r.results[item.second];
  if (queued) {
    result.queue_ms = ms_between(r.enqueued[item.second], clock_.now());
  }
  result.code = code;
  result.error = std::move(error);
  result.retry_after_ms = std::max<int64_t>(retry_after_ms, 0);
  if (code == errc::deadline_exceeded) {
    metrics_.hopeless_items.Increment();
  }
  end_item(item.first, r, item.second, std::move(result));
  flush();
}

bool scheduler_core::in_tail(const pending_request& r, uint32_t index) const {
  // A trainer that sends one rollout per request names their group instead, so the tail of a
  // group is its members', as far as they have arrived; else the request's items.
  double done = 0.0;
  double known = 0.0;
  const auto& group = r.items[index]->group;
  auto g = group.empty() ? group_summary{} : groups_.summary(group);
  if (g.scored + g.failed + g.pending > 0) {
    done = g.scored + g.failed;
    known = g.scored + g.failed + g.pending;
  } else {
    known = static_cast<double>(r.items.size());
    done = known - static_cast<double>(r.remaining);
  }
  return done + 1.0 >= routing_.hedge_tail_fraction * known;
}

void scheduler_core::dispatch_hedges(std::vector<dispatch_batch>& out) {
  if (!routing_.hedge) {
    return;
  }
  auto now = clock_.now();
  // (batch, whether only as the tail of its capability's work)
  std::vector<std::pair<batch_id, bool>> due;
  std::map<std::string, bool> drained;
  auto queue_empty = [&](const inflight_batch& batch) {
    const auto& capability = batch_capability(batch);
    auto [found, fresh] = drained.try_emplace(capability, false);
    if (fresh) {
      found->second = waiting_for(capability) == 0;
    }
    return found->second;
  };
  for (auto& [bid, batch] : batches_) {
    if (batch.hedge_at && *batch.hedge_at <= now) {
      due.emplace_back(bid, false);
    } else if (batch.tail_hedge_at && *batch.tail_hedge_at <= now && queue_empty(batch)) {
      due.emplace_back(bid, true);
    }
  }
  // Oldest first, so that the budget goes to the longest stragglers.
  std::sort(due.begin(), due.end());
  for (auto [bid, tail_only] : due) {
    auto avoid = batches_.at(bid).source;
    auto items = batches_.at(bid).items; // start_batch may rehash batches_.
    // A straggler that no source can take now (pacing, slots, the hedge budget) stays due:
    // every pump (an answer) looks at it again, and pacing says when to wake.
    bool keep = false;
    for (auto ref : items) {
      auto req = requests_.find(ref.first);
      if (req == requests_.end()) {
        continue;
      }
      auto& r = req->second;
      if (r.states[ref.second] != item_state::running || r.running_in[ref.second][1] != 0) {
        continue;
      }
      if (!in_tail(r, ref.second)) {
        // Not yet: once enough of its group (or request) is answered, it holds that up.
        keep = true;
        continue;
      }
      const auto& item = *r.items[ref.second];
      if (!sources_.has_alternative(item.capability, avoid)) {
        continue;
      }
      if (!hedge_budget_.can_retry()) {
        keep = true;
        continue;
      }
      auto demand = demand_of(ref);
      auto pick = sources_.pick(item.capability, demand, avoid);
      if (!pick.source || *pick.source == avoid
          || (tail_only && sources_.latency_of(*pick.source) >= sources_.latency_of(avoid))) {
        note_wait(pick, item.capability);
        keep = true;
        continue;
      }
      if (past_hope(*pick.source, r.deadline)) {
        continue; // it could only answer after the deadline: the first attempt is the hope left
      }
      hedge_budget_.on_retry();
      start_batch(*pick.source, {ref}, sources_.tokens_for(*pick.source, demand), true, out);
    }
    if (auto found = batches_.find(bid); found != batches_.end() && !keep) {
      found->second.hedge_at.reset();
      found->second.tail_hedge_at.reset();
    }
  }
}

} // namespace arbiter::scheduler
