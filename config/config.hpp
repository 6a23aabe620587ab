#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace arbiter::config {

/// How tasks inside one priority class are ordered.
enum class queue_order : uint8_t {
  /// First come, first served.
  fifo,
  /// Earliest deadline first (ties: arrival order).
  edf,
};

/// One priority class. Classes are listed highest first; while several have work waiting for
/// the same sources, each is served in proportion to its weight (weighted fair queuing), so
/// higher classes go first and lower ones are never starved. An item about to miss its
/// deadline goes first whatever its class.
struct priority_class {
  /// The name clients put in `priority`, e.g. "high".
  std::string name;
  /// Most items this class may hold queued (not yet dispatched). A request that does not fit is
  /// refused with 429 and Retry-After.
  uint32_t capacity = 100000;
  queue_order order = queue_order::fifo;
  /// Its share of the sources while other classes wait too. 0: 4 to the power of the number of
  /// classes listed after it (the last class 1, the one before it 4, then 16, ...).
  double weight = 0.0;
};

/// The weight of each class, highest first: its own, or the default for a 0.
std::vector<double> class_weights(const std::vector<priority_class>& classes);

/// The HTTP ingress.
struct server_config {
  /// Address to bind; "0.0.0.0" to listen on every interface.
  std::string host = "127.0.0.1";
  /// Port to bind; 0 picks a free one (printed on the first line of stdout).
  uint16_t port = 8080;
  /// Threads running the HTTP event loop. 0 means half the cores (at least 2).
  uint32_t io_threads = 0;
  /// Largest request body accepted, in bytes; larger ones get 413.
  uint64_t max_body_bytes = 16u << 20;
  /// Most items in one /v1/score request; more get 413.
  uint32_t max_batch_items = 8192;
  /// Time allowed to read one request (headers and body) once it has started.
  std::chrono::milliseconds read_timeout{30000};
  /// How long an idle keep-alive connection stays open.
  std::chrono::milliseconds idle_timeout{60000};
  /// Most client connections open at once. Beyond it the longest-open idle connection is
  /// closed to make room, or, when every one has a request in flight, the newcomer's request
  /// is answered 503. Lowered at start to fit the open-files limit.
  uint32_t max_connections = 4096;
  /// Keys a client must send as `Authorization: Bearer KEY`, comma-separated (TOML also takes
  /// an array of strings). Empty, with `api_key_file` empty too, means no key is asked for.
  std::string api_keys;
  /// A file holding more keys, one per line (`#` comments and blank lines skipped), read at
  /// start: keeps keys out of the configuration file (a Kubernetes Secret, say).
  std::string api_key_file;
  /// Whether binding a non-loopback `host` with no keys is allowed. Without it, such a
  /// configuration is refused: anyone who reached the port could spend the provider keys.
  bool allow_unauthenticated = false;
  /// Whether `GET /metrics` answers without a key (Prometheus scrapers often send none).
  bool metrics_public = true;
  /// Whether `GET /info` answers without a key (it names sources, endpoints and their errors).
  bool info_public = false;
  /// Whether the heap's free memory is handed back to the OS (glibc `malloc_trim`) once the
  /// ingress has written no reply for a second after a spell of work.
  bool return_memory = true;
  /// Whether a scoring request's remaining work is dropped when its client closes the
  /// connection before the answer (its items end `client_closed`). Off: it runs to the end.
  bool abandon_on_hang_up = true;
};

/// The scheduler actor and its admission control.
struct scheduler_config {
  /// CAF worker threads. 0 means the cores the I/O threads leave, at least 2 (a worker node:
  /// one per core).
  uint32_t threads = 0;
  /// Scheduler actors the CPU rewards are spread over, each with its share of the CPU workers
  /// (groups kept whole); model rewards stay on the first. 0 means one per 8 cores.
  uint32_t shards = 0;
  /// CAF's thread scheduling: "sharing" (one shared queue; idle threads sleep, which leaves
  /// the cores to the HTTP threads on small machines) or "stealing" (per-thread queues with
  /// work stealing; idle threads poll before sleeping).
  std::string policy = "sharing";
  /// Deadline applied when a request gives no `deadline_ms`.
  std::chrono::milliseconds default_deadline{30000};
  /// Largest `deadline_ms` a request may ask for.
  std::chrono::milliseconds max_deadline{600000};
  /// The class used when a request gives no `priority`; must name one of `priorities`.
  std::string default_priority = "normal";
  /// Most items sent to a worker in one message.
  uint32_t dispatch_batch_items = 32;
  /// Batches a source may have in flight at once.
  uint32_t max_inflight_batches_per_source = 2;
  /// On SIGINT/SIGTERM, how long queued and running work may still finish before what remains
  /// fails with `shutting_down`.
  std::chrono::milliseconds drain_timeout{10000};
  /// Order a GRPO group's members by the group's first arrival (FIFO classes) or earliest
  /// deadline (EDF classes), so a group's remaining members go ahead of later groups' first
  /// ones and groups finish together; false: each item by its own.
  bool group_order = true;
  /// How long an idle group (nothing of it pending) is remembered: a member arriving later
  /// joins its statistics and its place in the order; after that, the name starts afresh.
  std::chrono::milliseconds group_memory{300000};
  /// How many groups are remembered at most; past it the groups idle longest are forgotten
  /// first (never one with members pending).
  int64_t max_groups = 100000;
  /// Priority classes, highest first.
  std::vector<priority_class> priorities = {
      {"high", 100000, queue_order::fifo, 16.0},
      {"normal", 100000, queue_order::fifo, 4.0},
      {"low", 100000, queue_order::fifo, 1.0},
  };
};

/// How the scheduler treats sources that can fail: retries, ejection, hedging, caching and
/// coalescing (docs/architecture.md, "Routing, pacing, retries and hedging").
struct routing_config {
  /// Attempts per item, the first included.
  uint32_t max_attempts = 3;
  /// Retries may be at most this share of recent attempts (a 10 s window)...
  double retry_budget_ratio = 0.2;
  /// ...but this many per window are always allowed.
  uint32_t retry_budget_min = 10;
  /// Full-jitter backoff before retrying on the same source: base doubling to cap.
  std::chrono::milliseconds retry_backoff_base{500};
  std::chrono::milliseconds retry_backoff_cap{8000};
  /// The longest Retry-After honoured; longer ones are cut to this.
  std::chrono::milliseconds max_retry_after{60000};
  /// How long a source answering 401, 403 or 404 stays ejected.
  std::chrono::milliseconds auth_ejection{300000};
  /// The circuit breaker opens after this many failures in a row...
  uint32_t breaker_consecutive_failures = 5;
  /// ...or when this share of the calls in its 10 s window failed (with at least
  /// `breaker_minimum_volume` calls).
  double breaker_failure_ratio = 0.5;
  uint32_t breaker_minimum_volume = 20;
  /// The first ejection's length; each one in a row doubles it, up to the max.
  std::chrono::milliseconds breaker_ejection{5000};
  std::chrono::milliseconds breaker_max_ejection{300000};
  /// Hedge stragglers: an item still running past its source's recent 95th-percentile latency
  /// (and at least `hedge_min_delay`), once `hedge_tail_fraction` of its request is done, is
  /// sent to a second source; the first answer wins and the other attempt is cancelled.
  bool hedge = true;
  double hedge_tail_fraction = 0.75;
  std::chrono::milliseconds hedge_min_delay{200};
  /// Hedges may be at most this share of recent attempts.
  double hedge_budget_ratio = 0.05;
  /// An attempt at a remote source still unanswered after this many times the source's recent
  /// 95th-percentile latency (and at least `straggler_timeout_min`) is given up: cancelled,
  /// and its items retried as after a timeout. A share of calls that never answer then costs
  /// one such wait, not the source's whole `timeout_ms`. 0 turns it off.
  double straggler_timeout_factor = 4.0;
  std::chrono::milliseconds straggler_timeout_min{2000};
  /// Identical items of remote rewards in flight at once are sent once.
  bool coalesce = true;
  /// Results of remote rewards kept, keyed on the reward and its inputs (0: no cache).
  uint32_t cache_capacity = 65536;
  /// The most the cached results may take, keys and answers together (0: only the count
  /// bounds them): 65,536 long judge prompts would hold gigabytes.
  uint64_t cache_max_bytes = uint64_t{256} << 20;
  /// How long a cached result stays valid (0: until evicted).
  std::chrono::milliseconds cache_ttl{0};
};

/// One remote model endpoint (a `[[sources]]` table, or an environment shorthand such as
/// `LLM_JUDGE_SERVER_URL`).
struct source_config {
  /// Unique; results report it in `source`.
  std::string name;
  /// The API it speaks: "openai" (chat/completions, embeddings), "tei" (/embed) or
  /// "ig_service" (/compute_info_gain).
  std::string kind;
  /// Base URL, http or https; the API's paths are appended.
  std::string url;
  /// What it serves: "chat" (judge prompts), "generate" (completions with log-probabilities,
  /// for info_gain graphs), "embed" (embedding), "nli" (entailment, TEI /predict), "ig" (the IG
  /// service). Empty: the kind's default ("openai": chat, "tei": embed, "ig_service": ig).
  std::vector<std::string> capabilities;
  /// Sent as "model" (openai).
  std::string model;
  /// The API key itself (prefer `api_key_env`); sent as a bearer token, never logged.
  std::string api_key;
  /// The environment variable holding the API key.
  std::string api_key_env;
  /// Bound on one attempt (request sent to whole answer read), and on connecting.
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds connect_timeout{5000};
  /// The provider's limits (0: not paced); the pacing buckets hold `burst` worth of them.
  uint32_t requests_per_minute = 0;
  uint32_t tokens_per_minute = 0;
  std::chrono::milliseconds burst{60000};
  /// Calls in flight at once at most; the adaptive limit starts at `initial_concurrency`
  /// (0: at the maximum) and moves under this.
  uint32_t max_concurrency = 64;
  uint32_t initial_concurrency = 0;
  /// Items per call (0: the kind's default: 1 for chat, 32 for embed, 8 for ig).
  uint32_t max_batch_items = 0;
  /// While the source is busy, a batch that is not full waits this long for more items.
  std::chrono::milliseconds batch_wait{5};
  /// https: skip certificate verification (never in production).
  bool insecure_skip_verify = false;
  /// Judge calls unless the reward's options say otherwise: new tokens, sampling (the seeds'
  /// defaults), Qwen3 thinking (unset leaves the server's default), and /v1/completions
  /// instead of chat.
  uint32_t max_tokens = 512;
  double temperature = 0.7;
  double top_p = 0.8;
  std::optional<bool> enable_thinking;
  /// An OpenAI reasoning model (o1, o3, o4-mini, gpt-5): chat calls send
  /// `max_completion_tokens` and no temperature or top_p, which such models refuse. Unset:
  /// decided by the model's name.
  std::optional<bool> reasoning_model;
  bool use_completions = false;
  /// What a million prompt (input) and completion (output) tokens cost here, in the unit you
  /// choose (USD, say): the step accounts' and `arbiter_source_cost_total`'s cost.
  double input_cost_per_million = 0.0;
  double output_cost_per_million = 0.0;
};

/// `[[models]]`: a model folder Arbiter runs itself (libtorch), as a source beside the remote
/// endpoints.
struct model_config {
  /// The source's name (results' `source`, `[rewards.NAME] sources`, the model id of
  /// /v1/embeddings).
  std::string name;
  /// What it is: "embedding" (a BERT sentence embedder, capability embed), "generator" (a
  /// Qwen2/Qwen3 causal LM, capabilities generate and chat) or "nli" (a DeBERTa-v2/v3
  /// sequence classifier with entailment/neutral/contradiction labels, capability nli).
  std::string kind = "embedding";
  /// The Hugging Face model folder (config.json, model.safetensors, and tokenizer.json or,
  /// for DeBERTa, spm.model).
  std::string path;
  /// "cpu", "cuda" (every visible GPU, one worker each) or "cuda:N".
  std::string device = "cpu";
  /// "auto" (f32 on CPU, bf16 on GPU), "f32", "f16" or "bf16".
  std::string dtype = "auto";
  /// Most items per batch.
  uint32_t max_batch_items = 64;
  /// Most padded tokens one forward pass takes (batches are split below it).
  uint32_t max_batch_tokens = 16384;
  /// Generators: decode the calls of a batch together (faster). Sampling then sees logits
  /// that differ from a call run alone by float rounding, which can flip a sampled token now
  /// and then; false runs one call at a time, so a seeded call samples the same texts bit for
  /// bit whatever else is queued.
  bool batch_calls = true;
  /// Generators on a GPU: replay each decoding step from a CUDA graph instead of launching
  /// its kernels one by one (false: launched one by one, as before).
  bool cuda_graphs = true;
  /// How long a batch waits for more items, the worker idle or not (0: an idle worker starts
  /// at once). Concurrent small requests then share one forward pass or decoding instead of
  /// the first running alone while the rest queue behind it. -1: by kind (effective_batch_wait_ms).
  int64_t batch_wait_ms = -1;
  /// What one more forward pass or attention call is worth, in tokens computed, when a batch
  /// of mixed lengths is cut (-1: by device; backends/models/passes.hpp).
  int64_t pass_overhead_tokens = -1;
};

/// `batch_wait_ms`, or when unset: 5 ms for generators (their calls decode together for
/// seconds); 2 ms for embedders and NLI models on a GPU, where a forward pass costs about the
/// same for 32 inputs as for 128, so concurrent small requests should share one; 0 on the CPU.
inline int64_t effective_batch_wait_ms(const model_config& m) {
  if (m.batch_wait_ms >= 0) {
    return m.batch_wait_ms;
  }
  if (m.kind == "generator") {
    return 5;
  }
  return m.device.rfind("cuda", 0) == 0 ? 2 : 0;
}

/// The CPU rewards (`lexical`, `exact_match`).
struct cpu_config {
  /// false: no CPU workers in this process (a coordinator that leaves the CPU rewards to its
  /// worker nodes).
  bool enabled = true;
  /// CPU worker actors. 0 means one per core.
  uint32_t workers = 0;
  /// Longest text (in code points) `lexical` accepts per side; longer items fail with
  /// `reward_failed`, because difflib's matching is quadratic in the worst case.
  uint32_t max_lexical_chars = 100000;
};

/// A named reward: what clients put in `reward`, the kind that computes it, the sources it may
/// use, its options and its fallback.
struct reward_config {
  std::string name;
  /// A built-in kind (backends/rewards/reward_kinds.hpp).
  std::string kind;
  /// The sources (by name) its model calls may go to; empty: any source with the capability.
  std::vector<std::string> sources;
  /// The CPU kind ("lexical", "exact_match") that scores an item, flagged `fallback`, when no
  /// source can answer in time; "none" for no fallback; unset: the kind's default
  /// (`embedding`: lexical, as the seeds do; others: none).
  std::optional<std::string> fallback;
  /// `[rewards.NAME.options]` as a JSON object's text (empty: none); items' `extra_info`
  /// overrides them key by key.
  std::string options;
};

/// `[protocols]`: how the trainer drop-in routes (`/get_reward`, `/remote_rm`) score.
struct protocols_config {
  /// The reward they use when the request names none (`?reward=NAME`); empty: one is required.
  std::string reward;
  /// "error": a request with a failed item is answered 502/503/504 with the reason, so the
  /// trainer retries; "score": the item gets `failure_score`, flagged where the protocol can.
  std::string on_failure = "error";
  double failure_score = 0.0;
  /// `/remote_rm` answers a bare number when empty, else an object with the score under this
  /// key (slime's `--reward-key`).
  std::string slime_reward_key;
};

/// The whole configuration. Every field has a default, so an empty file is valid.
/// The cluster (docs/deployment.md): the coordinator (`arbiter serve`) publishes its scheduler
/// on `host:port` when `enabled`; worker nodes (`arbiter worker --join`) read the heartbeat,
/// timeout and certificate settings from the same section.
struct cluster_config {
  /// Publish the scheduler for worker nodes (`--cluster-port` turns it on too).
  bool enabled = false;
  /// Address the cluster port binds. Without certificates it must be a loopback address.
  std::string host = "127.0.0.1";
  /// Port worker nodes join on; 0 picks a free one (logged).
  uint16_t port = 7710;
  /// How often peers send a heartbeat, and how long a silent connection lives: a node that
  /// stops answering is given up after about `timeout`.
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds timeout{3000};
  /// Mutual TLS (CAF's OpenSSL module): this process's certificate chain and private key (PEM),
  /// and the CA that signs every member's certificate. All three or none.
  std::string certificate;
  std::string key;
  std::string ca;
};

/// The replay log (docs/replay.md): every reward item and model call that ends, appended as
/// JSON Lines for `arbiter replay`. Off while `path` is empty.
struct replay_config {
  /// The log file (appended to; created when missing).
  std::string path;
  /// Past this size the file is moved to PATH.1 (PATH.1 to PATH.2, ...) and a new one begun.
  uint32_t max_file_mb = 256;
  /// Rotated files kept (PATH.1 ... PATH.keep_files); 0 keeps none.
  uint32_t keep_files = 4;
  /// Records the writer may fall behind by before new ones are dropped (and counted).
  uint32_t max_backlog = 100000;
};

struct arbiter_config {
  server_config server;
  scheduler_config scheduler;
  routing_config routing;
  /// Remote model endpoints.
  std::vector<source_config> sources;
  /// Local models. When none is configured and no source serves embed, `arbiter serve` runs
  /// the built-in default embedder (all-MiniLM-L6-v2, when installed).
  std::vector<model_config> models;
  cpu_config cpu;
  protocols_config protocols;
  cluster_config cluster;
  replay_config replay;
  /// Configured rewards, by name. The built-in kinds are always available under their own
  /// names (`lexical`, `embedding`, ...); entries here add names or override those.
  std::map<std::string, reward_config> rewards;
  /// `data_source` -> reward name, used when an item names no `reward`. A name matches
  /// itself exactly; a key ending in `*` matches every name it begins, the longest such key
  /// first. The default serves the seeds' prefixes and exactly the names verl's
  /// `default_compute_score` sends to a rule reward Arbiter ports (docs/rewards.md), so a name
  /// verl refuses is refused here too, not scored by the wrong rule.
  std::map<std::string, std::string> data_sources = {
      {"lexical*", "lexical"},
      {"exact_match*", "exact_match"},
      {"embedding_remote*", "embedding"},
      {"llm_judge_remote*", "judge"},
      {"info_gain*", "info_gain"},
      {"openai/gsm8k", "gsm8k"},
      {"lighteval/MATH", "math"},
      {"DigitalLearningGmbH/MATH-lighteval", "math"},
      {"HuggingFaceH4/MATH-500", "math"},
      {"math", "math_dapo"},
      {"math_dapo", "math_dapo"},
      {"math_dapo_reasoning", "math_dapo"},
      {"aime*", "math_dapo"}, // verl: data_source.startswith("aime")
      {"searchR1_nq", "search_r1_qa_em"},
      {"searchR1_triviaqa", "search_r1_qa_em"},
      {"searchR1_popqa", "search_r1_qa_em"},
      {"searchR1_hotpotqa", "search_r1_qa_em"},
      {"searchR1_2wikimultihopqa", "search_r1_qa_em"},
      {"searchR1_musique", "search_r1_qa_em"},
      {"searchR1_bamboogle", "search_r1_qa_em"},
  };
};

/// One problem found in a configuration: the field's dotted path and why it is wrong.
struct config_problem {
  std::string field;
  std::string reason;
};

/// The configuration `arbiter serve` runs with when given no file.
arbiter_config embedded_default();

/// True when problem field `field` is `parent` or lies inside it ("a.b" is inside "a",
/// "a[0].b" too).
bool covered_by(const std::string& field, const std::string& parent);

/// Whether `host` names this machine's loopback interface ("localhost", an address 127.x.y.z,
/// "::1"; no other name, whatever it resolves to).
bool is_loopback_host(const std::string& host);

/// Whether `url` starts with http:// or https://, in any case (schemes are case-insensitive).
bool has_http_scheme(std::string_view url);

/// The problem with a URL `has_http_scheme` refuses, quoting it, or only its scheme where the
/// rest may hold credentials (user info, a query): `... (its scheme is "ftp")`.
std::string http_scheme_problem(std::string_view url);

/// `server.api_keys` split at its commas (blanks and line breaks trimmed, empty entries
/// dropped).
std::vector<std::string> split_api_keys(const std::string& keys);

/// Reads a `server.api_key_file`: one key per line, `#` comments and blank lines skipped.
/// Returns false with `error` set when it cannot be read, holds no key, or a key is not one
/// token of visible ASCII.
bool read_api_key_file(const std::string& path, std::vector<std::string>& keys,
                       std::string& error);

/// Whether a key is usable in an `Authorization: Bearer` header: visible ASCII, no comma.
bool is_valid_api_key(const std::string& key);

/// Which checks loading runs. `all`: the fields' own (types, ranges, unknown keys) and the
/// cross-field rules (`validate`). `fields`: only the fields' own, for a caller that applies
/// the environment and flags over the file first and then calls `validate_loaded`, so that a
/// variable can complete what the file leaves out (keys for a non-loopback host, a node's own
/// certificate paths).
enum class load_checks { all, fields };

/// Reads a TOML file over the embedded default. On success `problems` is empty. Every problem
/// found (parse errors with line and column, unknown fields, wrong types, out-of-range values,
/// broken references) is appended to `problems`; the returned config is then unusable.
arbiter_config load_file(const std::string& path, std::vector<config_problem>& problems,
                         load_checks checks = load_checks::all);

/// Same as `load_file`, from TOML text; `origin` names the text in messages.
arbiter_config load_string(const std::string& toml_text, const std::string& origin,
                           std::vector<config_problem>& problems,
                           load_checks checks = load_checks::all);

/// `validate` after a `load_checks::fields` load: a cross-field problem under a field already
/// in `problems` (one that kept its default for being wrong) is not reported again.
void validate_loaded(const arbiter_config& cfg, std::vector<config_problem>& problems);

/// Applies `ARBITER_*` environment variables (see docs/configuration.md) on top of `cfg`. `env`
/// looks a variable up by name and returns nullopt when it is unset. Bad values are appended
/// to `problems` naming the variable.
void apply_environment(arbiter_config& cfg,
                       const std::function<std::optional<std::string>(const std::string&)>& env,
                       std::vector<config_problem>& problems);

/// Adds remote sources from the variables today's reward scripts use, unless the
/// configuration already has a source of that name: `EMBEDDING_SERVER_URL` (source
/// "embedding_server", OpenAI /v1/embeddings, capability embed), `LLM_JUDGE_SERVER_URL`
/// ("llm_judge_server", OpenAI chat, capability chat), `IG_SERVICE_URL` ("ig_service",
/// capability ig), each with `_API_KEY`, `_TIMEOUT` (seconds) and `_MODEL` variants (see
/// docs/configuration.md). `apply_environment` calls it.
void apply_source_shorthands(
  arbiter_config& cfg, const std::function<std::optional<std::string>(const std::string&)>& env,
  std::vector<config_problem>& problems);

/// The variable whose URL made the source called `name` (`LLM_JUDGE_SERVER_URL` for
/// "llm_judge_server", ...), or nullptr when no shorthand makes a source of that name.
const char* shorthand_url_variable(const std::string& name);

/// Checks cross-field rules (default priority exists, rewards name known kinds, prefixes map
/// to known rewards, unique class names ...). Appends what it finds to `problems`.
void validate(const arbiter_config& cfg, std::vector<config_problem>& problems);

/// Renders problems one per line as "FIELD: REASON".
std::string describe(const std::vector<config_problem>& problems);

/// The names of every environment variable `apply_environment` reads, with the field each
/// sets, e.g. {"ARBITER_SERVER_PORT", "server.port"}.
std::vector<std::pair<std::string, std::string>> environment_variables();

} // namespace arbiter::config
