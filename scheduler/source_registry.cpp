#include "scheduler/source_registry.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "common/enum_names.hpp"
#include "common/log.hpp"
#include "common/token_estimate.hpp"

namespace arbiter::scheduler {

namespace {

/// Successful attempts kept for the straggler quantile.
constexpr size_t latency_window = 64;
/// Samples needed before a straggler threshold is given (hedging), and before a straggler
/// timeout is.
constexpr size_t min_latency_samples = 20;
constexpr size_t min_timeout_samples = 5;
/// Weight of a new sample in the smoothed latency.
constexpr double latency_alpha = 0.2;

sample_kind sample_of(attempt_outcome_kind k) {
  switch (k) {
    case attempt_outcome_kind::ok:
      return sample_kind::ok;
    case attempt_outcome_kind::rate_limited:
    case attempt_outcome_kind::timeout:
      return sample_kind::overloaded;
    default:
      return sample_kind::failed;
  }
}

/// Weight of a new sample in the smoothed time per item, tokens per item and prompt ratio.
constexpr double item_alpha = 0.1;

/// The learned prompt-token ratio stays within these bounds (a provider's tokenizer against
/// our bytes/3 estimate; a system prompt the endpoint adds).
constexpr double min_prompt_ratio = 0.05;
constexpr double max_prompt_ratio = 20.0;

/// Whether rate-limit headers show room for a call of `tokens` (and at least one request):
/// false when they say nothing. Tokens need twice the call's estimate: the endpoint may count
/// a call larger than we do; with no estimate yet (0: its token limit was not known when it
/// was sent), stated tokens cannot show room (helper-56: the first 429 of a tokens-per-minute
/// limit was taken for a cap on calls in flight, and held a slow source at one call).
bool room_left(const rate_limit_headers& h, uint64_t tokens) {
  if (!h.remaining_requests && !h.remaining_tokens) {
    return false;
  }
  if (h.remaining_requests && *h.remaining_requests == 0) {
    return false;
  }
  return !h.remaining_tokens || (tokens > 0 && *h.remaining_tokens >= 2 * tokens);
}

/// The longest Retry-After a refusal past a cap on calls in flight comes with: such a cap
/// frees a slot when a call ends. A longer one (a daily quota's, whose per-minute headers
/// still show room) is a rate limit.
constexpr nanoseconds longest_cap_retry_after = std::chrono::seconds{5};

double smoothed(double average, double sample, bool first) {
  return first ? sample : average + item_alpha * (sample - average);
}

/// The most a sample of a source's time per item or per call may weigh against what was
/// learned: one call far slower than the rest (a 1 MB text, whose tokenizing is most of its
/// time) taught admission a pace 4 times too slow, and a 5,000-item batch took its fallback
/// at once (helper-58). A source that did slow down is learned at 1.3 times a call.
constexpr double slowest_sample = 4.0;

double within_reach(double sample, double learned, bool known) {
  return known && learned > 0.0 ? std::min(sample, slowest_sample * learned) : sample;
}

} // namespace

struct source_registry::state {
  source_spec spec;
  source_info info;
  std::unique_ptr<rate_limiter> limiter;
  std::unique_ptr<circuit_breaker> breaker;
  std::unique_ptr<adaptive_concurrency> concurrency;
  double latency_ns = 0.0;
  bool has_latency = false;
  std::vector<int64_t> recent;
  size_t recent_next = 0;
  /// The fastest of `recent` (refreshed with the quantile; lowered by every faster sample).
  int64_t fastest = 0;
  size_t samples_since_quantile = 0;
  std::optional<nanoseconds> p95;
  /// Smoothed seconds per item of good answers (latency ÷ items), for capacity.
  double item_seconds = 0.0;
  bool has_item_seconds = false;
  /// The same over full calls (at least half a full batch, or cut by a limit while items
  /// waited: a TEI endpoint's input cap): what an item costs while a queue waits (a batching
  /// model runs 64 items in far less than 64 single-item calls), for how fast a full queue
  /// drains (`capacity`'s `full_calls`).
  double full_item_seconds = 0.0;
  bool has_full_item_seconds = false;
  /// Smoothed items per call sent (a batching source's calls carry fewer than it allows while
  /// items arrive one at a time), for what a bucket's requests hold in items.
  double items_per_call = 0.0;
  bool has_items_per_call = false;
  /// Smoothed input texts per item sent, where calls are capped in texts
  /// (`source_spec::max_batch_inputs`: an embedding item sends its candidate and each
  /// reference), for how many items a call can hold.
  double inputs_per_item = 0.0;
  bool has_inputs_per_item = false;
  /// When its last good answer came (unset: none yet), and whether the call sent first after
  /// its estimates went `stale` is out: its answer replaces them.
  std::optional<time_point> answered_at;
  bool resample = false;
  /// A source weighing items by work: how long its good answers took against their calls'
  /// work, fitted as a line (`learn_call`), and the smoothed work per item sent.
  struct work_fit {
    /// Sums over the calls, each weighing (1 - item_alpha) less than the next.
    double calls = 0.0;
    double work = 0.0;
    double seconds = 0.0;
    double work_squared = 0.0;
    double work_seconds = 0.0;

    void add(double w, double s) {
      for (double* sum : {&calls, &work, &seconds, &work_squared, &work_seconds}) {
        *sum *= 1.0 - item_alpha;
      }
      calls += 1.0;
      work += w;
      seconds += s;
      work_squared += w * w;
      work_seconds += w * s;
    }
  };
  work_fit work_seconds;
  /// Fixed seconds a call takes, and seconds per unit of work: the least-squares line
  /// through the recent calls once their work varied (a GPU runs 128 short texts about as
  /// fast as 32: most of a small call is fixed), else through zero (latency ÷ work).
  double call_seconds = 0.0;
  double unit_seconds = 0.0;
  bool has_unit_seconds = false;
  double work_per_item = 0.0;
  bool has_work_per_item = false;
  /// Smoothed tokens charged per item, for the token-pacing share of capacity.
  double tokens_per_item = 0.0;
  bool has_tokens_per_item = false;
  /// Reported ÷ estimated prompt tokens, from the answers' usage: the ratio of the two
  /// smoothed per-call counts, one for each `prompt_estimate`.
  struct learned_ratio {
    double ratio = 1.0;
    double reported = 0.0;
    double estimated = 0.0;
    bool known = false;
  };
  std::array<learned_ratio, 2> prompt_ratios;
  /// Whether a refusal past a cap on calls in flight was logged (once a source).
  bool cap_logged = false;
  /// Going away (`retire`): its calls' ends only free their slots.
  bool retired = false;

  bool serves(const std::string& capability) const {
    return std::find(spec.capabilities.begin(), spec.capabilities.end(), capability)
           != spec.capabilities.end();
  }

  uint32_t limit() const {
    return concurrency ? std::min(concurrency->limit(), spec.max_inflight) : spec.max_inflight;
  }

  bool ejected(time_point now) const {
    return breaker && breaker->state(now) == breaker_state::open;
  }

  uint64_t tokens_for(const token_demand& demand) const {
    if (!limiter || !spec.rate_limit || limiter->tokens_per_minute() <= 0.0) {
      return 0;
    }
    auto completion = demand.item != nullptr
                        ? estimate_completion_tokens(*demand.item, spec.completion_tokens)
                        : spec.completion_tokens;
    auto of = demand.item != nullptr ? estimate_of(*demand.item) : prompt_estimate::call;
    return prompt_tokens_for(demand.prompt, of) + completion;
  }

  uint64_t prompt_tokens_for(uint64_t estimated, prompt_estimate of) const {
    if (!limiter || !spec.rate_limit || limiter->tokens_per_minute() <= 0.0) {
      return 0;
    }
    const double ratio = prompt_ratios[static_cast<size_t>(of)].ratio;
    return static_cast<uint64_t>(std::ceil(static_cast<double>(estimated) * ratio));
  }

  double token_capacity() const {
    return limiter ? limiter->token_capacity() : std::numeric_limits<double>::infinity();
  }

  /// For a source weighing items by work, once a call was learned: the average work of
  /// `items` items whose last `own->count` are a request's (`own_items`); 0 otherwise.
  double work_each(double items, const own_items* own) const {
    if (!spec.weighs_work() || !has_unit_seconds || own == nullptr || own->work == 0
        || own->count <= 0.0) {
      return 0.0;
    }
    const auto mine = static_cast<double>(own->work);
    auto ahead_each = has_work_per_item ? work_per_item : mine / own->count;
    if (own->queued > 0.0 && own->queued_work > 0) {
      ahead_each = static_cast<double>(own->queued_work) / own->queued;
    }
    const auto ahead = std::max(items - own->count, 0.0);
    return (ahead * ahead_each + mine) / std::max(items, own->count);
  }

  /// See `source_registry::stale`.
  bool stale(time_point now) const {
    if (!has_latency || !answered_at || info.inflight > 0) {
      return false;
    }
    const auto after = std::max<nanoseconds>(std::chrono::seconds{10},
                                             nanoseconds{static_cast<int64_t>(2.0 * latency_ns)});
    return now - *answered_at > after;
  }

  /// Forgets what its answers taught about its pace, for a fresh answer to replace it.
  void forget_pace() {
    has_latency = false;
    has_item_seconds = false;
    has_full_item_seconds = false;
    work_seconds = work_fit{};
    has_unit_seconds = false;
  }

  /// Adds a good answer of a call of `work` that took `seconds` to the fit, and refits.
  void learn_call(double work, double seconds) {
    work_seconds.add(work, seconds);
    const auto& f = work_seconds;
    const double mean_work = f.work / f.calls;
    const double mean_seconds = f.seconds / f.calls;
    const double variance = f.work_squared / f.calls - mean_work * mean_work;
    const double covariance = f.work_seconds / f.calls - mean_work * mean_seconds;
    // The work must vary by a tenth or more for a slope to mean anything.
    if (variance > 0.01 * mean_work * mean_work && covariance >= 0.0) {
      unit_seconds = covariance / variance;
      call_seconds = mean_seconds - unit_seconds * mean_work;
      if (call_seconds < 0.0) { // no fixed part: the line through zero
        call_seconds = 0.0;
        unit_seconds = f.work_seconds / f.work_squared;
      }
    } else if (variance > 0.01 * mean_work * mean_work) {
      call_seconds = mean_seconds; // longer calls were not slower
      unit_seconds = 0.0;
    } else {
      call_seconds = 0.0;
      unit_seconds = mean_seconds / mean_work;
    }
    has_unit_seconds = true;
  }

  /// Seconds a call of `items` items of `work_each` takes on the fitted line.
  double call_time(double items, double work_each) const {
    return call_seconds + unit_seconds * work_each * items;
  }

  /// Items a call of `capability` carries: as many as calls have lately carried, one while
  /// none has gone.
  double per_call(const std::string& capability) const {
    return std::min(static_cast<double>(spec.batch_items(capability)),
                    has_items_per_call ? items_per_call : 1.0);
  }

  /// Most items one call of `capability` holds: a batch, or where calls are capped in texts,
  /// what the cap takes at the texts per item lately sent (an item of 7 references sends 8
  /// texts, 4 to a TEI call of 32).
  double call_holds(const std::string& capability) const {
    auto batch = static_cast<double>(spec.batch_items(capability));
    if (spec.max_batch_inputs > 0 && has_inputs_per_item && inputs_per_item > 1.0) {
      batch = std::min(batch, std::max(1.0, std::floor(spec.max_batch_inputs / inputs_per_item)));
    }
    return batch;
  }

  /// Whether what a full call of `capability` costs is still to be learned: a batching
  /// source none of whose full calls was answered (the first item of a herd goes alone; a
  /// trickle's calls drain the queue).
  bool fullness_unknown(const std::string& capability) const {
    return spec.batch_items(capability) > 1 && !has_full_item_seconds;
  }

  /// Seconds an item holds one of its slots while a queue waits, that is in calls as full as
  /// it takes (`work`: the items' average work, for a source weighing it; 0: not known).
  /// While `fullness_unknown`: with `soonest`, a call of half a batch (what counts as full:
  /// an embedding item sends two texts or more, and a TEI call holds 32) is taken to last as
  /// long as its calls so far, the least it can cost (on the first single items' pace, a herd
  /// on a fresh server was told to come back a minute later, 4 to 8 times too late:
  /// helper-58, helper-60); without, the calls' pace so far, as cautious as admitting work
  /// must be (on that guess, 640 items were admitted to a CPU embedder and failed at their
  /// deadline: helper-61). A model that weighs its items by work (`work` > 0) counts its
  /// fitted line either way: on the CPU a call's time grows with its work, and a 256-item
  /// request taken at the guess was admitted to fail whole (helper-63).
  double queued_item_seconds(const std::string& capability, double work, bool soonest) const {
    const auto batch = static_cast<double>(spec.batch_items(capability));
    const bool unknown = fullness_unknown(capability);
    if (unknown && soonest && work <= 0.0) {
      // Where calls are capped in texts, a full one holds what the cap takes (`call_holds`):
      // counted as half a batch, a probe of 32 items of 7 references was admitted, and 4
      // failed at their deadline.
      return latency_ns * 1e-9 / std::max(std::min(batch / 2.0, call_holds(capability)), 1.0);
    }
    if (work > 0.0) {
      const auto n = unknown ? per_call(capability) : batch;
      return call_time(n, work) / n;
    }
    return unknown ? item_seconds : full_item_seconds;
  }

  /// Items of `capability` per second this source can take now; nullopt while nothing bounds
  /// it. With `full_calls`, in calls as full as a waiting queue fills, at the soonest
  /// (`queued_item_seconds`): for a `Retry-After`.
  std::optional<double> rate(time_point now, const std::string& capability,
                             bool full_calls = false) const {
    auto best = paced_rate(now, capability); // 0 when ejected
    if (best && *best == 0.0) {
      return best;
    }
    const double each = full_calls ? queued_item_seconds(capability, 0.0, true) : item_seconds;
    if (has_item_seconds && each > 0.0) {
      auto slots = static_cast<double>(limit()) / each;
      best = std::min(best.value_or(slots), slots);
    }
    return best;
  }

  /// `rate`'s bounds from pacing alone (nullopt: none): request pacing × items per call, and
  /// token pacing over the tokens an item costs; 0 when ejected.
  std::optional<double> paced_rate(time_point now, const std::string& capability) const {
    if (ejected(now)) {
      return 0.0;
    }
    std::optional<double> best;
    if (limiter) {
      if (auto rpm = limiter->requests_per_minute(); rpm > 0.0) {
        best = rpm / 60.0 * spec.batch_items(capability);
      }
      if (auto tpm = limiter->tokens_per_minute(); tpm > 0.0 && has_tokens_per_item
                                                  && tokens_per_item > 0.0) {
        auto tokens = tpm / 60.0 / tokens_per_item;
        best = std::min(best.value_or(tokens), tokens);
      }
    }
    return best;
  }

  void record_latency(nanoseconds latency) {
    auto ns = static_cast<double>(latency.count());
    latency_ns = has_latency ? latency_ns + latency_alpha * (ns - latency_ns) : ns;
    has_latency = true;
    if (recent.size() < latency_window) {
      recent.push_back(latency.count());
    } else {
      recent[recent_next] = latency.count();
      recent_next = (recent_next + 1) % latency_window;
    }
    fastest = recent.size() == 1 ? latency.count() : std::min(fastest, latency.count());
    // Re-sorting 64 numbers every 8 samples keeps the quantile fresh and cheap; every sample
    // while there are few.
    if (recent.size() >= min_timeout_samples
        && (recent.size() < min_latency_samples || ++samples_since_quantile >= 8 || !p95)) {
      samples_since_quantile = 0;
      auto sorted = recent;
      auto at = sorted.begin() + static_cast<std::ptrdiff_t>((sorted.size() * 95) / 100);
      std::nth_element(sorted.begin(), at, sorted.end());
      p95 = nanoseconds{*at};
      fastest = *std::min_element(recent.begin(), recent.end());
    }
  }
};

source_registry::source_registry(const time_source& clock) : clock_(clock) {
}

source_registry::~source_registry() = default;

source_id source_registry::add(source_spec spec) {
  auto s = std::make_unique<state>();
  spec.max_inflight = std::max<uint32_t>(spec.max_inflight, 1);
  spec.max_batch_items = std::max<uint32_t>(spec.max_batch_items, 1);
  if (spec.rate_limit) {
    s->limiter = std::make_unique<rate_limiter>(*spec.rate_limit, clock_);
  }
  if (spec.breaker) {
    s->breaker = std::make_unique<circuit_breaker>(*spec.breaker);
  }
  if (spec.adaptive) {
    auto cfg = spec.concurrency;
    cfg.max_limit = spec.max_inflight;
    s->concurrency = std::make_unique<adaptive_concurrency>(cfg);
  }
  s->info.id = next_id_++;
  s->info.name = spec.name;
  s->info.capabilities = spec.capabilities;
  s->info.remote = spec.remote;
  s->spec = std::move(spec);
  sources_.push_back(std::move(s));
  return sources_.back()->info.id;
}

bool source_registry::remove(source_id id) {
  auto i = std::find_if(sources_.begin(), sources_.end(),
                        [id](const auto& s) { return s->info.id == id; });
  if (i == sources_.end()) {
    return false;
  }
  sources_.erase(i);
  return true;
}

void source_registry::retire(source_id id) {
  if (auto* s = find(id)) {
    s->retired = true;
  }
}

constexpr auto wait_cause_names = names_of<wait_cause::breaker>("none", "backoff", "requests",
                                                                "tokens", "breaker");

const char* to_string(wait_cause c) noexcept {
  return wait_cause_names[c];
}

prompt_estimate estimate_of(const score_item& item) noexcept {
  return item.kind == "embedding" && !item.call ? prompt_estimate::embedding_reward
                                                : prompt_estimate::call;
}

namespace {

wait_cause cause_of(rate_limit_wait_reason r) noexcept {
  switch (r) {
  case rate_limit_wait_reason::none:
    return wait_cause::none;
  case rate_limit_wait_reason::backoff:
    return wait_cause::backoff;
  case rate_limit_wait_reason::requests:
    return wait_cause::requests;
  case rate_limit_wait_reason::tokens:
    return wait_cause::tokens;
  }
  return wait_cause::none;
}

} // namespace

pick_result source_registry::pick(const std::string& capability, const token_demand& demand,
                                  std::optional<source_id> avoid) {
  auto now = clock_.now();
  source_id skip = 0; // Ids start at 1.
  if (avoid && has_alternative(capability, *avoid)) {
    skip = *avoid;
  }
  // An item larger than a source's whole token burst goes where a burst holds it, if any
  // source serving the capability has one that does.
  auto fits = [&demand](const state& s) {
    return static_cast<double>(s.tokens_for(demand)) <= s.token_capacity();
  };
  bool some_fit = std::any_of(sources_.begin(), sources_.end(), [&](const auto& sp) {
    return sp->serves(capability) && sp->info.id != skip && !sp->ejected(now) && fits(*sp);
  });
  pick_result out;
  state* best = nullptr;
  double best_eta = 0.0;
  auto wait_until = [&](time_point t, wait_cause why) {
    if (!out.retry_at || t < *out.retry_at) {
      out.retry_at = t;
      out.waiting_on = why;
    }
  };
  for (auto& sp : sources_) {
    auto& s = *sp;
    if (!s.serves(capability) || s.info.id == skip) {
      continue;
    }
    if (s.breaker) {
      auto st = s.breaker->state(now);
      if (st == breaker_state::open) {
        wait_until(s.breaker->open_until(), wait_cause::breaker);
        continue;
      }
      if (st == breaker_state::half_open
          && s.breaker->probes_in_flight() >= s.breaker->config().half_open_probes) {
        out.busy = true;
        continue;
      }
    }
    if (some_fit && !fits(s)) {
      continue;
    }
    if (s.info.inflight >= s.limit()) {
      out.busy = true;
      continue;
    }
    if (s.limiter) {
      // A request too large for every burst is paced on the rate: it waits for a full bucket,
      // and its cost overdraws it.
      auto d = s.limiter->peek_paced(s.tokens_for(demand));
      if (d.kind == acquire_decision_kind::wait) {
        const auto cause = cause_of(d.reason);
        wait_until(d.until, cause);
        if (cause != wait_cause::backoff && s.info.inflight > 0) {
          // An answer on its way may say the endpoint's limits afresh and fill the buckets
          // sooner than they would refill: an item is not given up on for pacing meanwhile.
          out.busy = true;
        }
        continue;
      }
    }
    double eta = s.latency_ns * (1.0 + static_cast<double>(s.info.inflight) / s.limit());
    // Expected completion compares only sources with a measured latency; a source without
    // one (new, or only failing) is not taken for the fastest, it competes on load.
    bool timed = best != nullptr && s.has_latency && best->has_latency;
    bool less_loaded = best == nullptr || s.info.inflight < best->info.inflight
                       || (s.info.inflight == best->info.inflight
                           && s.info.dispatched < best->info.dispatched);
    bool better = best == nullptr || (timed && eta < best_eta)
                  || ((!timed || eta == best_eta) && less_loaded);
    if (better) {
      best = &s;
      best_eta = eta;
    }
  }
  if (best != nullptr) {
    out.source = best->info.id;
    out.retry_at.reset();
    out.waiting_on = wait_cause::none;
  }
  return out;
}

uint64_t source_registry::tokens_for(source_id id, const token_demand& demand) const {
  auto* s = find(id);
  return s == nullptr ? 0 : s->tokens_for(demand);
}

uint64_t source_registry::prompt_tokens_for(source_id id, uint64_t estimated,
                                            prompt_estimate of) const {
  auto* s = find(id);
  return s == nullptr ? 0 : s->prompt_tokens_for(estimated, of);
}

double source_registry::token_allowance(source_id id) {
  auto* s = find(id);
  if (s == nullptr || !paces_tokens(id)) {
    return std::numeric_limits<double>::infinity();
  }
  return s->limiter->available_tokens();
}

bool source_registry::paces_tokens(source_id id) const {
  auto* s = find(id);
  // Limits learned from headers count too: an endpoint configured without a token limit
  // adopts the one it reports.
  return s != nullptr && s->limiter && s->limiter->tokens_per_minute() > 0.0;
}

void source_registry::acquire(source_id id, uint64_t tokens, size_t items, uint64_t work,
                              uint64_t inputs) {
  auto* s = find(id);
  if (s == nullptr) {
    return;
  }
  auto now = clock_.now();
  if (s->limiter) {
    // The pick peeked at the head item only; what the whole batch needs is taken even when
    // it overdraws, so the buckets stay honest (the overdraft delays the next send).
    s->limiter->take(tokens);
  }
  if (items > 0) {
    s->items_per_call = smoothed(s->items_per_call, static_cast<double>(items),
                                 !s->has_items_per_call);
    s->has_items_per_call = true;
  }
  if (inputs > 0 && items > 0) {
    s->inputs_per_item = smoothed(s->inputs_per_item,
                                  static_cast<double>(inputs) / static_cast<double>(items),
                                  !s->has_inputs_per_item);
    s->has_inputs_per_item = true;
  }
  if (work > 0 && items > 0 && s->spec.weighs_work()) {
    s->work_per_item = smoothed(s->work_per_item,
                                static_cast<double>(work) / static_cast<double>(items),
                                !s->has_work_per_item);
    s->has_work_per_item = true;
  }
  if (tokens > 0 && items > 0) {
    s->tokens_per_item = smoothed(s->tokens_per_item,
                                  static_cast<double>(tokens) / static_cast<double>(items),
                                  !s->has_tokens_per_item);
    s->has_tokens_per_item = true;
  }
  if (s->breaker) {
    s->breaker->allows(now);
  }
  if (s->stale(now)) {
    s->resample = true;
  }
  ++s->info.inflight;
  ++s->info.dispatched;
}

void source_registry::observe_usage(source_id id, uint64_t estimated, uint64_t reported,
                                    uint64_t charged, prompt_estimate of) {
  auto* s = find(id);
  if (s == nullptr || estimated == 0 || reported == 0) {
    return;
  }
  if (charged > 0 && s->limiter) {
    s->limiter->settle(charged, reported);
  }
  auto& learned = s->prompt_ratios[static_cast<size_t>(of)];
  bool first = !learned.known;
  learned.reported = smoothed(learned.reported, static_cast<double>(reported), first);
  learned.estimated = smoothed(learned.estimated, static_cast<double>(estimated), first);
  learned.ratio =
    std::clamp(learned.reported / learned.estimated, min_prompt_ratio, max_prompt_ratio);
  learned.known = true;
}

std::optional<uint64_t> source_registry::release(source_id id, const attempt_report& report,
                                                 nanoseconds eject_for, size_t items,
                                                 uint64_t charged, uint64_t call_tokens,
                                                 uint64_t work, bool full) {
  auto* s = find(id);
  if (s == nullptr) {
    return std::nullopt;
  }
  auto now = clock_.now();
  if (s->info.inflight > 0) {
    --s->info.inflight;
  }
  if (report.cancelled || s->retired) {
    if (s->breaker) {
      s->breaker->on_cancelled(now);
    }
    return std::nullopt;
  }
  // A 429 although the endpoint's headers show room under its rate limits, with calls of
  // ours still out to it: a cap on calls in flight (the provider's, or one its headers do
  // not cover). Those calls are the most it takes now; waiting out its Retry-After would
  // leave that room idle.
  const bool past_cap = report.kind == attempt_outcome_kind::rate_limited && s->concurrency
                        && s->info.inflight > 0
                        && (!report.retry_after || *report.retry_after <= longest_cap_retry_after)
                        && room_left(report.headers, std::max(charged, call_tokens));
  std::optional<uint64_t> too_large;
  if (s->limiter) {
    if (charged > 0
        && (report.kind == attempt_outcome_kind::rate_limited
            || report.kind == attempt_outcome_kind::bad_request)) {
      s->limiter->give_back(charged);
    }
    s->limiter->on_headers(report.headers);
    if (s->concurrency && s->concurrency->in_slow_start()
        && (s->limiter->requests_per_minute() > 0.0 || s->limiter->tokens_per_minute() > 0.0)) {
      // The endpoint said what it allows: pacing keeps to that from here, as for limits
      // written in the configuration, so the concurrency limit need not creep up to it (an
      // endpoint that also caps calls in flight refuses the calls past its cap: `past_cap`).
      s->concurrency->open_up();
    }
    const double burst = s->limiter->token_capacity();
    if (report.kind == attempt_outcome_kind::rate_limited && std::isfinite(burst)
        && static_cast<double>(std::max(charged, call_tokens)) > burst) {
      // More than the endpoint takes at once (a 10 s burst, say, under a per-minute limit
      // it fits): this call is refused whatever the wait, and nobody else's is.
      too_large = static_cast<uint64_t>(burst);
    } else if (report.kind == attempt_outcome_kind::rate_limited) {
      if (!past_cap) {
        s->limiter->on_rate_limited(report.retry_after, now - report.latency);
      }
    } else {
      s->limiter->on_success();
    }
  }
  if (too_large) {
    if (s->breaker) {
      s->breaker->on_cancelled(now);  // the call's size, not the endpoint's health
    }
    return too_large;
  }
  if (s->breaker) {
    // An ejection and a recovery are each one log line: an operator's first sign of a
    // provider failing (items' errors reach only their trainers).
    const auto ejections_before = s->breaker->ejections();
    const bool was_closed = s->breaker->state(now) == breaker_state::closed;
    const uint32_t probes_failed_before = s->breaker->failed_probes();
    if (ejects_source(report.kind)) {
      s->breaker->eject(now, report.detail, eject_for);
    } else if (counts_against_source(report.kind)) {
      // A straggler given up on counts towards the failure ratio, not the streak: the calls
      // sent in one burst expire together.
      // The last source of a capability is ejected only when it fails most calls: ejecting
      // it stops all of that capability's work, not only its share (helper-53: the only
      // judge source, failing 30 % of calls, was ejected every few hundred calls, 5 s and
      // more each).
      const bool sole = std::any_of(
        s->spec.capabilities.begin(), s->spec.capabilities.end(),
        [&](const std::string& c) { return !has_alternative(c, s->info.id); });
      s->breaker->on_failure(now, !report.abandoned,
                             report.detail.empty() ? std::string_view{to_string(report.kind)}
                                                   : std::string_view{report.detail},
                             report.kind == attempt_outcome_kind::connect_failure
                               && report.unsent,
                             sole);
    } else if (report.kind == attempt_outcome_kind::ok) {
      s->breaker->on_success(now);
    } else {
      s->breaker->on_cancelled(now);
    }
    // A re-ejection after failed probes is logged at the 1st, 2nd, 4th, 8th... of them: the
    // last source of a capability (or one nothing listens at) is probed every
    // breaker_ejection_ms, a line per 5 s for as long as it is down.
    const uint32_t probes = s->breaker->failed_probes();
    if (s->breaker->ejections() > ejections_before && (probes & (probes - 1)) == 0) {
      log::warn("source '", s->spec.name, "' ejected for ",
                std::chrono::duration_cast<std::chrono::milliseconds>(
                  s->breaker->open_until() - now).count(),
                " ms: ", s->breaker->reason(),
                probes > 1 ? " (" + std::to_string(probes) + " probes in a row failed; logged "
                               "at powers of two)"
                           : std::string{});
    } else if (!was_closed && s->breaker->state(now) == breaker_state::closed) {
      // With its re-ejections logged at powers of two, say how long it was out.
      log::info("source '", s->spec.name, "' is back: a probe succeeded",
                probes_failed_before > 0
                  ? " after " + std::to_string(probes_failed_before) + " failed"
                  : std::string{});
    }
  }
  if (past_cap) {
    s->concurrency->cap_at(s->info.inflight, now);
    if (!std::exchange(s->cap_logged, true)) {
      log::info("source '", s->spec.name, "' caps calls in flight: it refused one (",
                report.detail, ") with ", s->info.inflight,
                " out and room under its rate limits. Its limit on calls in flight",
                " (arbiter_source_concurrency_limit) follows such refusals from now");
    }
  } else if (s->concurrency) {
    // A straggler the scheduler gave up on is not a sign of load.
    auto sample = report.abandoned ? sample_kind::failed : sample_of(report.kind);
    s->concurrency->on_sample(report.latency, sample, now);
  }
  const bool resample = std::exchange(s->resample, false);
  if (report.kind == attempt_outcome_kind::ok) {
    if (resample) {
      s->forget_pace(); // stale: this answer says what the source takes now
    }
    s->answered_at = now;
    s->record_latency(report.latency);
    if (items > 0) {
      auto per_item = std::chrono::duration<double>(report.latency).count()
                      / static_cast<double>(items);
      s->item_seconds = smoothed(s->item_seconds,
                                 within_reach(per_item, s->item_seconds, s->has_item_seconds),
                                 !s->has_item_seconds);
      s->has_item_seconds = true;
      if (full || 2 * items >= s->spec.max_batch_items) {
        s->full_item_seconds = smoothed(
          s->full_item_seconds,
          within_reach(per_item, s->full_item_seconds, s->has_full_item_seconds),
          !s->has_full_item_seconds);
        s->has_full_item_seconds = true;
      }
    }
    if (work > 0 && s->spec.weighs_work()) {
      const auto w = static_cast<double>(work);
      s->learn_call(w, within_reach(std::chrono::duration<double>(report.latency).count(),
                                    s->call_time(1.0, w), s->has_unit_seconds));
    }
  }
  return std::nullopt;
}

std::optional<double> source_registry::capacity(const std::string& capability,
                                                bool full_calls) {
  auto now = clock_.now();
  std::optional<double> total;
  for (const auto& sp : sources_) {
    if (!sp->serves(capability)) {
      continue;
    }
    if (auto r = sp->rate(now, capability, full_calls)) {
      total = total.value_or(0.0) + *r;
    }
  }
  return total;
}

std::optional<double> source_registry::paced_rate(const std::string& capability) {
  auto now = clock_.now();
  std::optional<double> total;
  for (const auto& sp : sources_) {
    if (!sp->serves(capability)) {
      continue;
    }
    auto r = sp->paced_rate(now, capability);
    if (!r) {
      return std::nullopt;
    }
    total = total.value_or(0.0) + *r;
  }
  return total;
}

nanoseconds source_registry::quickest_answer(const std::string& capability) const {
  std::optional<int64_t> quickest;
  for (const auto& sp : sources_) {
    if (sp->serves(capability) && !sp->recent.empty()) {
      quickest = std::min(quickest.value_or(sp->fastest), sp->fastest);
    }
  }
  return nanoseconds{quickest.value_or(0)};
}

std::optional<double> source_registry::seconds_to_start(const std::string& capability,
                                                        double items, bool idle,
                                                        const own_items* own, bool soonest) {
  constexpr double unbounded = std::numeric_limits<double>::infinity();
  /// One source's starts by time t (s): min(now_a + rate_a·t, now_b + rate_b·t) from `delay`.
  struct pace {
    double delay = 0.0;
    double bucket_now = unbounded;
    double bucket_rate = unbounded;
    double slots_now = unbounded;
    double slots_rate = unbounded;
    double starts_by(double t) const {
      if (t < delay) {
        return 0.0;
      }
      t -= delay;
      return std::max(0.0, std::min(line(bucket_now, bucket_rate, t),
                                    line(slots_now, slots_rate, t)));
    }
    /// How fast `starts_by` grows just after `t`.
    double slope_after(double t) const {
      if (t < delay) {
        return 0.0;
      }
      t -= delay;
      auto bucket = line(bucket_now, bucket_rate, t);
      auto slots = line(slots_now, slots_rate, t);
      auto least = std::min(bucket, slots);
      // At a corner the lines meet up to rounding: the one that binds after it is the one
      // that grows slower (a rounding error picked the other, and admitted a herd).
      auto tolerance = 1e-9 * std::max(1.0, std::abs(least));
      if (least < -tolerance) {
        return 0.0; // an overdrawn bucket still paying back
      }
      double slope = unbounded;
      if (bucket <= least + tolerance) {
        slope = bucket_rate;
      }
      if (slots <= least + tolerance) {
        slope = std::min(slope, slots_rate);
      }
      return slope;
    }
    static double line(double at_zero, double rate, double t) {
      return rate == unbounded ? unbounded : at_zero + rate * t; // not ∞ × 0
    }
  };
  auto now = clock_.now();
  std::vector<pace> paces;
  double total_rate = 0.0;
  for (const auto& sp : sources_) {
    auto& s = *sp;
    if (!s.serves(capability)) {
      continue;
    }
    auto rate = s.rate(now, capability);
    if (!rate || *rate <= 0.0) {
      continue; // Nothing bounds it yet (as `capacity`), or ejected.
    }
    total_rate += *rate;
    pace p;
    const auto batch = static_cast<double>(s.spec.batch_items(capability));
    // What one call sent now carries: items arriving at once go one a call (a herd of
    // single-item requests took a 120-call bucket for 3,840 embedding items), so as many as
    // calls have lately carried, one while none has gone.
    const auto per_call = s.per_call(capability);
    if (s.has_item_seconds && s.item_seconds > 0.0) {
      auto free = static_cast<double>(s.limit())
                  - (idle ? 0.0 : static_cast<double>(s.info.inflight));
      p.slots_now = std::max(free, 0.0) * per_call;
      if (s.spec.remote && own != nullptr && own->count > 1.0 && free >= 1.0) {
        // A request's items, and those queued ahead of it, are in the queue at once: a free
        // slot takes as many as a call holds, not as many as calls lately carried (16 items
        // beside a trickle of single items were counted one a call, expected in 4.5 s and
        // refused, though one call of 1 s took them). A local model's slots feed one worker
        // that runs its batches one after another, so it keeps the count of calls carried.
        p.slots_now = std::max(p.slots_now, std::min(std::floor(free) * s.call_holds(capability),
                                                     own->count + own->queued));
      }
      // A model weighing items by work: these items at their work, not at the recent ones'.
      auto work = s.work_each(items, own);
      // Items past what the free slots take now queue; half a batch or more goes in full
      // calls (`queued_item_seconds`), fewer in calls as full as they have lately been.
      auto each = items - p.slots_now >= batch / 2.0 && batch > 1.0
                    ? s.queued_item_seconds(capability, work, soonest || idle)
                  : work > 0.0 ? s.call_time(per_call, work) / per_call
                               : s.item_seconds;
      p.slots_rate = static_cast<double>(s.limit()) / each;
    }
    if (s.limiter) {
      auto& l = *s.limiter;
      if (auto blocked = l.blocked_until(); blocked > now && !idle) {
        p.delay = std::chrono::duration<double>(blocked - now).count();
      }
      // What a bucket holds when the source may send again (it refills during a block), in
      // items, and its refill rate.
      auto bucket = [&p, idle](double level, double capacity, double per_second) {
        auto then = idle ? capacity : std::min(capacity, level + per_second * p.delay);
        return std::make_pair(then, per_second);
      };
      if (auto rpm = l.requests_per_minute(); rpm > 0.0) {
        std::tie(p.bucket_now, p.bucket_rate) = bucket(
          l.available_requests() * per_call, l.request_capacity() * per_call, rpm / 60.0 * batch);
        auto requests = bucket(l.available_requests(), l.request_capacity(), rpm / 60.0).first;
        if (own != nullptr && own->count > 1.0 && requests >= 1.0) {
          // As a free slot: a request's items and those queued ahead are in the queue at
          // once, so a request the bucket holds takes a call's worth of them.
          p.bucket_now = std::max(p.bucket_now, std::min(std::floor(requests)
                                                           * s.call_holds(capability),
                                                         own->count + own->queued));
        }
      }
      auto tpm = l.tokens_per_minute();
      auto per_item = s.has_tokens_per_item ? s.tokens_per_item : 0.0;
      if (tpm > 0.0 && own != nullptr && own->count > 0.0 && own->demand.item != nullptr) {
        // The request's items at their own size, those ahead at what the queued ones hold on
        // average, or the recent calls' cost per item (or, with neither, the request's).
        const auto& item = *own->demand.item;
        auto completion = static_cast<double>(
          estimate_completion_tokens(item, s.spec.completion_tokens));
        auto tokens = static_cast<double>(
                        s.prompt_tokens_for(own->demand.prompt, estimate_of(item)))
                      + own->count * completion;
        auto ahead = std::max(items - own->count, 0.0);
        auto ahead_each = per_item > 0.0 ? per_item : tokens / own->count;
        if (own->queued > 0.0 && own->queued_prompt > 0) {
          auto queued = static_cast<double>(
            s.prompt_tokens_for(own->queued_prompt, estimate_of(item)));
          ahead_each = queued / own->queued + completion;
        }
        per_item = (ahead * ahead_each + tokens) / std::max(items, own->count);
      }
      if (tpm > 0.0 && per_item > 0.0) {
        // Both buckets bound it; the one that runs dry first decides (a close enough line).
        auto [now_items, rate_items] = bucket(l.available_tokens() / per_item,
                                              l.token_capacity() / per_item, tpm / 60.0 / per_item);
        p.bucket_now = std::min(p.bucket_now, now_items);
        p.bucket_rate = std::min(p.bucket_rate, rate_items);
      }
    }
    paces.push_back(p);
  }
  if (paces.empty() || total_rate <= 0.0) {
    return std::nullopt;
  }
  if (items <= 0.0) {
    return 0.0;
  }
  // The sum is piecewise linear: find the stretch between two corners where it reaches
  // `items` and solve on it (exact, unlike a bisection, so whole seconds stay whole).
  std::vector<double> corners{0.0};
  for (const auto& p : paces) {
    corners.push_back(p.delay);
    if (p.bucket_rate != unbounded && p.bucket_now < 0.0) {
      corners.push_back(p.delay - p.bucket_now / p.bucket_rate); // an overdraft paid back
    }
    if (p.bucket_rate != unbounded && p.slots_rate != unbounded
        && p.bucket_rate != p.slots_rate) {
      auto t = (p.slots_now - p.bucket_now) / (p.bucket_rate - p.slots_rate);
      if (t > 0.0) {
        corners.push_back(p.delay + t); // where its bound changes from one line to the other
      }
    }
  }
  std::sort(corners.begin(), corners.end());
  // Between two corners the sum grows linearly; at a corner it may jump (a block ending hands
  // out its bucket at once).
  for (size_t i = 0; i < corners.size(); ++i) {
    double at = 0.0;
    double slope = 0.0;
    for (const auto& p : paces) {
      at += p.starts_by(corners[i]);
      slope += p.slope_after(corners[i]);
    }
    if (at >= items) {
      return corners[i];
    }
    bool last = i + 1 == corners.size();
    if (slope > 0.0) {
      auto t = corners[i] + (items - at) / slope;
      if (last || t <= corners[i + 1]) {
        return t;
      }
    } else if (last) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

nanoseconds source_registry::latency(const std::string& capability, double items,
                                     const own_items* own) const {
  std::optional<double> best;
  for (const auto& sp : sources_) {
    if (!sp->serves(capability)) {
      continue;
    }
    std::optional<double> ns;
    if (auto work = sp->work_each(items, own); work > 0.0) {
      ns = sp->call_time(std::clamp(items, 1.0, std::max(sp->per_call(capability), 1.0)),
                         work)
           * 1e9;
    } else if (sp->has_latency) {
      ns = sp->latency_ns;
    }
    if (ns && (!best || *ns < *best)) {
      best = ns;
    }
  }
  return nanoseconds{static_cast<nanoseconds::rep>(best.value_or(0.0))};
}

work_rule source_registry::work_rule_of(const std::string& capability) const {
  work_rule rule;
  for (const auto& sp : sources_) {
    if (sp->serves(capability)) {
      rule.input_cap = std::max<uint64_t>(rule.input_cap, sp->spec.max_input_tokens);
      if (sp->spec.remote) {
        rule.completion_default = std::max(rule.completion_default, sp->spec.completion_tokens);
      }
    }
  }
  return rule;
}

nanoseconds source_registry::latency(const std::string& capability) const {
  std::optional<double> best;
  for (const auto& sp : sources_) {
    if (sp->serves(capability) && sp->has_latency && (!best || sp->latency_ns < *best)) {
      best = sp->latency_ns;
    }
  }
  return nanoseconds{static_cast<nanoseconds::rep>(best.value_or(0.0))};
}

nanoseconds source_registry::latency_of(source_id id) const {
  auto* s = find(id);
  return s == nullptr ? nanoseconds{0}
                      : nanoseconds{static_cast<nanoseconds::rep>(s->latency_ns)};
}

double source_registry::answers_by(const std::string& capability, time_point by,
                                   source_id than) {
  auto* slow = find(than);
  if (slow == nullptr || !slow->has_latency) {
    return 0.0;
  }
  auto now = clock_.now();
  double total = 0.0;
  for (const auto& sp : sources_) {
    auto& s = *sp;
    if (!s.serves(capability) || &s == slow || !s.has_latency
        || s.latency_ns >= slow->latency_ns) {
      continue;
    }
    auto rate = s.rate(now, capability);
    if (!rate || *rate <= 0.0) {
      continue; // Ejected, or nothing known of its pace.
    }
    // When it can start the next item: now, after a slot frees, or when pacing allows.
    auto ready = now;
    auto latency = nanoseconds{static_cast<nanoseconds::rep>(s.latency_ns)};
    if (s.info.inflight >= s.limit()) {
      ready += latency / std::max<uint32_t>(s.limit(), 1);
    }
    if (s.limiter) {
      auto d = s.limiter->peek(0);
      if (d.kind == acquire_decision_kind::wait && d.until > ready) {
        ready = d.until;
      }
    }
    auto last_start = by - latency;
    if (last_start < ready) {
      continue;
    }
    total += 1.0 + std::floor(std::chrono::duration<double>(last_start - ready).count() * *rate);
  }
  return total;
}

const std::vector<std::string>* source_registry::feeds(const std::string& capability) const {
  for (const auto& sp : sources_) {
    if (auto found = sp->spec.feeds.find(capability); found != sp->spec.feeds.end()) {
      return &found->second;
    }
  }
  return nullptr;
}

bool source_registry::has_alternative(const std::string& capability, source_id except) {
  auto now = clock_.now();
  return std::any_of(sources_.begin(), sources_.end(), [&](const auto& s) {
    return s->info.id != except && s->serves(capability) && !s->ejected(now);
  });
}

bool source_registry::serves(const std::string& capability) const {
  return count(capability) > 0;
}

size_t source_registry::count(const std::string& capability) const {
  return static_cast<size_t>(std::count_if(sources_.begin(), sources_.end(), [&](const auto& s) {
    return s->serves(capability);
  }));
}

uint32_t source_registry::max_batch_items(source_id id, const std::string& capability) const {
  auto* s = find(id);
  return s == nullptr ? 1 : s->spec.batch_items(capability);
}

uint32_t source_registry::max_batch_inputs(source_id id) const {
  auto* s = find(id);
  return s == nullptr ? 0 : s->spec.max_batch_inputs;
}

nanoseconds source_registry::batch_wait(source_id id) const {
  auto* s = find(id);
  return s == nullptr ? nanoseconds{0} : s->spec.batch_wait;
}

bool source_registry::waits_when_idle(source_id id) const {
  auto* s = find(id);
  return s != nullptr && s->spec.wait_when_idle;
}

bool source_registry::busy(source_id id) const {
  auto* s = find(id);
  return s != nullptr && s->info.inflight > 0;
}

std::optional<nanoseconds> source_registry::straggler_after(source_id id) const {
  auto* s = find(id);
  if (s == nullptr || s->recent.size() < min_latency_samples) {
    return std::nullopt;
  }
  return s->p95;
}

bool source_registry::stale(source_id id) const {
  const auto* s = find(id);
  return s != nullptr && s->stale(clock_.now());
}

bool source_registry::stale(const std::string& capability) const {
  const auto now = clock_.now();
  bool any = false;
  for (const auto& sp : sources_) {
    if (sp->serves(capability)) {
      if (!sp->stale(now)) {
        return false;
      }
      any = true;
    }
  }
  return any;
}

bool source_registry::full_pace_unknown(const std::string& capability) const {
  bool any = false;
  for (const auto& sp : sources_) {
    if (sp->serves(capability)) {
      if (!sp->has_item_seconds || !sp->fullness_unknown(capability) || sp->spec.weighs_work()) {
        return false;
      }
      any = true;
    }
  }
  return any;
}

std::optional<nanoseconds> source_registry::fastest_answer(source_id id) const {
  auto* s = find(id);
  if (s == nullptr || s->recent.size() < min_latency_samples) {
    return std::nullopt;
  }
  return nanoseconds{s->fastest};
}

std::optional<nanoseconds> source_registry::timeout_basis(source_id id) const {
  auto* s = find(id);
  return s == nullptr ? std::nullopt : s->p95;
}

const std::string& source_registry::name(source_id id) const {
  static const std::string none;
  auto* s = find(id);
  return s == nullptr ? none : s->info.name;
}

bool source_registry::remote(source_id id) const {
  auto* s = find(id);
  return s != nullptr && s->spec.remote;
}

bool source_registry::local_model(source_id id) const {
  auto* s = find(id);
  return s != nullptr && s->spec.local_model;
}

double source_registry::cost(source_id id, uint64_t prompt_tokens,
                             uint64_t completion_tokens) const {
  auto* s = find(id);
  if (s == nullptr) {
    return 0.0;
  }
  return (static_cast<double>(prompt_tokens) * s->spec.input_cost_per_million
          + static_cast<double>(completion_tokens) * s->spec.output_cost_per_million)
         / 1e6;
}

std::vector<source_info> source_registry::sources() {
  std::vector<source_info> out;
  out.reserve(sources_.size());
  for (auto& sp : sources_) {
    out.push_back(describe(sp->info.id));
  }
  return out;
}

source_info source_registry::describe(source_id id) {
  auto now = clock_.now();
  auto* sp = find(id);
  if (sp == nullptr) {
    return {};
  }
  {
    auto info = sp->info;
    info.max_inflight = sp->limit();
    if (sp->breaker) {
      info.breaker = sp->breaker->state(now);
      // Why it opened, while it is not closed: once closed again the reason is history.
      info.breaker_reason =
        info.breaker == breaker_state::closed ? std::string{} : sp->breaker->reason();
    }
    info.latency_ms = sp->latency_ns / 1e6;
    if (sp->limiter) {
      info.requests_per_minute = sp->limiter->requests_per_minute();
      info.tokens_per_minute = sp->limiter->tokens_per_minute();
      if (info.requests_per_minute > 0.0) {
        info.available_requests = sp->limiter->available_requests();
        info.request_burst = sp->limiter->request_capacity();
      }
    }
    info.prompt_token_ratio =
      sp->prompt_ratios[static_cast<size_t>(prompt_estimate::call)].ratio;
    info.embedding_token_ratio =
      sp->prompt_ratios[static_cast<size_t>(prompt_estimate::embedding_reward)].ratio;
    // Of its first capability (a source serving chat and embed takes more embed items).
    info.items_per_second =
      sp->rate(now, sp->spec.capabilities.empty() ? std::string{} : sp->spec.capabilities.front())
        .value_or(0.0);
    info.slow_start = sp->concurrency && sp->concurrency->in_slow_start();
    return info;
  }
}

std::optional<time_point> source_registry::next_breaker_change(time_point now) const {
  std::optional<time_point> next;
  for (const auto& s : sources_) {
    if (s->breaker && s->breaker->state(now) == breaker_state::open) {
      auto at = s->breaker->open_until();
      if (!next || at < *next) {
        next = at;
      }
    }
  }
  return next;
}

std::vector<std::pair<source_id, breaker_state>>
source_registry::breakers(time_point now) const {
  std::vector<std::pair<source_id, breaker_state>> out;
  for (const auto& s : sources_) {
    if (s->breaker) {
      out.emplace_back(s->info.id, s->breaker->state(now));
    }
  }
  return out;
}

source_registry::state* source_registry::find(source_id id) const {
  for (const auto& s : sources_) {
    if (s->info.id == id) {
      return s.get();
    }
  }
  return nullptr;
}

} // namespace arbiter::scheduler
