#include "net/routes.hpp"

#include <chrono>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "arbiter/version.hpp"
#include "common/log.hpp"

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
  parse_histogram_ = &ctx_.scheduler_metrics->stage("parse");
  request_histogram_ = &ctx_.scheduler_metrics->stage("request");
}

void router::handle(std::string_view method, std::string_view target, std::string body,
                    reply_fn reply, defer_fn defer) {
  auto path = target.substr(0, target.find('?'));
  auto expect = [&](const char* allowed, const std::string& route) {
    if (method == allowed) {
      return true;
    }
    http_reply r;
    r.status = 405;
    r.headers.emplace_back("Allow", allowed);
    r.body = encode_error("method_not_allowed", std::string{path} + " accepts only " + allowed
                                                  + ", not " + std::string{method});
    ctx_.metrics->reject("method_not_allowed");
    respond(route, std::move(r), reply);
    return false;
  };
  if (path == "/v1/score") {
    if (expect("POST", "/v1/score")) {
      score(std::move(body), std::move(reply), std::move(defer));
    }
  } else if (path == "/compute_info_gain") {
    if (expect("POST", "/compute_info_gain")) {
      compute_info_gain(std::move(body), std::move(reply), std::move(defer));
    }
  } else if (path == "/health") {
    if (expect("GET", "/health")) {
      http_reply r;
      r.status = draining_ ? 503 : 200;
      r.body = draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})";
      respond("/health", std::move(r), reply);
    }
  } else if (path == "/info") {
    if (expect("GET", "/info")) {
      info(std::move(reply));
    }
  } else if (path == "/metrics") {
    if (expect("GET", "/metrics")) {
      http_reply r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = ctx_.registry->render();
      respond("/metrics", std::move(r), reply);
    }
  } else {
    refuse("other", 404, "not_found", "not_found",
           "no route for " + std::string{method} + " " + std::string{path}, "", reply);
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

void router::refuse(const std::string& route, unsigned status, const std::string& reason,
                    const std::string& code, const std::string& message,
                    const std::string& field, const reply_fn& reply) {
  ctx_.metrics->reject(reason);
  http_reply r;
  r.status = status;
  r.body = encode_error(code, message, field);
  respond(route, std::move(r), reply);
}

void router::score(std::string body, reply_fn reply, defer_fn defer) {
  auto start = steady_clock::now();
  const std::string route = "/v1/score";
  if (refuse_while_draining(route, reply)) {
    return;
  }
  score_request_body decoded;
  codec_error err;
  bool ok = decode_score_request(body, codec_, decoded, err);
  parse_histogram_->Observe(seconds_since(start));
  if (!ok) {
    refuse(route, err.status, err.status == 413 ? "payload_too_large" : "bad_request",
           err.status == 413 ? "payload_too_large" : "invalid_request", err.message, err.field,
           reply);
    return;
  }
  ctx_.metrics->request_items.Observe(static_cast<double>(decoded.items.size()));
  actors::score_request req;
  req.priority = decoded.priority;
  req.deadline = start + decoded.deadline;
  req.items = std::move(decoded.items);
  run(route, start, std::move(req), encode_score_response, std::move(reply), std::move(defer));
}

void router::compute_info_gain(std::string body, reply_fn reply, defer_fn defer) {
  auto start = steady_clock::now();
  const std::string route = "/compute_info_gain";
  if (refuse_while_draining(route, reply)) {
    return;
  }
  auto decoded = std::make_shared<info_gain_request_body>();
  codec_error err;
  bool ok = decode_info_gain_request(body, codec_, *decoded, err);
  parse_histogram_->Observe(seconds_since(start));
  if (!ok) {
    refuse(route, err.status, err.status == 413 ? "payload_too_large" : "bad_request",
           err.status == 413 ? "payload_too_large" : "invalid_request", err.message, err.field,
           reply);
    return;
  }
  ctx_.metrics->request_items.Observe(static_cast<double>(decoded->positions.size()));
  actors::score_request req;
  req.priority = decoded->priority;
  req.deadline = start + decoded->deadline;
  req.items = std::move(decoded->items);
  decoded->items.clear();
  if (req.items.empty()) {
    // Nothing to schedule: every item was answered with its error.
    http_reply r;
    r.body = encode_info_gain_response(*decoded, {});
    respond(route, std::move(r), reply);
    return;
  }
  auto encode = [decoded](const std::vector<item_result>& results) {
    return encode_info_gain_response(*decoded, results);
  };
  run(route, start, std::move(req), std::move(encode), std::move(reply), std::move(defer));
}

bool router::refuse_while_draining(const std::string& route, const reply_fn& reply) {
  if (!draining_) {
    return false;
  }
  http_reply r;
  r.status = 503;
  r.headers.emplace_back("Retry-After", "1");
  r.body = encode_error("shutting_down", "the server is shutting down");
  ctx_.metrics->reject("draining");
  respond(route, std::move(r), reply);
  return true;
}

void router::run(const std::string& route, steady_clock::time_point start,
                 actors::score_request req, encode_fn encode, reply_fn reply, defer_fn defer) {
  // The scheduler answers every admitted request by its deadline (and fails pending ones if it
  // ever fails itself), calling this on its own thread; the encoding and the write happen on
  // the connection's strand.
  actors::reply_callback reply_to = [this, start, route, encode = std::move(encode),
                                     reply = std::move(reply),
                                     defer = std::move(defer)](actors::score_reply&& answer) {
    defer([this, start, route, encode, reply, answer = std::move(answer)] {
      if (!answer.admitted) {
        http_reply r;
        bool draining = answer.rejection == "draining";
        bool internal = answer.rejection == "internal";
        r.status = draining ? 503 : internal ? 500 : 429;
        if (!internal) {
          r.headers.emplace_back("Retry-After", std::to_string(answer.retry_after_s));
        }
        r.body = encode_error(draining ? "shutting_down" : internal ? "internal" : "overloaded",
                              answer.reason);
        ctx_.metrics->reject(internal ? "scheduler_error" : answer.rejection);
        respond(route, std::move(r), reply);
        return;
      }
      http_reply r;
      r.body = encode(answer.results);
      request_histogram_->Observe(seconds_since(start));
      respond(route, std::move(r), reply);
    });
  };
  submit(std::move(req), std::move(reply_to));
}

void router::submit(actors::score_request req, actors::reply_callback reply_to) {
  if (!ctx_.post) {
    caf::anon_send(ctx_.scheduler, actors::score_atom::value, std::move(req),
                   std::move(reply_to));
    return;
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> guard{pending_mutex_};
    first = pending_.empty();
    pending_.push_back({std::move(req), std::move(reply_to)});
  }
  if (first) {
    ctx_.post([this] { flush(); });
  }
}

void router::flush() {
  std::vector<actors::score_submission> batch;
  {
    std::lock_guard<std::mutex> guard{pending_mutex_};
    batch.swap(pending_);
  }
  if (batch.size() == 1) {
    auto& only = batch.front();
    caf::anon_send(ctx_.scheduler, actors::score_atom::value, std::move(only.request),
                   std::move(only.reply_to));
  } else if (!batch.empty()) {
    caf::anon_send(ctx_.scheduler, actors::score_atom::value, std::move(batch));
  }
}

void router::info(reply_fn reply) {
  auto sched = ctx_.scheduler;
  ctx_.system->spawn([this, sched, reply = std::move(reply)](caf::event_based_actor* self) {
    self->request(sched, std::chrono::seconds{5}, actors::info_atom::value)
      .then(
        [this, reply](const actors::scheduler_info& snap) {
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
          for (size_t i = 0; i < snap.queues.size(); ++i) {
            const auto& q = snap.queues[i];
            queues.push_back({{"priority", q.priority},
                              {"depth", q.depth},
                              {"capacity", q.capacity},
                              {"order", cfg.scheduler.priorities[i].order
                                            == config::queue_order::edf
                                          ? "edf"
                                          : "fifo"}});
          }
          doc["queues"] = queues;
          doc["default_priority"] = cfg.scheduler.default_priority;
          json sources = json::array();
          for (const auto& s : snap.sources) {
            sources.push_back({{"id", s.id},
                               {"name", s.name},
                               {"capabilities", s.capabilities},
                               {"inflight_batches", s.inflight},
                               {"max_inflight_batches", s.max_inflight},
                               {"dispatched_batches", s.dispatched},
                               {"remote", s.remote},
                               {"breaker", s.breaker},
                               {"breaker_reason", s.breaker_reason},
                               {"latency_ms", s.latency_ms}});
          }
          doc["sources"] = sources;
          doc["limits"] = {{"max_body_bytes", cfg.server.max_body_bytes},
                           {"max_batch_items", cfg.server.max_batch_items},
                           {"default_deadline_ms", cfg.scheduler.default_deadline.count()},
                           {"max_deadline_ms", cfg.scheduler.max_deadline.count()}};
          http_reply r;
          r.body = doc.dump();
          respond("/info", std::move(r), reply);
        },
        [this, reply](caf::error& e) {
          http_reply r;
          r.status = 500;
          r.body = encode_error("internal", "the scheduler did not answer: "
                                              + ctx_.system->render(e));
          respond("/info", std::move(r), reply);
        });
  });
}

} // namespace arbiter::net
