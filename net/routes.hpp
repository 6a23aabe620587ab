#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/messages.hpp"
#include "backends/reward_catalog.hpp"
#include "common/gpu_monitor.hpp"
#include "common/metrics.hpp"
#include "config/config.hpp"
#include "net/http_errors.hpp"
#include "net/api_keys.hpp"
#include "net/http_metrics.hpp"
#include "net/info_gain_codec.hpp"
#include "net/openai_codec.hpp"
#include "net/score_codec.hpp"
#include "net/trainer_codec.hpp"
#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::actors {
class node_models;
struct replay_metrics;
} // namespace arbiter::actors

namespace arbiter::net {

/// One request as the HTTP server hands it on. The views live as long as the `handle` call.
struct http_request {
  std::string_view method;
  /// Path and query.
  std::string_view target;
  /// The `Authorization` and `Content-Type` headers' values ("" when absent).
  std::string_view authorization;
  std::string_view content_type;
  std::string body;
  /// The `X-Arbiter-Step` header's value ("" when absent).
  std::string_view step;
  /// The `Content-Encoding` and `Transfer-Encoding` headers' values ("" when absent).
  std::string_view content_encoding;
  std::string_view transfer_encoding{};
  /// How long the client waits for the answer, in seconds, as the OpenAI SDKs say it
  /// (`X-Stainless-Read-Timeout`, "" when absent).
  std::string_view client_timeout{};
  /// The connection's name for this request (unique in the process; 0: none), by which
  /// `request_handler::abandon` says its client hung up before the answer.
  uint64_t ticket = 0;
};

/// Called once with the reply, from any thread.
using reply_fn = std::function<void(http_reply)>;

/// Runs a function on the connection's strand (an I/O thread), from any thread.
using defer_fn = std::function<void(std::function<void()>)>;

/// A loaded local model, as /info shows it.
struct local_model_info {
  std::string name;
  std::string path;
  std::string device;
  std::string architecture;
  std::string dtype;
  uint32_t max_tokens = 0;
  uint64_t weight_bytes = 0;
};

/// What the routes need from the rest of the server.
struct router_context {
  caf::actor_system* system = nullptr;
  caf::actor scheduler;
  /// Every scheduler shard, `scheduler` first (see `scheduler.shards`); empty: `scheduler`
  /// alone. Requests of CPU rewards are spread over them (`plan_shards`); /info and /v1/steps
  /// ask them all.
  std::vector<caf::actor> shards;
  /// The cluster gateway (actors/cluster.hpp), when the cluster is on: /info lists its nodes.
  caf::actor cluster;
  /// The models its nodes' sources serve (kept by the gateway), which the pass-through routes
  /// serve beside the configured ones; null without a cluster.
  const actors::node_models* node_models = nullptr;
  const config::arbiter_config* config = nullptr;
  const backends::reward_catalog* catalog = nullptr;
  metrics_registry* registry = nullptr;
  http_metrics* metrics = nullptr;
  scheduler::scheduler_metrics* scheduler_metrics = nullptr;
  /// Local model workers, one entry per device.
  std::vector<local_model_info> models;
  /// The replay log writer's counters while it runs (`[replay] path`), else null: /info
  /// shows the log's settings and records.
  actors::replay_metrics* replay = nullptr;
  /// The machine's GPUs (NVML), or null when it has none: /metrics and /info then say nothing
  /// of GPUs.
  gpu_monitor* gpus = nullptr;
  /// The keys a request must carry (`server.api_keys` and `server.api_key_file`, read at
  /// start); none: every route is open.
  api_keys keys;
  /// Runs a function soon on an I/O thread. When set, requests that arrive together (within
  /// one turn of the event loop) go to the scheduler in one message; when empty, each goes
  /// alone.
  std::function<void(std::function<void()>)> post;
};

/// What the HTTP server hands requests to: the router, or a worker node's status routes.
class request_handler {
public:
  virtual ~request_handler() = default;

  /// Handles one request. `reply` is called exactly once.
  virtual void handle(http_request req, reply_fn reply, defer_fn defer) = 0;

  /// Counts a request refused by the HTTP layer itself (body too large, malformed HTTP).
  virtual void count_protocol_error(const std::string& reason, unsigned status) = 0;

  /// Whether a request for `target` starts work that a hang-up could stop (a scoring route):
  /// only such requests get a ticket and are watched while in flight.
  virtual bool abandonable(std::string_view /*target*/) const {
    return false;
  }

  /// The client of the request with `ticket` (`http_request::ticket`) closed its connection
  /// while the request was in flight: its work may stop. Its `reply` is still called.
  virtual void abandon(uint64_t /*ticket*/) {}

  /// The body of an error the HTTP layer answers itself (body too large, server busy) for a
  /// request to `target`, in the shape its route's clients read: Arbiter's by default.
  virtual std::string error_body_for(std::string_view target, unsigned status,
                                     std::string_view code, std::string_view message) const;
};

/// A trainer route's request held after a refusal (`router::run`): its client's ticket, how
/// long it has been held, how many times it was sent, and the last refusal, which answers it
/// when it is not admitted again (with what was left of its Retry-After).
struct held_so_far {
  uint64_t client_ticket = 0;
  std::chrono::nanoseconds held{0};
  int sent = 0;
  std::string rejection;
  std::string reason;
  int64_t retry_after_s = 0;
};

/// Maps method and path to a handler. The scoring routes (`/v1/score`, `/compute_info_gain`,
/// the trainer protocols and the OpenAI/TEI pass-through routes) send the decoded request to
/// the scheduler actor with a callback that `defer`s the encoding and the reply to the
/// connection's strand; `GET /info` asks through a short-lived bridge actor. No thread waits
/// on an actor. Every other route answers at once.
class router : public request_handler {
public:
  explicit router(router_context ctx);

  /// Handles one request. `reply` is called exactly once. Before a route sees it: 404 for
  /// an unknown path, 401 without a key where one is needed (`/health` never needs one,
  /// `/metrics` and `/info` as `server.metrics_public` and `server.info_public` say), 405 for
  /// another method, 415 for a body whose Content-Type is not JSON.
  void handle(http_request req, reply_fn reply, defer_fn defer) override;

  /// From now on /health says "draining" and /v1/score answers 503 with a Retry-After of the
  /// drain's time left (at least 1 s): by then this process has gone, and one restarted in
  /// its place may answer. A client that retried each second gave up while the server
  /// restarted (helper-34: 5 retries in 5.4 s; the old process left at 6.2 s).
  /// Refusals held for their Retry-After (`hold_refusal`) are answered now.
  void begin_drain(
    std::chrono::milliseconds drain_timeout = std::chrono::milliseconds{0}) noexcept;

  bool draining() const noexcept {
    return draining_;
  }

  void count_protocol_error(const std::string& reason, unsigned status) override;

  /// The scoring routes (those that send work to the scheduler).
  bool abandonable(std::string_view target) const override;
  std::string error_body_for(std::string_view target, unsigned status, std::string_view code,
                             std::string_view message) const override;

  /// Tells every scheduler shard (`abandon_atom`): the items of the request with `ticket`
  /// that have not ended end `client_closed`, and nothing more is sent for them.
  void abandon(uint64_t ticket) override;

private:
  /// The groups of a request's items as they stood when it finished (see `finished_request`).
  using group_list = std::vector<scheduler::group_summary>;
  /// Turns a request's results (and its items' groups) into the response.
  using encode_fn = std::function<http_reply(const std::vector<item_result>&, const group_list&)>;

  /// What a scoring route's decoder hands `serve_scoring`: the items, their priority class and
  /// deadline (from now), and how their results become the response.
  struct scoring_job {
    size_t priority = 0;
    std::chrono::nanoseconds deadline{0};
    std::vector<score_item> items;
    /// Counted in `arbiter_request_items` (unset: not counted).
    std::optional<size_t> counted_items;
    /// With no items, answer `encode({}, {})` at once instead of scheduling nothing.
    bool answer_empty_at_once = false;
    encode_fn encode;
    /// Set before decoding: the deadline a pass-through request without `deadline_ms` gets,
    /// from how long its client waits (`client_deadline`); unset: the default deadline.
    std::optional<std::chrono::milliseconds> client_deadline{};
  };

  /// A scoring route's decoder: the body (and the target, for `?reward=`) into a job; false
  /// with why (`err`) when the body is refused.
  using decode_fn = bool(std::string_view body, std::string_view target, scoring_job& job,
                         codec_error& err);
  using decoder = decode_fn router::*;

  /// Who may call a route.
  enum class access : uint8_t {
    /// Anyone (`/health`: probes carry no key).
    open,
    /// A key holder, when keys are configured.
    keyed,
    /// Keyed unless `server.metrics_public`.
    metrics,
    /// Keyed unless `server.info_public`.
    info,
  };

  /// One route: its path, the one method it accepts, the shape of its error bodies, who may
  /// call it, whether it takes a JSON body, whether the key may come as `?api_key=KEY` (the
  /// trainer routes: OpenRLHF's and slime's HTTP clients send no headers, only the URL they
  /// are given), and for a scoring route its decoder.
  struct route_spec {
    std::string_view path;
    std::string_view method;
    error_style style;
    access who;
    bool json_body;
    bool key_in_query = false;
    decoder decode = nullptr;
  };

  /// Every route (routes.cpp).
  static const route_spec routes_[];
  static const route_spec* find_route(std::string_view path);

  /// The one scoring handler every scoring route goes through: 503 while draining, decode
  /// (a refusal answered in the route's style), count, schedule, encode.
  /// `req.step`: the `X-Arbiter-Step` header, the training step of the items that name none.
  /// `req.ticket`: the connection's name for the request.
  void serve_scoring(const std::string& route, error_style style, decoder decode,
                     http_request req, reply_fn reply, defer_fn defer);

  /// The scoring routes' decoders, one per route shape (routes.cpp).
  decode_fn decode_score, decode_info_gain, decode_get_reward, decode_remote_rm, decode_chat,
    decode_embeddings, decode_tei_embed, decode_predict;

  /// `/v1/embeddings` (OpenAI) or `/embed` (TEI).
  bool embed_job(bool tei, std::string_view body, scoring_job& job, codec_error& err);
  /// The reward a trainer route uses (`?reward=`, else `[protocols] reward`); nullptr and a
  /// refusal naming `reward` when there is none.
  const backends::reward_entry* trainer_reward(const std::string& route, std::string_view target,
                                               codec_error& err) const;
  /// A trainer route's answer: the failed-items reply unless failures are scored
  /// (`protocols.on_failure = "score"`), else `body`.
  http_reply trainer_failure_or(const std::vector<item_result>& results, std::string body) const;
  /// The model id `source` serves (its name when it is not a pass-through source).
  std::string model_of(const std::string& source) const;
  /// Answers 503 while draining; true when it did.
  bool refuse_while_draining(const std::string& route, const reply_fn& reply,
                             error_style style = error_style::arbiter);
  /// Submits `req` and answers with `encode` of its results (or the refusal). `so_far`: the
  /// request is being sent again after a hold.
  void run(const std::string& route, steady_clock::time_point start, actors::score_request req,
           encode_fn encode, reply_fn reply, defer_fn defer,
           error_style style = error_style::arbiter, held_so_far so_far = {});
  /// Holds a trainer route's refused request for `wait` (`hold_refusal`), then sends it to
  /// the scheduler again (`run`) while its deadline leaves time, else answers the refusal.
  void hold_and_send_again(const std::string& route, steady_clock::time_point start,
                           actors::score_request again, encode_fn encode, reply_fn reply,
                           defer_fn defer, error_style style, held_so_far held,
                           std::chrono::nanoseconds wait);
  /// Hands a request to the scheduler (its shard, or its parts to theirs), coalescing it with
  /// others arriving at the same time.
  void submit(actors::score_request req, actors::reply_callback reply_to);
  /// Queues one submission for `shard`.
  void enqueue(size_t shard, actors::score_submission sub);
  /// Sends `abandon_atom` for `ticket` to every shard (a request may be split among them,
  /// and each ignores a ticket it does not hold).
  void abandon_on_every_shard(uint64_t ticket) const;
  /// Sends what `submit` collected.
  void flush();
  /// Asks every shard `msg` and hands `done` their answers in shard order, or `failed` the
  /// first error; on a short-lived bridge actor.
  template <class T, class Msg>
  void ask_shards(Msg msg, std::function<void(std::vector<T>)> done,
                  std::function<void(caf::error&)> failed);
  void info(reply_fn reply);
  /// GET /v1/steps (every recent step) and /v1/steps/STEP (one, or 404).
  void steps(std::string step, reply_fn reply);
  void respond(const std::string& route, http_reply r, const reply_fn& reply);
  /// Runs `fire(true)` after `delay`, or `fire(false)` at once when the drain begins or the
  /// client of `client_ticket` hangs up (a short-lived actor). `first`: the request's first
  /// hold (later ones find it gone when its client hung up while it was sent again).
  void hold_refusal(std::chrono::nanoseconds delay, uint64_t client_ticket, bool first,
                    std::function<void(bool)> fire);
  /// The ticket under which the held request of `client_ticket` goes to the scheduler again
  /// (a fresh one: a refused part of a request split among shards leaves its ticket abandoned
  /// on the shards that refused it), or 0 when its client has hung up meanwhile.
  uint64_t ticket_to_send_again(uint64_t client_ticket);
  /// The request of `client_ticket` was answered: it is held no more.
  void forget_held(uint64_t client_ticket);
  struct held_refusal {
    caf::actor holder;
    uint64_t client_ticket = 0;
  };
  /// The refusals held now, by number, for the drain and hang-ups to fire.
  std::mutex held_mutex_;
  std::unordered_map<uint64_t, held_refusal> held_;
  uint64_t next_held_ = 0;
  /// The requests held or sent again after a hold and not yet answered, by their client's
  /// ticket: the ticket they were last sent under.
  std::unordered_map<uint64_t, uint64_t> held_tickets_;
  uint64_t next_resend_ticket_ = 0;
  /// Counts a refusal under `reason` (arbiter_rejections_total) and answers `r`.
  void refuse(const std::string& route, const std::string& reason, http_reply r,
              const reply_fn& reply);
  /// Refuses a body a decoder rejected (400/404/413).
  void refuse_decoded(const std::string& route, const codec_error& err, const reply_fn& reply,
                      error_style style = error_style::arbiter);

  /// The models the pass-through routes serve now: the configured ones (`models_`) and
  /// those of the cluster's nodes that are up.
  std::shared_ptr<const std::vector<model_entry>> served_models() const;
  /// What the pass-through decoders need, with `models` for the model list and `job`'s
  /// client deadline.
  passthrough_context passthrough(const std::vector<model_entry>& models,
                                  const scoring_job& job) const {
    return {&codec_, &models, job.client_deadline};
  }

  router_context ctx_;
  codec_context codec_;
  /// The configured sources' and models' (fixed at start).
  std::vector<model_entry> models_;
  /// `served_models()`'s last answer, and the node_models version it was built from.
  mutable std::mutex served_mutex_;
  mutable std::shared_ptr<const std::vector<model_entry>> served_;
  mutable uint64_t served_version_ = 0;
  failure_policy failure_policy_;
  /// Unix seconds at start-up (`created` of /v1/models) and a counter for completion ids.
  int64_t started_unix_ = 0;
  std::atomic<uint64_t> completions_{0};
  std::atomic<bool> draining_{false};
  /// When the drain ends (steady_clock, nanoseconds since its epoch).
  std::atomic<int64_t> drain_ends_ns_{0};
  /// The seconds a client refused while draining should wait: the drain's time left, at
  /// least 1.
  int64_t drain_retry_after_s() const noexcept;
  std::vector<caf::actor> shards_;
  /// Requests of CPU rewards with no group go to the shards in turn.
  std::atomic<size_t> next_spare_{0};
  std::mutex pending_mutex_;
  /// What `submit` collected since the last flush, per shard.
  std::vector<std::vector<actors::score_submission>> pending_;
  bool flush_posted_ = false;
  prometheus::Histogram* parse_histogram_;
  prometheus::Histogram* request_histogram_;
};

} // namespace arbiter::net
