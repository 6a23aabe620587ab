// The field tables: every field of `[server]`, `[scheduler]`, `[cpu]`, `[protocols]`,
// `[cluster]` and `[routing]` with its TOML path, bounds, accessors and one-line doc (loading,
// the environment, validation and the docs test all walk it), and the keys of the
// `[[sources]]`, `[[models]]` and `[[scheduler.priorities]]` elements (config_fields.hpp).
#include "config/config_fields.hpp"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <sstream>

namespace arbiter::config::detail {
namespace {

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

} // namespace

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
          "HTTP event-loop threads; 0 means half the cores (at least 2)"),
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
      bool_field(
          "server.abandon_on_hang_up",
          [](const arbiter_config& c) { return c.server.abandon_on_hang_up ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.server.abandon_on_hang_up = v != 0.0; },
          "Drop a request's remaining work when its client hangs up"),
      // [scheduler]
      int_field(
          "scheduler.threads", 0, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.threads; },
          [](arbiter_config& c, int64_t v) { c.scheduler.threads = static_cast<uint32_t>(v); },
          "CAF worker threads; 0 means the cores the I/O threads leave (at least 2; a worker "
          "node: one per core)"),
      int_field(
          "scheduler.shards", 0, 64,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.shards; },
          [](arbiter_config& c, int64_t v) { c.scheduler.shards = static_cast<uint32_t>(v); },
          "Scheduler actors the CPU rewards are spread over; 0 means one per 8 cores"),
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
      bool_field(
          "scheduler.group_order",
          [](const arbiter_config& c) { return c.scheduler.group_order ? 1.0 : 0.0; },
          [](arbiter_config& c, double v) { c.scheduler.group_order = v != 0.0; },
          "Order a group's members by the group's first arrival (groups finish together)"),
      int_field(
          "scheduler.group_memory_ms", 1, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.group_memory.count(); },
          [](arbiter_config& c, int64_t v) { c.scheduler.group_memory = ms{v}; },
          "How long an idle group is remembered"),
      int_field(
          "scheduler.max_groups", 1, 100000000,
          [](const arbiter_config& c) -> int64_t { return c.scheduler.max_groups; },
          [](arbiter_config& c, int64_t v) { c.scheduler.max_groups = v; },
          "How many groups are remembered at most (the idle longest go first)"),
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
      // [replay]
      str_field(
          "replay.path", 0,
          [](const arbiter_config& c) -> const std::string& { return c.replay.path; },
          [](arbiter_config& c, std::string v) { c.replay.path = std::move(v); },
          "Replay log file (JSON Lines); empty: no log"),
      int_field(
          "replay.max_file_mb", 1, 1 << 20,
          [](const arbiter_config& c) -> int64_t { return c.replay.max_file_mb; },
          [](arbiter_config& c, int64_t v) { c.replay.max_file_mb = static_cast<uint32_t>(v); },
          "Rotate the replay log past this many MiB"),
      int_field(
          "replay.keep_files", 0, 1000,
          [](const arbiter_config& c) -> int64_t { return c.replay.keep_files; },
          [](arbiter_config& c, int64_t v) { c.replay.keep_files = static_cast<uint32_t>(v); },
          "Rotated replay logs kept (PATH.1 ... PATH.N)"),
      int_field(
          "replay.max_backlog", 1, max_u32,
          [](const arbiter_config& c) -> int64_t { return c.replay.max_backlog; },
          [](arbiter_config& c, int64_t v) { c.replay.max_backlog = static_cast<uint32_t>(v); },
          "Records the writer may fall behind by before new ones are dropped"),
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
          "routing.cache_max_bytes", 0, max_i64,
          [](const arbiter_config& c) -> int64_t {
            return static_cast<int64_t>(
                std::min<uint64_t>(c.routing.cache_max_bytes, static_cast<uint64_t>(max_i64)));
          },
          [](arbiter_config& c, int64_t v) {
            c.routing.cache_max_bytes = static_cast<uint64_t>(v);
          },
          "Most bytes the cached results take, keys and answers (0: only the count bounds it)"),
      int_field(
          "routing.cache_ttl_ms", 0, max_duration_ms,
          [](const arbiter_config& c) -> int64_t { return c.routing.cache_ttl.count(); },
          [](arbiter_config& c, int64_t v) { c.routing.cache_ttl = ms{v}; },
          "How long a cached result stays valid (0: until evicted)"),
  };
  return fields;
}

std::string env_token(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    out.push_back(std::isalnum(u) != 0 ? static_cast<char>(std::toupper(u)) : '_');
  }
  return out;
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

std::optional<double> parse_env_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) != 0) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) {
    return std::nullopt;
  }
  return value;
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

// ---- [[sources]] and [[models]] elements -----------------------------------------------------

namespace {

using ms = std::chrono::milliseconds;

template <typename T>
element_field<T> text_field(std::string_view key, void (*set)(T&, std::string),
                            bool required = false) {
  element_field<T> f{key, field_type::string};
  f.set_str = set;
  f.required = required;
  return f;
}

template <typename T>
element_field<T> int_field_of(std::string_view key, int64_t min, int64_t max,
                              void (*set)(T&, int64_t)) {
  element_field<T> f{key, field_type::integer, min, max};
  f.set_int = set;
  return f;
}

template <typename T>
element_field<T> number_field_of(std::string_view key, double min, double max,
                                 void (*set)(T&, double)) {
  element_field<T> f{key, field_type::number};
  f.min_num = min;
  f.max_num = max;
  f.set_num = set;
  return f;
}

template <typename T>
element_field<T> bool_field_of(std::string_view key, void (*set)(T&, double)) {
  element_field<T> f{key, field_type::boolean};
  f.set_num = set;
  return f;
}

} // namespace

const std::vector<element_field<source_config>>& source_fields() {
  using S = source_config;
  static const std::vector<element_field<S>> fields = {
    text_field<S>("name", [](S& s, std::string v) { s.name = std::move(v); }),
    text_field<S>("kind", [](S& s, std::string v) { s.kind = std::move(v); }),
    text_field<S>("url", [](S& s, std::string v) { s.url = std::move(v); }),
    [] {
      element_field<S> f{"capabilities", field_type::string_array};
      f.set_str = [](S& s, std::string v) { s.capabilities.push_back(std::move(v)); };
      return f;
    }(),
    text_field<S>("model", [](S& s, std::string v) { s.model = std::move(v); }),
    text_field<S>("api_key", [](S& s, std::string v) { s.api_key = std::move(v); }),
    text_field<S>("api_key_env", [](S& s, std::string v) { s.api_key_env = std::move(v); }),
    int_field_of<S>("timeout_ms", 1, max_duration_ms, [](S& s, int64_t v) { s.timeout = ms{v}; }),
    int_field_of<S>("connect_timeout_ms", 1, max_duration_ms,
                    [](S& s, int64_t v) { s.connect_timeout = ms{v}; }),
    int_field_of<S>("requests_per_minute", 0, max_u32,
                    [](S& s, int64_t v) { s.requests_per_minute = static_cast<uint32_t>(v); }),
    int_field_of<S>("tokens_per_minute", 0, max_u32,
                    [](S& s, int64_t v) { s.tokens_per_minute = static_cast<uint32_t>(v); }),
    int_field_of<S>("burst_ms", 1, 60000, [](S& s, int64_t v) { s.burst = ms{v}; }),
    int_field_of<S>("max_concurrency", 1, 100000,
                    [](S& s, int64_t v) { s.max_concurrency = static_cast<uint32_t>(v); }),
    int_field_of<S>("initial_concurrency", 0, 100000,
                    [](S& s, int64_t v) { s.initial_concurrency = static_cast<uint32_t>(v); }),
    int_field_of<S>("max_batch_items", 0, 100000,
                    [](S& s, int64_t v) { s.max_batch_items = static_cast<uint32_t>(v); }),
    int_field_of<S>("batch_wait_ms", 0, 10000, [](S& s, int64_t v) { s.batch_wait = ms{v}; }),
    bool_field_of<S>("insecure_skip_verify",
                     [](S& s, double v) { s.insecure_skip_verify = v != 0.0; }),
    int_field_of<S>("max_tokens", 1, max_u32,
                    [](S& s, int64_t v) { s.max_tokens = static_cast<uint32_t>(v); }),
    number_field_of<S>("temperature", 0.0, 2.0, [](S& s, double v) { s.temperature = v; }),
    number_field_of<S>("top_p", 0.0, 1.0, [](S& s, double v) { s.top_p = v; }),
    bool_field_of<S>("enable_thinking", [](S& s, double v) { s.enable_thinking = v != 0.0; }),
    bool_field_of<S>("reasoning_model", [](S& s, double v) { s.reasoning_model = v != 0.0; }),
    bool_field_of<S>("use_completions", [](S& s, double v) { s.use_completions = v != 0.0; }),
    number_field_of<S>("input_cost_per_million", 0.0, 1e9,
                       [](S& s, double v) { s.input_cost_per_million = v; }),
    number_field_of<S>("output_cost_per_million", 0.0, 1e9,
                       [](S& s, double v) { s.output_cost_per_million = v; }),
  };
  return fields;
}

const std::vector<element_field<priority_class>>& priority_fields() {
  using P = priority_class;
  static const std::vector<element_field<P>> fields = {
    [] {
      auto f = text_field<P>("name", [](P& p, std::string v) { p.name = std::move(v); }, true);
      f.missing_reason = "missing required field";
      return f;
    }(),
    int_field_of<P>("capacity", 1, max_u32,
                    [](P& p, int64_t v) { p.capacity = static_cast<uint32_t>(v); }),
    [] {
      auto f = number_field_of<P>("weight", 0.0, 1e6, [](P& p, double v) { p.weight = v; });
      f.min_exclusive = true;
      return f;
    }(),
    [] {
      auto f = text_field<P>("order", [](P& p, std::string v) {
        p.order = v == "edf" ? queue_order::edf : queue_order::fifo;
      });
      f.check_str = [](const std::string& v) -> std::string {
        return v == "fifo" || v == "edf" ? std::string{}
                                         : "must be \"fifo\" or \"edf\" (got " + detail::quoted(v) + ")";
      };
      return f;
    }(),
  };
  return fields;
}

const std::vector<element_field<model_config>>& model_fields() {
  using M = model_config;
  static const std::vector<element_field<M>> fields = {
    text_field<M>("name", [](M& m, std::string v) { m.name = std::move(v); }, true),
    text_field<M>("kind", [](M& m, std::string v) { m.kind = std::move(v); }),
    text_field<M>("path", [](M& m, std::string v) { m.path = std::move(v); }, true),
    text_field<M>("device", [](M& m, std::string v) { m.device = std::move(v); }),
    text_field<M>("dtype", [](M& m, std::string v) { m.dtype = std::move(v); }),
    int_field_of<M>("max_batch_items", 1, 100000,
                    [](M& m, int64_t v) { m.max_batch_items = static_cast<uint32_t>(v); }),
    int_field_of<M>("max_batch_tokens", 1, 10000000,
                    [](M& m, int64_t v) { m.max_batch_tokens = static_cast<uint32_t>(v); }),
    int_field_of<M>("batch_wait_ms", 0, 10000, [](M& m, int64_t v) { m.batch_wait_ms = v; }),
    int_field_of<M>("pass_overhead_tokens", 0, 100000000,
                    [](M& m, int64_t v) { m.pass_overhead_tokens = v; }),
    bool_field_of<M>("batch_calls", [](M& m, double v) { m.batch_calls = v != 0.0; }),
    bool_field_of<M>("cuda_graphs", [](M& m, double v) { m.cuda_graphs = v != 0.0; }),
  };
  return fields;
}

} // namespace arbiter::config::detail
