#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/score_types.hpp"
#include "common/time_source.hpp"
#include "config/config.hpp"
#include "scheduler/abandoned_places.hpp"
#include "scheduler/admission.hpp"
#include "scheduler/backoff.hpp"
#include "scheduler/fair_share.hpp"
#include "scheduler/group_tracker.hpp"
#include "scheduler/ids.hpp"
#include "scheduler/priority_queues.hpp"
#include "scheduler/result_cache.hpp"
#include "scheduler/retry_policy.hpp"
#include "scheduler/scheduler_metrics.hpp"
#include "scheduler/source_registry.hpp"
#include "scheduler/step_ledger.hpp"

namespace arbiter::scheduler {

/// A batch of items the scheduler sends to one source.
struct dispatch_batch {
  batch_id id = 0;
  source_id source = 0;
  std::vector<shared_item> items;
  /// A second attempt at a straggler (see `routing_config::hedge`).
  bool hedge = false;
  /// The most urgent priority class and the earliest deadline among its items' requests
  /// (a reward graph gives its model calls the same).
  size_t priority = 0;
  time_point deadline;
  /// The replay log is on: the source should say what each score was computed from
  /// (`item_outcome::evidence`).
  bool record = false;
};

/// Scores an item with its reward's fallback kind (see `score_item::fallback`).
using fallback_fn = std::function<item_outcome(const score_item&)>;
/// See `scheduler_core::set_item_check`.
using item_check_fn = std::function<std::string(const score_item&)>;

/// A batch the scheduler gave up on (a hedge that lost): the caller tells its source to stop.
struct cancelled_batch {
  batch_id id = 0;
  source_id source = 0;
};

/// A request whose every item has an answer.
struct finished_request {
  request_id id = 0;
  /// A reward graph's model calls (see `submit`).
  bool internal = false;
  /// Every item was refused after admission (`errc::overloaded`: the pace its sources'
  /// limits allow, learned after it was admitted, cannot start it before its deadline): the
  /// request is answered as admission refuses one ("deadline_unmeetable"), after
  /// `retry_after_s`, the first item's reason as `reason`.
  bool refused = false;
  int64_t retry_after_s = 0;
  std::string reason;
  /// The items, and one result per item, in the request's order.
  std::vector<shared_item> items;
  std::vector<item_result> results;
  /// The groups its items belong to, in order of first appearance, as they stood when it
  /// finished (members in other requests included); empty for internal requests.
  std::vector<group_summary> groups;
  /// With the replay log on (`set_recording`): when each item got its answer; else empty.
  std::vector<std::chrono::system_clock::time_point> ended;
};

/// What /info shows of the scheduler.
struct scheduler_snapshot {
  struct queue {
    std::string priority;
    size_t depth = 0;
    size_t capacity = 0;
  };
  std::vector<queue> queues;
  std::vector<source_info> sources;
  size_t pending_requests = 0;
  bool draining = false;
};

/// The scheduler's state machine, without actors: admission, priority queues, routing to
/// sources with pacing, retries, circuit breakers, hedging, coalescing and a result cache,
/// deadlines and draining. The scheduler actor translates messages into these calls; tests
/// drive it with a `manual_time_source`.
///
/// Every admitted item ends exactly once: scored by a source (or the cache, or an identical
/// item in flight), or failed with a reason (`deadline_exceeded`, `shutting_down`,
/// `worker_failed`, `no_eligible_source`, `upstream_failed`, `upstream_rejected`, ...). A
/// request is finished when all of its items have ended; `take_finished` hands it out.
class scheduler_core {
public:
  scheduler_core(const config::scheduler_config& cfg, const time_source& clock,
                 scheduler_metrics& metrics, const config::routing_config& routing = {},
                 uint64_t seed = 1);
  ~scheduler_core();

  scheduler_core(const scheduler_core&) = delete;
  scheduler_core& operator=(const scheduler_core&) = delete;

  /// Registers a local worker serving `capabilities` (batches of `dispatch_batch_items`,
  /// `max_inflight_batches_per_source` at once, no pacing or breaker) and returns its id.
  source_id add_source(std::string name, std::vector<std::string> capabilities);

  /// Registers a source with its own policy (remote endpoints) and returns its id.
  source_id add_source(source_spec spec);

  /// Sets how items whose reward has a fallback are scored when no source can: when such an
  /// item would fail for want of a source (deadline, no eligible source, upstream failures,
  /// worker failure, overload, shutdown), `fallback` scores it and it ends `fallback`.
  void set_fallback(fallback_fn fallback) {
    fallback_ = std::move(fallback);
  }

  /// Asked of every item a client submits: a reason its reward cannot score it whatever the
  /// sources answer (an embedding item with no reference), or "". Such an item fails at once
  /// as reward_failed and makes no model call.
  void set_item_check(item_check_fn check) {
    item_check_ = std::move(check);
  }

  /// With the replay log on, every batch asks its source for the evidence of its scores
  /// (`dispatch_batch::record`).
  void set_recording(bool on) noexcept {
    recording_ = on;
  }

  /// Removes a source (a worker that stopped, a node that was lost). Its in-flight items count
  /// a failed attempt (`connect_failure`, `reason`) and are retried on other sources while
  /// attempts and time are left; a late answer from it is ignored. Items left with no source
  /// serving their capability, queued or in flight, wait up to 10 s for one to join (a node
  /// restarting), then fail together with `worker_failed` and the reason.
  void remove_source(source_id id, const std::string& reason);

  /// The name `id` was added under ("" when unknown), for logs.
  std::string source_name(source_id id) const;

  /// Admits or refuses a request. On admission the core owns the items and will finish the
  /// request (see `take_finished`); on refusal nothing was queued and the caller answers the
  /// client with the result's reason and Retry-After. Items whose capability no source serves
  /// fail at once with `no_eligible_source`; items of remote rewards found in the cache end
  /// at once, and those identical to one in flight wait for its answer.
  /// `internal` requests (a reward graph's model calls, part of work already admitted) skip
  /// admission: they are queued even while draining.
  [[nodiscard]] admission_result submit(request_id id, size_t priority, time_point deadline,
                                        std::vector<shared_item> items, bool internal = false);
  [[nodiscard]] admission_result submit(request_id id, size_t priority, time_point deadline,
                                        std::vector<score_item> items, bool internal = false) {
    return submit(id, priority, deadline, share_items(std::move(items)), internal);
  }

  /// Takes every batch that can be sent now: retries that are due, then for each class in
  /// priority order and each capability waiting in it, batches for the source expected to
  /// finish first among those with a free slot and pacing room, then hedges for stragglers.
  /// The caller must send each batch and later report it with `complete` or `fail_batch`.
  std::vector<dispatch_batch> dispatch();

  /// Records a source's answer for `batch`: how the attempt went and, when it went well, one
  /// outcome per item in the batch's order. A report without a latency is timed from the
  /// dispatch. A failed attempt is retried here, elsewhere or not at all as the retry policy
  /// decides. Late answers (the item already ended, the batch was cancelled) are ignored.
  void complete(batch_id batch, attempt_report report,
                const std::vector<item_outcome>& outcomes);

  /// A successful attempt with these outcomes (a local worker's answer).
  void complete(batch_id batch, const std::vector<item_outcome>& outcomes);

  /// Fails every item of `batch` with `code` (a local worker failed or died); not retried.
  void fail_batch(batch_id batch, errc code, const std::string& reason);

  /// Ends every item of request `id` that has not ended with `client_closed` and `reason`
  /// (its client hung up): queued and retrying items are dropped unsent, and a batch left with
  /// no item still waiting for it is cancelled at its source (`take_cancelled`). Items of other
  /// requests following one of its items in flight (coalesced) keep waiting, on a new leader.
  /// Each dropped model call's queue place is held for a minute (`abandoned_places`): the same
  /// call submitted again in that time is queued where it was. Unknown or finished ids are
  /// ignored.
  void cancel(request_id id, const std::string& reason);

  /// Request `callee` holds the model calls of the work in batch `caller` (a reward graph's):
  /// when `caller` is given up (its client hung up), `callee` is cancelled in the same turn,
  /// so that none of its queued calls is sent while the graph's own word is on its way.
  void follow_caller(request_id callee, batch_id caller);

  /// Fails what has run out of time: items past their request's deadline and, once the drain
  /// deadline has passed, everything. Call it at `next_wakeup()`, then `dispatch`.
  void on_timer();

  /// The earliest time something is due: a deadline, the drain deadline, a retry, pacing room
  /// at a source, a hedge.
  std::optional<time_point> next_wakeup() const;

  /// Stops admitting. Queued and running work may finish until `drain_deadline`; then what
  /// remains fails with `shutting_down`.
  void begin_drain(time_point drain_deadline);

  bool draining() const noexcept {
    return draining_;
  }

  /// True when no admitted request is waiting for an answer.
  bool idle() const noexcept {
    return requests_.empty();
  }

  /// Hands out the requests finished since the last call.
  std::vector<finished_request> take_finished();

  /// Hands out the batches given up on since the last call (their sources should stop).
  std::vector<cancelled_batch> take_cancelled();

  scheduler_snapshot snapshot();

  /// The accounts of the recent training steps (see `score_item::step`).
  const step_ledger& steps() const noexcept {
    return steps_;
  }

private:
  enum class item_state : uint8_t { queued, retrying, following, running, done };
  using item_ref = std::pair<request_id, uint32_t>;

  struct pending_request {
    size_t priority = 0;
    /// A reward graph's model calls (see `submit`).
    bool internal = false;
    /// The batch whose work made these calls (`follow_caller`; 0: none).
    batch_id caller = 0;
    time_point deadline;
    time_point admitted;
    std::vector<shared_item> items;
    std::vector<item_result> results;
    std::vector<item_state> states;
    std::vector<task_id> tasks;
    std::vector<time_point> enqueued;
    /// With the replay log on: when each item got its answer (wall clock), its record's time.
    std::vector<std::chrono::system_clock::time_point> ended;
    /// The time each item is ordered by in its queue when it is not its own: its group's.
    std::vector<std::optional<time_point>> order_at;
    /// Cache / coalescing key per item (empty: neither applies).
    std::vector<std::string> keys;
    /// Why an item waiting to be retried failed last (empty when it never failed), and how.
    std::vector<std::string> last_failure;
    std::vector<std::optional<attempt_outcome_kind>> last_outcome;
    /// Prompt tokens per item, estimated once (0 for items no remote source serves).
    std::vector<uint64_t> tokens;
    /// Work per item for a local model weighing items so (`estimate_model_work`; 0 else).
    std::vector<uint64_t> work;
    /// Attempts per item that used up one of `routing.max_attempts` (see `counts_as_attempt`).
    std::vector<uint32_t> failures;
    /// The batches an item runs in now (two while hedged; 0 = none).
    std::vector<std::array<batch_id, 2>> running_in;
    size_t remaining = 0;
  };

  struct inflight_batch {
    source_id source = 0;
    std::string source_name;
    time_point dispatched;
    std::vector<item_ref> items;
    /// When its items become stragglers worth hedging (unset: never), and when they do if
    /// nothing else waits for their capability (the tail of the work).
    std::optional<time_point> hedge_at;
    std::optional<time_point> tail_hedge_at;
    /// Sent to a remote source: given up past its straggler timeout (`straggler_deadline`).
    bool remote = false;
    /// The unscaled prompt-token estimate of its items, to learn from the answer's usage.
    uint64_t prompt_tokens = 0;
    /// Its items' work (`pending_request::work`, summed), to learn seconds per unit from.
    uint64_t work = 0;
    /// Which of its source's prompt-token ratios scales its items' estimate and learns from
    /// its answer (a batch holds items of one kind).
    prompt_estimate estimate = prompt_estimate::call;
    /// Given up while a local model (or, past its items' deadline, a remote source) ran it
    /// (`give_up_if_unneeded`): it runs to the end, so it keeps its slot until it answers,
    /// and its answers are kept under the keys its items had (empty: none), in the items'
    /// order.
    bool given_up = false;
    std::vector<std::string> late_keys;
    /// What its source's token bucket was charged for it (given back on a refusal), and the
    /// part of that for its prompts (settled against the answer's usage).
    uint64_t charged_tokens = 0;
    uint64_t charged_prompt_tokens = 0;
    /// Each item's training step (empty: none), in the items' order.
    std::vector<std::string> steps;
    bool hedge = false;
    /// Items of its capability still waited when it went (`source_registry::release`'s
    /// `full`).
    bool full = false;
  };

  /// When and why a capability's last source was lost: its items wait a while for one to
  /// join (`remove_source`), then fail (`fail_orphaned`).
  struct lost_capability {
    time_point since;
    std::string reason;
  };

  struct retry_entry {
    time_point ready_at;
    item_ref item;
    std::optional<source_id> avoid;
    /// Sent only once the retry budget has room (see `retry_decision::awaits_budget`).
    bool awaits_budget = false;
  };

  struct flight {
    item_ref leader;
    std::vector<item_ref> followers;
  };

  /// Adds `prompt` and `completion` tokens that `batch`'s source reported, and their cost, to
  /// the source's running totals (`arbiter_source_tokens_total`, `arbiter_source_cost_total`).
  void bill_tokens(const inflight_batch& batch, uint64_t prompt, uint64_t completion);
  /// Starts a batch of `items` on `source` costing `tokens` of its token bucket and appends
  /// it to `out`. `full`: items of its capability still wait (the batch was cut by a limit).
  void start_batch(source_id source, std::vector<item_ref> items, uint64_t tokens, bool hedge,
                   std::vector<dispatch_batch>& out, bool full = false);
  void dispatch_retries(std::vector<dispatch_batch>& out);
  void dispatch_queues(std::vector<dispatch_batch>& out);
  /// Dispatches one batch of what waits for `capability` in class `cls` (what `choose_class`
  /// just said; `dispatched`: its items; 0 when items were failed instead, past hope or with
  /// every source ejected). False when the capability can dispatch nothing more now (no
  /// source can take it yet, or its work is held back).
  bool dispatch_step(const std::string& capability, size_t cls,
                     std::vector<dispatch_batch>& out, size_t& dispatched);
  void dispatch_hedges(std::vector<dispatch_batch>& out);
  /// The class whose head item for `capability` goes next: one about to miss its deadline
  /// (the earliest such; `urgent_out`, when given, says so), else the fair share's choice.
  /// Nullopt when nothing waits.
  std::optional<size_t> choose_class(const std::string& capability, bool* urgent_out = nullptr);
  /// Whether to hold the queue's tail back from `source` (a remote one) because the other
  /// sources serving `capability` would answer everything waiting sooner than it could answer
  /// one item (a slow endpoint at the end of a step).
  bool hold_for_faster(const std::string& capability, source_id source);
  /// Whether a running item is in the tail of its trainer's group, where a straggler is worth a
  /// hedge (`routing.hedge_tail_fraction` of the group's arrived members answered, this one
  /// counted; for an item without a group, of its request's items).
  bool in_tail(const pending_request& r, uint32_t index) const;
  /// Items queued for `capability` in every class.
  size_t waiting_for(const std::string& capability) const;
  /// The capability of a batch's items ("" when they all ended).
  const std::string& batch_capability(const inflight_batch& batch) const;
  /// What item `ref` asks of a source's token bucket.
  token_demand demand_of(item_ref ref) const;
  /// The input texts an item adds to a call (an embedding item: its candidate and each
  /// reference; anything else: 1), against a source's `max_batch_inputs`.
  uint64_t inputs_of(item_ref ref) const;
  /// Items a second the sources under `capability` take: a reward graph's, the slowest of
  /// the capabilities its items call (a few levels down); unset while unknown. With
  /// `full_calls`, in calls as full as a waiting queue makes them (`source_registry::capacity`).
  std::optional<double> capacity_through(const std::string& capability, bool full_calls = false,
                                         int depth = 0);
  /// The expected time until `items` more items of `capability` at class `cls` are answered:
  /// what waits ahead of them and they themselves over the sources' capacity, plus a latency.
  /// For a reward graph, the longest of its model calls' capabilities. Nullopt while the
  /// capacity is unknown. `alone`: as if nothing else waited and the class had the whole
  /// capacity (the least it could take on an idle server). `calls_ahead`: calls a graph
  /// above will add ahead of them (`graph_items_ahead`).
  /// `tokens`: the request's items' prompt tokens, summed, and one of them (token pacing
  /// counts them at their own size); unset: at what recent calls cost. `work`: their work,
  /// summed, for a local model that weighs items so (0: at what recent calls did).
  /// `soonest` (and `alone`): a batching source's full calls at the least they can cost
  /// while not known (`source_registry::seconds_to_start`).
  std::optional<nanoseconds> expected_wait(const std::string& capability, size_t cls,
                                           size_t items, int depth = 0, bool alone = false,
                                           double calls_ahead = 0.0,
                                           const token_demand& tokens = {}, uint64_t work = 0,
                                           bool soonest = false);
  /// Whether the sources an item of `capability` waits for (a reward graph's: those of the
  /// capabilities under it) are `source_registry::stale`, with nothing queued for them: an
  /// estimate too old to refuse a request on.
  bool stale_estimate(const std::string& capability) const;
  /// Whether the sources an item of `capability` waits for only know the pace of calls that
  /// were not full (`source_registry::full_pace_unknown`), with nothing queued for them and
  /// no request that will teach it still running (`full_pace_probes_`): a request refused on
  /// that cautious pace may go as a probe, one at a time, and its calls teach the full pace.
  bool full_pace_probe(const std::string& capability) const;
  /// What the registry says of the sources of a capability (`source_registry::stale`, ...).
  using sources_say = bool (source_registry::*)(const std::string&) const;
  /// Whether `say` holds for the sources an item of `capability` waits for (a reward graph's:
  /// for those of a capability under it); with `unqueued`, and nothing is queued for them.
  bool sources_under(const std::string& capability, sources_say say, bool unqueued = false,
                     int depth = 0) const;
  /// A reward graph's items ahead of a new one at class `cls` whose model calls are not queued
  /// yet: queued for the graph, or running there before their calls arrive.
  double graph_items_ahead(const std::string& capability, size_t cls) const;
  /// When the scheduler stops waiting for `batch` (a remote call) and retries its items:
  /// `routing.straggler_timeout_factor` × its source's recent 95th-percentile latency after it
  /// was sent (at least `straggler_timeout_min`), once the source has answered a few calls.
  /// Computed anew each time, so calls sent before anything was known get one too.
  std::optional<time_point> straggler_deadline(const inflight_batch& batch) const;
  /// Gives up on attempts at remote sources past their straggler timeout: cancelled at the
  /// source, their items retried as after a timeout.
  void expire_stragglers();
  /// Remembers the earliest time a source that was waiting could take work.
  void note_wait(const pick_result& pick, const std::string& capability);
  /// When `pick` found every source serving `capability` ejected, or holding back after a
  /// 429, until after the deadline of the head of `cls`'s queue for it, fails that item with
  /// upstream_failed and returns true.
  bool fail_ejected(size_t cls, const std::string& capability, const pick_result& pick);
  /// When `pick` found the sources serving `capability` paced to their rate limits, refuses
  /// the requests at the back of `cls`'s queue for it that their limits cannot start before
  /// their deadlines: their items end `errc::overloaded` (a fallback answers where the reward
  /// has one), and a request whose every item did is answered as admission refuses one, so
  /// its client sends it again later. Only requests none of whose items has begun; at most
  /// once per `doom_scan_interval` a capability.
  void refuse_doomed(size_t cls, const std::string& capability, const pick_result& pick);
  /// Why a call to `source` now could only answer after `deadline` (less time is left than the
  /// remote source's fastest recent answer took), or nullopt when it may answer in time.
  std::optional<std::string> past_hope(source_id source, time_point deadline) const;
  /// Whole milliseconds from now to `at`, rounded up; 0 when it has passed.
  int64_t ms_until(time_point at) const;
  /// Fails the head of `cls`'s queue for `capability` with deadline_exceeded, unsent, `why`.
  void fail_hopeless(size_t cls, const std::string& capability, std::string why);
  /// Ends `item` of `r` before any call was sent for it, with `code` and `error` (a
  /// deadline_exceeded here is a hopeless item, and counted); `queued`: it leaves a queue now,
  /// so its queue time ends too (a retry's was counted on its first attempt);
  /// `retry_after_ms`: when its sources take calls again, if known (item_result's).
  void end_unsent(const item_ref& item, pending_request& r, errc code, std::string error,
                  bool queued, int64_t retry_after_ms = 0);
  /// Whether an item of class `priority` due at `deadline` would wait longer following
  /// `leader` (an identical item) than queued on its own: the leader is still queued or
  /// waiting to retry, in a lower class or due later.
  bool waits_behind(item_ref leader, size_t priority, time_point deadline) const;
  /// Whether no source can take an item before `deadline`: each is ejected, holds back after
  /// a 429, or is paced to its rate limit, until past it.
  static bool waits_past(const pick_result& pick, time_point deadline);
  /// Why an item fails when `waits_past`.
  std::string ejected_reason(const std::string& capability, const pick_result& pick,
                             const std::string& last_failure);
  /// Queues item `ref` again in its class, where its first arrival puts it (a FIFO class keeps
  /// it ahead of later items).
  void requeue(item_ref ref);
  /// Hands the calls `from` runs in (a leader that ended for its own request's reasons) to
  /// `to`, its follower, which waits for their answer instead of making its own call.
  /// Returns whether there was a call to hand over.
  bool hand_over_calls(item_ref from, item_ref to);
  /// Ends item `index` of `req` with `result`; a request whose last item this was is
  /// finished by the next `flush`. `shareable`: followers of the item's flight may take the
  /// same result (false when the item ended for reasons of its own request).
  void end_item(request_id id, pending_request& req, uint32_t index, item_result result,
                bool shareable = true);
  /// Answers or re-leads the followers of a flight whose leader ended.
  void settle_flight(const std::string& key, item_ref leader, const item_result& result,
                     bool shareable);
  /// Forgets `batch` on item `ref`; cancels any other batch left with nothing to do.
  void detach(item_ref ref, batch_id batch, bool item_done);
  /// Gives up batch `id` (taken, and handed to `take_cancelled` for its source) unless one of
  /// its items still waits for it; nothing when it is no longer in flight. A local model's
  /// batch is marked `given_up` instead of taken: the model runs it to the end. With
  /// `run_on` (its items' deadline passed), a remote call is too, uncancelled: a retry of a
  /// call longer than its deadline finds the answer instead of paying for it again.
  void give_up_if_unneeded(batch_id id, bool run_on = false);
  /// Fails every item of `capability` still queued or waiting to be retried (its last source
  /// was lost and none joined in time).
  void fail_orphaned(const std::string& capability, const lost_capability& lost);
  /// Sets the source's breaker gauge when its state is not the one shown.
  void show_breaker(source_id id, breaker_state state);
  /// `cancel` without finishing the requests it ended (the caller flushes).
  void drop(request_id id, const std::string& reason);
  /// Ends every item of `id` that has not ended, with `code` (one past its deadline that no
  /// call went for also names its sources that were ejected, `ejected_sources`).
  void fail_remaining(request_id id, errc code, const std::string& reason);
  /// The sources serving `capability` whose breaker is not closed, and why ("" when none).
  std::string ejected_sources(const std::string& capability);
  /// The sources serving `capability` whose breaker is open or half-open.
  std::vector<source_info> unclosed_sources(const std::string& capability);
  /// Finishes the requests whose last item ended.
  void flush();
  void finish(request_id id);
  /// Removes `id` from the in-flight batches and frees its source's slot with `report`.
  std::optional<inflight_batch> take_batch(batch_id id, attempt_report& report);
  /// Decides, after a failed attempt, what happens to item `ref`.
  void after_failure(item_ref ref, const inflight_batch& batch, const attempt_report& report);
  std::string cache_key(const score_item& item) const;
  /// `result` turned into the fallback's answer when item `item` may fall back; else as is.
  item_result maybe_fall_back(const score_item& item, item_result result);
  bool remote_capability(const std::string& capability) const;
  /// Keeps the good answer `o` of a given-up local batch from `source` under `key`: in the
  /// result cache, and for a queued item leading an identical flight (a trainer's retry of an
  /// item its hung-up request had sent), which ends with it and its followers.
  void keep_late_answer(const std::string& key, const std::string& source,
                        const item_outcome& o);
  /// Whether identical items of `item`'s kind give the same answer, so that they may share
  /// one (coalescing and the result cache): a remote capability's, or a local model's unless
  /// it is a generator call that samples afresh (a temperature other than 0 and no seed).
  bool shares_answers(const score_item& item) const;
  prometheus::Counter& items_counter(const std::string& reward, item_status status);
  prometheus::Histogram& latency_histogram(const std::string& reward);
  prometheus::Counter& failure_counter(errc code);
  /// Moves class `cls`'s depth gauge by the change in its queue's depth since the last call,
  /// so that several cores (scheduler shards) can share the gauge.
  void note_depth(size_t cls);

  config::scheduler_config cfg_;
  config::routing_config routing_;
  const time_source& clock_;
  scheduler_metrics& metrics_;
  priority_queues queues_;
  source_registry sources_;
  seeded_random_source random_;
  retry_budget retry_budget_;
  retry_policy retry_policy_;
  retry_budget hedge_budget_;
  result_cache cache_;
  fair_share fair_;
  group_tracker groups_;
  refusal_backlog refused_;
  abandoned_places abandoned_places_;
  step_ledger steps_;
  std::unordered_map<request_id, pending_request> requests_;
  /// The request admitted last that calls several items of a capability at once while its
  /// sources' full-call pace is unknown (as a probe, `full_pace_probe`, or fitting anyway):
  /// while it runs, no other goes as a probe.
  std::unordered_map<std::string, request_id> full_pace_probes_;
  std::set<std::pair<time_point, request_id>> deadlines_;
  std::unordered_map<batch_id, inflight_batch> batches_;
  /// Capabilities whose last source was lost (`lost_capability`).
  std::unordered_map<std::string, lost_capability> orphaned_;
  /// The breaker state each source's gauge shows (`show_breaker`).
  std::unordered_map<source_id, breaker_state> breaker_shown_;
  /// Internal requests by the batch whose work made them (`follow_caller`).
  std::unordered_multimap<batch_id, request_id> callees_;
  std::vector<retry_entry> retries_;
  std::unordered_map<std::string, flight> flights_;
  std::set<std::string> remote_capabilities_;
  /// Capabilities served by local models (`source_spec::local_model`).
  std::set<std::string> local_model_capabilities_;
  std::optional<time_point> pacing_wakeup_;
  std::vector<request_id> finishing_;
  std::vector<finished_request> finished_;
  /// When `refuse_doomed` last looked at each capability's queues.
  std::unordered_map<std::string, time_point> doom_scanned_;
  std::vector<cancelled_batch> cancelled_;
  /// A remote call given up before it answered, counted for its steps at dispatch, until its
  /// source says whether it was sent at all (`settle_given_up`).
  struct given_up_call {
    source_id source = 0;
    std::string source_name;
    std::vector<std::string> steps;
    bool hedge = false;
  };
  std::unordered_map<batch_id, given_up_call> given_up_calls_;
  /// The calls still running for items that ended (`inflight_batch::given_up`), by the key
  /// of such an item: its batch and its place there. A retry of it takes that place
  /// (`adopt_late_call`) rather than sending the call again.
  std::unordered_map<std::string, std::pair<batch_id, size_t>> late_calls_;
  /// Lists in `late_calls_` the places of given-up batch `id` whose items ended.
  void note_late_calls(batch_id id);
  /// Puts item `index` of request `id` (its key set) in the place of an ended item with its
  /// key in a call still running, as if it had been sent in it; false when there is none.
  bool adopt_late_call(request_id id, uint32_t index);
  /// Notes that remote batch `id` was given up (before it leaves `batches_`).
  void note_given_up(batch_id id);
  /// A call written on a kept-alive connection that the provider reset, and written again on
  /// a fresh one: the provider read the first write, a failed call (a `connect_failure`
  /// attempt); `second_sent` counts the second write as a call too.
  void count_resend(const std::string& source_name, const std::vector<std::string>& steps,
                    bool second_sent);
  /// The late answer of a given-up call: one its source never sent is taken off its steps'
  /// `calls` (it did not reach the provider).
  void settle_given_up(batch_id id, const attempt_report& report);
  fallback_fn fallback_;
  item_check_fn item_check_;
  std::vector<prometheus::Gauge*> depth_gauges_;
  /// What this core last added to each depth gauge (see `note_depth`).
  std::vector<size_t> depth_noted_;
  std::vector<prometheus::Histogram*> wait_histograms_;
  prometheus::Histogram* run_histogram_;
  prometheus::Histogram* schedule_histogram_;
  std::map<std::pair<std::string, item_status>, prometheus::Counter*> item_counters_;
  std::map<errc, prometheus::Counter*> failure_counters_;
  std::map<std::string, prometheus::Histogram*, std::less<>> latency_histograms_;
  task_id next_task_ = 1;
  batch_id next_batch_ = 1;
  bool draining_ = false;
  bool recording_ = false;
  time_point drain_deadline_;
};

} // namespace arbiter::scheduler
