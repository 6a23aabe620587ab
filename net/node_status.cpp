#include "net/node_status.hpp"

#include <nlohmann/json.hpp>

#include "arbiter/version.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

node_status_routes::node_status_routes(std::function<node_status()> status,
                                       metrics_registry& registry, http_metrics& metrics,
                                       gpu_monitor* gpus)
  : status_(std::move(status)), registry_(registry), metrics_(metrics), gpus_(gpus) {
}

void node_status_routes::handle(http_request req, reply_fn reply, defer_fn) {
  const auto method = req.method;
  const auto target = req.target;
  auto path = std::string{target.substr(0, target.find('?'))};
  http_reply r;
  std::string route = path;
  if (path != "/health" && path != "/metrics") {
    route = "other";
    r.status = 404;
    r.body = encode_error("not_found", "no route for " + std::string{method} + " " + path
                                         + " (a worker node serves /health and /metrics)");
    metrics_.reject("not_found");
  } else if (method != "GET") {
    r.status = 405;
    r.headers.emplace_back("Allow", "GET");
    r.body = encode_error("method_not_allowed", path + " accepts only GET, not "
                                                  + std::string{method});
    metrics_.reject("method_not_allowed");
  } else if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (gpus_ != nullptr) {
      gpus_->read();
    }
    r.body = registry_.render();
  } else {
    auto s = status_();
    r.status = s.joined ? 200 : 503;
    r.body = nlohmann::json{{"status", s.joined ? "ok" : "joining"},
                            {"role", "worker"},
                            {"node", s.name},
                            {"coordinator", s.coordinator},
                            {"version", arbiter::version}}
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  metrics_.count(route, r.status);
  reply(std::move(r));
}

void node_status_routes::count_protocol_error(const std::string& reason, unsigned status) {
  metrics_.reject(reason);
  metrics_.count("other", status);
}

} // namespace arbiter::net
