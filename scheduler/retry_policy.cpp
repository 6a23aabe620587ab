#include "scheduler/retry_policy.hpp"

#include <algorithm>
#include <iterator>

#include "common/enum_names.hpp"

namespace arbiter::scheduler {

constexpr auto attempt_outcome_kind_names = names_of<attempt_outcome_kind::unsupported>(
    "ok", "rate_limited", "server_error", "timeout", "connect_failure", "bad_response",
    "bad_request", "unauthorized", "not_found", "unsupported");

const char* to_string(attempt_outcome_kind k) noexcept {
  return attempt_outcome_kind_names[k];
}

attempt_outcome_kind classify_http_status(int status) noexcept {
  if (status >= 200 && status < 300) {
    return attempt_outcome_kind::ok;
  }
  switch (status) {
    case 401:
    case 403:
      return attempt_outcome_kind::unauthorized;
    case 404:
      return attempt_outcome_kind::not_found;
    case 408:
      return attempt_outcome_kind::timeout;
    case 409:
    // TEI's backend failed (e.g. CUDA out of memory): the replica is sick, not the request.
    case 424:
      return attempt_outcome_kind::server_error;
    case 429:
      return attempt_outcome_kind::rate_limited;
    default:
      break;
  }
  if (status >= 400 && status < 500) {
    return attempt_outcome_kind::bad_request;
  }
  if (status >= 500 && status < 600) {
    return attempt_outcome_kind::server_error;
  }
  return attempt_outcome_kind::bad_response;
}

namespace {

/// Each outcome's traits (retry_policy.hpp says what each means), in the enum's order.
struct outcome_traits {
  bool retryable;
  bool ejects_source;
  bool counts_against_source;
  bool counts_as_attempt;
};

constexpr outcome_traits traits_of[] = {
  // retryable, ejects, against the source, uses an attempt
  {false, false, false, false}, // ok
  {true, false, false, false},  // rate_limited: not now
  {true, false, true, true},    // server_error
  {true, false, true, true},    // timeout
  {true, false, true, false},   // connect_failure: never reached the backend
  {true, false, true, true},    // bad_response
  {false, false, false, false}, // bad_request: any source refuses it alike
  {true, true, false, false},   // unauthorized: about this source only
  {true, true, false, false},   // not_found: about this source only
  {true, false, false, false},  // unsupported: about this source only
};
static_assert(std::size(traits_of) == static_cast<size_t>(attempt_outcome_kind::unsupported) + 1);

/// A value outside the enum (a corrupt byte) has the traits of an unusable answer.
const outcome_traits& traits(attempt_outcome_kind k) noexcept {
  auto i = static_cast<size_t>(k);
  if (i >= std::size(traits_of)) {
    i = static_cast<size_t>(attempt_outcome_kind::bad_response);
  }
  return traits_of[i];
}

} // namespace

bool is_retryable(attempt_outcome_kind k) noexcept {
  return traits(k).retryable;
}

bool ejects_source(attempt_outcome_kind k) noexcept {
  return traits(k).ejects_source;
}

bool counts_against_source(attempt_outcome_kind k) noexcept {
  return traits(k).counts_against_source;
}

bool counts_as_attempt(attempt_outcome_kind k) noexcept {
  return traits(k).counts_as_attempt;
}

namespace {

/// Outcomes about one source only: another source may serve the same request.
bool about_this_source(attempt_outcome_kind k) noexcept {
  return ejects_source(k) || k == attempt_outcome_kind::unsupported;
}

} // namespace

constexpr auto retry_decision_kind_names = names_of<retry_decision_kind::retry_elsewhere>(
    "no_retry", "retry_here", "retry_elsewhere");

const char* to_string(retry_decision_kind k) noexcept {
  return retry_decision_kind_names[k];
}

retry_budget::retry_budget(const retry_budget_config& cfg, const time_source& clock)
  : clock_(clock),
    retry_ratio_(std::max(cfg.retry_ratio, 0.0)),
    min_retries_(cfg.min_retries),
    slot_length_(std::max(cfg.window / std::max<uint32_t>(cfg.slots, 1), nanoseconds{1})),
    slots_(std::max<uint32_t>(cfg.slots, 1)) {
}

int64_t retry_budget::slot_index(time_point now) const noexcept {
  return now.time_since_epoch() / slot_length_;
}

retry_budget::slot& retry_budget::current() {
  auto index = slot_index(clock_.now());
  while (!window_.empty() && window_.front().index <= index - slots_) {
    window_.pop_front();
  }
  if (window_.empty() || window_.back().index != index) {
    window_.push_back(slot{index, 0, 0});
  }
  return window_.back();
}

retry_budget::slot retry_budget::totals() const {
  auto oldest = slot_index(clock_.now()) - slots_;
  slot sum;
  for (const auto& s : window_) {
    if (s.index > oldest) {
      sum.requests += s.requests;
      sum.retries += s.retries;
    }
  }
  return sum;
}

void retry_budget::on_request(uint64_t count) {
  current().requests += count;
}

void retry_budget::on_retry() {
  ++current().retries;
}

bool retry_budget::can_retry() const {
  auto sum = totals();
  double allowed = std::max(static_cast<double>(min_retries_),
                            retry_ratio_ * static_cast<double>(sum.requests));
  return static_cast<double>(sum.retries) + 1.0 <= allowed;
}

uint64_t retry_budget::requests_in_window() const {
  return totals().requests;
}

uint64_t retry_budget::retries_in_window() const {
  return totals().retries;
}

retry_policy::retry_policy(const retry_policy_config& cfg, retry_budget& budget,
                           random_source& random)
  : max_attempts_(cfg.max_attempts),
    max_retry_after_(std::max(cfg.max_retry_after, nanoseconds{0})),
    backoff_(cfg.backoff_base, cfg.backoff_cap),
    budget_(budget),
    random_(random) {
}

retry_decision retry_policy::decide(attempt_outcome_kind outcome, uint32_t failures_so_far,
                                    nanoseconds time_left, other_sources others,
                                    std::optional<nanoseconds> retry_after) {
  retry_decision d;
  if (outcome == attempt_outcome_kind::ok) {
    d.reason = "ok";
    return d;
  }
  if (!is_retryable(outcome)
      || (about_this_source(outcome) && others == other_sources::none)) {
    d.reason = "fatal_status";
    return d;
  }
  if (about_this_source(outcome)) {
    d.kind = retry_decision_kind::retry_elsewhere;
    d.reason = to_string(outcome);
    return d;
  }
  if (counts_as_attempt(outcome) && failures_so_far >= max_attempts_) {
    d.reason = "max_attempts";
    return d;
  }
  bool server_wait = retry_after && *retry_after > nanoseconds{0};
  // What must pass before a retry can succeed: nothing elsewhere; here, the server's word
  // (uncut: a Retry-After beyond the deadline says a retry before it is futile) or ours.
  nanoseconds needed{0};
  if (others == other_sources::available) {
    d.kind = retry_decision_kind::retry_elsewhere;
  } else {
    d.kind = retry_decision_kind::retry_here;
    if (server_wait) {
      needed = *retry_after;
      d.delay = std::min(*retry_after, max_retry_after_);
    } else {
      d.delay = backoff_.next(failures_so_far > 0 ? failures_so_far - 1 : 0, random_);
      needed = d.delay;
    }
  }
  if (needed >= time_left) {
    return retry_decision{retry_decision_kind::no_retry, nanoseconds{0}, "deadline"};
  }
  // The budget guards backends that did work for nothing. A 429 waits out the endpoint's one
  // shared backoff instead of adding load, and a connection that failed never reached the
  // backend, so neither spends it.
  bool spends_budget = outcome != attempt_outcome_kind::rate_limited
                       && outcome != attempt_outcome_kind::connect_failure;
  if (spends_budget && !budget_.can_retry()) {
    // The budget keeps a failing backend from a retry storm; it does not end items. The retry
    // is due after its usual delay, and the caller sends it then if the window has room or
    // nothing fresh waits for the capability; else it waits for room, while the deadline
    // allows.
    auto wait = std::max(needed, budget_.slice());
    if (wait >= time_left) {
      return retry_decision{retry_decision_kind::no_retry, nanoseconds{0}, "budget_exhausted"};
    }
    d.reason = "budget_wait";
    d.awaits_budget = true;
    return d;
  }
  if (spends_budget) {
    budget_.on_retry();
  }
  d.reason = to_string(outcome);
  return d;
}

} // namespace arbiter::scheduler
