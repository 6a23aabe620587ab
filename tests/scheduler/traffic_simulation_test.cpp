// The scheduler core against simulated providers in virtual time: token buckets enforced per
// second that answer 429 with Retry-After and `x-ratelimit-*` headers, lognormal latencies,
// injected 5xx, calls that never answer. The shapes trainers send (many single-item requests
// at once, one big batch), with limits configured and not. Everything runs on a manual clock,
// so the makespans asserted here are deterministic, not timings.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <queue>
#include <random>

#include "scheduler/scheduler_core.hpp"
#include "test_support.hpp"

using namespace arbiter;
using namespace arbiter::scheduler;
using namespace arbiter::scheduler::testing;
using namespace std::chrono_literals;

namespace {

/// What one simulated provider enforces and how it answers.
struct provider_settings {
  std::string name;
  double rpm = 0;
  double tpm = 0;
  /// Seconds of the per-minute limits the buckets hold.
  double burst_s = 1.0;
  double median_ms = 100;
  double p99_ms = 300;
  /// Share of admitted calls answered 503, and share that never answer.
  double error_rate = 0;
  double hang_rate = 0;
};

/// One continuously refilling bucket, as providers (and the fake provider) keep them.
struct sim_bucket {
  double per_minute = 0;
  double capacity = 0;
  double level = 0;

  bool on() const {
    return per_minute > 0;
  }
  void refill(double seconds) {
    level = std::min(capacity, level + seconds * per_minute / 60.0);
  }
  double seconds_until(double amount) const {
    return std::max(0.0, amount - level) / (per_minute / 60.0);
  }
  double reset_seconds() const {
    return (capacity - level) / (per_minute / 60.0);
  }
};

class sim_provider {
public:
  sim_provider(provider_settings s, uint64_t seed, time_point start)
    : s_(std::move(s)), rng_(seed), last_(start) {
    requests_.per_minute = s_.rpm;
    requests_.capacity = std::max(1.0, s_.rpm * s_.burst_s / 60.0);
    requests_.level = requests_.capacity;
    tokens_.per_minute = s_.tpm;
    tokens_.capacity = s_.tpm * s_.burst_s / 60.0;
    tokens_.level = tokens_.capacity;
  }

  struct answer {
    nanoseconds after{0};
    attempt_report report;
    std::vector<item_outcome> outcomes;
    bool hangs = false;
  };

  /// A call with `cost` tokens (prompt words + max_tokens) for `items` items, at `now`.
  answer call(time_point now, double cost, uint64_t prompt_words, size_t items) {
    ++calls_;
    double elapsed = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    if (requests_.on()) {
      requests_.refill(elapsed);
    }
    if (tokens_.on()) {
      tokens_.refill(elapsed);
    }
    answer a;
    double wait = 0;
    if (requests_.on() && requests_.level < 1.0) {
      wait = requests_.seconds_until(1.0);
    }
    if (tokens_.on() && tokens_.level < cost) {
      wait = std::max(wait, cost > tokens_.capacity ? 60.0 : tokens_.seconds_until(cost));
    }
    if (wait > 0) {
      ++rate_limited_;
      a.after = 2ms;
      a.report.kind = attempt_outcome_kind::rate_limited;
      a.report.retry_after = nanoseconds{static_cast<int64_t>(std::ceil(wait * 1000.0)) * 1000000};
      a.report.detail = "HTTP 429: rate limit exceeded";
      a.report.headers = headers();
      return a;
    }
    if (requests_.on()) {
      requests_.level -= 1.0;
    }
    if (tokens_.on()) {
      tokens_.level -= cost;
    }
    double u = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    double z = std::normal_distribution<double>{0.0, 1.0}(rng_);
    double sigma = s_.p99_ms > s_.median_ms ? std::log(s_.p99_ms / s_.median_ms) / 2.326 : 0.0;
    a.after = nanoseconds{static_cast<int64_t>(s_.median_ms * std::exp(sigma * z) * 1e6)};
    a.report.headers = headers();
    if (u < s_.hang_rate) {
      a.hangs = true;
      return a;
    }
    if (u < s_.hang_rate + s_.error_rate) {
      a.report.kind = attempt_outcome_kind::server_error;
      a.report.detail = "HTTP 503: injected overload";
      return a;
    }
    auto output = std::make_shared<model_output>();
    output->prompt_tokens = static_cast<uint32_t>(prompt_words);
    for (size_t i = 0; i < items; ++i) {
      item_outcome o = ok_outcome(0.5);
      o.output = output;
      a.outcomes.push_back(o);
    }
    return a;
  }

  uint64_t calls() const {
    return calls_;
  }
  uint64_t rate_limited() const {
    return rate_limited_;
  }
  const provider_settings& settings() const {
    return s_;
  }

private:
  rate_limit_headers headers() const {
    rate_limit_headers h;
    auto ns = [](double seconds) {
      return nanoseconds{static_cast<int64_t>(std::ceil(seconds * 1000.0)) * 1000000};
    };
    if (requests_.on()) {
      h.limit_requests = static_cast<uint64_t>(requests_.per_minute);
      h.remaining_requests = static_cast<uint64_t>(std::floor(std::max(0.0, requests_.level)));
      h.reset_requests = ns(requests_.reset_seconds());
    }
    if (tokens_.on()) {
      h.limit_tokens = static_cast<uint64_t>(tokens_.per_minute);
      h.remaining_tokens = static_cast<uint64_t>(std::floor(std::max(0.0, tokens_.level)));
      h.reset_tokens = ns(tokens_.reset_seconds());
    }
    return h;
  }

  provider_settings s_;
  std::mt19937_64 rng_;
  time_point last_;
  sim_bucket requests_;
  sim_bucket tokens_;
  uint64_t calls_ = 0;
  uint64_t rate_limited_ = 0;
};

/// A remote chat endpoint as `remote_source_spec` builds one: limits from the configuration
/// (then full concurrency), or none (then two calls in slow start).
source_spec chat_endpoint(const provider_settings& p, bool configured) {
  source_spec s;
  s.name = p.name;
  s.capabilities = {"chat"};
  s.max_batch_items = 1;
  s.max_inflight = 64;
  s.remote = true;
  s.adaptive = true;
  s.concurrency.min_limit = 1;
  s.concurrency.growth_tolerance = 1e9;
  s.concurrency.blowup_tolerance = 1e9;
  rate_limit_config rl;
  if (configured) {
    rl.requests_per_minute = static_cast<uint32_t>(p.rpm);
    rl.tokens_per_minute = static_cast<uint64_t>(p.tpm);
    rl.burst = std::chrono::duration_cast<nanoseconds>(std::chrono::duration<double>(p.burst_s));
    s.concurrency.initial_limit = 64;
  } else {
    s.concurrency.initial_limit = 2;
    s.concurrency.slow_start = true;
  }
  s.rate_limit = rl;
  s.breaker = circuit_breaker_config{};
  s.completion_tokens = 512;
  return s;
}

/// A judge call of `words` words asking for `max_tokens`; `step` makes the texts of one step
/// differ from another's (no cache hits).
score_item judge_call(size_t index, size_t words, uint32_t max_tokens, size_t step = 0) {
  score_item item;
  item.reward = "judge/chat";
  item.kind = "chat";
  item.capability = "chat";
  auto call = std::make_shared<model_call>();
  call->prompt = "step" + std::to_string(step) + " item" + std::to_string(index);
  for (size_t w = 2; w < words; ++w) {
    call->prompt += " word" + std::to_string((index + w) % 97);
  }
  call->max_tokens = max_tokens;
  item.call = call;
  return item;
}

struct run_result {
  double makespan_s = 0;
  uint64_t calls = 0;
  uint64_t provider_429 = 0;
  size_t refused = 0;
  size_t failed = 0;
  std::vector<std::string> errors;
};

/// Drives the core and the providers in virtual time until every admitted request is answered.
class simulation {
public:
  simulation(std::vector<provider_settings> providers, bool configured,
             config::routing_config routing = {})
    : metrics_(cfg_), core_(cfg_, clock_, metrics_.metrics, routing, 7) {
    uint64_t seed = 101;
    for (auto& p : providers) {
      auto id = core_.add_source(chat_endpoint(p, configured));
      providers_.emplace(id, sim_provider{p, seed, clock_.now()});
      seed += 101;
    }
  }

  /// Submits `requests` (each a list of items) at once, deadline `deadline` from now, and runs.
  run_result run(std::vector<std::vector<score_item>> requests, nanoseconds deadline) {
    run_result out;
    auto start = clock_.now();
    size_t admitted = 0;
    for (auto& items : requests) {
      if (core_.submit(next_request_++, 1, start + deadline, std::move(items)).admitted()) {
        ++admitted;
      } else {
        ++out.refused;
      }
    }
    size_t finished = 0;
    for (int step = 0; step < 2'000'000 && finished < admitted; ++step) {
      for (auto& b : core_.dispatch()) {
        auto& p = providers_.at(b.source);
        double cost = 0;
        uint64_t words = 0;
        for (const auto& item : b.items) {
          auto w = static_cast<uint64_t>(std::count(item->call->prompt.begin(),
                                                    item->call->prompt.end(), ' ')
                                         + 1);
          words += w;
          cost += static_cast<double>(w + item->call->max_tokens.value_or(512));
        }
        auto a = p.call(clock_.now(), cost, words, b.items.size());
        if (!a.hangs) {
          events_.push({clock_.now() + a.after, b.id, std::move(a.report), std::move(a.outcomes)});
        }
      }
      core_.take_cancelled(); // An abandoned call is simply never answered here.
      for (auto& done : core_.take_finished()) {
        ++finished;
        for (const auto& r : done.results) {
          if (r.status != item_status::ok) {
            ++out.failed;
            out.errors.push_back(r.error);
          }
        }
        out.makespan_s = std::chrono::duration<double>(clock_.now() - start).count();
      }
      if (finished >= admitted) {
        break;
      }
      auto next = core_.next_wakeup();
      if (!events_.empty() && (!next || events_.top().at < *next)) {
        next = events_.top().at;
      }
      if (!next) {
        ADD_FAILURE() << "nothing due, " << admitted - finished << " requests unanswered";
        break;
      }
      if (*next > clock_.now()) {
        clock_.advance(*next - clock_.now());
      }
      core_.on_timer();
      while (!events_.empty() && events_.top().at <= clock_.now()) {
        auto e = events_.top();
        events_.pop();
        core_.complete(e.id, e.report, e.outcomes);
      }
    }
    uint64_t calls = 0;
    uint64_t limited = 0;
    for (const auto& [sid, p] : providers_) {
      calls += p.calls();
      limited += p.rate_limited();
    }
    out.calls = calls - counted_calls_;
    out.provider_429 = limited - counted_429_;
    counted_calls_ = calls;
    counted_429_ = limited;
    return out;
  }

  /// Lets time pass with nothing to do (a trainer generating its next step's rollouts).
  void idle(nanoseconds quiet) {
    clock_.advance(quiet);
    core_.on_timer();
  }

  std::string metrics_text() {
    return metrics_.registry.render();
  }

private:
  struct event {
    time_point at;
    batch_id id;
    attempt_report report;
    std::vector<item_outcome> outcomes;
    bool operator<(const event& o) const {
      return at > o.at; // earliest first in a max-heap
    }
  };

  config::scheduler_config cfg_;
  manual_time_source clock_;
  metrics_fixture metrics_;
  scheduler_core core_;
  std::map<source_id, sim_provider> providers_;
  std::priority_queue<event> events_;
  request_id next_request_ = 1;
  uint64_t counted_calls_ = 0;
  uint64_t counted_429_ = 0;
};

/// The three providers of bench/trainer_traffic.py: 600/1200/1800 RPM enforced per second.
std::vector<provider_settings> three_providers() {
  return {{"a", 600, 0, 1.0, 300, 900, 0.0, 0.0},
          {"b", 1200, 0, 1.0, 800, 2500, 0.02, 0.0},
          {"c", 1800, 0, 1.0, 150, 500, 0.05, 0.0}};
}

/// bench/grpo_step.py's lower bound for n items on these providers (9.72 s for 600).
constexpr double three_provider_bound_600 = 9.72;

std::vector<std::vector<score_item>> single_items(size_t n, size_t words, uint32_t max_tokens,
                                                  size_t step = 0) {
  std::vector<std::vector<score_item>> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back({judge_call(i, words, max_tokens, step)});
  }
  return out;
}

std::vector<std::vector<score_item>> one_batch(size_t n, size_t words, uint32_t max_tokens) {
  std::vector<score_item> items;
  for (size_t i = 0; i < n; ++i) {
    items.push_back(judge_call(i, words, max_tokens));
  }
  return {std::move(items)};
}

std::string first_errors(const run_result& r) {
  std::string out;
  for (size_t i = 0; i < r.errors.size() && i < 3; ++i) {
    out += r.errors[i] + "\n";
  }
  return out;
}

} // namespace

TEST(TrafficSimulation, SingleItemRequestsToConfiguredProvidersAreAllAdmittedAndPaced) {
  simulation sim{three_providers(), true};
  auto r = sim.run(single_items(600, 60, 64), 120s);
  EXPECT_EQ(r.refused, 0u) << "the work fits its deadline: Arbiter itself refuses nothing";
  EXPECT_EQ(r.failed, 0u) << first_errors(r);
  EXPECT_LT(static_cast<double>(r.provider_429), 0.01 * static_cast<double>(r.calls));
  EXPECT_LT(r.makespan_s, 1.15 * three_provider_bound_600) << r.makespan_s;
}

TEST(TrafficSimulation, LimitsNobodyConfiguredAreLearnedFromHeaders) {
  for (bool batch : {false, true}) {
    simulation sim{three_providers(), false};
    auto r = sim.run(batch ? one_batch(600, 60, 64) : single_items(600, 60, 64), 120s);
    EXPECT_EQ(r.refused, 0u) << batch;
    EXPECT_EQ(r.failed, 0u) << batch << "\n" << first_errors(r);
    // The burst each provider really enforces (10, 20, 30 a second) is learned from the first
    // answers' headers, before any 429.
    EXPECT_LT(static_cast<double>(r.provider_429), 0.01 * static_cast<double>(r.calls))
      << batch << ": " << r.provider_429 << " of " << r.calls;
    EXPECT_LT(r.makespan_s, 1.15 * three_provider_bound_600) << batch << ": " << r.makespan_s;
  }
}

TEST(TrafficSimulation, ThePerSecondBurstBehindAPerMinuteLimitIsLearned) {
  // Between two steps the trainer generates for 30 s: a bucket holding the per-minute limit
  // the headers state would refill to 600 calls and send them at once. The bucket the
  // provider really keeps holds 10 (a second's worth): that is what is learned and kept.
  simulation sim{three_providers(), false};
  auto first = sim.run(single_items(600, 60, 64), 120s);
  EXPECT_EQ(first.failed, 0u) << first_errors(first);
  sim.idle(30s);
  auto second = sim.run(single_items(600, 60, 64, 1), 120s);
  EXPECT_EQ(second.failed, 0u) << first_errors(second);
  EXPECT_LT(static_cast<double>(second.provider_429), 0.01 * static_cast<double>(second.calls))
    << second.provider_429 << " of " << second.calls;
  EXPECT_LT(second.makespan_s, 1.15 * three_provider_bound_600) << second.makespan_s;
}

TEST(TrafficSimulation, ATokenLimitedProviderPacesLongPromptsWithoutFailures) {
  // 30,000 TPM enforced per second (a 500-token burst), 175-word prompts + 64 max_tokens:
  // about two calls a second.
  for (bool configured : {true, false}) {
    simulation sim{{{"t", 0, 30000, 1.0, 300, 900, 0.0, 0.0}}, configured};
    auto r = sim.run(single_items(60, 175, 64), 120s);
    EXPECT_EQ(r.failed, 0u) << configured << "\n" << first_errors(r);
    EXPECT_EQ(r.refused, 0u) << configured;
    EXPECT_LT(static_cast<double>(r.provider_429), 0.03 * static_cast<double>(r.calls))
      << configured << ": " << r.provider_429 << " of " << r.calls;
    // 60 × 239 tokens at 500 a second, less the first burst, plus a latency: 28.5 s.
    EXPECT_LT(r.makespan_s, 1.15 * 28.5) << configured << ": " << r.makespan_s;
  }
}

TEST(TrafficSimulation, CallsThatNeverAnswerCostOneStragglerTimeoutNotTheSources) {
  // A fifth of the calls never answer; the source's own timeout (60 s) is never reached.
  simulation sim{{{"a", 6000, 0, 1.0, 100, 200, 0.0, 0.2}, {"b", 6000, 0, 1.0, 100, 200, 0.0, 0.2}},
                 true};
  auto r = sim.run(single_items(200, 20, 16), 30s);
  EXPECT_EQ(r.failed, 0u) << first_errors(r);
  EXPECT_LT(r.makespan_s, 10.0) << "a few straggler timeouts of about 2 s, not 60 s";
  EXPECT_NE(sim.metrics_text().find("outcome=\"timeout\""), std::string::npos);
}
