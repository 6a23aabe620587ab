#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <utility>  // Boost 1.74's Asio needs std::exchange declared first.

#include <boost/asio/io_context.hpp>

#include "config/config.hpp"
#include "net/http_metrics.hpp"
#include "net/routes.hpp"

namespace arbiter::net {

class http_session;

/// The Beast HTTP/1.1 server: accepts connections (at most `max_connections`: beyond it the
/// longest-open idle connection is closed, or the newcomer answered 503; accept failures back
/// off), reads requests (keep-alive, body-size limit, `idle_timeout` for a request's first
/// bytes and `read_timeout` for the rest) and hands them to a request handler (the router, or a
/// worker node's status routes). Each connection runs on its own strand, so any number of io
/// threads may run the io_context.
class http_server {
public:
  http_server(boost::asio::io_context& ioc, const config::server_config& cfg,
              request_handler& routes, http_metrics& metrics);
  ~http_server();

  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Binds and listens. Returns false with `error` set (naming the address) on failure.
  bool listen(const std::string& host, uint16_t port, std::string& error);

  /// The bound port (the real one when 0 was asked for).
  uint16_t port() const noexcept {
    return port_;
  }

  /// Starts accepting connections.
  void start();

  /// From now on every reply says `Connection: close`, so each connection closes after its
  /// next answer; the listener stays open, so that a request arriving while the scheduler
  /// drains is answered (503 from the routes, `GET /health` `draining`), not refused.
  void begin_drain();

  /// Stops accepting and closes the connections waiting for a request; those with one under
  /// way get their answer and then close. Called once the scheduler has drained.
  void finish_drain();

  /// Destroys the acceptor and the accept-retry timer. Call after the io threads have stopped
  /// and before the io_context is destroyed.
  void shutdown();

  /// Connections still open.
  size_t open_connections() const noexcept {
    return open_.load();
  }

  /// Replies written so far (any status): a quiet ingress is one where this stands still.
  uint64_t replies_written() const noexcept {
    return replies_.load(std::memory_order_relaxed);
  }

private:
  friend class http_session;
  struct impl;

  void accept_next();
  void accept_failed(const boost::system::error_code& ec);

  std::unique_ptr<impl> impl_;
  uint16_t port_ = 0;
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> replies_{0};
};

} // namespace arbiter::net
