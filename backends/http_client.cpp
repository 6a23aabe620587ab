#include "backends/http_client.hpp"

#include <utility>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <deque>
#include <unordered_map>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/enum_names.hpp"

namespace arbiter::backends {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

constexpr auto http_error_names = names_of<http_error::protocol_error>(
    "none", "connect_failed", "timeout", "connection_reset", "tls_failed", "cancelled", "bad_url",
    "protocol_error");

std::string_view to_string(http_error e) noexcept {
  return http_error_names[e];
}

const std::string* http_result::header(std::string_view lower_case_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_case_name) {
      return &value;
    }
  }
  return nullptr;
}

namespace {

bool has_space_or_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

url_parse_result url_failure(std::string message) {
  return url_parse_result{std::nullopt, "invalid endpoint URL: " + std::move(message)};
}

} // namespace

url_parse_result parse_url(std::string_view url) {
  if (url.empty()) {
    return url_failure("it is empty");
  }
  if (has_space_or_control(url)) {
    return url_failure("it contains whitespace or control characters");
  }
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return url_failure("it has no scheme (expected http:// or https://)");
  }
  auto scheme = lower(url.substr(0, scheme_end));
  http_endpoint ep;
  if (scheme == "https") {
    ep.tls = true;
  } else if (scheme != "http") {
    return url_failure("unsupported scheme '" + scheme + "' (expected http or https)");
  }
  auto rest = url.substr(scheme_end + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return url_failure("query strings and fragments are not allowed");
  }
  auto authority = rest.substr(0, rest.find('/'));
  auto path = rest.substr(authority.size());
  if (authority.find('@') != std::string_view::npos) {
    return url_failure("user info is not supported (pass the API key in the options)");
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return url_failure("unterminated '[' in an IPv6 host");
    }
    ep.host = std::string(authority.substr(1, close - 1));
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return url_failure("unexpected characters after the IPv6 host");
      }
      port_text = after.substr(1);
      if (port_text.empty()) {
        return url_failure("empty port after ':'");
      }
    }
  } else {
    auto colon = authority.find(':');
    if (colon != std::string_view::npos) {
      if (authority.find(':', colon + 1) != std::string_view::npos) {
        return url_failure("IPv6 hosts must be written in brackets, e.g. http://[::1]:8080");
      }
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) {
        return url_failure("empty port after ':'");
      }
    }
    ep.host = std::string(authority.substr(0, colon));
  }
  if (ep.host.empty()) {
    return url_failure("it has no host");
  }
  if (port_text.empty()) {
    ep.port = ep.tls ? 443 : 80;
  } else {
    if (port_text.size() > 5
        || !std::all_of(port_text.begin(), port_text.end(),
                        [](char c) { return c >= '0' && c <= '9'; })) {
      return url_failure("port '" + std::string(port_text) + "' is not a number in 1..65535");
    }
    auto value = std::stoul(std::string(port_text));
    if (value == 0 || value > 65535) {
      return url_failure("port '" + std::string(port_text) + "' is not a number in 1..65535");
    }
    ep.port = static_cast<uint16_t>(value);
  }
  while (!path.empty() && path.back() == '/') {
    path.remove_suffix(1);
  }
  ep.base_path = std::string(path);
  return url_parse_result{std::move(ep), {}};
}

namespace {

using strand_type = asio::strand<asio::io_context::executor_type>;

/// One connection to the endpoint: plain TCP or TLS over TCP. Owned by the pool (idle list)
/// or by the job using it; every handler of its I/O runs on the pool's strand.
struct connection {
  connection(const strand_type& ex, ssl::context* tls_context) : resolver(ex) {
    if (tls_context != nullptr) {
      tls.emplace(ex, *tls_context);
    } else {
      plain.emplace(ex);
    }
  }

  beast::tcp_stream& tcp() {
    return tls ? beast::get_lowest_layer(*tls) : *plain;
  }

  /// Calls `f` with the stream HTTP is spoken over.
  template <class F>
  void with_stream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(*plain);
    }
  }

  /// Closes the socket; pending operations complete with `operation_aborted`.
  void close() {
    resolver.cancel();
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().close();
  }

  /// Whether the peer closed it while it sat idle (an end of stream or a reset is pending),
  /// or, over plain TCP, sent bytes nobody asked for: seen without blocking or reading. Such
  /// a connection is not used again. A request written to it fails, and is sent once more on
  /// a fresh one, though the peer (a provider restarted) never read it: a step counted 97
  /// calls against the provider's 64 (helper-64). Over TLS, bytes may be a record the session
  /// reads in its stride (a session ticket; a close_notify, whose end of stream the request
  /// then meets, and the one resend on a fresh connection covers).
  bool closed_while_idle() {
    auto& sock = tcp().socket();
    if (!sock.is_open()) {
      return true;
    }
    char byte = 0;
    auto n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) {
      return true;
    }
    if (n > 0) {
      return !tls;
    }
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }

  tcp::resolver resolver;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  /// Whether it already served a complete response (so a new exchange reuses it).
  bool served = false;
  /// Whether the pool no longer counts it as open.
  bool discarded = false;
};

/// One `async_post` from submission to completion.
struct job {
  uint64_t id = 0;
  http::request<http::string_body> req;
  std::optional<http::response_parser<http::string_body>> parser;
  http_completion done;
  /// The connection of the current attempt; null while waiting.
  std::shared_ptr<connection> conn;
  /// Whether the current attempt runs on a connection that served a response before.
  bool attempt_reused = false;
  /// Whether the one stale-connection retry was used.
  bool retried = false;
  /// Interim (1xx) responses read past in the current attempt.
  unsigned interim = 0;
  /// Whether a write of the request began (in any attempt).
  bool written = false;
  bool finished = false;
};

/// Interim responses one attempt reads past before giving up on the server.
constexpr unsigned max_interim_responses = 16;

/// Consumes the CR and LF bytes at the start of `buffer`.
void drop_line_breaks(beast::flat_buffer& buffer) {
  const auto* data = static_cast<const char*>(buffer.data().data());
  size_t n = 0;
  while (n < buffer.size() && (data[n] == '\r' || data[n] == '\n')) {
    ++n;
  }
  buffer.consume(n);
}

} // namespace

struct http_client_pool::impl : std::enable_shared_from_this<impl> {
  impl(std::string_view url, asio::io_context& io, http_client_options o)
    : strand(asio::make_strand(io)), opts(std::move(o)) {
    auto parsed = parse_url(url);
    endpoint = std::move(parsed.endpoint);
    url_error = std::move(parsed.error);
    if (opts.max_connections == 0) {
      opts.max_connections = 1;
    }
    if (endpoint && endpoint->tls) {
      tls_context.emplace(ssl::context::tls_client);
      if (opts.insecure_skip_verify) {
        tls_context->set_verify_mode(ssl::verify_none);
      } else {
        beast::error_code ec;
        tls_context->set_default_verify_paths(ec);
        // Without system CAs every handshake fails verification and says so; no need to
        // fail here.
        tls_context->set_verify_mode(ssl::verify_peer);
      }
    }
    if (endpoint) {
      where = endpoint->host + ":" + std::to_string(endpoint->port);
      host_header = endpoint->host.find(':') != std::string::npos ? "[" + endpoint->host + "]"
                                                                  : endpoint->host;
      if (endpoint->port != (endpoint->tls ? 443 : 80)) {
        host_header += ":" + std::to_string(endpoint->port);
      }
    }
  }

  // ---- fixed after construction (read from any thread) ----
  strand_type strand;
  http_client_options opts;
  std::optional<http_endpoint> endpoint;
  std::string url_error;
  std::optional<ssl::context> tls_context;
  /// "host:port" for error messages.
  std::string where;
  std::string host_header;
  std::atomic<uint64_t> next_id{1};

  // ---- strand state ----
  bool shut_down = false;
  std::size_t open = 0;
  std::vector<std::shared_ptr<connection>> idle;
  std::deque<std::shared_ptr<job>> waiting;
  std::unordered_map<uint64_t, std::shared_ptr<job>> active;

  static http_result failure(http_error e, std::string message) {
    http_result r;
    r.error = e;
    r.error_message = std::move(message);
    return r;
  }

  void finish(const std::shared_ptr<job>& j, http_result result) {
    if (j->finished) {
      return;
    }
    j->finished = true;
    result.resent = j->retried;
    result.sent = j->written;
    active.erase(j->id);
    j->conn.reset();
    auto done = std::move(j->done);
    j->done = nullptr;
    if (done) {
      done(std::move(result));
    }
  }

  /// Stops counting `c` as open and closes it. Idempotent.
  void discard(const std::shared_ptr<connection>& c) {
    c->close();
    if (!c->discarded) {
      c->discarded = true;
      --open;
    }
  }

  void submit(uint64_t id, std::string path, std::string body,
              std::vector<http_header> headers, http_completion done) {
    auto j = std::make_shared<job>();
    j->id = id;
    j->done = std::move(done);
    if (shut_down) {
      return finish(j, failure(http_error::cancelled, "the HTTP client pool is shut down"));
    }
    if (!endpoint) {
      return finish(j, failure(http_error::bad_url, url_error));
    }
    if (path.empty() || path.front() != '/' || has_space_or_control(path)) {
      return finish(j, failure(http_error::bad_url,
                               "invalid request path: it must start with '/' and contain no "
                               "whitespace or control characters"));
    }
    j->req.method(http::verb::post);
    j->req.target(endpoint->base_path + path);
    j->req.version(11);
    j->req.set(http::field::host, host_header);
    j->req.set(http::field::user_agent, "arbiter");
    bool has_content_type = false;
    for (auto& [name, value] : headers) {
      if (name.empty() || has_space_or_control(name)
          || value.find_first_of("\r\n") != std::string::npos) {
        // The value is not echoed: it may be a credential.
        return finish(j, failure(http_error::bad_url, "invalid request header '"
                                                        + (has_space_or_control(name) ? "?" : name)
                                                        + "': bad name or line break in value"));
      }
      has_content_type = has_content_type || beast::iequals(name, "content-type");
      j->req.insert(name, value);
    }
    if (!has_content_type) {
      j->req.set(http::field::content_type, "application/json");
    }
    if (!opts.api_key.empty()) {
      j->req.set(http::field::authorization, "Bearer " + opts.api_key);
    }
    j->req.keep_alive(true);
    j->req.body() = std::move(body);
    j->req.prepare_payload();
    waiting.push_back(std::move(j));
    pump();
  }

  /// Starts waiting jobs while connections are idle or may be opened.
  void pump() {
    while (!waiting.empty() && !shut_down) {
      if (!idle.empty()) {
        auto c = std::move(idle.back());
        idle.pop_back();
        if (c->closed_while_idle()) {
          discard(c);
          continue;
        }
        auto j = std::move(waiting.front());
        waiting.pop_front();
        exchange(j, c);
      } else if (open < opts.max_connections) {
        auto j = std::move(waiting.front());
        waiting.pop_front();
        connect_new(j);
      } else {
        break;
      }
    }
  }

  /// Whether `j` already ended (cancelled, shut down) while `c` was being set up or used; if
  /// so, drops `c` and starts waiting work.
  bool abandoned(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c) {
    if (!j->finished) {
      return false;
    }
    discard(c);
    pump();
    return true;
  }

  /// Drops `c`, fails `j` with `kind` and `message`, and starts waiting work.
  void fail_setup(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                  http_error kind, std::string message) {
    discard(c);
    finish(j, failure(kind, std::move(message)));
    pump();
  }

  void connect_new(const std::shared_ptr<job>& j) {
    ++open;
    auto c = std::make_shared<connection>(strand, tls_context ? &*tls_context : nullptr);
    j->conn = c;
    active[j->id] = j;
    c->resolver.async_resolve(
      endpoint->host, std::to_string(endpoint->port),
      [self = shared_from_this(), j, c](beast::error_code ec, tcp::resolver::results_type r) {
        self->on_resolved(j, c, ec, r);
      });
  }

  void on_resolved(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                   beast::error_code ec, const tcp::resolver::results_type& results) {
    if (abandoned(j, c)) {
      return;
    }
    if (ec) {
      return fail_setup(j, c, http_error::connect_failed,
                        "cannot resolve " + endpoint->host + ": " + ec.message());
    }
    c->tcp().expires_after(opts.connect_timeout);
    c->tcp().async_connect(results, [self = shared_from_this(), j, c](
                                      beast::error_code e, const tcp::endpoint&) {
      self->on_connected(j, c, e);
    });
  }

  void on_connected(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                    beast::error_code ec) {
    if (abandoned(j, c)) {
      return;
    }
    if (ec) {
      return fail_setup(j, c, http_error::connect_failed,
                        ec == beast::error::timeout
                          ? "connect to " + where + " timed out after "
                              + std::to_string(opts.connect_timeout.count()) + " ms"
                          : "connect to " + where + " failed: " + ec.message());
    }
    if (!c->tls) {
      return exchange(j, c);
    }
    beast::error_code address_ec;
    asio::ip::make_address(endpoint->host, address_ec);
    bool is_ip = !address_ec;
    // SNI carries host names only (RFC 6066).
    if (!is_ip && SSL_set_tlsext_host_name(c->tls->native_handle(), endpoint->host.c_str()) != 1) {
      return fail_setup(j, c, http_error::tls_failed,
                        "cannot set TLS SNI for " + endpoint->host);
    }
    if (!opts.insecure_skip_verify) {
      c->tls->set_verify_callback(ssl::host_name_verification(endpoint->host));
    }
    c->tcp().expires_after(opts.connect_timeout);
    c->tls->async_handshake(ssl::stream_base::client,
                            [self = shared_from_this(), j, c](beast::error_code e) {
                              self->on_handshake(j, c, e);
                            });
  }

  void on_handshake(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                    beast::error_code ec) {
    if (abandoned(j, c)) {
      return;
    }
    if (ec) {
      return fail_setup(j, c, http_error::tls_failed,
                        ec == beast::error::timeout
                          ? "TLS handshake with " + where + " timed out after "
                              + std::to_string(opts.connect_timeout.count()) + " ms"
                          : "TLS handshake with " + where + " failed: " + ec.message());
    }
    exchange(j, c);
  }

  /// Runs one attempt of `j` on the open connection `c`.
  void exchange(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c) {
    j->conn = c;
    j->attempt_reused = c->served;
    j->interim = 0;
    active[j->id] = j;
    new_parser(*j);
    c->tcp().expires_after(opts.attempt_timeout);
    j->written = true;
    c->with_stream([&](auto& stream) {
      http::async_write(stream, j->req,
                        [self = shared_from_this(), j, c](beast::error_code ec, std::size_t) {
                          self->on_written(j, c, ec);
                        });
    });
  }

  void new_parser(job& j) const {
    j.parser.emplace();
    j.parser->body_limit(opts.max_response_bytes);
    j.parser->header_limit(64 * 1024);
  }

  void on_written(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                  beast::error_code ec) {
    if (abandoned(j, c)) {
      return;
    }
    if (ec) {
      return on_attempt_error(j, c, ec);
    }
    read_response(j, c);
  }

  void read_response(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c) {
    c->with_stream([&](auto& stream) {
      http::async_read(stream, c->buffer, *j->parser,
                       [self = shared_from_this(), j, c](beast::error_code e, std::size_t) {
                         self->on_read(j, c, e);
                       });
    });
  }

  void on_read(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
               beast::error_code ec) {
    if (abandoned(j, c)) {
      return;
    }
    if (ec) {
      return on_attempt_error(j, c, ec);
    }
    if (auto status = j->parser->get().result_int(); status == 101) {
      // Switching Protocols, which no request here asks for: what follows is not HTTP, so the
      // connection is given up and the attempt fails as an invalid response (retried as one).
      discard(c);
      finish(j, failure(http_error::protocol_error,
                        "invalid HTTP response from " + where
                          + ": 101 Switching Protocols, to a request that asked for no upgrade"));
      pump();
      return;
    } else if (status >= 100 && status < 200) {
      // An interim response (100 Continue, 102 Processing, 103 Early Hints) comes before the
      // final one, which a client must read past it (RFC 9110 §15.2) on the same connection,
      // within the attempt's time. Taken as the answer, it would fail the call and leave the
      // real response in the buffer for the connection's next request.
      if (++j->interim > max_interim_responses) {
        return fail_interim(j, c, status);
      }
      new_parser(*j);
      return read_response(j, c);
    }
    auto res = j->parser->release();
    j->parser.reset();
    // Bytes already read past the response are none of the next request's business (one
    // request at a time, no pipelining): such a connection is not used again, or its next
    // request would read them as its answer. (Line breaks alone, which some servers send after
    // a body, are dropped.)
    drop_line_breaks(c->buffer);
    bool keep = res.keep_alive() && !shut_down && c->buffer.size() == 0;
    c->served = true;
    c->tcp().expires_never();
    http_result r;
    r.status = static_cast<int>(res.result_int());
    r.reused_connection = j->attempt_reused;
    r.headers.reserve(static_cast<std::size_t>(std::distance(res.begin(), res.end())));
    for (const auto& field : res) {
      r.headers.emplace_back(lower({field.name_string().data(), field.name_string().size()}),
                             std::string(field.value().data(), field.value().size()));
    }
    r.body = std::move(res.body());
    if (keep) {
      idle.push_back(c);
    } else {
      discard(c);
    }
    finish(j, std::move(r));
    pump();
  }

  void fail_interim(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                    unsigned status) {
    discard(c);
    finish(j, failure(http_error::protocol_error,
                      "invalid HTTP response from " + where + ": more than "
                        + std::to_string(max_interim_responses) + " interim responses (HTTP "
                        + std::to_string(status) + ") before a final one"));
    pump();
  }

  void on_attempt_error(const std::shared_ptr<job>& j, const std::shared_ptr<connection>& c,
                        beast::error_code ec) {
    bool got_some = j->parser && j->parser->got_some();
    discard(c);
    // A reused connection that fails before any response byte was most likely closed by the
    // server while idle: the request was not processed, so one fresh attempt is safe.
    if (j->attempt_reused && !got_some && !j->retried && ec != beast::error::timeout
        && !shut_down) {
      j->retried = true;
      // Nor was it sent, then: a fresh connection refused leaves it unsent (helper-41: the
      // probes of a killed provider went out on its stale connections first, so each refusal
      // counted as heard and doubled the source's ejection).
      j->written = false;
      connect_new(j);
      return;
    }
    finish(j, classify(ec));
    pump();
  }

  http_result classify(beast::error_code ec) const {
    if (ec == beast::error::timeout) {
      return failure(http_error::timeout, "no complete response from " + where + " within "
                                            + std::to_string(opts.attempt_timeout.count())
                                            + " ms");
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category()
        && ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return failure(http_error::protocol_error,
                     "invalid HTTP response from " + where + ": " + ec.message());
    }
    return failure(http_error::connection_reset,
                   "connection to " + where + " failed: " + ec.message());
  }

  void cancel(uint64_t id) {
    auto w = std::find_if(waiting.begin(), waiting.end(),
                          [id](const std::shared_ptr<job>& j) { return j->id == id; });
    if (w != waiting.end()) {
      auto j = std::move(*w);
      waiting.erase(w);
      return finish(j, failure(http_error::cancelled, "request cancelled"));
    }
    auto a = active.find(id);
    if (a == active.end()) {
      return;
    }
    auto j = a->second;
    // The pending handler sees `finished` and discards the connection, freeing its slot.
    if (j->conn) {
      j->conn->close();
    }
    finish(j, failure(http_error::cancelled, "request cancelled"));
  }

  void stop() {
    shut_down = true;
    auto queued = std::move(waiting);
    waiting.clear();
    for (auto& j : queued) {
      finish(j, failure(http_error::cancelled, "the HTTP client pool shut down"));
    }
    std::vector<std::shared_ptr<job>> running;
    running.reserve(active.size());
    for (auto& [id, j] : active) {
      running.push_back(j);
    }
    for (auto& j : running) {
      if (j->conn) {
        j->conn->close();
      }
      finish(j, failure(http_error::cancelled, "the HTTP client pool shut down"));
    }
    for (auto& c : idle) {
      discard(c);
    }
    idle.clear();
  }
};

http_client_pool::http_client_pool(std::string_view url, asio::io_context& io,
                                   http_client_options options)
  : impl_(std::make_shared<impl>(url, io, std::move(options))) {
}

http_client_pool::~http_client_pool() {
  shutdown();
}

bool http_client_pool::valid() const noexcept {
  return impl_->endpoint.has_value();
}

const std::optional<http_endpoint>& http_client_pool::endpoint() const noexcept {
  return impl_->endpoint;
}

const std::string& http_client_pool::url_error() const noexcept {
  return impl_->url_error;
}

uint64_t http_client_pool::async_post(std::string path, std::string body,
                                      std::vector<http_header> headers, http_completion done) {
  auto id = impl_->next_id.fetch_add(1, std::memory_order_relaxed);
  asio::post(impl_->strand, [self = impl_, id, path = std::move(path), body = std::move(body),
                             headers = std::move(headers), done = std::move(done)]() mutable {
    self->submit(id, std::move(path), std::move(body), std::move(headers), std::move(done));
  });
  return id;
}

void http_client_pool::cancel(uint64_t id) {
  asio::post(impl_->strand, [self = impl_, id] { self->cancel(id); });
}

void http_client_pool::shutdown() {
  asio::post(impl_->strand, [self = impl_] { self->stop(); });
}

} // namespace arbiter::backends
