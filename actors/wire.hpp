#pragma once

// How the scheduler's work messages cross process boundaries (issue 7, the cluster): CAF 0.17
// `inspect` overloads for `work_batch`, `work_result` and what they hold, so that CAF's
// middleman can carry them between a coordinator and its worker nodes.
//
// In one process these types still travel as they are (shared pointers, no copy); only a
// message bound for another node is serialized. Three things are not plain fields:
//
// - shared pointers (`shared_item`, the model call and output): a presence flag and the value,
//   rebuilt as a fresh shared object on the other side;
// - std::optional: a presence flag and the value;
// - `work_batch::deadline`, a point on this process's steady clock, which means nothing on
//   another machine: it travels as the time left (nanoseconds, negative when past) and is
//   turned back into a point on the receiver's clock. The transit time is lost from the
//   budget, which errs on the early side.
//
// Enumerations travel as their underlying integers and are checked on arrival.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include "actors/messages.hpp"

namespace arbiter::wire {

/// A field that may be absent, as a presence flag and a value: an optional value, or a
/// shared, read-only object.
template <class T, class Holder>
struct present_ref {
  Holder& value;
};

template <class T>
using optional_ref = present_ref<T, std::optional<T>>;

template <class T>
using shared_ref = present_ref<T, std::shared_ptr<const T>>;

template <class Inspector, class T, class Holder>
typename Inspector::result_type inspect(Inspector& f, present_ref<T, Holder>& x) {
  if constexpr (Inspector::reads_state) {
    bool has = static_cast<bool>(x.value);
    T value = has ? *x.value : T{};
    return f(has, value);
  } else {
    bool has = false;
    T value{};
    auto err = f(has, value);
    if (err) {
      return err;
    }
    if constexpr (std::is_same_v<Holder, std::optional<T>>) {
      x.value = has ? Holder{std::move(value)} : std::nullopt;
    } else {
      x.value = has ? std::make_shared<const T>(std::move(value)) : nullptr;
    }
    return err;
  }
}

/// An enumeration, as its underlying integer; on arrival, values above `Max` are refused.
template <class E, E Max>
struct enum_ref {
  E& value;
};

template <class Inspector, class E, E Max>
typename Inspector::result_type inspect(Inspector& f, enum_ref<E, Max>& x) {
  using raw_type = std::conditional_t<std::is_same_v<std::underlying_type_t<E>, uint8_t>,
                                      uint16_t, std::underlying_type_t<E>>;
  if constexpr (Inspector::reads_state) {
    auto raw = static_cast<raw_type>(x.value);
    return f(raw);
  } else {
    raw_type raw = 0;
    auto err = f(raw);
    if (!err) {
      if (raw < 0 || raw > static_cast<raw_type>(Max)) {
        return caf::make_error(caf::sec::invalid_argument);
      }
      x.value = static_cast<E>(raw);
    }
    return err;
  }
}

/// A duration, as signed nanoseconds.
struct duration_ref {
  std::chrono::nanoseconds& value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, duration_ref& x) {
  if constexpr (Inspector::reads_state) {
    int64_t ns = x.value.count();
    return f(ns);
  } else {
    int64_t ns = 0;
    auto err = f(ns);
    if (!err) {
      x.value = std::chrono::nanoseconds{ns};
    }
    return err;
  }
}

/// A deadline on this process's steady clock, as the time left until it.
struct deadline_ref {
  time_point& value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, deadline_ref& x) {
  if constexpr (Inspector::reads_state) {
    int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     x.value - steady_clock::now())
                     .count();
    return f(left);
  } else {
    int64_t left = 0;
    auto err = f(left);
    if (!err) {
      x.value = steady_clock::now() + std::chrono::nanoseconds{left};
    }
    return err;
  }
}

/// The items of a batch, each sent by value and rebuilt as its own shared item.
struct items_ref {
  std::vector<shared_item>& value;
};

} // namespace arbiter::wire

namespace arbiter {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_call& x) {
  wire::optional_ref<double> temperature{x.temperature};
  wire::optional_ref<double> top_p{x.top_p};
  wire::optional_ref<uint32_t> max_tokens{x.max_tokens};
  wire::optional_ref<bool> enable_thinking{x.enable_thinking};
  wire::optional_ref<uint64_t> seed{x.seed};
  return f(caf::meta::type_name("model_call"), x.prompt, x.messages, x.hypothesis, x.model,
           temperature, top_p, max_tokens, x.n, enable_thinking, x.stop, seed, x.extra_body);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generated_text& x) {
  return f(caf::meta::type_name("generated_text"), x.text, x.mean_logprob, x.tokens,
           x.finish_reason, x.reasoning, x.refusal, x.no_content);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_output& x) {
  return f(caf::meta::type_name("model_output"), x.texts, x.entailment, x.neutral,
           x.contradiction, x.embedding, x.prompt_tokens, x.completion_tokens, x.model);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, score_item& x) {
  wire::shared_ref<model_call> call{x.call};
  return f(caf::meta::type_name("score_item"), x.reward, x.kind, x.capability, x.solution_str,
           x.ground_truth, x.data_source, x.group, x.group_deadline_ms, x.step, x.extra_info, x.options, x.fallback,
           x.route_suffix, call);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, item_outcome& x) {
  wire::enum_ref<errc, errc::client_closed> code{x.code};
  wire::shared_ref<model_output> output{x.output};
  return f(caf::meta::type_name("item_outcome"), code, x.score, x.error, x.retry_after_ms,
           x.run_ms, x.queue_ms, output, x.sources, x.cached, x.coalesced, x.attempts, x.detail,
           x.extra, x.evidence);
}

} // namespace arbiter

namespace arbiter::wire {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, items_ref& x) {
  if constexpr (Inspector::reads_state) {
    std::vector<score_item> items;
    items.reserve(x.value.size());
    for (const auto& item : x.value) {
      items.push_back(*item);
    }
    return f(items);
  } else {
    std::vector<score_item> items;
    auto err = f(items);
    if (!err) {
      x.value.clear();
      x.value.reserve(items.size());
      for (auto& item : items) {
        x.value.push_back(std::make_shared<const score_item>(std::move(item)));
      }
    }
    return err;
  }
}

} // namespace arbiter::wire

namespace arbiter::scheduler {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rate_limit_headers& x) {
  // Durations as nanoseconds, through optional<int64_t>.
  std::optional<int64_t> reset_requests;
  std::optional<int64_t> reset_tokens;
  if constexpr (Inspector::reads_state) {
    if (x.reset_requests) {
      reset_requests = x.reset_requests->count();
    }
    if (x.reset_tokens) {
      reset_tokens = x.reset_tokens->count();
    }
  }
  wire::optional_ref<uint64_t> limit_requests{x.limit_requests};
  wire::optional_ref<uint64_t> limit_tokens{x.limit_tokens};
  wire::optional_ref<uint64_t> remaining_requests{x.remaining_requests};
  wire::optional_ref<uint64_t> remaining_tokens{x.remaining_tokens};
  wire::optional_ref<int64_t> reset_requests_ref{reset_requests};
  wire::optional_ref<int64_t> reset_tokens_ref{reset_tokens};
  if constexpr (Inspector::reads_state) {
    return f(caf::meta::type_name("rate_limit_headers"), limit_requests, limit_tokens,
             remaining_requests, remaining_tokens, reset_requests_ref, reset_tokens_ref);
  } else {
    auto err = f(caf::meta::type_name("rate_limit_headers"), limit_requests, limit_tokens,
                 remaining_requests, remaining_tokens, reset_requests_ref, reset_tokens_ref);
    if (!err) {
      x.reset_requests = reset_requests ? std::optional<nanoseconds>{nanoseconds{*reset_requests}}
                                        : std::nullopt;
      x.reset_tokens = reset_tokens ? std::optional<nanoseconds>{nanoseconds{*reset_tokens}}
                                    : std::nullopt;
    }
    return err;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_report& x) {
  wire::enum_ref<attempt_outcome_kind, attempt_outcome_kind::unsupported> kind{x.kind};
  std::optional<int64_t> retry_after;
  if constexpr (Inspector::reads_state) {
    if (x.retry_after) {
      retry_after = x.retry_after->count();
    }
  }
  wire::optional_ref<int64_t> retry_after_ref{retry_after};
  wire::duration_ref latency{x.latency};
  if constexpr (Inspector::reads_state) {
    return f(caf::meta::type_name("attempt_report"), kind, retry_after_ref, x.headers, latency,
             x.detail, x.cancelled, x.unsent, x.abandoned, x.resent, x.extra_requests);
  } else {
    auto err = f(caf::meta::type_name("attempt_report"), kind, retry_after_ref, x.headers,
                 latency, x.detail, x.cancelled, x.unsent, x.abandoned, x.resent,
                 x.extra_requests);
    if (!err) {
      x.retry_after = retry_after ? std::optional<nanoseconds>{nanoseconds{*retry_after}}
                                  : std::nullopt;
    }
    return err;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, adaptive_concurrency_config& x) {
  wire::duration_ref target_latency{x.target_latency};
  return f(caf::meta::type_name("adaptive_concurrency_config"), x.initial_limit, x.min_limit,
           x.max_limit, x.backoff_ratio, target_latency, x.growth_tolerance,
           x.blowup_tolerance, x.growth_window, x.slow_start, x.regrowth_rounds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rate_limit_config& x) {
  wire::duration_ref burst{x.burst};
  wire::duration_ref max_retry_after{x.max_retry_after};
  wire::duration_ref backoff_base{x.backoff_base};
  wire::duration_ref backoff_cap{x.backoff_cap};
  return f(caf::meta::type_name("rate_limit_config"), x.requests_per_minute,
           x.tokens_per_minute, burst, max_retry_after, backoff_base, backoff_cap);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, circuit_breaker_config& x) {
  wire::duration_ref window{x.window};
  wire::duration_ref base_ejection{x.base_ejection};
  wire::duration_ref max_ejection{x.max_ejection};
  return f(caf::meta::type_name("circuit_breaker_config"), x.consecutive_failures,
           x.failure_ratio, x.minimum_volume, window, x.window_buckets, base_ejection,
           x.ejection_multiplier, max_ejection, x.half_open_probes);
}

/// A source a worker node registers (its spec is built on the node, from the node's config).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, source_spec& x) {
  wire::duration_ref batch_wait{x.batch_wait};
  wire::optional_ref<rate_limit_config> rate_limit{x.rate_limit};
  wire::optional_ref<circuit_breaker_config> breaker{x.breaker};
  return f(caf::meta::type_name("source_spec"), x.name, x.capabilities, x.max_batch_items,
           x.single_item, x.max_batch_inputs, batch_wait, x.wait_when_idle, x.max_inflight, x.adaptive,
           x.concurrency, rate_limit, breaker, x.completion_tokens, x.remote,
           x.local_model, x.max_input_tokens, x.input_cost_per_million,
           x.output_cost_per_million, x.feeds);
}

} // namespace arbiter::scheduler

namespace arbiter::actors {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_batch& x) {
  wire::items_ref items{x.items};
  wire::deadline_ref deadline{x.deadline};
  uint64_t priority = x.priority;
  if constexpr (Inspector::reads_state) {
    return f(caf::meta::type_name("work_batch"), x.id, items, priority, deadline, x.record);
  } else {
    auto err =
      f(caf::meta::type_name("work_batch"), x.id, items, priority, deadline, x.record);
    if (!err) {
      x.priority = static_cast<size_t>(priority);
    }
    return err;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_result& x) {
  return f(caf::meta::type_name("work_result"), x.id, x.report, x.outcomes);
}

} // namespace arbiter::actors
