#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/score_types.hpp"
#include "common/time_source.hpp"
#include "common/token_estimate.hpp"
#include "scheduler/adaptive_concurrency.hpp"
#include "scheduler/circuit_breaker.hpp"
#include "scheduler/ids.hpp"
#include "scheduler/rate_limiter.hpp"
#include "scheduler/retry_policy.hpp"

namespace arbiter::scheduler {

/// How a source is to be treated, from configuration (remote endpoints) or from the process
/// that spawned it (local workers). A worker node sends it to the coordinator: a field added
/// here goes into its `inspect` in actors/wire.hpp too (wire_test checks each one).
struct source_spec {
  /// The name results report in `source`, e.g. "cpu" or "provider-a".
  std::string name;
  /// What it serves, e.g. {"cpu"}, {"chat"}, {"embed"}.
  std::vector<std::string> capabilities;
  /// Items per batch (a chat endpoint takes one prompt per call: 1).
  uint32_t max_batch_items = 32;
  /// Capabilities whose items go one a batch whatever `max_batch_items` says, narrowed routing
  /// keys ("chat@model:ID") included: a remote endpoint's chat and generate calls carry one prompt,
  /// while its embed calls carry `max_batch_items` (a source serving both sent one embedding
  /// item a call, 38 times slower).
  std::vector<std::string> single_item;

  /// Items a batch of `capability` may carry (empty: `max_batch_items`).
  uint32_t batch_items(const std::string& capability) const {
    for (const auto& one : single_item) {
      if (capability.compare(0, one.size(), one) == 0
          && (capability.size() == one.size() || capability[one.size()] == '@')) {
        return 1;
      }
    }
    return max_batch_items;
  }
  /// Most input texts one call carries (0: no cap): an embedding item sends its candidate and
  /// each reference, and TEI refuses a call over its --max-client-batch-size (32) inputs.
  uint32_t max_batch_inputs = 0;
  /// While the source has a batch in flight, a batch that is not full waits until its oldest
  /// item has queued this long, so that items arriving one by one share calls (0: never
  /// waits). An idle source gets work at once, unless `wait_when_idle`.
  nanoseconds batch_wait{0};
  /// The batch wait applies while the source is idle too: for sources whose calls run so long
  /// that a few milliseconds spent gathering company cost nothing (a local generator decodes
  /// the calls of one batch together; a call that started alone holds the others up for the
  /// whole of its decoding).
  bool wait_when_idle = false;
  /// Batches in flight at once. With `adaptive`, the AIMD limit moves below this.
  uint32_t max_inflight = 2;
  bool adaptive = false;
  /// The AIMD settings when `adaptive` (its max_limit is `max_inflight`).
  adaptive_concurrency_config concurrency;
  /// Pacing by requests and tokens per minute (remote endpoints with known limits).
  std::optional<rate_limit_config> rate_limit;
  /// A circuit breaker with timed ejection, for sources that can fail (remote endpoints).
  std::optional<circuit_breaker_config> breaker;
  /// Output tokens one item asks of this source when its call names none (the source's
  /// max_tokens where it serves chat or generate), for token pacing and admission weighing.
  uint64_t completion_tokens = 0;
  /// Whether the source is a remote endpoint (hedging and caching apply to its items).
  bool remote = false;
  /// A local model (embedding, NLI, generator): identical items in flight are coalesced and
  /// answers cached as a remote source's are, except a generator call that samples without a
  /// seed (`scheduler_core::shares_answers`).
  bool local_model = false;
  /// A local embedding or NLI model's longest input in tokens (`model_info::max_tokens`):
  /// its items weigh by their texts' tokens, each capped at this (`estimate_model_work`), and
  /// admission learns how long its calls take for their work (a fixed part and seconds per
  /// unit) rather than per item (after items of eight 400-word references, 20-word items were
  /// expected to take as long). 0:
  /// every item weighs alike (a generator's decoding costs about the same for one call as
  /// for a batch of them).
  uint32_t max_input_tokens = 0;

  /// Whether admission weighs the source's items by their work (`estimate_work`): a local
  /// model with `max_input_tokens`, or a remote source that generates (`completion_tokens`),
  /// whose chat and generate calls weigh their output tokens: a source's 3,500-token
  /// generations taught admission 35 s a call, and its judges' 16-token calls were refused.
  bool weighs_work() const noexcept {
    return max_input_tokens > 0 || (remote && completion_tokens > 0);
  }
  /// What a million prompt (input) and completion (output) tokens cost at this source, for
  /// the step accounts and `arbiter_source_cost_total` (0: free or unknown).
  double input_cost_per_million = 0.0;
  double output_cost_per_million = 0.0;
  /// Reward graphs: for each capability the source serves, the capabilities its model calls
  /// need (e.g. "judge" → {"chat"}). Admission estimates a graph item's wait from theirs.
  std::map<std::string, std::vector<std::string>> feeds;
};

/// How one attempt at a source ended, as the source reports it. A new field goes into its
/// `inspect` in actors/wire.hpp too: a worker node's reports cross the network.
struct attempt_report {
  attempt_outcome_kind kind = attempt_outcome_kind::ok;
  /// The server's Retry-After / retry-after-ms, when it sent one.
  std::optional<nanoseconds> retry_after;
  /// `x-ratelimit-*` headers of the answer (all absent for local workers).
  rate_limit_headers headers;
  /// From dispatch to answer.
  nanoseconds latency{0};
  /// What went wrong, for item errors, e.g. "HTTP 503: model overloaded" (empty on `ok`).
  std::string detail;
  /// The attempt was cancelled by the scheduler (a hedge that lost); it says nothing about
  /// the source.
  bool cancelled = false;
  /// The request was never sent, so the source did not see it. With `cancelled`: it waited
  /// for a connection, and the call does not count for its steps. With `connect_failure`: no
  /// connection could be made, and a breaker probe that failed so does not lengthen the
  /// source's ejection (circuit_breaker::on_failure's `unheard`).
  bool unsent = false;
  /// The scheduler stopped waiting for it: a straggler past the source's latency tail
  /// (`kind` is `timeout`). It counts against the source's health, not against its load.
  bool abandoned = false;
  /// The HTTP request was sent twice (`http_result::resent`): a failed attempt
  /// (`connect_failure`) came before this one, and the provider may have seen both.
  bool resent = false;
  /// HTTP requests the attempt made before its last one: the parts of an embedding call cut
  /// to fit a TEI endpoint's batch limit (remote::split_embedding_call), each seen by the
  /// provider. They count as calls of the attempt's steps.
  uint32_t extra_requests = 0;
  /// The `usage` of a 2xx answer the call could not use (fewer choices than its `n`, a body
  /// of the wrong shape), which the provider bills: counted for the call's steps and the
  /// source's token totals (an answer that was used reports its usage in its outcomes).
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};

/// Which learned ratio of reported to estimated prompt tokens scales an estimate. A source
/// learns one for embedding reward items, whose call sends each distinct text once (a batch's
/// repeated references cost nothing), and one for the rest (chat, completions, NLI and
/// passed-through embedding texts): shared, the embeddings' would pull the chat calls' charge
/// far below what the provider counts.
enum class prompt_estimate : uint8_t { call, embedding_reward };

/// The estimate `item`'s prompt tokens are: an embedding reward item's, or a call's.
prompt_estimate estimate_of(const score_item& item) noexcept;

/// What one item asks of a source's token bucket: its prompt estimate (scaled by each source's
/// learned ratio of reported to estimated prompt tokens) and, through `item`, the completion
/// tokens its call asks for (else the source's `completion_tokens`).
struct token_demand {
  uint64_t prompt = 0;
  /// The item (for its call's max_tokens and n); null: the source's default completion.
  const score_item* item = nullptr;
};

/// What /info and tests see of one source.
struct source_info {
  source_id id = 0;
  std::string name;
  std::vector<std::string> capabilities;
  /// Batches it may have in flight now (the adaptive limit, or the fixed one).
  uint32_t max_inflight = 1;
  uint32_t inflight = 0;
  /// Dispatches so far (also breaks ties fairly).
  uint64_t dispatched = 0;
  bool remote = false;
  /// Closed when the source has no breaker (`to_string` gives /info's and the metric's word).
  breaker_state breaker = breaker_state::closed;
  /// Why the breaker last opened (kept after it closes).
  std::string breaker_reason;
  /// Smoothed latency of successful attempts (0 before the first).
  double latency_ms = 0.0;
  /// Requests the pacing buckets allow now (-1 when not paced by requests).
  double available_requests = -1.0;
  /// The limits pacing works with, configured or learned from the endpoint's headers (0: not
  /// paced), and the request bucket's size (its burst; 0 when not paced by requests).
  double requests_per_minute = 0.0;
  double tokens_per_minute = 0.0;
  double request_burst = 0.0;
  /// Reported prompt tokens per estimated one, learned from the answers' `usage` (1 at first):
  /// of calls, and of embedding reward items (`prompt_estimate`).
  double prompt_token_ratio = 1.0;
  double embedding_token_ratio = 1.0;
  /// Items per second the source can serve now (0 while nothing bounds it; see
  /// `source_registry::capacity`).
  double items_per_second = 0.0;
  /// Whether the concurrency limit is still in slow start.
  bool slow_start = false;
};

/// Why the nearest source waits when `pick` found none.
enum class wait_cause : uint8_t {
  none,
  /// The endpoint answered 429 and is in its shared backoff.
  backoff,
  /// Its request bucket is empty.
  requests,
  /// Its token bucket holds fewer tokens than the batch needs.
  tokens,
  /// Its breaker is open.
  breaker,
};

/// The metric label: "none", "backoff", "requests", "tokens", "breaker".
const char* to_string(wait_cause c) noexcept;

/// Why `pick` found no source for a capability.
struct pick_result {
  std::optional<source_id> source;
  /// When no source could take the batch only because of pacing, a 429 backoff or an open
  /// breaker: the earliest time one could. Empty when sources are just busy (a completion
  /// will free a slot) or none serves the capability.
  std::optional<time_point> retry_at;
  /// Why the nearest one waits (`none` unless `retry_at` is set).
  wait_cause waiting_on = wait_cause::none;
  /// Some source serving the capability is only busy (no free slot, or its half-open probes
  /// are out; or it waits on its pacing with calls in flight, whose answers' rate-limit
  /// headers may fill its buckets): a completion will free it.
  bool busy = false;
};

/// The sources that can run work, by capability, with each source's policy: pacing, adaptive
/// concurrency, circuit breaker, latency. Picks the eligible source expected to finish a batch
/// first. Not thread-safe: one owner (the scheduler core).
class source_registry {
public:
  /// Reads time from `clock` (owned by the caller, outliving the registry).
  explicit source_registry(const time_source& clock);
  ~source_registry();

  source_registry(const source_registry&) = delete;
  source_registry& operator=(const source_registry&) = delete;

  /// Adds a source and returns its id (never reused).
  source_id add(source_spec spec);

  /// Removes a source. Returns false when it is unknown.
  bool remove(source_id id);

  /// Marks a source as going away: the calls it still holds, failed as it goes, teach
  /// nothing of its health (a worker that stopped tripped its breaker, and a node leaving
  /// cleanly was logged as an ejected source).
  void retire(source_id id);

  /// The source to send a batch needing `capability` whose first item asks `demand`: among
  /// sources serving it that are eligible now (breaker not open, a free slot under the
  /// concurrency limit, the pacing buckets holding a request and the item's tokens), the one
  /// with the earliest expected completion (smoothed latency × (1 + in flight ÷ limit)); ties
  /// go to the fewest in flight, then the fewest dispatched. `avoid` is skipped when another
  /// source serving the capability is not ejected. An item larger than a source's whole token
  /// burst goes to a source whose burst holds it; where none does, it is paced on the rate
  /// (it waits for a full bucket). Takes nothing; `acquire` does.
  pick_result pick(const std::string& capability, const token_demand& demand,
                   std::optional<source_id> avoid = std::nullopt);

  /// The tokens `demand` costs at `id` (0 when the source does not pace by tokens).
  uint64_t tokens_for(source_id id, const token_demand& demand) const;

  /// Tokens the source's token bucket allows now (unbounded when not paced by tokens).
  double token_allowance(source_id id);

  /// Whether the source paces by tokens (callers then count the tokens of each item).
  bool paces_tokens(source_id id) const;

  /// Records a batch sent to `id` costing `tokens` (from `tokens_for`) over `items` items:
  /// takes its request and tokens from the buckets, a probe slot when half-open, and a
  /// concurrency slot. `work`: its items' work, summed, for a source that weighs items so;
  /// `inputs`: its input texts, for a source whose calls are capped in texts (0: not counted).
  void acquire(source_id id, uint64_t tokens, size_t items, uint64_t work = 0,
               uint64_t inputs = 0);

  /// The part of `tokens_for` that pays for `estimated` prompt tokens of the kind `of`
  /// (scaled by its learned ratio); 0 when the source does not pace by tokens.
  uint64_t prompt_tokens_for(source_id id, uint64_t estimated,
                             prompt_estimate of = prompt_estimate::call) const;

  /// Learns from an answer's `usage` how the source counts prompt tokens: `reported` where we
  /// estimated `estimated`. Later token demands are scaled by the ratio of the smoothed
  /// totals (a long prompt weighs more than a short one, as in the provider's count). When
  /// `charged` (from `prompt_tokens_for`) is not 0, the call's charge is settled: the token
  /// bucket gets back what it was charged beyond `reported`, or pays what it was charged
  /// short. `of` says which of the source's ratios learns.
  void observe_usage(source_id id, uint64_t estimated, uint64_t reported, uint64_t charged = 0,
                     prompt_estimate of = prompt_estimate::call);

  /// Items per second the sources serving `capability` can take now, together: for each
  /// source not ejected, the least of its concurrency limit over the measured time per item,
  /// its request pacing × items per call, and its token pacing over the tokens an item costs.
  /// Nullopt while no source has a bound (nothing measured and no limits). With
  /// `full_calls`: the time per item of the calls sent while a queue waited (at least half a
  /// full batch), where one was, rather than of every call: how fast a full queue drains,
  /// whose calls are full (single items arriving one at a time went one a call, and a
  /// batching model's time per item in them told a herd to come back 3 to 8 times too late).
  std::optional<double> capacity(const std::string& capability, bool full_calls = false);

  /// Items per second the rate limits of the sources serving `capability` let through at
  /// most, together (request pacing × items per call, token pacing over the tokens an item
  /// costs; an ejected source none): a bound no concurrency or latency raises. Nullopt when a
  /// source serving it has no such limit (known or learned).
  std::optional<double> paced_rate(const std::string& capability);

  /// The quickest answer among the recent ones of the sources serving `capability` (zero
  /// before any): no call of it ends sooner after it starts.
  nanoseconds quickest_answer(const std::string& capability) const;

  /// Seconds until the sources serving `capability` could have started `items` more items,
  /// each going as soon as its pacing and slots allow: what their buckets hold now goes at
  /// once (a rate limit's burst), the rest at the refill rate, and no faster than free slots
  /// and the measured time per item turn over. A source blocked by a 429 starts when the
  /// block ends; an ejected one adds nothing. Nullopt where `capacity` is unset or 0.
  /// `idle`: as the sources would be with nothing in flight, full buckets and no block (the
  /// least a later try could see). `own`: the last `own->count` of the items are a request's,
  /// whose prompt tokens are known (`own->demand.prompt`, summed; `demand.item` one of them):
  /// a token bucket counts them by their own size, the others by the estimated prompt tokens
  /// of the `queued` items waiting ahead (`queued_prompt`, summed) or, with none queued, by
  /// what recent calls cost per item (a request of long prompts after short ones was admitted
  /// on the short ones' cost).
  /// A source that weighs its items by work (`source_spec::weighs_work`) counts them
  /// likewise: the request's by their own work (`work`, summed), those ahead at the average
  /// of the queued ones (`queued_work`, summed) or, with none queued, of recent calls.
  struct own_items {
    double count = 0.0;
    token_demand demand;
    double queued = 0.0;
    uint64_t queued_prompt = 0;
    uint64_t work = 0;
    uint64_t queued_work = 0;
  };
  /// `soonest`: where a batching source's pace in full calls is not known yet (none was
  /// answered), a full call is taken to last as long as its calls so far (the least it can
  /// cost: for a `Retry-After`, or before refusing for good) rather than at their pace per
  /// item (the cautious count, for admitting work); `idle` implies it.
  std::optional<double> seconds_to_start(const std::string& capability, double items,
                                         bool idle = false, const own_items* own = nullptr,
                                         bool soonest = false);

  /// The smoothed latency of the fastest source serving `capability` (0 before any answer).
  nanoseconds latency(const std::string& capability) const;

  /// How long the call that answers the last of `items` more items takes at the fastest
  /// source serving `capability`: its smoothed latency, or for a source that weighs items by
  /// work, what it has learned a call of them takes (at most as many items as its calls
  /// carry, at the average work of `own` and those ahead of it).
  nanoseconds latency(const std::string& capability, double items, const own_items* own) const;

  /// How the sources serving `capability` weigh its items (`estimate_work`): the largest
  /// `max_input_tokens`, and the largest `completion_tokens` of the remote sources that
  /// generate (0s: items weigh alike).
  work_rule work_rule_of(const std::string& capability) const;

  /// The smoothed latency of `id` (0 before its first good answer).
  nanoseconds latency_of(source_id id) const;

  /// How many items the sources serving `capability` that are faster than `than` (a smaller
  /// smoothed latency) can be expected to have answered by `by` if each takes work as soon as
  /// its slots and pacing allow: per source not ejected and with a measured capacity, the
  /// items it can start between when it is next ready and `by` minus its latency. The
  /// scheduler holds the tail of a queue back from a slow source when the faster ones would
  /// answer all of it sooner; since `pick` prefers them as soon as they may take work, the
  /// held items always move on.
  double answers_by(const std::string& capability, time_point by, source_id than);

  /// For a reward graph's capability, the capabilities its model calls need; null otherwise.
  const std::vector<std::string>* feeds(const std::string& capability) const;

  /// Records how an attempt at `id` ended and frees its slot: corrects the buckets from its
  /// headers, honours a 429's Retry-After as one backoff for the endpoint, feeds the breaker
  /// (5xx, timeouts, connection failures and unusable bodies count against it; 401/403/404
  /// eject it for `eject_for` with the reason; what the request caused, 400s and replies that
  /// do not fit what was asked, does not count) and the concurrency limit, and the latency and
  /// time per item of good answers. `charged` (the tokens `acquire` took for the call) goes
  /// back to the token bucket when the endpoint refused the call before running it (a 429 or
  /// a 400-class refusal): it counted none of them, and one call past the whole limit had
  /// overdrawn the bucket for a minute or more.
  ///
  /// Returns the endpoint's token burst when the call was a 429 for more tokens than that
  /// burst (once this answer's headers are learned; the call's size is `charged`, or
  /// `call_tokens` when larger: a call sent before any limit was known was charged none):
  /// the refusal is about the call's size, which no wait mends, so the endpoint is not
  /// blocked for everyone's calls (its Retry-After, often a minute, held every other item),
  /// and the caller fails the call as too large. nullopt otherwise.
  ///
  /// `work`: the call's items' work (`estimate_model_work`, summed) for a source that weighs
  /// them so: a good answer teaches it the seconds one unit takes. `full`: the call was as
  /// full as the source takes (items of its capability still waited when it went, cut by its
  /// batch, input or token limit): its time per item is the pace of a waiting queue.
  std::optional<uint64_t> release(source_id id, const attempt_report& report,
                                  nanoseconds eject_for, size_t items = 1, uint64_t charged = 0,
                                  uint64_t call_tokens = 0, uint64_t work = 0,
                                  bool full = false);

  /// Whether a source other than `except` serves `capability` and is not ejected.
  bool has_alternative(const std::string& capability, source_id except);

  /// Whether what `id` was measured to take rests on answers too old to refuse work on:
  /// nothing in flight, and no good answer for max(10 s, twice its smoothed latency). A source
  /// whose first call took 35 s (3,500 tokens) refused every later request due in 30 s by
  /// that, so no call ever corrected it. The next call sent to it is a probe: its answer
  /// replaces the estimates (latency, time per item, a model's fit) instead of joining them.
  bool stale(source_id id) const;

  /// `stale` for every source serving `capability` (false when none serves it).
  bool stale(const std::string& capability) const;

  /// Whether every source serving `capability` batches it, has answered calls of it but no
  /// full one (admission counts the calls' pace so far, `fullness_unknown`) and weighs no
  /// work: false when none serves it.
  bool full_pace_unknown(const std::string& capability) const;

  /// Whether any source serves `capability`, busy or not.
  bool serves(const std::string& capability) const;

  /// How many sources serve `capability`.
  size_t count(const std::string& capability) const;

  /// Items per batch for `id` (1 when unknown).
  uint32_t max_batch_items(source_id id, const std::string& capability) const;

  /// Input texts per call for `id` (0: no cap).
  uint32_t max_batch_inputs(source_id id) const;

  /// How long a partial batch may wait for more items while `id` is busy, whether it is
  /// busy (has a batch in flight), and whether the wait applies while it is idle too.
  nanoseconds batch_wait(source_id id) const;
  bool busy(source_id id) const;
  bool waits_when_idle(source_id id) const;

  /// The latency past which an attempt at `id` is a straggler worth hedging: the 95th
  /// percentile of its recent successful attempts; nullopt until 20 have been seen.
  std::optional<nanoseconds> straggler_after(source_id id) const;

  /// The fastest of its recent successful attempts (the last 64), once 20 have been seen: a
  /// call with less time left than this would answer after its deadline.
  std::optional<nanoseconds> fastest_answer(source_id id) const;

  /// The same percentile as soon as a few (5) good answers are in, for the straggler timeout:
  /// calls that never answer should not wait for 20.
  std::optional<nanoseconds> timeout_basis(source_id id) const;

  /// The source's name ("" when unknown).
  const std::string& name(source_id id) const;
  bool remote(source_id id) const;
  /// Whether `id` is a local model (`source_spec::local_model`).
  bool local_model(source_id id) const;

  /// What `prompt_tokens` and `completion_tokens` cost at source `id` (its configured prices).
  double cost(source_id id, uint64_t prompt_tokens, uint64_t completion_tokens) const;

  /// Every source as /info shows it.
  std::vector<source_info> sources();

  /// One source as /info shows it (default-constructed when unknown).
  source_info describe(source_id id);

  /// The earliest time an open breaker turns half-open (its ejection ends); empty when none
  /// is open at `now`.
  std::optional<time_point> next_breaker_change(time_point now) const;
  /// Each source with a breaker, and its breaker's state at `now`.
  std::vector<std::pair<source_id, breaker_state>> breakers(time_point now) const;

private:
  struct state;

  state* find(source_id id) const;

  const time_source& clock_;
  std::vector<std::unique_ptr<state>> sources_;
  source_id next_id_ = 1;
};

} // namespace arbiter::scheduler
