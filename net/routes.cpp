#include "net/routes.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include "actors/cluster.hpp"
#include "actors/messages.hpp"
#include "actors/replay_writer.hpp"
#include "actors/reward_graph_actor.hpp"
#include "actors/source_capabilities.hpp"
#include "backends/rewards/reward_kinds.hpp"
#include "arbiter/version.hpp"
#include "common/log.hpp"
#include "net/json_reading.hpp"
#include "net/shards.hpp"

namespace arbiter::net {

namespace {

using json = nlohmann::json;

double seconds_since(steady_clock::time_point start) {
  return std::chrono::duration<double>(steady_clock::now() - start).count();
}

std::vector<std::string> priority_names(const config::arbiter_config& cfg) {
  std::vector<std::string> names;
  for (const auto& p : cfg.scheduler.priorities) {
    names.push_back(p.name);
  }
  return names;
}

/// Adds `source`'s serving `id` for `cap` to `models`.
void add_served(std::vector<model_entry>& models, const std::string& id, capability cap,
                const std::string& source) {
  auto at = std::find_if(models.begin(), models.end(),
                         [&](const model_entry& m) { return m.id == id; });
  if (at == models.end()) {
    models.push_back({id, {}, {}, {}});
    at = models.end() - 1;
  }
  if (std::find(at->capabilities.begin(), at->capabilities.end(), cap)
      == at->capabilities.end()) {
    at->capabilities.push_back(cap);
  }
  if (std::find(at->sources.begin(), at->sources.end(), source) == at->sources.end()) {
    at->sources.push_back(source);
  }
}

/// The models the pass-through routes serve, from the configured sources.
std::vector<model_entry> configured_models(const config::arbiter_config& cfg) {
  std::vector<model_entry> models;
  for (const auto& src : cfg.sources) {
    for (auto cap : {capability::chat, capability::embed}) {
      if (!actors::serves(src, cap)) {
        continue;
      }
      add_served(models, actors::served_model(src), cap, src.name);
    }
  }
  for (const auto& m : cfg.models) {
    models.push_back({m.name, actors::model_capabilities(m), {m.name}, {}});
  }
  return models;
}

/// A decoded body's priority class, deadline and items into a scoring job, the items counted.
template <typename Job, typename Body>
void take_items(Job& job, Body& body) {
  job.counted_items = body.items.size();
  job.priority = body.priority;
  job.deadline = body.deadline;
  job.items = std::move(body.items);
  body.items.clear();
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace

router::router(router_context ctx) : ctx_(std::move(ctx)) {
  const auto& cfg = *ctx_.config;
  codec_.catalog = ctx_.catalog;
  codec_.priorities = priority_names(cfg);
  for (size_t i = 0; i < codec_.priorities.size(); ++i) {
    if (codec_.priorities[i] == cfg.scheduler.default_priority) {
      codec_.default_priority = i;
    }
  }
  codec_.default_deadline = cfg.scheduler.default_deadline;
  codec_.max_deadline = cfg.scheduler.max_deadline;
  codec_.max_batch_items = cfg.server.max_batch_items;
  models_ = configured_models(cfg);
  served_ = std::make_shared<const std::vector<model_entry>>(models_);
  if (cfg.protocols.on_failure == "score") {
    failure_policy_.score = cfg.protocols.failure_score;
  }
  started_unix_ = unix_seconds();
  parse_histogram_ = &ctx_.scheduler_metrics->stage("parse");
  request_histogram_ = &ctx_.scheduler_metrics->stage("request");
  shards_ = ctx_.shards.empty() ? std::vector<caf::actor>{ctx_.scheduler} : ctx_.shards;
  pending_.resize(shards_.size());
}

namespace {

/// `doc` as JSON text. Strings that are not valid UTF-8 (none should reach here) are written
/// with U+FFFD rather than throwing, which would take the answering actor down.
std::string json_text(const json& doc) {
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// `text` without the spaces and tabs around it (a header value's optional whitespace).
std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  return text;
}

/// Whether `text` equals `lower` (lower case) in any case.
bool iequals(std::string_view text, std::string_view lower) {
  return text.size() == lower.size()
         && std::equal(text.begin(), text.end(), lower.begin(), [](char x, char y) {
              return std::tolower(static_cast<unsigned char>(x)) == y;
            });
}

/// Whether a Content-Encoding leaves the body as sent: none, or `identity`.
bool is_identity_encoding(std::string_view encoding) {
  encoding = trim_blanks(encoding);
  return encoding.empty() || iequals(encoding, "identity");
}

/// Whether a Transfer-Encoding holds no coding but `chunked` (which the parser undoes); a
/// compressed one (`gzip, chunked`) would hand the route bytes it cannot read.
bool only_chunked(std::string_view codings) {
  while (!codings.empty()) {
    auto comma = codings.find(',');
    auto coding = trim_blanks(codings.substr(0, comma));
    if (!coding.empty() && !iequals(coding, "chunked")) {
      return false;
    }
    codings = comma == std::string_view::npos ? std::string_view{} : codings.substr(comma + 1);
  }
  return true;
}

/// The deadline of a pass-through request whose client says how long it waits for the answer
/// (`X-Stainless-Read-Timeout: 600.0`, seconds, from the OpenAI SDKs): that wait less a tenth,
/// at most a second, so that the answer (a 504 included) comes while the client still reads,
/// at most `max`. Unset when the header is absent or not a positive number of seconds.
std::optional<std::chrono::milliseconds> client_deadline(std::string_view timeout,
                                                         std::chrono::milliseconds max) {
  timeout = trim_blanks(timeout);
  double seconds = 0.0;
  const auto* end = timeout.data() + timeout.size();
  auto [at, ec] = std::from_chars(timeout.data(), end, seconds);
  if (timeout.empty() || ec != std::errc{} || at != end || !std::isfinite(seconds)
      || seconds <= 0.0) {
    return std::nullopt;
  }
  const double wait_ms = std::min(seconds * 1000.0, static_cast<double>(max.count()) + 1000.0);
  const double ms = wait_ms - std::min(1000.0, wait_ms / 10.0);
  return std::chrono::milliseconds{
    std::clamp<int64_t>(static_cast<int64_t>(ms), 1, max.count())};
}

/// Drops a UTF-8 byte order mark before a JSON body, which some Windows tools write: JSON
/// parsers may ignore one (RFC 8259 §8.1), and a client cannot see it in its own text.
void skip_byte_order_mark(std::string& body) {
  if (body.rfind("\xEF\xBB\xBF", 0) == 0) {
    body.erase(0, 3);
  }
}

/// Whether a Content-Type names JSON: `application/json` or `application/SOMETHING+json`,
/// any case, with or without parameters. An absent one is taken as JSON (curl's `-d` and
/// some HTTP libraries send none).
bool is_json_content_type(std::string_view type) {
  type = trim_blanks(type.substr(0, type.find(';')));
  if (type.empty()) {
    return true;
  }
  constexpr std::string_view prefix = "application/";
  if (type.size() <= prefix.size() || !iequals(type.substr(0, prefix.size()), prefix)) {
    return false;
  }
  const std::string_view subtype = type.substr(prefix.size());
  return iequals(subtype, "json")
         || (subtype.size() > 5 && iequals(subtype.substr(subtype.size() - 5), "+json"));
}

} // namespace

const router::route_spec router::routes_[] = {
    {"/v1/score", "POST", error_style::arbiter, access::keyed, true, false,
     &router::decode_score},
    {"/compute_info_gain", "POST", error_style::arbiter, access::keyed, true, false,
     &router::decode_info_gain},
    {"/get_reward", "POST", error_style::arbiter, access::keyed, true, true,
     &router::decode_get_reward},
    {"/remote_rm", "POST", error_style::arbiter, access::keyed, true, true,
     &router::decode_remote_rm},
    {"/v1/chat/completions", "POST", error_style::openai, access::keyed, true, false,
     &router::decode_chat},
    {"/v1/embeddings", "POST", error_style::openai, access::keyed, true, false,
     &router::decode_embeddings},
    {"/embed", "POST", error_style::tei, access::keyed, true, false, &router::decode_tei_embed},
    {"/predict", "POST", error_style::tei, access::keyed, true, false, &router::decode_predict},
    {"/v1/models", "GET", error_style::openai, access::keyed, false},
    {"/health", "GET", error_style::arbiter, access::open, false},
    {"/info", "GET", error_style::arbiter, access::info, false},
    {"/v1/steps", "GET", error_style::arbiter, access::keyed, false},
    // Ends with '/': matches every path under it (/v1/steps/STEP).
    {"/v1/steps/", "GET", error_style::arbiter, access::keyed, false},
    {"/metrics", "GET", error_style::arbiter, access::metrics, false},
};

const router::route_spec* router::find_route(std::string_view path) {
  for (const auto& route : routes_) {
    if (route.path == path) {
      return &route;
    }
  }
  for (const auto& route : routes_) {
    if (route.path.size() > 1 && route.path.back() == '/' && path.size() > route.path.size()
        && path.substr(0, route.path.size()) == route.path) {
      return &route;
    }
  }
  return nullptr;
}

void router::handle(http_request req, reply_fn reply, defer_fn defer) {
  const std::string_view method = req.method;
  const std::string_view target = req.target;
  auto path = target.substr(0, target.find('?'));
  const route_spec* spec = find_route(path);
  if (spec == nullptr) {
    http_reply r;
    r.status = 404;
    r.body = encode_error("not_found",
                          "no route for " + std::string{method} + " " + std::string{path});
    refuse("other", "not_found", std::move(r), reply);
    return;
  }
  const std::string route{spec->path};
  const auto& server = ctx_.config->server;
  const bool needs_key = spec->who == access::keyed
                         || (spec->who == access::metrics && !server.metrics_public)
                         || (spec->who == access::info && !server.info_public);
  std::string_view authorization = req.authorization;
  std::string from_query;
  if (needs_key && authorization.empty() && spec->key_in_query) {
    if (auto key = query_parameter(target, "api_key")) {
      from_query = "Bearer " + *key;
      authorization = from_query;
    }
  }
  if (needs_key && !ctx_.keys.accepts(authorization)) {
    http_reply r;
    r.status = 401;
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    // A key in the URL of a route that reads it from the header only: a client given one URL
    // for every route was told it sent none.
    const bool key_in_url = authorization.empty() && !spec->key_in_query
                            && query_parameter(target, "api_key").has_value();
    r.body = error_body(spec->style, 401, "invalid_api_key",
                        key_in_url
                          ? "no API key: this route reads it from the Authorization header "
                            "only (send Authorization: Bearer KEY with a key from "
                            "server.api_keys); ?api_key= is read on /get_reward and /remote_rm"
                        : authorization.empty()
                          ? "no API key: send Authorization: Bearer KEY with a key from "
                            "server.api_keys"
                          : !from_query.empty()
                            ? "incorrect API key: the api_key query parameter is none of "
                              "server.api_keys"
                            : "incorrect API key: the Authorization header's Bearer key is "
                              "none of server.api_keys");
    refuse(route, "unauthorized", std::move(r), reply);
    return;
  }
  // HEAD is served as GET (the ingress then sends the headers only).
  if (method != spec->method && !(method == "HEAD" && spec->method == "GET")) {
    http_reply r;
    r.status = 405;
    r.headers.emplace_back("Allow", std::string{spec->method});
    r.body = encode_error("method_not_allowed", route + " accepts only "
                                                  + std::string{spec->method} + ", not "
                                                  + std::string{method});
    ctx_.metrics->reject("method_not_allowed");
    respond(route, std::move(r), reply);
    return;
  }
  if (spec->json_body && !is_json_content_type(req.content_type)) {
    http_reply r;
    r.status = 415;
    r.body = error_body(spec->style, 415, "unsupported_media_type",
                        "Content-Type: expected application/json, got "
                          + std::string{req.content_type}
                          + (req.content_type.rfind("application/x-www-form-urlencoded", 0) == 0
                               ? " (curl -d sends that: add -H 'Content-Type: "
                                 "application/json')"
                               : ""),
                        "Content-Type");
    refuse(route, "unsupported_media_type", std::move(r), reply);
    return;
  }
  if (spec->json_body && !only_chunked(req.transfer_encoding)) {
    // RFC 9112 §6.1: a transfer coding the server does not understand is answered 501.
    http_reply r;
    r.status = 501;
    r.body = error_body(spec->style, 501, "not_implemented",
                        "Transfer-Encoding: " + std::string{req.transfer_encoding}
                          + " is not supported: send the body uncompressed (chunked is fine)",
                        "Transfer-Encoding");
    refuse(route, "not_implemented", std::move(r), reply);
    return;
  }
  if (spec->json_body && !is_identity_encoding(req.content_encoding)) {
    http_reply r;
    r.status = 415;
    r.headers.emplace_back("Accept-Encoding", "identity");
    r.body = error_body(spec->style, 415, "unsupported_media_type",
                        "Content-Encoding: " + std::string{req.content_encoding}
                          + " is not supported: send the body uncompressed",
                        "Content-Encoding");
    refuse(route, "unsupported_media_type", std::move(r), reply);
    return;
  }
  if (spec->json_body) {
    skip_byte_order_mark(req.body);
  }
  if (spec->decode != nullptr) {
    serve_scoring(route, spec->style, spec->decode, std::move(req), std::move(reply),
                  std::move(defer));
    return;
  }
  if (path == "/v1/models") {
    http_reply r;
    r.body = encode_models(*served_models(), started_unix_);
    respond(route, std::move(r), reply);
  } else if (path == "/health") {
    http_reply r;
    r.status = draining_ ? 503 : 200;
    r.body = draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})";
    respond(route, std::move(r), reply);
  } else if (path == "/info") {
    info(std::move(reply));
  } else if (route == "/v1/steps" || route == "/v1/steps/") {
    steps(route == "/v1/steps" ? std::string{} : percent_decode(path.substr(route.size()), false),
          std::move(reply));
  } else {
    http_reply r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (ctx_.gpus != nullptr) {
      ctx_.gpus->read();
    }
    r.body = ctx_.registry->render();
    respond(route, std::move(r), reply);
  }
}

void router::count_protocol_error(const std::string& reason, unsigned status) {
  ctx_.metrics->reject(reason);
  ctx_.metrics->count("other", status);
}

void router::respond(const std::string& route, http_reply r, const reply_fn& reply) {
  ctx_.metrics->count(route, r.status);
  reply(std::move(r));
}

void router::refuse(const std::string& route, const std::string& reason, http_reply r,
                    const reply_fn& reply) {
  ctx_.metrics->reject(reason);
  respond(route, std::move(r), reply);
}

void router::refuse_decoded(const std::string& route, const codec_error& err,
                            const reply_fn& reply, error_style style) {
  // A body that can never be served: invalid (400), naming an unknown model (404) or too
  // large (413); or one naming a model only lost cluster nodes serve (503: a restarted node
  // joins again within a second or two).
  auto answer = refusal_answer_for(err.why);
  http_reply r;
  r.status = answer.status;
  r.body = error_body(style, answer.status, answer.code, err.message, err.field);
  if (err.why == refusal::model_away) {
    r.headers.emplace_back("Retry-After", "2");
  }
  refuse(route, std::string{answer.reason}, std::move(r), reply);
}

void router::serve_scoring(const std::string& route, error_style style, decoder decode,
                           http_request req, reply_fn reply, defer_fn defer) {
  auto start = steady_clock::now();
  if (refuse_while_draining(route, reply, style)) {
    return;
  }
  const std::string_view step = req.step;
  scoring_job job;
  job.client_deadline = client_deadline(req.client_timeout, codec_.max_deadline);
  codec_error err;
  bool ok = (this->*decode)(req.body, req.target, job, err);
  if (!ok) {
    name_malformed_body(req.body, err);
  }
  parse_histogram_->Observe(seconds_since(start));
  if (ok && step.size() > max_tag_bytes) {
    ok = false;
    err = {refusal::invalid, "X-Arbiter-Step",
           "X-Arbiter-Step: longer than " + std::to_string(max_tag_bytes) + " bytes"};
  }
  if (ok && !is_valid_utf8(step)) {
    // A header's bytes are the client's own encoding (Latin-1 from many HTTP libraries): the
    // step is shown in JSON (/v1/steps, the replay log), which holds UTF-8 only.
    ok = false;
    err = {refusal::invalid, "X-Arbiter-Step",
           "X-Arbiter-Step: not valid UTF-8 (send the step's name UTF-8 encoded, or in the "
           "body's `step` field)"};
  }
  if (!ok) {
    refuse_decoded(route, err, reply, style);
    return;
  }
  if (!step.empty()) {
    for (auto& item : job.items) {
      if (item.step.empty()) {
        item.step.assign(step);
      }
    }
  }
  if (job.counted_items) {
    ctx_.metrics->request_items.Observe(static_cast<double>(*job.counted_items));
  }
  if (job.items.empty() && job.answer_empty_at_once) {
    respond(route, job.encode({}, {}), reply);
    return;
  }
  actors::score_request sreq;
  sreq.priority = job.priority;
  sreq.deadline = start + job.deadline;
  sreq.ticket = req.ticket;
  sreq.items = share_items(std::move(job.items));
  run(route, start, std::move(sreq), std::move(job.encode), std::move(reply), std::move(defer),
      style);
}

// ---- the scoring routes' decoders --------------------------------------------------------

bool router::decode_score(std::string_view body, std::string_view target, scoring_job& job,
                          codec_error& err) {
  score_request_body decoded;
  if (!refuse_query(target, err) || !decode_score_request(body, codec_, decoded, err)) {
    return false;
  }
  take_items(job, decoded);
  job.encode = [](const std::vector<item_result>& results, const group_list& groups) {
    http_reply r;
    r.body = encode_score_response(results, groups);
    return r;
  };
  return true;
}

bool router::decode_info_gain(std::string_view body, std::string_view target,
                              scoring_job& job, codec_error& err) {
  auto decoded = std::make_shared<info_gain_request_body>();
  if (!refuse_query(target, err) || !decode_info_gain_request(body, codec_, *decoded, err)) {
    return false;
  }
  take_items(job, *decoded);
  job.counted_items = decoded->positions.size();
  // Every item answered with its error: nothing to schedule.
  job.answer_empty_at_once = true;
  job.encode = [decoded](const std::vector<item_result>& results, const group_list&) {
    http_reply r;
    r.body = encode_info_gain_response(*decoded, results);
    return r;
  };
  return true;
}

const backends::reward_entry* router::trainer_reward(const std::string& route,
                                                     std::string_view target,
                                                     codec_error& err) const {
  auto name = query_parameter(target, "reward").value_or(ctx_.config->protocols.reward);
  if (name.empty()) {
    err = {refusal::invalid, "reward",
           "reward: name the reward in the URL (" + route
             + "?reward=NAME) or set protocols.reward in the configuration"};
    return nullptr;
  }
  const auto* reward = ctx_.catalog->find(name);
  if (reward == nullptr) {
    err = {refusal::invalid, "reward",
           "reward: unknown reward '" + name + "' (GET /info lists them)"};
  }
  return reward;
}

std::shared_ptr<const std::vector<model_entry>> router::served_models() const {
  if (ctx_.node_models == nullptr) {
    return served_;  // set once in the constructor: no lock on a server without a cluster
  }
  std::lock_guard<std::mutex> lock{served_mutex_};
  const auto nodes = ctx_.node_models->get();
  if (nodes.version != served_version_) {
    auto models = models_;
    for (const auto& e : *nodes.entries) {
      if (e.away.empty()) {
        add_served(models, e.model, e.cap, e.source);
      }
    }
    for (const auto& e : *nodes.entries) {
      if (!e.away.empty()) { // after every served entry: a model served elsewhere is served
        models.push_back({e.model, {e.cap}, {}, e.away});
      }
    }
    served_ = std::make_shared<const std::vector<model_entry>>(std::move(models));
    served_version_ = nodes.version;
  }
  return served_;
}

std::string router::model_of(const std::string& source) const {
  for (const auto& m : *served_models()) {
    if (std::find(m.sources.begin(), m.sources.end(), source) != m.sources.end()) {
      return m.id;
    }
  }
  return source;
}

http_reply router::trainer_failure_or(const std::vector<item_result>& results,
                                      std::string body) const {
  if (!failure_policy_.score) {
    if (auto failed = failed_items_reply(results, error_style::arbiter)) {
      return std::move(*failed);
    }
  }
  http_reply r;
  r.body = std::move(body);
  return r;
}

bool router::decode_get_reward(std::string_view body, std::string_view target,
                               scoring_job& job, codec_error& err) {
  const auto* reward = trainer_reward("/get_reward", target, err);
  if (reward == nullptr || !decode_openrlhf_request(body, *reward, codec_, job.items, err)) {
    return false;
  }
  if (!job.items.empty()) {
    job.counted_items = job.items.size();
  }
  job.priority = codec_.default_priority;
  auto deadline = codec_.default_deadline;
  if (!read_trainer_query(target, codec_, job.priority, deadline, err)) {
    return false;
  }
  job.deadline = deadline;
  // OpenRLHF sends empty lists to every URL but the first.
  job.answer_empty_at_once = true;
  std::vector<std::string> groups;
  groups.reserve(job.items.size());
  for (const auto& item : job.items) {
    groups.push_back(item.group);
  }
  job.encode = [this, groups = std::move(groups)](const std::vector<item_result>& results,
                                                  const group_list& summaries) {
    return trainer_failure_or(
      results, encode_openrlhf_response(results, failure_policy_, groups, summaries));
  };
  return true;
}

bool router::decode_remote_rm(std::string_view body, std::string_view target, scoring_job& job,
                              codec_error& err) {
  const auto* reward = trainer_reward("/remote_rm", target, err);
  score_item item;
  if (reward == nullptr || !decode_slime_request(body, *reward, item, err)) {
    return false;
  }
  job.counted_items = 1;
  job.priority = codec_.default_priority;
  auto deadline = codec_.default_deadline;
  if (!read_trainer_query(target, codec_, job.priority, deadline, err)) {
    return false;
  }
  job.deadline = deadline;
  job.items.push_back(std::move(item));
  job.encode = [this](const std::vector<item_result>& results, const group_list&) {
    auto reply = trainer_failure_or(results,
                                    encode_slime_response(results.at(0),
                                                          ctx_.config->protocols.slime_reward_key,
                                                          failure_policy_));
    if (reply.status == 200 && results.at(0).status == item_status::failed) {
      // A failure score: a bare number cannot say so, its header does (both forms carry it).
      reply.headers.emplace_back("X-Arbiter-Failed", to_string(results.at(0).code));
    }
    return reply;
  };
  return true;
}

bool router::decode_chat(std::string_view body, std::string_view /*target*/, scoring_job& job,
                         codec_error& err) {
  auto decoded = std::make_shared<chat_request_body>();
  if (!decode_chat_request(body, passthrough(*served_models(), job), *decoded, err)) {
    return false;
  }
  job.counted_items = 1;
  job.priority = decoded->priority;
  job.deadline = decoded->deadline;
  job.items.push_back(decoded->item);
  job.encode = [this, decoded](const std::vector<item_result>& results, const group_list&) {
    if (auto failed = failed_items_reply(results, error_style::openai)) {
      return std::move(*failed);
    }
    http_reply r;
    std::string id = "chatcmpl-arbiter-" + std::to_string(started_unix_) + "-"
                     + std::to_string(completions_.fetch_add(1) + 1);
    if (decoded->model.empty()) {
      decoded->model = model_of(results.at(0).source);
    }
    r.body = encode_chat_response(*decoded, results.at(0), id, unix_seconds());
    return r;
  };
  return true;
}

bool router::decode_embeddings(std::string_view body, std::string_view /*target*/,
                               scoring_job& job, codec_error& err) {
  return embed_job(false, body, job, err);
}

bool router::decode_tei_embed(std::string_view body, std::string_view /*target*/,
                              scoring_job& job, codec_error& err) {
  return embed_job(true, body, job, err);
}

bool router::embed_job(bool tei, std::string_view body, scoring_job& job, codec_error& err) {
  auto decoded = std::make_shared<embed_request_body>();
  const auto models = served_models();
  bool ok = tei ? net::decode_tei_embed(body, passthrough(*models, job), *decoded, err)
                : decode_openai_embeddings(body, passthrough(*models, job), *decoded, err);
  if (!ok) {
    return false;
  }
  take_items(job, *decoded);
  job.encode = [this, decoded, tei](const std::vector<item_result>& results, const group_list&) {
    if (auto failed = failed_items_reply(results, tei ? error_style::tei : error_style::openai)) {
      return std::move(*failed);
    }
    if (decoded->dimensions > 0) {
      // More values than the model gives cannot be made up (OpenAI refuses them too).
      for (const auto& result : results) {
        if (result.output && result.output->embedding.size() < decoded->dimensions) {
          const auto style = tei ? error_style::tei : error_style::openai;
          http_reply r;
          r.status = 400;
          r.body = error_body(style, 400, "invalid_request",
                              "dimensions: " + std::to_string(decoded->dimensions)
                                + " asks for more values than the model's vectors have ("
                                + std::to_string(result.output->embedding.size()) + ")",
                              "dimensions");
          return r;
        }
      }
    }
    if (decoded->model.empty() && !results.empty()) {
      decoded->model = model_of(results.front().source);
    }
    http_reply r;
    r.body = tei ? encode_tei_embed(*decoded, results)
                 : encode_openai_embeddings(*decoded, results);
    return r;
  };
  return true;
}

bool router::decode_predict(std::string_view body, std::string_view /*target*/,
                            scoring_job& job, codec_error& err) {
  auto decoded = std::make_shared<predict_request_body>();
  if (!decode_tei_predict(body, passthrough(*served_models(), job), *decoded, err)) {
    return false;
  }
  take_items(job, *decoded);
  job.encode = [decoded](const std::vector<item_result>& results, const group_list&) {
    if (auto failed = failed_items_reply(results, error_style::tei)) {
      return std::move(*failed);
    }
    http_reply r;
    r.body = encode_tei_predict(*decoded, results);
    return r;
  };
  return true;
}

int64_t router::drain_retry_after_s() const noexcept {
  const auto left = std::chrono::steady_clock::time_point{
                      std::chrono::steady_clock::duration{drain_ends_ns_.load()}}
                    - std::chrono::steady_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
  return std::max<int64_t>(1, (ms + 999) / 1000);
}

bool router::refuse_while_draining(const std::string& route, const reply_fn& reply,
                                   error_style style) {
  if (!draining_) {
    return false;
  }
  refuse(route, "draining",
         failure_reply(style, errc::shutting_down, "the server is shutting down", {},
                       drain_retry_after_s()),
         reply);
  return true;
}

void router::begin_drain(std::chrono::milliseconds drain_timeout) noexcept {
  drain_ends_ns_ = (std::chrono::steady_clock::now() + drain_timeout).time_since_epoch().count();
  draining_ = true;
  try {
    std::unordered_map<uint64_t, held_refusal> held;
    {
      std::lock_guard<std::mutex> lock(held_mutex_);
      held.swap(held_);
      ctx_.metrics->held_now.Set(0);
    }
    for (auto& entry : held) {
      caf::anon_send(entry.second.holder, caf::ok_atom::value, false);
    }
  } catch (...) {
    // Out of memory: the held refusals are answered when their time comes.
  }
}

void router::hold_refusal(std::chrono::nanoseconds delay, uint64_t client_ticket, bool first,
                          std::function<void(bool)> fire) {
  // The lock is held while the actor starts, so that it finds itself listed when it fires.
  std::lock_guard<std::mutex> lock(held_mutex_);
  auto number = ++next_held_;
  auto holder = ctx_.system->spawn(
    [this, number, delay, fire = std::move(fire)](caf::event_based_actor* self) -> caf::behavior {
      self->delayed_send(self, delay, caf::ok_atom::value, true);
      return {[this, self, number, fire](caf::ok_atom, bool in_time) {
        {
          std::lock_guard<std::mutex> fired(held_mutex_);
          held_.erase(number);
          ctx_.metrics->held_now.Set(static_cast<double>(held_.size()));
        }
        fire(in_time);
        self->quit();
      }};
    });
  // A request sent again whose client hung up meanwhile is not held again.
  bool gone = false;
  if (client_ticket != 0) {
    if (first) {
      held_tickets_.emplace(client_ticket, client_ticket);
    } else {
      gone = held_tickets_.count(client_ticket) == 0;
    }
  }
  if (draining_ || gone) {
    caf::anon_send(holder, caf::ok_atom::value, false);
    return;
  }
  held_.emplace(number, held_refusal{std::move(holder), client_ticket});
  ctx_.metrics->held_now.Set(static_cast<double>(held_.size()));
}

uint64_t router::ticket_to_send_again(uint64_t client_ticket) {
  if (client_ticket == 0) {
    return 0;
  }
  std::lock_guard<std::mutex> lock(held_mutex_);
  auto found = held_tickets_.find(client_ticket);
  if (found == held_tickets_.end()) {
    return 0;  // its client hung up
  }
  // Apart from the HTTP server's tickets, which count up from 1.
  found->second = (uint64_t{1} << 63) | ++next_resend_ticket_;
  return found->second;
}

void router::forget_held(uint64_t client_ticket) {
  if (client_ticket != 0) {
    std::lock_guard<std::mutex> lock(held_mutex_);
    held_tickets_.erase(client_ticket);
  }
}

namespace {

/// The 429 of a trainer route's request held after a refusal, when it is not admitted again.
http_reply held_reply(error_style style, const held_so_far& held) {
  auto held_ms = std::chrono::duration_cast<std::chrono::milliseconds>(held.held).count();
  return failure_reply(
      style, errc::overloaded,
      held.reason + " (held " + std::to_string(held_ms)
          + " ms for a client that retries at once; tried "
          + (held.sent == 1 ? std::string{"once"} : std::to_string(held.sent) + " times") + ")",
      {}, held.retry_after_s);
}

} // namespace

void router::hold_and_send_again(const std::string& route, steady_clock::time_point start,
                                 actors::score_request again, encode_fn encode, reply_fn reply,
                                 defer_fn defer, error_style style, held_so_far held,
                                 std::chrono::nanoseconds wait) {
  const auto deadline = again.deadline;
  const auto client_ticket = held.client_ticket;
  const bool first = held.sent == 1;
  hold_refusal(
      wait, client_ticket, first,
      [this, route, start, again = std::move(again), encode = std::move(encode),
       reply = std::move(reply), defer = std::move(defer), style, held = std::move(held),
       deadline](bool in_time) mutable {
        defer([this, route, start, again = std::move(again), encode = std::move(encode), reply,
               defer, style, held = std::move(held), deadline, in_time]() mutable {
          if (in_time && !draining_
              && deadline - std::chrono::steady_clock::now() >= std::chrono::milliseconds{100}) {
            again.ticket = ticket_to_send_again(held.client_ticket);
            if (again.ticket != 0 || held.client_ticket == 0) {
              ctx_.metrics->held_sent_again.Increment();
              run(route, start, std::move(again), std::move(encode), std::move(reply),
                  std::move(defer), style, std::move(held));
              return;
            }
          }
          // Its deadline has come, the drain began or its client hung up.
          forget_held(held.client_ticket);
          ctx_.metrics->held_answered.Increment();
          refuse(route, held.rejection, held_reply(style, held), reply);
        });
      });
}

void router::run(const std::string& route, steady_clock::time_point start,
                 actors::score_request req, encode_fn encode, reply_fn reply, defer_fn defer,
                 error_style style, held_so_far so_far) {
  // OpenRLHF's and slime's clients send a refused request again at once, whatever its
  // Retry-After says (OpenRLHF: 5 attempts, 1 s apart): a herd the providers' pace could not
  // take before its deadline lost its samples' rewards in 5 s (helper-72: 96 of 320). Their
  // routes wait a refusal's Retry-After out for them and send the request again, until its
  // deadline: an attempt then ends when its items are scored or its deadline has come.
  const bool hold = route == "/get_reward" || route == "/remote_rm";
  const auto deadline = req.deadline;
  if (so_far.sent == 0) {
    so_far.client_ticket = req.ticket;
  }
  ++so_far.sent;
  // What a hold sends again: the same items (shared, not copied) and deadline.
  std::optional<actors::score_request> again;
  if (hold) {
    again = req;
  }
  // The scheduler answers every admitted request by its deadline (and fails pending ones if it
  // ever fails itself), calling this on its own thread; the encoding and the write happen on
  // the connection's strand.
  actors::reply_callback reply_to = [this, start, route, style, hold, deadline, so_far,
                                     again = std::move(again), encode = std::move(encode),
                                     reply = std::move(reply),
                                     defer = std::move(defer)](actors::score_reply&& answer) {
    defer([this, start, route, style, hold, deadline, so_far, again, encode, reply, defer,
           answer = std::move(answer)]() mutable {
      // A request sent again is held again when refused: the pace estimate behind a
      // `deadline_unmeetable` is cautious, so one sent again with less time left is often
      // admitted, and the client's attempts then last a deadline each (OpenRLHF's own client,
      // 320 samples 40 at a time against a deadline of 20 s: 7 refusals reached it, not 70,
      // though 7 samples took two deadlines where they would have taken one and a bit).
      if (!answer.admitted && hold && !draining_ && answer.retry_after_s > 0
          && (answer.rejection == "queue_full" || answer.rejection == "deadline_unmeetable")) {
        auto left = deadline - std::chrono::steady_clock::now();
        auto wait = std::min<std::chrono::nanoseconds>(std::chrono::seconds{answer.retry_after_s},
                                                       left);
        if (wait >= std::chrono::milliseconds{100}) {
          auto held = so_far;
          held.held += wait;
          held.rejection = answer.rejection;
          held.reason = answer.reason;
          // What is left of the Retry-After when it is answered (at least 1 s).
          held.retry_after_s = std::max<int64_t>(
            1, answer.retry_after_s
                 - std::chrono::duration_cast<std::chrono::seconds>(wait).count());
          hold_and_send_again(route, start, std::move(*again), std::move(encode),
                              std::move(reply), std::move(defer), style, std::move(held),
                              wait);
          return;
        }
      }
      if (so_far.sent > 1) {
        forget_held(so_far.client_ticket);
        if (!answer.admitted
            && (answer.rejection == "queue_full" || answer.rejection == "deadline_unmeetable"
                || answer.rejection == "too_large")) {
          auto last = so_far;
          // Too large for the time it has left now, not for its deadline: answered with the
          // refusal it was held for.
          if (answer.rejection != "too_large") {
            last.rejection = answer.rejection;
            last.reason = answer.reason;
            last.retry_after_s = std::max<int64_t>(1, answer.retry_after_s);
          }
          refuse(route, last.rejection, held_reply(style, last), reply);
          return;
        }
      }
      if (!answer.admitted) {
        if (answer.rejection == "too_large") {
          // More items than the priority class ever holds, or than its deadline allows on an
          // idle server: a retry cannot help. The field is the route's list.
          const char* field = route == "/v1/embeddings"                      ? "input"
                              : route == "/embed" || route == "/predict" ? "inputs"
                                                                         : "items";
          http_reply r;
          r.status = 413;
          r.body = error_body(style, 413, "payload_too_large", answer.reason, field);
          refuse(route, "too_large", std::move(r), reply);
          return;
        }
        // Refused by admission ("queue_full", "deadline_unmeetable"), while draining, or by
        // a scheduler that failed ("internal").
        bool internal = answer.rejection == "internal";
        errc code = answer.rejection == "draining" ? errc::shutting_down
                    : internal                     ? errc::internal
                                                   : errc::overloaded;
        refuse(route, internal ? "scheduler_error" : answer.rejection,
               failure_reply(style, code, answer.reason, {},
                             code == errc::shutting_down && draining_
                               ? drain_retry_after_s()
                               : answer.retry_after_s),
               reply);
        return;
      }
      auto& results = answer.results;
      for (size_t i = 0; i < results.size() && i < answer.items.size(); ++i) {
        // A failed (or fallen back) item of a kind with fields beside its score reports them
        // too (as a miss), so every result has the same keys.
        if (results[i].status != item_status::ok && results[i].extra.empty()
            && answer.items[i]) {
          if (const auto* kind = backends::find_reward_kind(answer.items[i]->kind)) {
            results[i].extra = kind->failed_extra;
          }
        }
      }
      http_reply r = encode(results, answer.groups);
      request_histogram_->Observe(seconds_since(start));
      respond(route, std::move(r), reply);
    });
  };
  submit(std::move(req), std::move(reply_to));
}

void router::submit(actors::score_request req, actors::reply_callback reply_to) {
  size_t shard = 0;
  if (shards_.size() > 1 && !req.internal) {
    auto plan = plan_shards(req.items, shards_.size(),
                            next_spare_.fetch_add(1, std::memory_order_relaxed));
    if (plan.size() > 1) {
      std::function<void()> on_refused;
      if (req.ticket != 0) {
        // A part refused: the request is refused whole, so the admitted parts' work stops.
        on_refused = [this, ticket = req.ticket] { abandon_on_every_shard(ticket); };
      }
      auto parts = split_request(std::move(req), plan, std::move(reply_to),
                                 std::move(on_refused));
      for (auto& part : parts) {
        enqueue(part.shard, std::move(part.submission));
      }
      return;
    }
    shard = plan.front().shard;
  }
  enqueue(shard, {std::move(req), std::move(reply_to)});
}

bool router::abandonable(std::string_view target) const {
  const route_spec* spec = find_route(target.substr(0, target.find('?')));
  return spec != nullptr && spec->decode != nullptr;
}

std::string request_handler::error_body_for(std::string_view /*target*/, unsigned /*status*/,
                                            std::string_view code,
                                            std::string_view message) const {
  return encode_error(code, message);
}

std::string router::error_body_for(std::string_view target, unsigned status,
                                   std::string_view code, std::string_view message) const {
  const route_spec* spec = find_route(target.substr(0, target.find('?')));
  return error_body(spec == nullptr ? error_style::arbiter : spec->style, status, code, message);
}

void router::abandon(uint64_t ticket) {
  if (ticket == 0) {
    return;
  }
  ctx_.metrics->abandoned.Increment();
  abandon_on_every_shard(ticket);
  // A request held after a refusal is answered now and not sent again; one sent again ends.
  uint64_t sent_as = 0;
  {
    std::lock_guard<std::mutex> lock(held_mutex_);
    auto found = held_tickets_.find(ticket);
    if (found == held_tickets_.end()) {
      return;
    }
    sent_as = found->second;
    held_tickets_.erase(found);
    for (const auto& entry : held_) {
      if (entry.second.client_ticket == ticket) {
        caf::anon_send(entry.second.holder, caf::ok_atom::value, false);
      }
    }
  }
  if (sent_as != ticket) {
    abandon_on_every_shard(sent_as);
  }
}

void router::abandon_on_every_shard(uint64_t ticket) const {
  // Each shard ignores a ticket it does not hold (after remembering it briefly, in case its
  // part is still on its way).
  for (const auto& shard : shards_) {
    caf::anon_send(shard, actors::abandon_atom::value, ticket);
  }
}

void router::enqueue(size_t shard, actors::score_submission sub) {
  if (!ctx_.post) {
    caf::anon_send(shards_[shard], actors::score_atom::value, std::move(sub.request),
                   std::move(sub.reply_to));
    return;
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> guard{pending_mutex_};
    first = !flush_posted_;
    flush_posted_ = true;
    pending_[shard].push_back(std::move(sub));
  }
  if (first) {
    ctx_.post([this] { flush(); });
  }
}

void router::flush() {
  std::vector<std::vector<actors::score_submission>> batches(shards_.size());
  {
    std::lock_guard<std::mutex> guard{pending_mutex_};
    batches.swap(pending_);
    flush_posted_ = false;
  }
  for (size_t shard = 0; shard < batches.size(); ++shard) {
    auto& batch = batches[shard];
    if (batch.size() == 1) {
      auto& only = batch.front();
      caf::anon_send(shards_[shard], actors::score_atom::value, std::move(only.request),
                     std::move(only.reply_to));
    } else if (!batch.empty()) {
      caf::anon_send(shards_[shard], actors::score_atom::value, std::move(batch));
    }
  }
}

template <class T, class Msg>
void router::ask_shards(Msg msg, std::function<void(std::vector<T>)> done,
                        std::function<void(caf::error&)> failed) {
  struct gathered {
    std::vector<T> answers;
    size_t left = 0;
    bool over = false;
  };
  ctx_.system->spawn([shards = shards_, msg, done = std::move(done),
                      failed = std::move(failed)](caf::event_based_actor* self) {
    auto state = std::make_shared<gathered>();
    state->answers.resize(shards.size());
    state->left = shards.size();
    for (size_t i = 0; i < shards.size(); ++i) {
      std::apply(
        [&](auto&&... args) {
          self->request(shards[i], std::chrono::seconds{5}, args...)
            .then(
              [state, done, i](T& answer) {
                if (state->over) {
                  return;
                }
                state->answers[i] = std::move(answer);
                if (--state->left == 0) {
                  state->over = true;
                  done(std::move(state->answers));
                }
              },
              [state, failed](caf::error& e) {
                if (!state->over) {
                  state->over = true;
                  failed(e);
                }
              });
        },
        msg);
    }
  });
}

void router::info(reply_fn reply) {
  ask_shards<actors::scheduler_info>(
    std::make_tuple(actors::info_atom::value),
    [this, reply](std::vector<actors::scheduler_info> shards) {
      auto sharded = merge_snapshots(std::move(shards));
      ctx_.system->spawn([this, reply, snap = std::move(sharded.merged),
                          source_shard = std::move(sharded.source_shard)](
                           caf::event_based_actor* self) {
        const auto& cfg = *ctx_.config;
        json doc;
        doc["name"] = "arbiter";
        doc["version"] = arbiter::version;
        doc["draining"] = snap.draining || draining_.load();
        doc["pending_requests"] = snap.pending_requests;
        json rewards = json::array();
        for (const auto& r : ctx_.catalog->rewards()) {
          rewards.push_back({{"name", r.name}, {"kind", r.kind}, {"capability", r.capability}});
        }
        doc["rewards"] = rewards;
        doc["data_sources"] = ctx_.catalog->data_sources();
        json queues = json::array();
        auto weights = config::class_weights(cfg.scheduler.priorities);
        for (size_t i = 0; i < snap.queues.size(); ++i) {
          const auto& q = snap.queues[i];
          queues.push_back({{"priority", q.priority},
                            {"depth", q.depth},
                            {"capacity", q.capacity},
                            {"order", cfg.scheduler.priorities[i].order
                                          == config::queue_order::edf
                                        ? "edf"
                                        : "fifo"},
                            {"weight", weights[i]}});
        }
        doc["queues"] = queues;
        doc["default_priority"] = cfg.scheduler.default_priority;
        json sources = json::array();
        for (size_t k = 0; k < snap.sources.size(); ++k) {
          const auto& s = snap.sources[k];
          sources.push_back({{"id", s.id},
                             {"shard", source_shard[k]},
                             {"name", s.name},
                             {"capabilities", s.capabilities},
                             {"inflight_batches", s.inflight},
                             {"max_inflight_batches", s.max_inflight},
                             {"dispatched_batches", s.dispatched},
                             {"remote", s.remote},
                             {"breaker", scheduler::to_string(s.breaker)},
                             {"breaker_reason", s.breaker_reason},
                             {"latency_ms", s.latency_ms},
                             {"requests_per_minute", s.requests_per_minute},
                             {"tokens_per_minute", s.tokens_per_minute},
                             {"request_burst", s.request_burst},
                             {"prompt_token_ratio", s.prompt_token_ratio},
                             {"embedding_token_ratio", s.embedding_token_ratio},
                             {"items_per_second", s.items_per_second},
                             {"slow_start", s.slow_start}});
        }
        doc["sources"] = sources;
        json models = json::array();
        for (const auto& m : ctx_.models) {
          models.push_back({{"name", m.name},
                            {"path", m.path},
                            {"device", m.device},
                            {"architecture", m.architecture},
                            {"dtype", m.dtype},
                            {"max_tokens", m.max_tokens},
                            {"weight_bytes", m.weight_bytes}});
        }
        doc["models"] = models;
        if (ctx_.gpus != nullptr) {
          json gpus = json::array();
          for (const auto& g : ctx_.gpus->read()) {
            json workers = json::array();
            for (const auto& m : ctx_.models) {
              if (m.device == "cuda:" + std::to_string(g.index)) {
                workers.push_back(m.name);
              }
            }
            gpus.push_back({{"index", g.index},
                            {"name", g.name},
                            {"memory_used_bytes", g.memory_used},
                            {"memory_total_bytes", g.memory_total},
                            {"utilization", g.utilization},
                            {"model_workers", workers}});
          }
          doc["gpus"] = gpus;
        }
        if (ctx_.replay != nullptr) {
          auto records = [this](const char* result) {
            return static_cast<uint64_t>(
              ctx_.replay->records.Add({{"result", result}}).Value());
          };
          doc["replay"] = {{"enabled", true},
                           {"path", cfg.replay.path},
                           {"max_file_mb", cfg.replay.max_file_mb},
                           {"keep_files", cfg.replay.keep_files},
                           {"records",
                            {{"written", records("written")},
                             {"dropped", records("dropped")},
                             {"failed", records("failed")}}}};
        } else {
          doc["replay"] = {{"enabled", false}};
        }
        doc["limits"] = {{"max_body_bytes", cfg.server.max_body_bytes},
                         {"max_batch_items", cfg.server.max_batch_items},
                         {"default_deadline_ms", cfg.scheduler.default_deadline.count()},
                         {"max_deadline_ms", cfg.scheduler.max_deadline.count()}};
        auto send = [this, reply](const json& body) {
          http_reply r;
          r.body = json_text(body);
          respond("/info", std::move(r), reply);
        };
        if (!ctx_.cluster) {
          doc["cluster"] = {{"enabled", false}};
          send(doc);
          return;
        }
        doc["cluster"] = {{"enabled", true},
                          {"host", cfg.cluster.host},
                          {"port", cfg.cluster.port},
                          {"tls", !cfg.cluster.certificate.empty()},
                          {"heartbeat_ms", cfg.cluster.heartbeat.count()},
                          {"timeout_ms", cfg.cluster.timeout.count()}};
        self->request(ctx_.cluster, std::chrono::seconds{5}, actors::info_atom::value)
          .then(
            [send, doc](const std::vector<actors::node_info>& nodes) mutable {
              json list = json::array();
              for (const auto& n : nodes) {
                list.push_back({{"name", n.name},
                                {"host", n.host},
                                {"pid", n.pid},
                                {"version", n.version},
                                {"state", n.state},
                                {"reason", n.reason},
                                {"joined_ms_ago", n.joined_ms_ago},
                                {"last_seen_ms_ago", n.last_seen_ms_ago},
                                {"sources", n.sources}});
              }
              doc["cluster"]["nodes"] = list;
              send(doc);
            },
            [send, doc](caf::error&) mutable {
              doc["cluster"]["nodes"] = nullptr;
              send(doc);
            });
      });
    },
    [this, reply](caf::error& e) {
      http_reply r;
      r.status = 500;
      r.body = encode_error("internal", "the scheduler did not answer: "
                                          + ctx_.system->render(e));
      respond("/info", std::move(r), reply);
    });
}

namespace {

/// A training step's account as GET /v1/steps answers it (docs/api.md).
json step_json(const scheduler::step_account& a) {
  json sources = json::object();
  uint64_t calls = 0;
  uint64_t hedges = 0;
  uint64_t limited = 0;
  uint64_t retries = 0;
  uint64_t prompt = 0;
  uint64_t completion = 0;
  double cost = 0.0;
  for (const auto& [name, s] : a.sources) {
    sources[name] = {{"calls", s.calls},
                     {"hedges", s.hedges},
                     {"rate_limited", s.rate_limited},
                     {"retries", s.retries},
                     {"failed_calls", s.failed_calls},
                     {"prompt_tokens", s.prompt_tokens},
                     {"completion_tokens", s.completion_tokens},
                     {"cost", s.cost},
                     {"run_ms", s.run_ms}};
    // Model calls only: a CPU worker's or a reward graph's batches run no model.
    const std::string_view n = name;
    const bool local_work = n == actors::reward_graph_source || n == "cpu"
                            || (n.size() > 4 && n.substr(n.size() - 4) == "/cpu");
    calls += local_work ? 0 : s.calls;
    hedges += s.hedges;
    limited += s.rate_limited;
    retries += s.retries;
    prompt += s.prompt_tokens;
    completion += s.completion_tokens;
    cost += s.cost;
  }
  return {{"step", a.step},
          {"items",
           {{"total", a.items()},
            {"ok", a.items_ok},
            {"fallback", a.items_fallback},
            {"failed", a.items_failed}}},
          {"cache_hits", a.cache_hits},
          {"failures", a.failures},
          {"queue_ms", a.queue_ms},
          {"run_ms", a.run_ms},
          {"totals",
           {{"calls", calls},
            {"hedges", hedges},
            {"rate_limited", limited},
            {"retries", retries},
            {"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"cost", cost}}},
          {"sources", sources}};
}

} // namespace

void router::steps(std::string step, reply_fn reply) {
  const std::string route = step.empty() ? "/v1/steps" : "/v1/steps/";
  // One step is looked up among all shards' recent steps (`find_step`): asked alone, a shard
  // that still holds a step others have dropped would answer a part of it.
  ask_shards<actors::step_accounts>(
    std::make_tuple(actors::steps_atom::value),
    [this, route, step, reply](std::vector<actors::step_accounts> shards) {
      http_reply r;
      if (step.empty()) {
        json list = json::array();
        for (const auto& a : merge_steps(std::move(shards))) {
          list.push_back(step_json(a));
        }
        r.body = json_text(json{{"steps", list}});
      } else if (auto account = find_step(std::move(shards), step)) {
        r.body = json_text(step_json(*account));
      } else {
        r.status = 404;
        r.body = encode_error("not_found", "no step '" + step
                                             + "' among the recent ones (GET /v1/steps "
                                               "lists them)");
      }
      respond(route, std::move(r), reply);
    },
    [this, route, reply](caf::error& e) {
      http_reply r;
      r.status = 500;
      r.body = encode_error("internal", "the scheduler did not answer: " + ctx_.system->render(e));
      respond(route, std::move(r), reply);
    });
}

} // namespace arbiter::net
