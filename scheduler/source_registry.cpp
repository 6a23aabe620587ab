#include "scheduler/source_registry.hpp"

#include <algorithm>
#include <limits>

namespace arbiter::scheduler {

namespace {

/// Successful attempts kept for the straggler quantile.
constexpr size_t latency_window = 64;
/// Samples needed before a straggler threshold is given.
constexpr size_t min_latency_samples = 20;
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

/// Whether an outcome counts against the source's health.
bool counts_against(attempt_outcome_kind k) {
  switch (k) {
    case attempt_outcome_kind::server_error:
    case attempt_outcome_kind::timeout:
    case attempt_outcome_kind::connect_failure:
    case attempt_outcome_kind::bad_response:
      return true;
    default:
      return false;
  }
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
  size_t samples_since_quantile = 0;
  std::optional<nanoseconds> p95;

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
    // Re-sorting 64 numbers every 8 samples keeps the quantile fresh and cheap.
    if (recent.size() >= min_latency_samples && (++samples_since_quantile >= 8 || !p95)) {
      samples_since_quantile = 0;
      auto sorted = recent;
      auto at = sorted.begin() + static_cast<std::ptrdiff_t>((sorted.size() * 95) / 100);
      std::nth_element(sorted.begin(), at, sorted.end());
      p95 = nanoseconds{*at};
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

pick_result source_registry::pick(const std::string& capability, uint64_t tokens,
                                  std::optional<source_id> avoid) {
  auto now = clock_.now();
  source_id skip = 0; // Ids start at 1.
  if (avoid && has_alternative(capability, *avoid)) {
    skip = *avoid;
  }
  pick_result out;
  state* best = nullptr;
  double best_eta = 0.0;
  auto wait_until = [&](time_point t, const char* why) {
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
        wait_until(s.breaker->open_until(), "breaker");
        continue;
      }
      if (st == breaker_state::half_open
          && s.breaker->probes_in_flight() >= s.breaker->config().half_open_probes) {
        out.busy = true;
        continue;
      }
    }
    if (s.info.inflight >= s.limit()) {
      out.busy = true;
      continue;
    }
    if (s.limiter) {
      auto d = s.limiter->peek(tokens + s.spec.completion_tokens);
      if (d.kind == acquire_decision_kind::wait) {
        wait_until(d.until, to_string(d.reason));
        continue;
      }
      // A request too large for the bucket is sent anyway: the provider will say what it
      // thinks, and its answer is classified like any other.
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
    out.waiting_on.clear();
  }
  return out;
}

double source_registry::token_allowance(source_id id) {
  auto* s = find(id);
  if (s == nullptr || !s->limiter || !s->spec.rate_limit
      || s->spec.rate_limit->tokens_per_minute == 0) {
    return std::numeric_limits<double>::infinity();
  }
  return s->limiter->available_tokens();
}

bool source_registry::paces_tokens(source_id id) const {
  auto* s = find(id);
  return s != nullptr && s->spec.rate_limit && s->spec.rate_limit->tokens_per_minute > 0;
}

void source_registry::acquire(source_id id, uint64_t tokens, size_t items) {
  auto* s = find(id);
  if (s == nullptr) {
    return;
  }
  auto now = clock_.now();
  if (s->limiter) {
    // The pick peeked at the head item only; what the whole batch needs is taken even when
    // it overdraws, so the buckets stay honest (the overdraft delays the next send).
    s->limiter->take(tokens + s->spec.completion_tokens * items);
  }
  if (s->breaker) {
    s->breaker->allows(now);
  }
  ++s->info.inflight;
  ++s->info.dispatched;
}

void source_registry::release(source_id id, const attempt_report& report, nanoseconds eject_for) {
  auto* s = find(id);
  if (s == nullptr) {
    return;
  }
  auto now = clock_.now();
  if (s->info.inflight > 0) {
    --s->info.inflight;
  }
  if (report.cancelled) {
    if (s->breaker) {
      s->breaker->on_cancelled(now);
    }
    return;
  }
  if (s->limiter) {
    s->limiter->on_headers(report.headers);
    if (report.kind == attempt_outcome_kind::rate_limited) {
      s->limiter->on_rate_limited(report.retry_after);
    } else {
      s->limiter->on_success();
    }
  }
  if (s->breaker) {
    if (ejects_source(report.kind)) {
      s->breaker->eject(now, report.detail, eject_for);
    } else if (counts_against(report.kind)) {
      s->breaker->on_failure(now);
    } else if (report.kind == attempt_outcome_kind::ok) {
      s->breaker->on_success(now);
    } else {
      s->breaker->on_cancelled(now);
    }
  }
  if (s->concurrency) {
    s->concurrency->on_sample(report.latency, sample_of(report.kind), now);
  }
  if (report.kind == attempt_outcome_kind::ok) {
    s->record_latency(report.latency);
  }
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

uint32_t source_registry::max_batch_items(source_id id) const {
  auto* s = find(id);
  return s == nullptr ? 1 : s->spec.max_batch_items;
}

nanoseconds source_registry::batch_wait(source_id id) const {
  auto* s = find(id);
  return s == nullptr ? nanoseconds{0} : s->spec.batch_wait;
}

bool source_registry::busy(source_id id) const {
  auto* s = find(id);
  return s != nullptr && s->info.inflight > 0;
}

std::optional<nanoseconds> source_registry::straggler_after(source_id id) const {
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
      info.breaker = to_string(sp->breaker->state(now));
      info.breaker_reason = sp->breaker->reason();
    }
    info.latency_ms = sp->latency_ns / 1e6;
    if (sp->limiter && sp->spec.rate_limit && sp->spec.rate_limit->requests_per_minute > 0) {
      info.available_requests = sp->limiter->available_requests();
    }
    return info;
  }
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
