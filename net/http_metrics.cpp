#include "net/http_metrics.hpp"

#include <map>
#include <utility>

namespace arbiter::net {

http_metrics::http_metrics(metrics_registry& registry)
  : requests(registry.counter("arbiter_http_requests_total",
                              "HTTP requests answered, by route and status code")),
    rejections(
        registry.counter("arbiter_rejections_total", "Requests refused before scoring, by reason")),
    request_items(registry.histogram("arbiter_request_items", "Items per /v1/score request")
                      .Add({}, size_buckets())),
    connections(registry.gauge("arbiter_http_connections", "Open client connections").Add({})),
    abandoned(registry
                .counter("arbiter_abandoned_requests_total",
                         "Scoring requests whose client closed its connection before the answer")
                .Add({})),
    held(registry.counter("arbiter_held_refusals_total",
                          "Trainer-route refusals held for their Retry-After, by what ended "
                          "the hold")),
    held_sent_again(held.Add({{"outcome", "sent_again"}})),
    held_answered(held.Add({{"outcome", "answered"}})),
    held_now(registry
               .gauge("arbiter_held_requests",
                      "Trainer-route requests held for a refusal's Retry-After now")
               .Add({})) {
}

void http_metrics::count(const std::string& route, unsigned code) {
  // Family::Add builds a label map on every call; remember the counters instead.
  prometheus::Counter* counter = nullptr;
  {
    std::lock_guard<std::mutex> guard{cache_mutex_};
    auto key = std::make_pair(route, code);
    auto found = request_counters_.find(key);
    if (found == request_counters_.end()) {
      auto& added = requests.Add({{"route", route}, {"code", std::to_string(code)}});
      found = request_counters_.emplace(std::move(key), &added).first;
    }
    counter = found->second;
  }
  counter->Increment();
}

void http_metrics::reject(const std::string& reason) {
  rejections.Add({{"reason", reason}}).Increment();
}

} // namespace arbiter::net
