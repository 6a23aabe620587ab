#include "actors/remote_source_actor.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "actors/source_capabilities.hpp"
#include "backends/http_client.hpp"
#include "backends/remote/redaction.hpp"
#include "backends/remote/remote_codec.hpp"
#include "common/log.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(arbiter::backends::http_result)

namespace arbiter::actors {

namespace remote = backends::remote;
using scheduler::attempt_outcome_kind;

namespace {

struct pending_call {
  caf::response_promise promise;
  remote::prepared_call call;
  std::vector<shared_item> items;
  time_point started;
  uint64_t http_id = 0;
  /// The request bodies of the call, sent one after another (several only for an embedding
  /// call with more texts than the source takes at once: split_embedding_call).
  std::vector<std::string> parts;
  /// The replies of the parts answered so far.
  std::vector<std::string> replies;
  /// Whether an earlier part was sent or resent.
  bool sent = false;
  bool resent = false;
};

struct remote_source_state {
  std::string source_name;
  remote::api_kind api = remote::api_kind::openai;
  remote::endpoint_options options;
  std::shared_ptr<backends::http_client_pool> pool;
  /// The key sent to the provider: blanked wherever the provider's answer quotes it.
  std::string api_key;
  std::unordered_map<scheduler::batch_id, pending_call> pending;
  steady_time_source clock;
  /// Most input texts of one embedding request (`max_batch_items`).
  uint32_t max_inputs = 0;
};

using remote_source_actor = caf::stateful_actor<remote_source_state>;

/// How a transport failure counts.
attempt_outcome_kind outcome_of(backends::http_error e) {
  switch (e) {
    case backends::http_error::timeout:
      return attempt_outcome_kind::timeout;
    case backends::http_error::protocol_error:
      return attempt_outcome_kind::bad_response;
    case backends::http_error::bad_url:
      return attempt_outcome_kind::not_found;
    default:
      return attempt_outcome_kind::connect_failure;
  }
}

/// Turns one HTTP exchange into the scheduler's report and the items' outcomes.
work_result interpret_exchange(remote_source_state& st, scheduler::batch_id id, pending_call& p,
                      backends::http_result& r) {
  work_result out;
  out.id = id;
  auto& report = out.report;
  report.latency = st.clock.now() - p.started;
  if (report.latency.count() == 0) {
    report.latency = nanoseconds{1};
  }
  report.resent = r.resent;
  report.extra_requests = static_cast<uint32_t>(p.replies.size());
  if (r.error == backends::http_error::cancelled) {
    report.cancelled = true;
    report.unsent = !r.sent;
    report.kind = attempt_outcome_kind::connect_failure;
    report.detail = "cancelled";
    return out;
  }
  if (r.error != backends::http_error::none) {
    report.kind = outcome_of(r.error);
    report.unsent = r.error == backends::http_error::connect_failed && !r.sent;
    report.detail = std::string{to_string(r.error)} + ": " + r.error_message;
    if (r.error == backends::http_error::connection_reset && r.sent) {
      // The provider read the request, then dropped the connection or cut its answer off (one
      // that crashes on this input does so every time): an unusable answer, which spends an
      // attempt, not a connection refused. Counted as refused, an item was sent 220 times
      // until its deadline (helper-59).
      report.kind = attempt_outcome_kind::bad_response;
      report.detail += " (after the request was sent)";
    }
    return out;
  }
  scheduler::header_lookup lookup = [&r](std::string_view name) -> std::optional<std::string_view> {
    if (const auto* v = r.header(name)) {
      return std::string_view{*v};
    }
    return std::nullopt;
  };
  report.headers = scheduler::parse_rate_limit_headers(lookup);
  report.kind = scheduler::classify_http_status(r.status);
  if (r.status == 429 && r.body.find("insufficient_quota") != std::string::npos) {
    // OpenAI's billing ran out: no wait helps. The source is ejected (auth_ejection_ms) with
    // the provider's message, as for a revoked key; the items go elsewhere or fail saying so.
    report.kind = attempt_outcome_kind::unauthorized;
  } else if (r.status == 429 && r.body.find("Request too large") != std::string::npos) {
    // One request past the whole per-minute token limit (OpenAI's "Request too large ... on
    // tokens per min"): it never fits, so it fails its items now instead of holding the rate.
    report.kind = attempt_outcome_kind::bad_request;
  }
  if (report.kind != attempt_outcome_kind::ok) {
    if (report.kind == attempt_outcome_kind::rate_limited
        || report.kind == attempt_outcome_kind::server_error) {
      report.retry_after = scheduler::retry_after_from_headers(lookup);
    }
    report.detail =
      "HTTP " + std::to_string(r.status) + ": " + remote::error_message(r.body, st.api_key);
    return out;
  }
  try {
    out.outcomes = remote::parse_reply(st.api, st.options, p.call, p.items, r.body);
  } catch (const remote::unfit_reply& e) {
    report.kind = attempt_outcome_kind::unsupported;
    report.detail = e.what();
    std::tie(report.prompt_tokens, report.completion_tokens) = remote::reply_usage(r.body);
    out.outcomes.clear();
    return out;
  } catch (const remote::bad_reply& e) {
    report.kind = attempt_outcome_kind::bad_response;
    report.detail = e.what();
    std::tie(report.prompt_tokens, report.completion_tokens) = remote::reply_usage(r.body);
    out.outcomes.clear();
    return out;
  }
  auto ms = std::chrono::duration<double, std::milli>(report.latency).count();
  for (auto& o : out.outcomes) {
    o.run_ms = ms;
  }
  return out;
}

/// `interpret_exchange`, with every text that came from the provider (the report's detail,
/// the items' errors) cleared of credentials, the source's own key first: they reach item
/// errors, logs and /info.
work_result interpret(remote_source_state& st, scheduler::batch_id id, pending_call& p,
                      backends::http_result& r) {
  work_result out = interpret_exchange(st, id, p, r);
  if (!out.report.detail.empty()) {
    out.report.detail = remote::redact_secrets(out.report.detail, st.api_key);
  }
  for (auto& o : out.outcomes) {
    if (!o.error.empty()) {
      o.error = remote::redact_secrets(o.error, st.api_key);
    }
  }
  return out;
}

/// Sends `p`'s next part (its first when none was answered yet); returns the pool's request id.
uint64_t send_part(remote_source_actor* self, scheduler::batch_id id, const pending_call& p) {
  auto hdl = caf::actor_cast<caf::actor>(self);
  return self->state.pool->async_post(p.call.path, p.parts[p.replies.size()], {},
                                      [hdl, id](backends::http_result r) {
                                        caf::anon_send(hdl, http_done_atom::value, id,
                                                       std::move(r));
                                      });
}

caf::behavior remote_source(remote_source_actor* self, boost::asio::io_context* io,
                            config::source_config cfg) {
  auto& st = self->state;
  st.source_name = cfg.name;
  if (auto api = remote::parse_api_kind(cfg.kind)) {
    st.api = *api;
  }
  st.options.model = cfg.model;
  st.options.max_tokens = cfg.max_tokens;
  st.options.temperature = cfg.temperature;
  st.options.top_p = cfg.top_p;
  st.options.use_completions = cfg.use_completions;
  st.options.enable_thinking = cfg.enable_thinking;
  st.options.reasoning_model = cfg.reasoning_model;
  if (st.api == remote::api_kind::tei) {
    // TEI refuses a call over its --max-client-batch-size inputs, which `max_batch_items`
    // follows. An OpenAI-compatible endpoint takes an item's texts in one call (OpenAI's
    // limit is 2,048), whatever its `max_batch_items`.
    st.max_inputs = cfg.max_batch_items > 0
                      ? cfg.max_batch_items
                      : default_max_batch_items(cfg.capabilities.empty()
                                                  ? keys_of(default_capabilities(cfg.kind))
                                                  : cfg.capabilities);
  }
  backends::http_client_options http;
  http.max_connections = std::max<uint32_t>(cfg.max_concurrency, 1);
  http.connect_timeout = cfg.connect_timeout;
  http.attempt_timeout = cfg.timeout;
  http.insecure_skip_verify = cfg.insecure_skip_verify;
  http.api_key = resolve_api_key(cfg);
  st.api_key = http.api_key;
  st.pool = std::make_shared<backends::http_client_pool>(base_url(cfg), *io, http);
  self->attach_functor([pool = st.pool] { pool->shutdown(); });
  return {
    [self](work_atom, work_batch& batch) -> caf::result<work_result> {
      auto& s = self->state;
      pending_call p;
      p.items = std::move(batch.items);
      try {
        p.call = remote::prepare_call(s.api, s.options, p.items);
        p.call.keep_vectors = batch.record;
      } catch (const std::exception& e) {
        // The reward cannot be computed by this API at all: the items fail, the source is fine.
        work_result result;
        result.id = batch.id;
        for (size_t i = 0; i < p.items.size(); ++i) {
          item_outcome o;
          o.code = errc::reward_failed;
          o.error = "source '" + s.source_name + "': " + e.what();
          result.outcomes.push_back(std::move(o));
        }
        return result;
      }
      p.parts = remote::split_embedding_call(p.call, s.max_inputs);
      p.promise = self->make_response_promise();
      p.started = s.clock.now();
      p.http_id = send_part(self, batch.id, p);
      s.pending.emplace(batch.id, std::move(p));
      return caf::delegated<work_result>{};
    },
    [self](http_done_atom, scheduler::batch_id id, backends::http_result& r) {
      auto& s = self->state;
      auto found = s.pending.find(id);
      if (found == s.pending.end()) {
        return;
      }
      auto& p = found->second;
      const bool answered = r.error == backends::http_error::none && r.status / 100 == 2;
      if (answered && p.replies.size() + 1 < p.parts.size()) {
        // A part of a split embedding call: the next goes out once this one is answered, so
        // the call holds one connection, as any call does.
        p.replies.push_back(std::move(r.body));
        p.sent = true;
        p.resent = p.resent || r.resent;
        p.http_id = send_part(self, id, p);
        return;
      }
      auto node = s.pending.extract(found);
      auto call = std::move(node.mapped());
      r.sent = r.sent || call.sent;
      r.resent = r.resent || call.resent;
      if (answered && !call.replies.empty()) {
        call.replies.push_back(std::move(r.body));
        r.body = remote::join_embedding_replies(s.api, call.replies);
        call.replies.pop_back(); // the report counts the requests before the last
      }
      call.promise.deliver(interpret(s, id, call, r));
    },
    [self](cancel_atom, scheduler::batch_id id) {
      auto& s = self->state;
      if (auto found = s.pending.find(id); found != s.pending.end()) {
        // The pool completes it with `cancelled`; the promise is answered then.
        s.pool->cancel(found->second.http_id);
      }
    },
  };
}

} // namespace

uint32_t default_max_batch_items(const std::vector<std::string>& capabilities) {
  // TEI takes 32 inputs a call by default (--max-client-batch-size); a chat or completions
  // call carries one prompt whatever this says (`source_spec::single_item`); the IG
  // service's items are heavy (2 × N generations each).
  if (serves(capabilities, capability::nli) || serves(capabilities, capability::embed)) {
    return 32;
  }
  if (serves(capabilities, capability::chat) || serves(capabilities, capability::generate)) {
    return 1;
  }
  if (serves(capabilities, capability::ig)) {
    return 8;
  }
  return 32;
}

std::string base_url(const config::source_config& cfg) {
  std::string url = cfg.url;
  if (cfg.kind != "openai") {
    return url;
  }
  std::string_view path = url;
  if (auto scheme = path.find("://"); scheme != std::string_view::npos) {
    path.remove_prefix(scheme + 3);
  }
  // Only a path's `/v1` (not a host named "v1"), with or without a final slash.
  auto slash = path.find('/');
  for (std::string_view suffix : {"/v1/", "/v1"}) {
    if (slash != std::string_view::npos && path.size() - slash >= suffix.size()
        && path.substr(path.size() - suffix.size()) == suffix) {
      url.resize(url.size() - suffix.size());
      return url;
    }
  }
  return url;
}

std::string resolve_api_key(const config::source_config& cfg) {
  std::string key = cfg.api_key;
  if (key.empty() && !cfg.api_key_env.empty()) {
    if (const char* v = std::getenv(cfg.api_key_env.c_str())) {
      key = v;
    }
  }
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!key.empty() && blank(key.back())) {
    key.pop_back();
  }
  size_t first = 0;
  while (first < key.size() && blank(key[first])) {
    ++first;
  }
  return key.substr(first);
}

scheduler::source_spec remote_source_spec(const config::source_config& cfg,
                                          const config::routing_config& routing) {
  scheduler::source_spec spec;
  spec.name = cfg.name;
  spec.capabilities = cfg.capabilities.empty() ? keys_of(default_capabilities(cfg.kind))
                                               : cfg.capabilities;
  spec.remote = true;
  spec.input_cost_per_million = cfg.input_cost_per_million;
  spec.output_cost_per_million = cfg.output_cost_per_million;
  bool chat = serves(spec.capabilities, capability::chat);
  spec.max_batch_items =
    cfg.max_batch_items > 0 ? cfg.max_batch_items : default_max_batch_items(spec.capabilities);
  // One prompt a call (`prepare_call` refuses more), beside embed calls of many items.
  for (auto one : {capability::chat, capability::generate}) {
    if (serves(spec.capabilities, one)) {
      spec.single_item.push_back(routing_key(one));
    }
  }
  if (serves(spec.capabilities, capability::embed)) {
    // TEI's --max-client-batch-size (32) counts input texts, and an embedding item sends its
    // candidate and each reference: the cap is on texts.
    spec.max_batch_inputs = spec.max_batch_items;
  }
  spec.batch_wait = cfg.batch_wait;
  spec.max_inflight = std::max<uint32_t>(cfg.max_concurrency, 1);
  spec.adaptive = true;
  bool limits_known = cfg.requests_per_minute > 0 || cfg.tokens_per_minute > 0;
  if (cfg.initial_concurrency > 0) {
    spec.concurrency.initial_limit = cfg.initial_concurrency;
  } else if (limits_known) {
    // Pacing keeps the endpoint below its limits from the first call.
    spec.concurrency.initial_limit = spec.max_inflight;
  } else {
    // Nobody said what the endpoint allows: start small and double per round of good answers
    // until it pushes back, while its headers teach the pacing buckets its limits.
    spec.concurrency.initial_limit = std::min(unconfigured_initial_concurrency, spec.max_inflight);
    spec.concurrency.slow_start = true;
  }
  spec.concurrency.min_limit = 1;
  // Latency alone does not cut the limit: pacing keeps a provider under its rate, and latency
  // spreads of 3× are normal for LLM calls. 429s and timeouts do.
  spec.concurrency.growth_tolerance = 1e9;
  spec.concurrency.blowup_tolerance = 1e9;
  if (cfg.requests_per_minute > 0 || cfg.tokens_per_minute > 0) {
    scheduler::rate_limit_config rl;
    rl.requests_per_minute = cfg.requests_per_minute;
    rl.tokens_per_minute = cfg.tokens_per_minute;
    rl.burst = cfg.burst;
    rl.max_retry_after = routing.max_retry_after;
    spec.rate_limit = rl;
  } else {
    // Unpaced endpoints still honour Retry-After as one shared backoff.
    scheduler::rate_limit_config rl;
    rl.max_retry_after = routing.max_retry_after;
    spec.rate_limit = rl;
  }
  scheduler::circuit_breaker_config breaker;
  breaker.consecutive_failures = routing.breaker_consecutive_failures;
  breaker.failure_ratio = routing.breaker_failure_ratio;
  breaker.minimum_volume = routing.breaker_minimum_volume;
  breaker.base_ejection = routing.breaker_ejection;
  breaker.max_ejection = routing.breaker_max_ejection;
  spec.breaker = breaker;
  // A source that generates: token pacing counts its calls' output, and admission weighs
  // them by it (`source_spec::weighs_work`).
  spec.completion_tokens =
    chat || serves(spec.capabilities, capability::generate) ? cfg.max_tokens : 0;
  return spec;
}

caf::actor spawn_remote_source(caf::actor_system& sys, boost::asio::io_context& io,
                               const config::source_config& cfg) {
  return sys.spawn(remote_source, &io, cfg);
}

} // namespace arbiter::actors
