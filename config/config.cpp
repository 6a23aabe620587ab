#include "config/config.hpp"

#include <algorithm>
#include <fstream>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <limits>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

namespace arbiter::config {
namespace {

using problem_list = std::vector<config_problem>;

/// Longest duration any `_ms` field accepts (about 24.8 days). Keeps every duration well inside
/// what the rest of the service converts it to (nanosecond clocks, 32-bit timer arguments).
constexpr int64_t max_duration_ms = std::numeric_limits<int32_t>::max();
constexpr int64_t max_u32 = std::numeric_limits<uint32_t>::max();
constexpr int64_t max_i64 = std::numeric_limits<int64_t>::max();

/// The TOML type a scalar field takes.
enum class field_type : uint8_t {
  string,
  integer,
  /// A float (an integer is accepted too); bounds are `min_num`/`max_num`.
  number,
  /// true or false (environment: true, false, 1, 0).
  boolean,
  /// A string of comma-separated entries; TOML also takes an array of strings (joined with
  /// commas, so no entry may hold one).
  string_list,
};

/// One scalar configuration field: where it lives in TOML, what it accepts, how to read and
/// write it in `arbiter_config`. `load_*`, `apply_environment`, `validate` and
/// `environment_variables` all walk the same table, so they cannot disagree.
struct field_descriptor {
  /// Dotted TOML path, e.g. "server.port". The environment variable is derived from it.
  std::string_view path;
  field_type type;
  /// Integer fields: inclusive bounds. String fields: `min` is the shortest length accepted.
  int64_t min;
  int64_t max;
  int64_t (*get_int)(const arbiter_config&);
  void (*set_int)(arbiter_config&, int64_t);
  const std::string& (*get_str)(const arbiter_config&);
  void (*set_str)(arbiter_config&, std::string);
  /// One-line description (docs/configuration.md says the same at more length).
  std::string_view doc;
  /// Number and boolean fields (a boolean is 0 or 1).
  double (*get_num)(const arbiter_config&) = nullptr;
  void (*set_num)(arbiter_config&, double) = nullptr;
  double min_num = 0.0;
  double max_num = 0.0;
};

/// Shorthand for an integer field descriptor.
constexpr field_descriptor int_field(std::string_view path, int64_t min, int64_t max,
                                     int64_t (*get)(const arbiter_config&),
                                     void (*set)(arbiter_config&, int64_t),
                                     std::string_view doc) {
  return field_descriptor{path, field_type::integer, min, max, get, set, nullptr, nullptr, doc};
}

/// Shorthand for a string field descriptor.
constexpr field_descriptor str_field(std::string_view path, int64_t min_length,
                                     const std::string& (*get)(const arbiter_config&),
                                     void (*set)(arbiter_config&, std::string),
                                     std::string_view doc) {
  return field_descriptor{path, field_type::string, min_length, 0, nullptr, nullptr, get, set,
                          doc};
}

/// Shorthand for a comma-separated list field descriptor.
constexpr field_descriptor list_field(std::string_view path,
                                      const std::string& (*get)(const arbiter_config&),
                                      void (*set)(arbiter_config&, std::string),
                                      std::string_view doc) {
  return field_descriptor{path, field_type::string_list, 0, 0, nullptr, nullptr, get, set, doc};
}

/// Shorthand for a float field descriptor.
field_descriptor num_field(std::string_view path, double min, double max,
                           double (*get)(const arbiter_config&),
                           void (*set)(arbiter_config&, double), std::string_view doc) {
  field_descriptor f{path, field_type::number, 0, 0, nullptr, nullptr, nullptr, nullptr, doc};
  f.get_num = get;
  f.set_num = set;
  f.min_num = min;
  f.max_num = max;
  return f;
}

/// Shorthand for a boolean field descriptor.
field_descriptor bool_field(std::string_view path, double (*get)(const arbiter_config&),
                            void (*set)(arbiter_config&, double), std::string_view doc) {
  field_descriptor f{path, field_type::boolean, 0, 1, nullptr, nullptr, nullptr, nullptr, doc};
  f.get_num = get;
  f.set_num = set;
  f.max_num = 1.0;
  return f;
}

/// Every scalar field, in documentation order.
const std::vector<field_descriptor>& scalar_fields() {
  using ms = std::chrono::milliseconds;
  static const std::vector<field_descriptor> fields = {
      // [server]
      str_field(
          "server.host", 1,
          [](const arbiter_config& c) -> const std::string& { return c.server.host; },
          [](arbiter_config& c, std::string v) { c.server.host = std::move(v); },
          "Address to bind"),
      int_field(
          "server.port", 0, std::numeric_limits<uint16_t>::max(),
          [](const arbiter_config& c) -> int64_t { return c.server.port; },
          [](arbiter_config& c, int64_t v) { c.server.port = static_cast<uint16_t>(v); },
          "Port to bind; 0 picks a free one"),
      int_field(
          "server.io_threads", 0, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.server.io_threads; },
          [](arbiter_config& c, int64_t v) { c.server.io_threads = static_cast<uint32_t>(v); },
          "HTTP event-loop threads; 0 means one per core"),
      int_field(
          "server.max_body_bytes", 1024, max_i64,
          [](const arbiter_config& c) -> int64_t {
            return static_cast<int64_t>(
                std::min<uint64_t>(c.server.max_body_bytes, static_cast<uint64_t>(max_i64)));
          },
          [](arbiter_config& c, int64_t v) {
            c.server.max_body_bytes = static_cast<uint64_t>(v);
          },
          "Largest request body accepted, in bytes"),
      int_field(
          "server.max_batch_items", 1, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.server.max_batch_items; },
          [](arbiter_config& c, int64_t v) {
            c.server.max_batch_items = static_cast<uint32_t>(v);
          },
          "Most items in one /v1/score request"),
      int_field(
          "server.read_timeout_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.server.read_timeout.count(); },
          [](arbiter_config& c, int64_t v) { c.server.read_timeout = ms{v}; },
          "Time allowed to read one request, in milliseconds"),
      int_field(
          "server.idle_timeout_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.server.idle_timeout.count(); },
          [](arbiter_config& c, int64_t v) { c.server.idle_timeout = ms{v}; },
          "How long an idle keep-alive connection stays open, in milliseconds"),
      int_field(
          "server.max_connections", 1, 1000000,
          [](const arbiter_config& c) -> int64_t { return c.server.max_connections; },
          [](arbiter_config& c, int64_t v) {
            c.server.max_connections = static_cast<uint32_t>(v);
          },
          "Most client connections open at once"),
      list_field(
          "server.api_keys",
          [](const arbiter_config& c) -> const std::string& { return c.server.api_keys; },
          [](arbiter_config& c, std::string v) { c.server.api_keys = std::move(v); },
          "Keys clients send as Authorization: Bearer KEY, comma-separated"),
      str_field(
          "server.api_key_file", 0,
          [](const arbiter_config& c) -> const std::string& { return c.server.api_key_file; },
          [](arbiter_config& c, std::string v) { c.server.api_key_file = std::move(v); },
          "File with more keys, one per line"),
      bool_field(
          "server.allow_unauthenticated",
          [](const arbiter_config& c) { return c.server.allow_unauthenticated ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.server.allow_unauthenticated = v != 0.0; },
          "Allow a non-loopback host with no API keys"),
      bool_field(
          "server.metrics_public",
          [](const arbiter_config& c) { return c.server.metrics_public ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.server.metrics_public = v != 0.0; },
          "GET /metrics answers without a key"),
      bool_field(
          "server.info_public",
          [](const arbiter_config& c) { return c.server.info_public ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.server.info_public = v != 0.0; },
          "GET /info answers without a key"),
      bool_field(
          "server.return_memory",
          [](const arbiter_config& c) { return c.server.return_memory ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.server.return_memory = v != 0.0; },
          "Give freed heap memory back to the OS once requests stop"),
      // [scheduler]
      int_field(
          "scheduler.threads", 0, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.threads; },
          [](arbiter_config& c, int64_t v) { c.scheduler.threads = static_cast<uint32_t>(v); },
          "CAF worker threads; 0 means one per core"),
      int_field(
          "scheduler.default_deadline_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.default_deadline.count(); },
          [](arbiter_config& c, int64_t v) { c.scheduler.default_deadline = ms{v}; },
          "Deadline for requests that give no deadline_ms"),
      int_field(
          "scheduler.max_deadline_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.max_deadline.count(); },
          [](arbiter_config& c, int64_t v) { c.scheduler.max_deadline = ms{v}; },
          "Largest deadline_ms a request may ask for"),
      str_field(
          "scheduler.policy", 1,
          [](const arbiter_config& c) -> const std::string& { return c.scheduler.policy; },
          [](arbiter_config& c, std::string v) { c.scheduler.policy = std::move(v); },
          "CAF thread scheduling: sharing or stealing"),
      str_field(
          "scheduler.default_priority", 0,
          [](const arbiter_config& c) -> const std::string& {
            return c.scheduler.default_priority;
          },
          [](arbiter_config& c, std::string v) { c.scheduler.default_priority = std::move(v); },
          "Priority class for requests that give no priority"),
      int_field(
          "scheduler.dispatch_batch_items", 1, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.dispatch_batch_items; },
          [](arbiter_config& c, int64_t v) {
            c.scheduler.dispatch_batch_items = static_cast<uint32_t>(v);
          },
          "Most items sent to a worker in one message"),
      int_field(
          "scheduler.max_inflight_batches_per_source", 1, max_u32,
          [](const arbiter_config& c) -> int64_t {
            return c.scheduler.max_inflight_batches_per_source;
          },
          [](arbiter_config& c, int64_t v) {
            c.scheduler.max_inflight_batches_per_source = static_cast<uint32_t>(v);
          },
          "Batches one source may have in flight at once"),
      int_field(
          "scheduler.drain_timeout_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.drain_timeout.count(); },
          [](arbiter_config& c, int64_t v) { c.scheduler.drain_timeout = ms{v}; },
          "How long work may finish after SIGINT/SIGTERM"),
      // [cpu]
      bool_field(
          "cpu.enabled", [](const arbiter_config& c) { return c.cpu.enabled ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.cpu.enabled = v != 0.0; },
          "Run CPU workers here (false: leave the CPU rewards to worker nodes)"),
      int_field(
          "cpu.workers", 0, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.cpu.workers; },
          [](arbiter_config& c, int64_t v) { c.cpu.workers = static_cast<uint32_t>(v); },
          "CPU worker actors; 0 means one per core"),
      int_field(
          "cpu.max_lexical_chars", 1, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.cpu.max_lexical_chars; },
          [](arbiter_config& c, int64_t v) {
            c.cpu.max_lexical_chars = static_cast<uint32_t>(v);
          },
          "Longest text, in code points, lexical accepts per side"),
      // [protocols]
      str_field(
          "protocols.reward", 0,
          [](const arbiter_config& c) -> const std::string& { return c.protocols.reward; },
          [](arbiter_config& c, std::string v) { c.protocols.reward = std::move(v); },
          "Reward of /get_reward and /remote_rm when the URL names none"),
      str_field(
          "protocols.on_failure", 1,
          [](const arbiter_config& c) -> const std::string& { return c.protocols.on_failure; },
          [](arbiter_config& c, std::string v) { c.protocols.on_failure = std::move(v); },
          "error (answer 5xx so the trainer retries) or score (failure_score, flagged)"),
      num_field(
          "protocols.failure_score", -1e9, 1e9,
          [](const arbiter_config& c) { return c.protocols.failure_score; },
          [](arbiter_config& c, double v) { c.protocols.failure_score = v; },
          "Score a failed item gets when on_failure is score"),
      str_field(
          "protocols.slime_reward_key", 0,
          [](const arbiter_config& c) -> const std::string& {
            return c.protocols.slime_reward_key;
          },
          [](arbiter_config& c, std::string v) { c.protocols.slime_reward_key = std::move(v); },
          "When set, /remote_rm answers an object with the score under this key"),
      // [cluster]
      bool_field(
          "cluster.enabled",
          [](const arbiter_config& c) { return c.cluster.enabled ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.cluster.enabled = v != 0.0; },
          "Publish the scheduler for worker nodes (arbiter worker --join)"),
      str_field(
          "cluster.host", 1,
          [](const arbiter_config& c) -> const std::string& { return c.cluster.host; },
          [](arbiter_config& c, std::string v) { c.cluster.host = std::move(v); },
          "Address the cluster port binds; loopback unless certificates are set"),
      int_field(
          "cluster.port", 0, std::numeric_limits<uint16_t>::max(),
          [](const arbiter_config& c) -> int64_t { return c.cluster.port; },
          [](arbiter_config& c, int64_t v) { c.cluster.port = static_cast<uint16_t>(v); },
          "Port worker nodes join on; 0 picks a free one"),
      int_field(
          "cluster.heartbeat_ms", 10, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.cluster.heartbeat.count(); },
          [](arbiter_config& c, int64_t v) { c.cluster.heartbeat = ms{v}; },
          "How often cluster peers send a heartbeat"),
      int_field(
          "cluster.timeout_ms", 10, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.cluster.timeout.count(); },
          [](arbiter_config& c, int64_t v) { c.cluster.timeout = ms{v}; },
          "A peer silent this long is given up (its work is retried elsewhere)"),
      str_field(
          "cluster.certificate", 0,
          [](const arbiter_config& c) -> const std::string& { return c.cluster.certificate; },
          [](arbiter_config& c, std::string v) { c.cluster.certificate = std::move(v); },
          "PEM certificate chain of this process (mutual TLS)"),
      str_field(
          "cluster.key", 0,
          [](const arbiter_config& c) -> const std::string& { return c.cluster.key; },
          [](arbiter_config& c, std::string v) { c.cluster.key = std::move(v); },
          "PEM private key of the certificate"),
      str_field(
          "cluster.ca", 0,
          [](const arbiter_config& c) -> const std::string& { return c.cluster.ca; },
          [](arbiter_config& c, std::string v) { c.cluster.ca = std::move(v); },
          "PEM CA certificate that signs every cluster member"),
      // [routing]
      int_field(
          "routing.max_attempts", 1, 100,
          [](const arbiter_config& c) -> int64_t { return c.routing.max_attempts; },
          [](arbiter_config& c, int64_t v) { c.routing.max_attempts = static_cast<uint32_t>(v); },
          "Attempts per item at remote sources, the first included"),
      num_field(
          "routing.retry_budget_ratio", 0.0, 10.0,
          [](const arbiter_config& c) { return c.routing.retry_budget_ratio; },
          [](arbiter_config& c, double v) { c.routing.retry_budget_ratio = v; },
          "Retries may be at most this share of recent attempts"),
      int_field(
          "routing.retry_budget_min", 0, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.routing.retry_budget_min; },
          [](arbiter_config& c, int64_t v) {
            c.routing.retry_budget_min = static_cast<uint32_t>(v);
          },
          "Retries always allowed per 10 s window"),
      int_field(
          "routing.retry_backoff_base_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.retry_backoff_base.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.retry_backoff_base = ms{v}; },
          "First backoff before retrying on the same source"),
      int_field(
          "routing.retry_backoff_cap_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.retry_backoff_cap.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.retry_backoff_cap = ms{v}; },
          "Longest backoff before retrying on the same source"),
      int_field(
          "routing.max_retry_after_ms", 0, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.max_retry_after.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.max_retry_after = ms{v}; },
          "Longest Retry-After honoured; longer ones are cut to this"),
      int_field(
          "routing.auth_ejection_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.auth_ejection.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.auth_ejection = ms{v}; },
          "How long a source answering 401/403/404 stays ejected"),
      int_field(
          "routing.breaker_consecutive_failures", 0, max_u32,
          [](const arbiter_config& c) -> int64_t {
            return c.routing.breaker_consecutive_failures;
          },
          [](arbiter_config& c, int64_t v) {
            c.routing.breaker_consecutive_failures = static_cast<uint32_t>(v);
          },
          "Failures in a row that open a source's breaker (0: never)"),
      num_field(
          "routing.breaker_failure_ratio", 0.0, 1.0,
          [](const arbiter_config& c) { return c.routing.breaker_failure_ratio; },
          [](arbiter_config& c, double v) { c.routing.breaker_failure_ratio = v; },
          "Share of failed calls in 10 s that opens the breaker (0: never)"),
      int_field(
          "routing.breaker_minimum_volume", 1, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.routing.breaker_minimum_volume; },
          [](arbiter_config& c, int64_t v) {
            c.routing.breaker_minimum_volume = static_cast<uint32_t>(v);
          },
          "Calls in the window before the failure ratio counts"),
      int_field(
          "routing.breaker_ejection_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.breaker_ejection.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.breaker_ejection = ms{v}; },
          "First ejection of a failing source; doubles while it keeps failing"),
      int_field(
          "routing.breaker_max_ejection_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t {
            return c.routing.breaker_max_ejection.count();
          },
          [](arbiter_config& c, int64_t v) { c.routing.breaker_max_ejection = ms{v}; },
          "Longest ejection"),
      bool_field(
          "routing.hedge", [](const arbiter_config& c) { return c.routing.hedge ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.routing.hedge = v != 0.0; },
          "Hedge stragglers at the tail of a request on a second source"),
      num_field(
          "routing.hedge_tail_fraction", 0.0, 1.0,
          [](const arbiter_config& c) { return c.routing.hedge_tail_fraction; },
          [](arbiter_config& c, double v) { c.routing.hedge_tail_fraction = v; },
          "Share of a request answered before its stragglers are hedged"),
      int_field(
          "routing.hedge_min_delay_ms", 0, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.hedge_min_delay.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.hedge_min_delay = ms{v}; },
          "Shortest run time before an item counts as a straggler"),
      num_field(
          "routing.hedge_budget_ratio", 0.0, 1.0,
          [](const arbiter_config& c) { return c.routing.hedge_budget_ratio; },
          [](arbiter_config& c, double v) { c.routing.hedge_budget_ratio = v; },
          "Hedges may be at most this share of recent attempts"),
      num_field(
          "routing.straggler_timeout_factor", 0.0, 1000.0,
          [](const arbiter_config& c) { return c.routing.straggler_timeout_factor; },
          [](arbiter_config& c, double v) { c.routing.straggler_timeout_factor = v; },
          "Give up on a remote call unanswered after this many times its source's p95 latency "
          "and retry it (0: wait for the source's timeout)"),
      int_field(
          "routing.straggler_timeout_min_ms", 0, max_duration_ms,
          [](const arbiter_config& c) -> int64_t {
            return c.routing.straggler_timeout_min.count();
          },
          [](arbiter_config& c, int64_t v) { c.routing.straggler_timeout_min = ms{v}; },
          "Shortest straggler timeout"),
      bool_field(
          "routing.coalesce",
          [](const arbiter_config& c) { return c.routing.coalesce ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.routing.coalesce = v != 0.0; },
          "Send identical remote items in flight at once only once"),
      int_field(
          "routing.cache_capacity", 0, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.routing.cache_capacity; },
          [](arbiter_config& c, int64_t v) {
            c.routing.cache_capacity = static_cast<uint32_t>(v);
          },
          "Results of remote rewards cached (0: no cache)"),
      int_field(
          "routing.cache_ttl_ms", 0, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.cache_ttl.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.cache_ttl = ms{v}; },
          "How long a cached result stays valid (0: until evicted)"),
  };
  return fields;
}

/// "server.read_timeout_ms" -> "ARBITER_SERVER_READ_TIMEOUT_MS".
std::string env_name(std::string_view path) {
  std::string name = "ARBITER_";
  for (const char ch : path) {
    if (ch == '.') {
      name += '_';
    } else if (ch >= 'a' && ch <= 'z') {
      name += static_cast<char>(ch - 'a' + 'A');
    } else {
      name += ch;
    }
  }
  return name;
}

const field_descriptor* find_field(std::string_view path) {
  for (const auto& field : scalar_fields()) {
    if (field.path == path) {
      return &field;
    }
  }
  return nullptr;
}

/// "an integer", "a string" ... for "expected X, got Y" messages.
std::string type_phrase(toml::node_type type) {
  switch (type) {
    case toml::node_type::none:
      return "nothing";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
  }
  return "an unknown value";
}

std::string wrong_type(std::string_view expected, const toml::node& node) {
  return "expected " + std::string(expected) + ", got " + type_phrase(node.type());
}

/// A TOML key as a problem names it: the empty key `"" = 1` is written `""`, so no problem's
/// field is ever empty or ends in a bare dot.
std::string key_name(std::string_view key) {
  return key.empty() ? std::string{"\"\""} : std::string{key};
}

std::string quoted(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

std::string range_reason(int64_t min, int64_t max, std::string_view got) {
  if (max == max_i64) {
    return "must be at least " + std::to_string(min) + " (got " + std::string(got) + ")";
  }
  return "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " +
         std::string(got) + ")";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) {
      out += ", ";
    }
    out += item;
  }
  return out;
}

/// Checks `value` against an integer field's bounds; sets it when it fits.
void set_int_checked(const field_descriptor& field, int64_t value, const std::string& where,
                     arbiter_config& cfg, problem_list& problems) {
  if (value < field.min || value > field.max) {
    problems.push_back({where, range_reason(field.min, field.max, std::to_string(value))});
    return;
  }
  field.set_int(cfg, value);
}

/// Checks `value` against a number field's bounds; sets it when it fits.
void set_num_checked(const field_descriptor& field, double value, const std::string& where,
                     arbiter_config& cfg, problem_list& problems) {
  if (!(value >= field.min_num && value <= field.max_num)) {
    std::ostringstream out;
    out << "must be between " << field.min_num << " and " << field.max_num << " (got " << value
        << ")";
    problems.push_back({where, out.str()});
    return;
  }
  field.set_num(cfg, value);
}

/// Checks `value` against a string field's minimum length; sets it when it fits.
void set_str_checked(const field_descriptor& field, std::string value, const std::string& where,
                     arbiter_config& cfg, problem_list& problems) {
  if (static_cast<int64_t>(value.size()) < field.min) {
    problems.push_back({where, "must not be empty"});
    return;
  }
  field.set_str(cfg, std::move(value));
}

/// Reads one scalar field from its TOML node.
void load_scalar(const field_descriptor& field, const toml::node& node, arbiter_config& cfg,
                 problem_list& problems) {
  const std::string where(field.path);
  if (field.type == field_type::number || field.type == field_type::boolean) {
    double v = 0.0;
    if (field.type == field_type::boolean) {
      const auto* b = node.as_boolean();
      if (b == nullptr) {
        problems.push_back({where, wrong_type("a boolean", node)});
        return;
      }
      v = b->get() ? 1.0 : 0.0;
    } else if (const auto* f = node.as_floating_point()) {
      v = f->get();
    } else if (const auto* i = node.as_integer()) {
      v = static_cast<double>(i->get());
    } else {
      problems.push_back({where, wrong_type("a number", node)});
      return;
    }
    set_num_checked(field, v, where, cfg, problems);
    return;
  }
  if (field.type == field_type::integer) {
    const auto* value = node.as_integer();
    if (value == nullptr) {
      problems.push_back({where, wrong_type("an integer", node)});
      return;
    }
    set_int_checked(field, value->get(), where, cfg, problems);
    return;
  }
  if (field.type == field_type::string_list) {
    if (const auto* array = node.as_array()) {
      std::string joined;
      for (size_t i = 0; i < array->size(); ++i) {
        const auto* entry = array->get(i)->as_string();
        const std::string at = where + "[" + std::to_string(i) + "]";
        if (entry == nullptr) {
          problems.push_back({at, wrong_type("a string", *array->get(i))});
          return;
        }
        if (entry->get().find(',') != std::string::npos) {
          problems.push_back({at, "must not contain a comma"});
          return;
        }
        joined += (i == 0 ? "" : ",") + entry->get();
      }
      field.set_str(cfg, std::move(joined));
      return;
    }
  }
  const auto* value = node.as_string();
  if (value == nullptr) {
    problems.push_back({where, wrong_type(field.type == field_type::string_list
                                            ? "a string or an array of strings"
                                            : "a string",
                                          node)});
    return;
  }
  set_str_checked(field, value->get(), where, cfg, problems);
}

/// Reads one `[[scheduler.priorities]]` element.
priority_class load_priority_class(const toml::node& node, const std::string& where,
                                   problem_list& problems) {
  priority_class result;
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({where, wrong_type("a table", node)});
    return result;
  }
  bool has_name = false;
  for (const auto& [key, value] : *table) {
    const std::string field = where + "." + key_name(key.str());
    if (key.str() == "name") {
      has_name = true;
      if (const auto* text = value.as_string()) {
        result.name = text->get();
      } else {
        problems.push_back({field, wrong_type("a string", value)});
      }
    } else if (key.str() == "capacity") {
      if (const auto* number = value.as_integer()) {
        const int64_t capacity = number->get();
        if (capacity < 1 || capacity > max_u32) {
          problems.push_back({field, range_reason(1, max_u32, std::to_string(capacity))});
        } else {
          result.capacity = static_cast<uint32_t>(capacity);
        }
      } else {
        problems.push_back({field, wrong_type("an integer", value)});
      }
    } else if (key.str() == "weight") {
      std::optional<double> weight;
      if (const auto* number = value.as_floating_point()) {
        weight = number->get();
      } else if (const auto* integer = value.as_integer()) {
        weight = static_cast<double>(integer->get());
      }
      if (!weight) {
        problems.push_back({field, wrong_type("a number", value)});
      } else if (!(*weight > 0.0 && *weight <= 1e6)) {
        std::ostringstream out;
        out << "must be above 0 and at most 1000000 (got " << *weight << ")";
        problems.push_back({field, out.str()});
      } else {
        result.weight = *weight;
      }
    } else if (key.str() == "order") {
      if (const auto* text = value.as_string()) {
        if (text->get() == "fifo") {
          result.order = queue_order::fifo;
        } else if (text->get() == "edf") {
          result.order = queue_order::edf;
        } else {
          problems.push_back(
              {field, "must be \"fifo\" or \"edf\" (got " + quoted(text->get()) + ")"});
        }
      } else {
        problems.push_back({field, wrong_type("a string", value)});
      }
    } else {
      problems.push_back({field, "unknown field"});
    }
  }
  if (!has_name) {
    problems.push_back({where + ".name", "missing required field"});
  }
  return result;
}

/// Reads `[[scheduler.priorities]]`; a present array replaces the default classes.
void load_priorities(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const std::string where = "scheduler.priorities";
  const auto* array = node.as_array();
  if (array == nullptr) {
    problems.push_back({where, wrong_type("an array of tables", node)});
    return;
  }
  std::vector<priority_class> classes;
  classes.reserve(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    // Broken elements still take their slot so later indices match the file.
    classes.push_back(
        load_priority_class(*array->get(i), where + "[" + std::to_string(i) + "]", problems));
  }
  cfg.scheduler.priorities = std::move(classes);
}

/// Reads one of the scalar sections (`[server]`, `[scheduler]`, `[cpu]`).
void load_section(std::string_view section, const toml::node& node, arbiter_config& cfg,
                  problem_list& problems) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({std::string(section), wrong_type("a table", node)});
    return;
  }
  for (const auto& [key, value] : *table) {
    const std::string path = std::string(section) + "." + key_name(key.str());
    if (const auto* field = find_field(path)) {
      load_scalar(*field, value, cfg, problems);
    } else if (path == "scheduler.priorities") {
      load_priorities(value, cfg, problems);
    } else {
      problems.push_back({path, "unknown field"});
    }
  }
}

/// Reads an array of strings at `field` into `out`.
void read_string_list(const toml::node& node, const std::string& field,
                      std::vector<std::string>& out, problem_list& problems) {
  const auto* list = node.as_array();
  if (list == nullptr) {
    problems.push_back({field, wrong_type("an array of strings", node)});
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (const auto* text = list->get(i)->as_string()) {
      out.push_back(text->get());
    } else {
      problems.push_back({field + "[" + std::to_string(i) + "]", wrong_type("a string", *list->get(i))});
    }
  }
}

/// Reads `[rewards.NAME]` tables.
void load_rewards(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({"rewards", wrong_type("a table", node)});
    return;
  }
  for (const auto& [key, value] : *table) {
    const std::string name(key.str());
    const std::string where = "rewards." + key_name(name);
    reward_config reward;
    reward.name = name;
    if (const auto* body = value.as_table()) {
      bool has_kind = false;
      for (const auto& [inner_key, inner] : *body) {
        const std::string_view k = inner_key.str();
        const std::string field = where + "." + key_name(k);
        if (k == "kind") {
          has_kind = true;
          if (const auto* text = inner.as_string()) {
            reward.kind = text->get();
          } else {
            problems.push_back({field, wrong_type("a string", inner)});
          }
        } else if (k == "fallback") {
          if (const auto* text = inner.as_string()) {
            reward.fallback = text->get();
          } else {
            problems.push_back({field, wrong_type("a string", inner)});
          }
        } else if (k == "sources") {
          read_string_list(inner, field, reward.sources, problems);
        } else if (k == "options") {
          if (const auto* options = inner.as_table()) {
            std::ostringstream json;
            json << toml::json_formatter{*options};
            reward.options = json.str();
          } else {
            problems.push_back({field, wrong_type("a table", inner)});
          }
        } else {
          problems.push_back({field, "unknown field"});
        }
      }
      if (!has_kind) {
        problems.push_back({where + ".kind", "missing required field"});
      }
    } else {
      problems.push_back({where, wrong_type("a table", value)});
    }
    // Kept even when broken, so data_sources naming it do not add a second complaint.
    cfg.rewards[name] = std::move(reward);
  }
}

/// Reads `[data_sources]`; a present table replaces the default map.
void load_data_sources(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({"data_sources", wrong_type("a table", node)});
    return;
  }
  std::map<std::string, std::string> sources;
  for (const auto& [key, value] : *table) {
    const std::string prefix(key.str());
    if (const auto* text = value.as_string()) {
      sources[prefix] = text->get();
    } else {
      problems.push_back({"data_sources." + key_name(prefix), wrong_type("a string", value)});
    }
  }
  cfg.data_sources = std::move(sources);
}

/// Reads one `[[sources]]` element.
source_config load_source(const toml::node& node, const std::string& where,
                          problem_list& problems) {
  source_config src;
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({where, wrong_type("a table", node)});
    return src;
  }
  using ms = std::chrono::milliseconds;
  auto text = [&](const toml::node& v, const std::string& field, std::string& out) {
    if (const auto* t = v.as_string()) {
      out = t->get();
    } else {
      problems.push_back({field, wrong_type("a string", v)});
    }
  };
  auto integer = [&](const toml::node& v, const std::string& field, int64_t min, int64_t max,
                     auto&& set) {
    const auto* i = v.as_integer();
    if (i == nullptr) {
      problems.push_back({field, wrong_type("an integer", v)});
    } else if (i->get() < min || i->get() > max) {
      problems.push_back({field, range_reason(min, max, std::to_string(i->get()))});
    } else {
      set(i->get());
    }
  };
  auto boolean = [&](const toml::node& v, const std::string& field, bool& out) {
    if (const auto* b = v.as_boolean()) {
      out = b->get();
    } else {
      problems.push_back({field, wrong_type("a boolean", v)});
    }
  };
  auto number = [&](const toml::node& v, const std::string& field, double min, double max,
                    double& out) {
    double got = 0.0;
    if (const auto* f = v.as_floating_point()) {
      got = f->get();
    } else if (const auto* i = v.as_integer()) {
      got = static_cast<double>(i->get());
    } else {
      problems.push_back({field, wrong_type("a number", v)});
      return;
    }
    if (!(got >= min && got <= max)) {
      std::ostringstream out_text;
      out_text << "must be between " << min << " and " << max << " (got " << got << ")";
      problems.push_back({field, out_text.str()});
      return;
    }
    out = got;
  };
  for (const auto& [key, value] : *table) {
    const std::string k(key.str());
    const std::string field = where + "." + key_name(k);
    if (k == "name") {
      text(value, field, src.name);
    } else if (k == "kind") {
      text(value, field, src.kind);
    } else if (k == "url") {
      text(value, field, src.url);
    } else if (k == "model") {
      text(value, field, src.model);
    } else if (k == "api_key") {
      text(value, field, src.api_key);
    } else if (k == "api_key_env") {
      text(value, field, src.api_key_env);
    } else if (k == "enable_thinking") {
      bool b = false;
      boolean(value, field, b);
      src.enable_thinking = b ? "true" : "false";
    } else if (k == "capabilities") {
      const auto* list = value.as_array();
      if (list == nullptr) {
        problems.push_back({field, wrong_type("an array of strings", value)});
        continue;
      }
      for (size_t i = 0; i < list->size(); ++i) {
        std::string cap;
        text(*list->get(i), field + "[" + std::to_string(i) + "]", cap);
        src.capabilities.push_back(std::move(cap));
      }
    } else if (k == "timeout_ms") {
      integer(value, field, 1, max_duration_ms, [&](int64_t v) { src.timeout = ms{v}; });
    } else if (k == "connect_timeout_ms") {
      integer(value, field, 1, max_duration_ms, [&](int64_t v) { src.connect_timeout = ms{v}; });
    } else if (k == "requests_per_minute") {
      integer(value, field, 0, max_u32,
              [&](int64_t v) { src.requests_per_minute = static_cast<uint32_t>(v); });
    } else if (k == "tokens_per_minute") {
      integer(value, field, 0, max_u32,
              [&](int64_t v) { src.tokens_per_minute = static_cast<uint32_t>(v); });
    } else if (k == "burst_ms") {
      integer(value, field, 1, 60000, [&](int64_t v) { src.burst = ms{v}; });
    } else if (k == "max_concurrency") {
      integer(value, field, 1, 100000,
              [&](int64_t v) { src.max_concurrency = static_cast<uint32_t>(v); });
    } else if (k == "initial_concurrency") {
      integer(value, field, 0, 100000,
              [&](int64_t v) { src.initial_concurrency = static_cast<uint32_t>(v); });
    } else if (k == "max_batch_items") {
      integer(value, field, 0, 100000,
              [&](int64_t v) { src.max_batch_items = static_cast<uint32_t>(v); });
    } else if (k == "batch_wait_ms") {
      integer(value, field, 0, 10000, [&](int64_t v) { src.batch_wait = ms{v}; });
    } else if (k == "max_tokens") {
      integer(value, field, 1, max_u32,
              [&](int64_t v) { src.max_tokens = static_cast<uint32_t>(v); });
    } else if (k == "temperature") {
      number(value, field, 0.0, 2.0, src.temperature);
    } else if (k == "top_p") {
      number(value, field, 0.0, 1.0, src.top_p);
    } else if (k == "insecure_skip_verify") {
      boolean(value, field, src.insecure_skip_verify);
    } else if (k == "use_completions") {
      boolean(value, field, src.use_completions);
    } else {
      problems.push_back({field, "unknown field"});
    }
  }
  return src;
}

/// Reads `[[sources]]`.
void load_sources(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* list = node.as_array();
  if (list == nullptr) {
    problems.push_back({"sources", wrong_type("an array of tables ([[sources]])", node)});
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    cfg.sources.push_back(
      load_source(*list->get(i), "sources[" + std::to_string(i) + "]", problems));
  }
}

/// Reads one `[[models]]` table.
model_config load_model(const toml::node& node, const std::string& where,
                        problem_list& problems) {
  model_config m;
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({where, wrong_type("a table", node)});
    return m;
  }
  bool has_name = false;
  bool has_path = false;
  // Not a structured binding: C++17 lambdas (below) may not capture one (clang refuses).
  for (const auto& entry : *table) {
    const auto& key = entry.first;
    const auto& value = entry.second;
    const std::string_view k = key.str();
    const std::string field = where + "." + key_name(k);
    auto text = [&](std::string& out) {
      if (const auto* t = value.as_string()) {
        out = t->get();
      } else {
        problems.push_back({field, wrong_type("a string", value)});
      }
    };
    auto count = [&](uint32_t& out, int64_t max) {
      const auto* i = value.as_integer();
      if (i == nullptr) {
        problems.push_back({field, wrong_type("an integer", value)});
      } else if (i->get() < 1 || i->get() > max) {
        problems.push_back({field, range_reason(1, max, std::to_string(i->get()))});
      } else {
        out = static_cast<uint32_t>(i->get());
      }
    };
    if (k == "name") {
      has_name = true;
      text(m.name);
    } else if (k == "kind") {
      text(m.kind);
    } else if (k == "path") {
      has_path = true;
      text(m.path);
    } else if (k == "device") {
      text(m.device);
    } else if (k == "dtype") {
      text(m.dtype);
    } else if (k == "max_batch_items") {
      count(m.max_batch_items, 100000);
    } else if (k == "max_batch_tokens") {
      count(m.max_batch_tokens, 10000000);
    } else if (k == "batch_wait_ms") {
      if (const auto* i = value.as_integer(); i == nullptr) {
        problems.push_back({field, wrong_type("an integer", value)});
      } else if (i->get() < 0 || i->get() > 10000) {
        problems.push_back({field, range_reason(0, 10000, std::to_string(i->get()))});
      } else {
        m.batch_wait_ms = static_cast<uint32_t>(i->get());
      }
    } else if (k == "batch_calls") {
      if (const auto* b = value.as_boolean()) {
        m.batch_calls = b->get();
      } else {
        problems.push_back({field, wrong_type("a boolean", value)});
      }
    } else {
      problems.push_back({field, "unknown field"});
    }
  }
  if (!has_name) {
    problems.push_back({where + ".name", "required"});
  }
  if (!has_path) {
    problems.push_back({where + ".path", "required"});
  }
  return m;
}

void load_models(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* list = node.as_array();
  if (list == nullptr) {
    problems.push_back({"models", wrong_type("an array of tables ([[models]])", node)});
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    cfg.models.push_back(load_model(*list->get(i), "models[" + std::to_string(i) + "]", problems));
  }
}

/// Walks the parsed document over the defaults.
void load_root(const toml::table& root, arbiter_config& cfg, problem_list& problems) {
  for (const auto& [key, value] : root) {
    const std::string_view name = key.str();
    if (name == "server" || name == "scheduler" || name == "cpu" || name == "routing"
        || name == "protocols" || name == "cluster") {
      load_section(name, value, cfg, problems);
    } else if (name == "rewards") {
      load_rewards(value, cfg, problems);
    } else if (name == "data_sources") {
      load_data_sources(value, cfg, problems);
    } else if (name == "sources") {
      load_sources(value, cfg, problems);
    } else if (name == "models") {
      load_models(value, cfg, problems);
    } else {
      problems.push_back({key_name(name), "unknown field"});
    }
  }
}

/// True when `field` is `parent` or lies inside it ("a.b" is inside "a", "a[0].b" too).
bool covered_by(const std::string& field, const std::string& parent) {
  if (field.compare(0, parent.size(), parent) != 0) {
    return false;
  }
  return field.size() == parent.size() || field[parent.size()] == '.' ||
         field[parent.size()] == '[';
}

/// Runs `validate` after loading, dropping what it says about fields that already have a
/// problem (a missing name is not also an empty name).
void validate_after_load(const arbiter_config& cfg, size_t first_load_problem,
                         problem_list& problems) {
  problem_list cross;
  validate(cfg, cross);
  std::vector<std::string> reported;
  for (size_t i = first_load_problem; i < problems.size(); ++i) {
    reported.push_back(problems[i].field);
  }
  for (auto& problem : cross) {
    const bool duplicate =
        std::any_of(reported.begin(), reported.end(),
                    [&](const std::string& parent) { return covered_by(problem.field, parent); });
    if (!duplicate) {
      problems.push_back(std::move(problem));
    }
  }
}

}  // namespace

std::vector<double> class_weights(const std::vector<priority_class>& classes) {
  std::vector<double> out(classes.size(), 1.0);
  double by_rank = 1.0;
  for (size_t i = classes.size(); i-- > 0;) {
    out[i] = classes[i].weight > 0.0 ? classes[i].weight : by_rank;
    by_rank *= 4.0;
  }
  return out;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool is_valid_api_key(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
    return ch > ' ' && ch < 0x7f && ch != ',';
  });
}

std::vector<std::string> split_api_keys(const std::string& keys) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= keys.size()) {
    size_t end = keys.find(',', begin);
    if (end == std::string::npos) {
      end = keys.size();
    }
    std::string key = keys.substr(begin, end - begin);
    const auto first = key.find_first_not_of(" \t");
    const auto last = key.find_last_not_of(" \t");
    if (first != std::string::npos) {
      out.push_back(key.substr(first, last - first + 1));
    }
    begin = end + 1;
  }
  return out;
}

bool read_api_key_file(const std::string& path, std::vector<std::string>& keys,
                       std::string& error) {
  std::ifstream in{path};
  if (!in) {
    error = "cannot read " + quoted(path) + ": " + std::strerror(errno);
    return false;
  }
  std::string line;
  size_t line_number = 0;
  size_t found = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') {
      continue;
    }
    const auto last = line.find_last_not_of(" \t\r");
    std::string key = line.substr(first, last - first + 1);
    if (!is_valid_api_key(key)) {
      error = quoted(path) + " line " + std::to_string(line_number) +
              ": a key is one token of visible ASCII with no comma";
      return false;
    }
    keys.push_back(std::move(key));
    ++found;
  }
  if (found == 0) {
    error = quoted(path) + " holds no key";
    return false;
  }
  return true;
}

namespace {

bool is_class_name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

bool is_reward_name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '.' || ch == '-';
}

bool is_builtin_kind(const std::string& kind) {
  const auto& kinds = builtin_reward_kinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

/// Parses a whole environment value as a decimal integer; nullopt on anything else.
/// Out-of-int64 values come back as nullopt with `overflow` set.
std::optional<int64_t> parse_integer(const std::string& text, bool& overflow) {
  overflow = false;
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (text.empty() || end != last) {
    return std::nullopt;
  }
  if (ec == std::errc::result_out_of_range) {
    overflow = true;
    return std::nullopt;
  }
  if (ec != std::errc{}) {
    return std::nullopt;
  }
  return value;
}

} // namespace

const std::vector<std::string>& builtin_reward_kinds() {
  static const std::vector<std::string> kinds = {
    "lexical", "exact_match", "judge",     "embedding",      "info_gain", "em_info_gain",
    // verl's rule rewards (backends/cpu/verl_rules.hpp)
    "gsm8k",   "math",        "math_dapo", "search_r1_qa_em"};
  return kinds;
}

arbiter_config embedded_default() {
  return arbiter_config{};
}

arbiter_config load_string(const std::string& toml_text, const std::string& origin,
                           std::vector<config_problem>& problems) {
  arbiter_config cfg = embedded_default();
  const size_t first = problems.size();
#if TOML_EXCEPTIONS
  try {
    const toml::table root = toml::parse(toml_text, origin);
    load_root(root, cfg, problems);
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    problems.push_back({origin + ":" + std::to_string(begin.line) + ":" +
                            std::to_string(begin.column),
                        std::string(error.description())});
    return cfg;
  }
#else
  const toml::parse_result result = toml::parse(toml_text, origin);
  if (!result) {
    const auto& error = result.error();
    const auto& begin = error.source().begin;
    problems.push_back({origin + ":" + std::to_string(begin.line) + ":" +
                            std::to_string(begin.column),
                        std::string(error.description())});
    return cfg;
  }
  load_root(result.table(), cfg, problems);
#endif
  validate_after_load(cfg, first, problems);
  return cfg;
}

arbiter_config load_file(const std::string& path, std::vector<config_problem>& problems) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    problems.push_back({path, std::string("cannot read file: ") + std::strerror(error)});
    return embedded_default();
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const size_t got = std::fread(buffer, 1, sizeof buffer, file);
    text.append(buffer, got);
    if (got < sizeof buffer) {
      break;
    }
  }
  const int error = errno;
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    problems.push_back({path, std::string("cannot read file: ") + std::strerror(error)});
    return embedded_default();
  }
  return load_string(text, path, problems);
}

namespace {

/// One of today's reward-script variables that names a remote service.
struct source_shorthand {
  const char* url;
  const char* name;
  const char* kind;
  const char* capability;
  std::vector<const char*> api_key;
  std::vector<const char*> timeout_s;
  std::vector<const char*> model;
  const char* batch_size;
};

const std::vector<source_shorthand>& shorthands() {
  static const std::vector<source_shorthand> list = {
      {"EMBEDDING_SERVER_URL", "embedding_server", "openai", "embed",
       {"EMBEDDING_SERVER_API_KEY", "EMBEDDING_API_KEY"},
       {"EMBEDDING_SERVER_TIMEOUT", "EMBEDDING_TIMEOUT"},
       {"EMBEDDING_MODEL", "EMBEDDING_MODEL_NAME"}, nullptr},
      {"LLM_JUDGE_SERVER_URL", "llm_judge_server", "openai", "chat",
       {"LLM_JUDGE_SERVER_API_KEY", "LLM_JUDGE_API_KEY"},
       {"LLM_JUDGE_SERVER_TIMEOUT", "LLM_JUDGE_TIMEOUT"},
       {"LLM_JUDGE_MODEL", "LLM_JUDGE_MODEL_NAME"}, nullptr},
      {"IG_SERVICE_URL", "ig_service", "ig_service", "ig",
       {"IG_SERVICE_API_KEY", "IG_API_KEY"},
       {"IG_SERVICE_TIMEOUT", "IG_TIMEOUT"},
       {},
       "IG_BATCH_SIZE"},
  };
  return list;
}

} // namespace

void apply_source_shorthands(
  arbiter_config& cfg, const std::function<std::optional<std::string>(const std::string&)>& env,
  std::vector<config_problem>& problems) {
  for (const auto& sh : shorthands()) {
    auto url = env(sh.url);
    if (!url || url->empty()) {
      continue;
    }
    bool exists = std::any_of(cfg.sources.begin(), cfg.sources.end(),
                              [&](const source_config& s) { return s.name == sh.name; });
    if (exists) {
      continue; // The file's table of that name wins.
    }
    source_config src;
    src.name = sh.name;
    src.kind = sh.kind;
    src.url = *url;
    src.capabilities = {sh.capability};
    auto first = [&](const std::vector<const char*>& names) -> std::optional<std::string> {
      for (const auto* n : names) {
        if (auto v = env(n); v && !v->empty()) {
          return v;
        }
      }
      return std::nullopt;
    };
    if (auto key = first(sh.api_key)) {
      src.api_key = *key;
    }
    if (auto model = first(sh.model)) {
      src.model = *model;
    }
    if (auto t = first(sh.timeout_s)) {
      char* end = nullptr;
      double seconds = std::strtod(t->c_str(), &end);
      if (end != t->c_str() + t->size() || !(seconds > 0.0) || seconds > 86400.0) {
        problems.push_back({sh.timeout_s.front(),
                            "expected a positive number of seconds, got " + quoted(*t)});
      } else {
        src.timeout = std::chrono::milliseconds{static_cast<int64_t>(seconds * 1000.0)};
      }
    }
    if (sh.batch_size != nullptr) {
      if (auto b = env(sh.batch_size); b && !b->empty()) {
        bool overflow = false;
        auto n = parse_integer(*b, overflow);
        if (!n || *n < 1 || *n > 100000) {
          problems.push_back({sh.batch_size, "expected a batch size of 1 to 100000, got "
                                               + quoted(*b)});
        } else {
          src.max_batch_items = static_cast<uint32_t>(*n);
        }
      }
    }
    cfg.sources.push_back(std::move(src));
  }
}

void apply_environment(arbiter_config& cfg,
                       const std::function<std::optional<std::string>(const std::string&)>& env,
                       std::vector<config_problem>& problems) {
  for (const auto& field : scalar_fields()) {
    const std::string name = env_name(field.path);
    std::optional<std::string> value = env(name);
    if (!value) {
      continue;
    }
    if (field.type == field_type::string || field.type == field_type::string_list) {
      set_str_checked(field, std::move(*value), name, cfg, problems);
      continue;
    }
    if (field.type == field_type::boolean) {
      if (*value == "true" || *value == "1") {
        field.set_num(cfg, 1.0);
      } else if (*value == "false" || *value == "0") {
        field.set_num(cfg, 0.0);
      } else {
        problems.push_back({name, "expected true or false, got " + quoted(*value)});
      }
      continue;
    }
    if (field.type == field_type::number) {
      char* end = nullptr;
      double v = std::strtod(value->c_str(), &end);
      if (value->empty() || end != value->c_str() + value->size()) {
        problems.push_back({name, "expected a number, got " + quoted(*value)});
      } else {
        set_num_checked(field, v, name, cfg, problems);
      }
      continue;
    }
    bool overflow = false;
    const std::optional<int64_t> number = parse_integer(*value, overflow);
    if (overflow) {
      problems.push_back({name, range_reason(field.min, field.max, *value)});
    } else if (!number) {
      problems.push_back({name, "expected an integer, got " + quoted(*value)});
    } else {
      set_int_checked(field, *number, name, cfg, problems);
    }
  }
  // The short name the deployment docs use; the field's own variable wins when both are set.
  if (!env(env_name("server.api_keys"))) {
    if (auto keys = env("ARBITER_API_KEYS")) {
      cfg.server.api_keys = std::move(*keys);
    }
  }
  apply_source_shorthands(cfg, env, problems);
}

void validate(const arbiter_config& cfg, std::vector<config_problem>& problems) {
  // Field-level bounds, for configurations built in code or changed after loading.
  for (const auto& field : scalar_fields()) {
    const std::string where(field.path);
    if (field.type == field_type::number || field.type == field_type::boolean) {
      const double value = field.get_num(cfg);
      if (!(value >= field.min_num && value <= field.max_num)) {
        problems.push_back({where, "out of range (got " + std::to_string(value) + ")"});
      }
    } else if (field.type == field_type::integer) {
      const int64_t value = field.get_int(cfg);
      if (value < field.min || value > field.max) {
        problems.push_back({where, range_reason(field.min, field.max, std::to_string(value))});
      }
    } else if (static_cast<int64_t>(field.get_str(cfg).size()) < field.min) {
      problems.push_back({where, "must not be empty"});
    }
  }

  const auto& sched = cfg.scheduler;
  if (sched.policy != "sharing" && sched.policy != "stealing") {
    problems.push_back({"scheduler.policy", "must be \"sharing\" or \"stealing\" (got " +
                                                quoted(sched.policy) + ")"});
  }
  if (sched.default_deadline > sched.max_deadline) {
    problems.push_back({"scheduler.default_deadline_ms",
                        "must not exceed scheduler.max_deadline_ms (" +
                            std::to_string(sched.default_deadline.count()) + " > " +
                            std::to_string(sched.max_deadline.count()) + ")"});
  }

  // The cluster.
  const auto& cl = cfg.cluster;
  if (cl.timeout <= cl.heartbeat) {
    problems.push_back({"cluster.timeout_ms", "must exceed cluster.heartbeat_ms (" +
                                                std::to_string(cl.timeout.count()) + " <= " +
                                                std::to_string(cl.heartbeat.count()) + ")"});
  }
  const bool any_tls = !cl.certificate.empty() || !cl.key.empty() || !cl.ca.empty();
  for (const auto& [field, path] : {std::pair{"cluster.certificate", &cl.certificate},
                                    std::pair{"cluster.key", &cl.key},
                                    std::pair{"cluster.ca", &cl.ca}}) {
    if (any_tls && path->empty()) {
      problems.push_back({field, "required with the other TLS settings (certificate, key and "
                                 "ca go together)"});
    } else if (!path->empty() && !std::ifstream{*path}.good()) {
      problems.push_back({field, "cannot read " + quoted(*path)});
    }
  }
  if (cl.enabled && !any_tls && !is_loopback_host(cl.host)) {
    problems.push_back({"cluster.certificate",
                        "required when cluster.host is not a loopback address (got " +
                            quoted(cl.host) +
                            "): without certificates anyone who reaches the port could join"});
  }

  // The ingress's keys.
  const auto& server = cfg.server;
  for (const auto& key : split_api_keys(server.api_keys)) {
    if (!is_valid_api_key(key)) {
      problems.push_back({"server.api_keys",
                          "a key is one token of visible ASCII (no spaces or commas)"});
      break;
    }
  }
  if (!server.api_key_file.empty()) {
    std::vector<std::string> from_file;
    std::string error;
    if (!read_api_key_file(server.api_key_file, from_file, error)) {
      problems.push_back({"server.api_key_file", error});
    }
  }
  const bool keyed = !split_api_keys(server.api_keys).empty() || !server.api_key_file.empty();
  if (!keyed && !server.allow_unauthenticated && !is_loopback_host(server.host)) {
    problems.push_back({"server.api_keys",
                        "required when server.host is not a loopback address (got " +
                            quoted(server.host) +
                            "): without keys anyone who reaches the port spends the provider "
                            "keys; set server.api_keys, ARBITER_API_KEYS or server.api_key_file, "
                            "or server.allow_unauthenticated = true"});
  }

  // Priority classes.
  std::vector<std::string> class_names;
  if (sched.priorities.empty()) {
    problems.push_back({"scheduler.priorities", "at least one priority class is required"});
  }
  for (size_t i = 0; i < sched.priorities.size(); ++i) {
    const auto& cls = sched.priorities[i];
    const std::string where = "scheduler.priorities[" + std::to_string(i) + "]";
    if (cls.name.empty()) {
      problems.push_back({where + ".name", "must not be empty"});
    } else if (!std::all_of(cls.name.begin(), cls.name.end(), is_class_name_char)) {
      problems.push_back(
          {where + ".name", "must match [a-z0-9_-]+ (got " + quoted(cls.name) + ")"});
    } else {
      const auto earlier = std::find(class_names.begin(), class_names.end(), cls.name);
      if (earlier != class_names.end()) {
        problems.push_back(
            {where + ".name", "duplicate class name " + quoted(cls.name) +
                                  " (also scheduler.priorities[" +
                                  std::to_string(earlier - class_names.begin()) + "])"});
      }
    }
    class_names.push_back(cls.name);
    if (cls.capacity < 1) {
      problems.push_back({where + ".capacity", range_reason(1, max_u32, "0")});
    }
    if (cls.order != queue_order::fifo && cls.order != queue_order::edf) {
      problems.push_back({where + ".order", "must be \"fifo\" or \"edf\""});
    }
  }
  if (!sched.priorities.empty() &&
      std::find(class_names.begin(), class_names.end(), sched.default_priority) ==
          class_names.end()) {
    std::vector<std::string> listed;
    for (const auto& name : class_names) {
      if (!name.empty()) {
        listed.push_back(quoted(name));
      }
    }
    problems.push_back({"scheduler.default_priority",
                        quoted(sched.default_priority) +
                            " is not one of the priority classes (" + join(listed) + ")"});
  }

  // Rewards.
  for (const auto& [name, reward] : cfg.rewards) {
    const std::string where = "rewards." + key_name(name);
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_reward_name_char)) {
      problems.push_back(
          {where, "reward name must match [A-Za-z0-9_.-]+ (got " + quoted(name) + ")"});
    }
    if (!is_builtin_kind(reward.kind)) {
      problems.push_back({where + ".kind", "unknown kind " + quoted(reward.kind) +
                                               "; expected one of " +
                                               join(builtin_reward_kinds())});
    }
    static const std::vector<std::string> fallbacks = {"lexical", "exact_match", "none"};
    if (reward.fallback
        && std::find(fallbacks.begin(), fallbacks.end(), *reward.fallback) == fallbacks.end()) {
      problems.push_back({where + ".fallback", "unknown fallback " + quoted(*reward.fallback)
                                                 + "; expected one of " + join(fallbacks)});
    }
    for (size_t i = 0; i < reward.sources.size(); ++i) {
      const auto& wanted = reward.sources[i];
      bool known = std::any_of(cfg.sources.begin(), cfg.sources.end(),
                               [&wanted](const source_config& s) { return s.name == wanted; })
                   || std::any_of(cfg.models.begin(), cfg.models.end(),
                                  [&wanted](const model_config& m) { return m.name == wanted; });
      if (!known) {
        problems.push_back({where + ".sources[" + std::to_string(i) + "]",
                            "no source is named " + quoted(wanted)});
      }
    }
  }

  // Remote sources.
  std::vector<std::string> source_names;
  for (size_t i = 0; i < cfg.sources.size(); ++i) {
    const auto& src = cfg.sources[i];
    const std::string where = "sources[" + std::to_string(i) + "]";
    if (src.name.empty()) {
      problems.push_back({where + ".name", "missing required field"});
    } else if (std::find(source_names.begin(), source_names.end(), src.name)
               != source_names.end()) {
      problems.push_back({where + ".name", "duplicate source name " + quoted(src.name)});
    } else if (src.name == "cpu" || src.name == "cache") {
      problems.push_back({where + ".name", quoted(src.name) + " is reserved"});
    }
    source_names.push_back(src.name);
    static const std::vector<std::string> kinds = {"openai", "tei", "ig_service"};
    if (std::find(kinds.begin(), kinds.end(), src.kind) == kinds.end()) {
      problems.push_back({where + ".kind", "unknown kind " + quoted(src.kind)
                                             + "; expected one of " + join(kinds)});
    }
    if (src.url.rfind("http://", 0) != 0 && src.url.rfind("https://", 0) != 0) {
      problems.push_back({where + ".url", "must start with http:// or https:// (got "
                                            + quoted(src.url) + ")"});
    }
    static const std::vector<std::string> capabilities = {"chat", "generate", "embed", "nli",
                                                          "ig"};
    for (size_t c = 0; c < src.capabilities.size(); ++c) {
      if (std::find(capabilities.begin(), capabilities.end(), src.capabilities[c])
          == capabilities.end()) {
        problems.push_back({where + ".capabilities[" + std::to_string(c) + "]",
                            "unknown capability " + quoted(src.capabilities[c])
                              + "; expected one of " + join(capabilities)});
      }
    }
    if (src.initial_concurrency > src.max_concurrency) {
      problems.push_back({where + ".initial_concurrency",
                          "must not exceed max_concurrency ("
                            + std::to_string(src.initial_concurrency) + " > "
                            + std::to_string(src.max_concurrency) + ")"});
    }
  }

  // Models.
  for (size_t i = 0; i < cfg.models.size(); ++i) {
    const auto& m = cfg.models[i];
    const std::string where = "models[" + std::to_string(i) + "]";
    bool taken = std::any_of(cfg.sources.begin(), cfg.sources.end(),
                             [&](const source_config& s) { return s.name == m.name; })
                 || std::any_of(cfg.models.begin(), cfg.models.begin() + static_cast<long>(i),
                                [&](const model_config& o) { return o.name == m.name; });
    if (m.name.empty() || !std::all_of(m.name.begin(), m.name.end(), is_reward_name_char)) {
      problems.push_back({where + ".name", "must be letters, digits, '_', '.' or '-' (got "
                                             + quoted(m.name) + ")"});
    } else if (taken) {
      problems.push_back({where + ".name", "duplicate source name " + quoted(m.name)});
    } else if (m.name == "cpu" || m.name == "cache" || m.name == "reward-graph") {
      problems.push_back({where + ".name", quoted(m.name) + " is reserved"});
    }
    if (m.kind != "embedding" && m.kind != "generator" && m.kind != "nli") {
      problems.push_back({where + ".kind",
                          "unknown kind " + quoted(m.kind)
                            + "; expected \"embedding\", \"generator\" or \"nli\""});
    }
    if (m.path.empty()) {
      problems.push_back({where + ".path", "must not be empty"});
    }
    bool device_ok = m.device == "cpu" || m.device == "cuda"
                     || (m.device.rfind("cuda:", 0) == 0 && m.device.size() > 5
                         && std::all_of(m.device.begin() + 5, m.device.end(),
                                        [](char c) { return c >= '0' && c <= '9'; }));
    if (!device_ok) {
      problems.push_back({where + ".device", "must be \"cpu\", \"cuda\" or \"cuda:N\" (got "
                                               + quoted(m.device) + ")"});
    }
    static const std::vector<std::string> dtypes = {"auto", "f32", "f16", "bf16"};
    if (std::find(dtypes.begin(), dtypes.end(), m.dtype) == dtypes.end()) {
      problems.push_back({where + ".dtype", "unknown dtype " + quoted(m.dtype) + "; expected one of "
                                              + join(dtypes)});
    }
  }

  // Protocols.
  if (cfg.protocols.on_failure != "error" && cfg.protocols.on_failure != "score") {
    problems.push_back({"protocols.on_failure", "must be \"error\" or \"score\" (got "
                                                  + quoted(cfg.protocols.on_failure) + ")"});
  }
  if (!cfg.protocols.reward.empty() && !is_builtin_kind(cfg.protocols.reward)
      && cfg.rewards.count(cfg.protocols.reward) == 0) {
    problems.push_back({"protocols.reward", quoted(cfg.protocols.reward)
                                              + " is neither a configured reward nor a "
                                                "built-in kind ("
                                              + join(builtin_reward_kinds()) + ")"});
  }

  // Data sources.
  for (const auto& [prefix, reward] : cfg.data_sources) {
    if (prefix.empty()) {
      problems.push_back({"data_sources", "a prefix must not be empty"});
    }
    if (!is_builtin_kind(reward) && cfg.rewards.count(reward) == 0) {
      problems.push_back({"data_sources." + prefix,
                          quoted(reward) +
                              " is neither a configured reward nor a built-in kind (" +
                              join(builtin_reward_kinds()) + ")"});
    }
  }
}

std::string describe(const std::vector<config_problem>& problems) {
  std::string out;
  for (const auto& problem : problems) {
    out += problem.field;
    out += ": ";
    out += problem.reason;
    out += '\n';
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> environment_variables() {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(scalar_fields().size());
  for (const auto& field : scalar_fields()) {
    out.emplace_back(env_name(field.path), std::string(field.path));
  }
  return out;
}

} // namespace arbiter::config
