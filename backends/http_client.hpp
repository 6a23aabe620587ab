#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace arbiter::backends {

/// Why an HTTP exchange with a remote backend produced no response. An HTTP error status (429,
/// 503, ...) is not an error here: it arrives with `none` and its `status`.
enum class http_error : uint8_t {
  /// A response arrived (any status).
  none = 0,
  /// No connection could be made (resolve failed, refused, unreachable, or the connect timeout
  /// passed). The request was never sent, so another attempt elsewhere is safe.
  connect_failed = 1,
  /// The per-attempt timeout passed after the request was sent; the connection was closed.
  timeout = 2,
  /// The server closed or reset the connection before the response was complete.
  connection_reset = 3,
  /// The TLS handshake failed: certificate or host name verification, or the peer does not
  /// speak TLS.
  tls_failed = 4,
  /// `cancel()` or `shutdown()` ended the request.
  cancelled = 5,
  /// The pool's endpoint URL or the request path is malformed.
  bad_url = 6,
  /// The server sent something that is not valid HTTP/1.1 (or a body over the size limit).
  protocol_error = 7,
};

/// The stable name of `e`, e.g. "connect_failed".
std::string_view to_string(http_error e) noexcept;

/// A parsed `http://host[:port][/base]` or `https://...` endpoint.
struct http_endpoint {
  /// True for https.
  bool tls = false;
  /// Host name or IP address (IPv6 without brackets).
  std::string host;
  /// Explicit or default (80 / 443) port.
  uint16_t port = 0;
  /// Path prefix of every request, without a trailing slash; empty for the root.
  std::string base_path;
};

/// `parse_url`'s answer: `endpoint` on success, otherwise `error` says what is wrong.
struct url_parse_result {
  std::optional<http_endpoint> endpoint;
  std::string error;
};

/// Parses `url` (`http` or `https`, host, optional port, optional base path). Query strings,
/// fragments and user info are refused with a sentence naming the problem.
url_parse_result parse_url(std::string_view url);

/// Options of one `http_client_pool`.
struct http_client_options {
  /// Open connections at most (idle plus busy); further requests wait in FIFO order.
  std::size_t max_connections = 8;
  /// Bound on the TCP connect and, separately, on the TLS handshake of a new connection (name
  /// resolution is bounded by the system resolver only).
  std::chrono::milliseconds connect_timeout{5000};
  /// Bound on writing one request and reading its whole response.
  std::chrono::milliseconds attempt_timeout{30000};
  /// Largest response body accepted; a larger one fails with `protocol_error`.
  std::size_t max_response_bytes = 64 * 1024 * 1024;
  /// https only: skip certificate and host name verification. Off by default, when the
  /// system CA store verifies the server.
  bool insecure_skip_verify = false;
  /// Sent as `Authorization: Bearer <api_key>` when not empty. Never logged and never part
  /// of an error message.
  std::string api_key;
};

/// A header as (name, value); response header names are lower-cased.
using http_header = std::pair<std::string, std::string>;

/// The outcome of one `async_post`.
struct http_result {
  http_error error = http_error::none;
  /// A sentence for logs when `error` is not `none` (never contains the API key).
  std::string error_message;
  /// HTTP status when `error` is `none`, otherwise 0.
  int status = 0;
  /// Response headers in arrival order, names lower-cased.
  std::vector<http_header> headers;
  std::string body;
  /// Whether the response came over a connection that had already served a response.
  bool reused_connection = false;
  /// Whether the request went twice: a reused connection failed before any byte of an answer
  /// (most likely closed by the server while idle), so it was sent again on a fresh one. The
  /// server may have received the first too: it counts as an attempt of its own.
  bool resent = false;
  /// Whether the request's write began, so that the server may have seen it (always, once a
  /// response came). False for a request cancelled while it waited for a connection or was
  /// connecting: nothing of it left.
  bool sent = false;

  /// The value of the first header called `lower_case_name`, or nullptr.
  const std::string* header(std::string_view lower_case_name) const;
};

/// Called exactly once per `async_post`, on the pool's strand (an io_context thread). It must
/// not block or throw; post heavy work elsewhere. It may call the pool again (those calls are
/// posted, never run inside it).
using http_completion = std::function<void(http_result)>;

/// A keep-alive HTTP/1.1 connection pool for one remote endpoint. All pool state lives on one
/// strand of the caller's io_context, which the caller runs; nothing blocks. Idle connections
/// are reused; at most `max_connections` are open; requests beyond that wait in FIFO order. A
/// reused connection that fails before any response byte arrives (the server closed it while
/// idle) is retried once on a fresh connection.
///
/// Every public member is thread-safe. The pool's internals outlive the object while I/O is
/// pending; destroying the object shuts it down (as `shutdown()`).
class http_client_pool {
public:
  /// The pool for `url`; `io` must outlive the pool's pending work. A malformed `url` does not
  /// throw: every request then completes with `bad_url` (see `valid()`).
  http_client_pool(std::string_view url, boost::asio::io_context& io,
                   http_client_options options = {});
  ~http_client_pool();
  http_client_pool(const http_client_pool&) = delete;
  http_client_pool& operator=(const http_client_pool&) = delete;

  /// Whether the endpoint URL parsed.
  bool valid() const noexcept;

  /// The parsed endpoint, or nullopt with `url_error()` set.
  const std::optional<http_endpoint>& endpoint() const noexcept;
  const std::string& url_error() const noexcept;

  /// Sends `POST <base_path><path>` with `body` (Content-Type application/json unless
  /// `headers` names one) and `headers`. The pool owns the request until it calls `done`,
  /// exactly once, on its strand; `done` is never called from inside `async_post`.
  /// Returns the request's id for `cancel`.
  uint64_t async_post(std::string path, std::string body, std::vector<http_header> headers,
                      http_completion done);

  /// Completes request `id` with `cancelled` if it has not completed yet, closing its
  /// connection if it is in flight. Unknown or finished ids are ignored.
  void cancel(uint64_t id);

  /// Completes every pending request with `cancelled`, closes every connection, and completes
  /// later requests with `cancelled` at once.
  void shutdown();

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

} // namespace arbiter::backends
