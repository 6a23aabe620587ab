#include "net/http_metrics.hpp"

namespace arbiter::net {

http_metrics::http_metrics(metrics_registry& registry)
  : requests(registry.add(prometheus::BuildCounter()
               .Name("arbiter_http_requests_total")
               .Help("HTTP requests answered, by route and status code"))),
    rejections(registry.add(prometheus::BuildCounter()
                 .Name("arbiter_rejections_total")
                 .Help("Requests refused before scoring, by reason"))),
    request_items(registry.add(prometheus::BuildHistogram()
                    .Name("arbiter_request_items")
                    .Help("Items per /v1/score request"))
                    .Add({}, size_buckets())),
    connections(registry.add(prometheus::BuildGauge()
                  .Name("arbiter_http_connections")
                  .Help("Open client connections"))
                  .Add({})) {
}

void http_metrics::count(const std::string& route, unsigned code) {
  requests.Add({{"route", route}, {"code", std::to_string(code)}}).Increment();
}

void http_metrics::reject(const std::string& reason) {
  rejections.Add({{"reason", reason}}).Increment();
}

} // namespace arbiter::net
