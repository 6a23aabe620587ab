#include "net/http_server.hpp"

#include <utility>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <optional>

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "arbiter/version.hpp"
#include "common/log.hpp"
#include "common/tickets.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

/// How often the hang-up sweep runs, and how long a request is in flight before its client is
/// watched: a hang-up is noticed within twice this.
constexpr std::chrono::milliseconds hang_up_sweep_every{50};

/// A reply to a request not read to its end waits this long at most, and drops this much at
/// most, for the client to finish sending before the connection closes (`linger`).
constexpr std::chrono::milliseconds linger_time{2000};
constexpr size_t linger_bytes = 64u << 20;

int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

} // namespace

struct http_server::impl {
  asio::io_context& ioc;
  config::server_config cfg;
  request_handler& routes;
  http_metrics& metrics;
  std::optional<tcp::acceptor> acceptor_storage;
  tcp::acceptor& acceptor;
  std::atomic<bool> draining{false};
  /// `finish_drain` closed the acceptor: an accept error then ends the accept loop.
  std::atomic<bool> accepting_stopped{false};
  std::mutex sessions_mutex;
  std::vector<std::weak_ptr<http_session>> sessions;
  /// Accept failures (out of file descriptors, above all) retry after a growing pause rather
  /// than at once, and are logged once per `accept_log_every`. Destroyed with the acceptor
  /// by `shutdown`, before the io_context whose service it uses.
  std::optional<asio::steady_timer> accept_pause;
  /// Every `hang_up_sweep_every`, requests in flight longer than that get their client
  /// watched for a hang-up (`server.abandon_on_hang_up`; `http_session::watch_if_slow`).
  std::optional<asio::steady_timer> hang_up_sweep;
  std::chrono::milliseconds accept_backoff{0};
  std::chrono::steady_clock::time_point accept_logged{};
  uint64_t accept_failures_unlogged = 0;

  impl(asio::io_context& io, const config::server_config& c, request_handler& r,
       http_metrics& m)
    : ioc(io), cfg(c), routes(r), metrics(m),
      acceptor_storage(std::in_place, asio::make_strand(io)), acceptor(*acceptor_storage),
      accept_pause(std::in_place, acceptor.get_executor()),
      hang_up_sweep(std::in_place, acceptor.get_executor()) {
  }

  /// Starts the watches `hang_up_sweep` is for, and arms it again.
  void sweep_hang_ups();

  /// Closes the longest-open connection that is waiting for a request (or still receiving
  /// one's headers), to make room for a new one. False when every connection has a request
  /// in flight.
  bool evict_idle();
};

namespace {

/// Whether a Transfer-Encoding's codings end in `chunked`, applied once, so that the parser
/// knows where the body ends (RFC 9112 §6.1, §6.3).
bool framed_by_chunked(beast::string_view codings) {
  size_t chunked = 0;
  bool last = false;
  while (!codings.empty()) {
    auto comma = codings.find(',');
    auto coding = codings.substr(0, comma);
    while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) {
      coding.remove_prefix(1);
    }
    while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) {
      coding.remove_suffix(1);
    }
    if (!coding.empty()) {
      last = beast::iequals(coding, "chunked");
      chunked += last ? 1 : 0;
    }
    codings = comma == beast::string_view::npos ? beast::string_view{}
                                                : codings.substr(comma + 1);
  }
  return last && chunked == 1;
}

/// A request target in origin form: the absolute form a client may send (`POST
/// http://host/v1/score`, as to a proxy; RFC 9112 §3.2.2 says a server must take it) without
/// its scheme and authority, which end at the first '/', '?' or '#'.
std::string origin_form(beast::string_view target) {
  auto scheme = target.find("://");
  if (target.empty() || target.front() == '/' || scheme == beast::string_view::npos
      || !(beast::iequals(target.substr(0, scheme), "http")
           || beast::iequals(target.substr(0, scheme), "https"))) {
    return std::string{target};
  }
  auto rest = target.substr(scheme + 3);
  auto end = rest.find_first_of("/?#");
  if (end == beast::string_view::npos) {
    return "/";
  }
  return (rest[end] == '/' ? std::string{} : std::string{"/"}) + std::string{rest.substr(end)};
}

} // namespace

/// One client connection. Reads a request, hands it to the router, writes the reply, and
/// repeats while the client keeps the connection alive. Only one request is in flight per
/// connection; the next is read after the reply is written.
class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(tcp::socket&& socket, http_server& server, bool over_capacity = false)
    : stream_(std::move(socket)), server_(server), impl_(*server.impl_),
      over_capacity_(over_capacity) {
    ++server_.open_;
    impl_.metrics.connections.Increment();
  }

  ~http_session() {
    --server_.open_;
    impl_.metrics.connections.Decrement();
  }

  void run() {
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this()] { self->read_header(); });
  }

  /// Whether a request is being handled (read in full, not yet answered).
  bool busy() const noexcept {
    return busy_.load();
  }

  /// Closes the connection if it waits for a request or is still receiving one's headers (at
  /// the end of a drain).
  void close_if_idle() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) {
        self->close_now();
      }
    });
  }

  /// To make room under `server.max_connections`: closes the connection as `close_if_idle`
  /// does, unless it has a request in flight or is being closed already; says whether it
  /// will. One still receiving its headers counts as idle: it was kept open (and no longer
  /// watched for a hang-up) while the newcomer took its place, so trickling clients outgrew
  /// the cap.
  bool evict() {
    if (busy_.load() || evicted_.exchange(true)) {
      return false;
    }
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) {
        self->close_now();
      } else {
        // Its request arrived meanwhile: it stays, and another idle one makes the room the
        // newcomer was promised (else each such race left the cap one higher for good).
        self->evicted_ = false;
        self->impl_.evict_idle();
      }
    });
    return true;
  }

  /// Called by the server's sweep (`sweep_hang_ups`, any thread): when the request in flight
  /// was handed on before `cutoff_ns` and nobody watches its client yet, starts the watch on
  /// the connection's strand. Quick requests, most of them, never pay for one.
  void watch_if_slow(int64_t cutoff_ns) {
    if (handed_on_ns_.load(std::memory_order_relaxed) > cutoff_ns) {
      return;
    }
    auto ticket = unwatched_.exchange(0, std::memory_order_acquire);
    if (ticket == 0) {
      return;
    }
    asio::post(stream_.get_executor(), [self = shared_from_this(), ticket] {
      if (!self->replied_ && self->ticket_ == ticket) {
        self->watch_for_hang_up();
      }
    });
  }

private:
  void read_header() {
    busy_ = false;
    started_ = false;
    head_ = false;
    parser_.emplace();
    parser_->body_limit(impl_.cfg.max_body_bytes);
    parser_->header_limit(64 * 1024);
    if (buffer_.size() > 0) {
      return read_request();
    }
    // An idle connection may wait `idle_timeout` for its next request's first bytes (a
    // connection over the cap only `read_timeout`); from there the whole request must arrive
    // within `read_timeout`, so a client trickling its headers is cut off at that.
    stream_.expires_after(over_capacity_ ? impl_.cfg.read_timeout : impl_.cfg.idle_timeout);
    stream_.async_read_some(buffer_.prepare(16 * 1024),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) {
                                return self->on_read_error(ec);
                              }
                              self->buffer_.commit(n);
                              self->read_request();
                            });
  }

  void read_request() {
    started_ = true;
    stream_.expires_after(impl_.cfg.read_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->on_header(ec);
                            });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    busy_ = true;
    if (auto codings = parser_->get()[http::field::transfer_encoding];
        !codings.empty() && !framed_by_chunked(codings)) {
      // RFC 9112 §6.3: the body's length cannot be known, so it must not be read as the next
      // request (a body holding one was served as such: request smuggling behind a proxy
      // that frames the message otherwise). 400, and the connection closes.
      impl_.routes.count_protocol_error("malformed_http", 400);
      return write_error(400, "invalid_request",
                         "malformed HTTP request: Transfer-Encoding '" + std::string{codings}
                           + "' does not end in chunked (once), so the body's length is "
                             "unknown");
    }
    if (const auto& head = parser_->get(); head.version() >= 11) {
      // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host line is a 400. A proxy
      // and this server could route it differently (one Host each).
      const auto [first, last] = head.equal_range(http::field::host);
      if (std::distance(first, last) != 1) {
        impl_.routes.count_protocol_error("malformed_http", 400);
        return write_error(400, "invalid_request",
                           first == last ? "malformed HTTP request: an HTTP/1.1 request "
                                           "needs a Host header"
                                         : "malformed HTTP request: Host given twice");
      }
    }
    // Small requests arrive whole with their headers: parse the buffered body at once
    // rather than through another asynchronous read.
    if (auto length = parser_->content_length();
        length && !parser_->chunked() && buffer_.size() >= *length) {
      while (!parser_->is_done() && !ec) {
        auto used = parser_->put(buffer_.data(), ec);
        buffer_.consume(used);
        if (used == 0 && !parser_->is_done()) {
          parser_->put_eof(ec);
        }
      }
      return on_body(ec);
    }
    // Clients such as curl ask before sending a large body, and wait a second if not told.
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      auto res = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     parser_->get().version());
      http::async_write(stream_, *res,
                        [self = shared_from_this(), res](beast::error_code e, size_t) {
                          if (e) {
                            return self->close();
                          }
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code e, size_t) {
                       self->on_body(e);
                     });
  }

  void on_body(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    auto req = parser_->release();
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    head_ = req.method() == http::verb::head;
    stream_.expires_never();
    const auto target = origin_form(req.target());
    const auto path = target.substr(0, target.find('?'));
    if (over_capacity_ && req.method() == http::verb::get
        && (path == "/health" || path == "/metrics")) {
      // A readiness probe and a Prometheus scrape are answered beyond the cap (their answers
      // are cheap): a saturated server failed its readiness check and lost its metrics just
      // when they mattered (helper-33). The connection closes after it.
      keep_alive_ = false;
    } else if (over_capacity_) {
      impl_.routes.count_protocol_error("too_many_connections", 503);
      keep_alive_ = false;
      http_reply r;
      r.status = 503;
      r.headers.emplace_back("Retry-After", "1");
      r.body = impl_.routes.error_body_for(
        target, 503, "server_busy",
        std::to_string(impl_.cfg.max_connections)
          + " connections are open (server.max_connections), each with a request in flight; "
            "retry shortly");
      return write(std::move(r));
    }
    auto self = shared_from_this();
    auto defer = [self](std::function<void()> fn) {
      asio::post(self->stream_.get_executor(), [self, fn = std::move(fn)] {
        self->on_strand_ = true;
        fn();
        self->on_strand_ = false;
      });
    };
    // One request is in flight per connection, so its reply comes from one place: the strand
    // (immediate answers, deferred ones) or an actor thread (which must post).
    auto reply = [self](http_reply r) {
      if (self->on_strand_) {
        return self->write(std::move(r));
      }
      asio::post(self->stream_.get_executor(),
                 [self, r = std::move(r)]() mutable { self->write(std::move(r)); });
    };
    on_strand_ = true;
    const auto view = [](beast::string_view text) {
      return std::string_view{text.data(), text.size()};
    };
    http_request request;
    request.method = view(req.method_string());
    request.target = target;
    request.authorization = view(req[http::field::authorization]);
    request.content_type = view(req[http::field::content_type]);
    request.step = view(req["X-Arbiter-Step"]);
    request.client_timeout = view(req["X-Stainless-Read-Timeout"]);
    request.content_encoding = view(req[http::field::content_encoding]);
    request.transfer_encoding = view(req[http::field::transfer_encoding]);
    request.body = std::move(req.body());
    // Only a request that starts work is watched for a hang-up (and counted when abandoned).
    request.ticket = impl_.routes.abandonable(request.target) ? new_ticket() : 0;
    ticket_ = request.ticket;
    replied_ = false;
    impl_.routes.handle(std::move(request), std::move(reply), std::move(defer));
    on_strand_ = false;
    if (!replied_) {
      handed_on_ns_.store(steady_ns(), std::memory_order_relaxed);
      unwatched_.store(ticket_, std::memory_order_release);
    }
  }

  /// While a request is in flight, notices its client closing the connection (a trainer's
  /// timeout, a killed job) and says so (`request_handler::abandon`), so that work nobody
  /// will read stops. A peek tells the cases apart, now and whenever the socket turns
  /// readable: the end of the stream (or a reset) is the hang-up; bytes (a pipelined request)
  /// end the watch and wait for the next read; nothing (a stale readiness event) watches on.
  void watch_for_hang_up() {
    char byte = 0;
    auto got = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got > 0) {
      return;
    }
    if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      hung_up_ = true;
      impl_.routes.abandon(ticket_);
      return;
    }
    stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), ticket = ticket_](beast::error_code ec) {
        // A watch still pending when its request is answered is left to end on its own (the
        // next request's bytes, or the connection's end), which costs less than cancelling.
        if (!ec && !self->replied_ && self->ticket_ == ticket) {
          self->watch_for_hang_up();
        }
      });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      impl_.routes.count_protocol_error("payload_too_large", 413);
      return write_error(413, "payload_too_large",
                         "body exceeds " + std::to_string(impl_.cfg.max_body_bytes)
                           + " bytes (server.max_body_bytes)");
    }
    if (ec == http::error::header_limit) {
      impl_.routes.count_protocol_error("header_too_large", 431);
      return write_error(431, "header_too_large", "request headers exceed 64 KiB");
    }
    if (ec == http::error::partial_message) {
      // The client hung up mid-request (a killed trainer, an upload timeout): not a malformed
      // request, and nobody reads an answer.
      return close();
    }
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted
        || ec == asio::error::connection_reset || ec == asio::error::eof
        || ec == asio::error::bad_descriptor) {
      return close();
    }
    if (ec == beast::error::timeout) {
      if (busy_ || started_) {
        impl_.routes.count_protocol_error("read_timeout", 408);
      }
      return close();
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
      impl_.routes.count_protocol_error("malformed_http", 400);
      return write_error(400, "invalid_request", "malformed HTTP request: " + ec.message());
    }
    return close();
  }

  /// Answers a request that was not read to its end (too large, malformed): the reply closes
  /// the connection, after dropping what the client still sends (`linger`).
  void write_error(unsigned status, const std::string& code, const std::string& message) {
    keep_alive_ = false;
    unread_ = true;
    http_reply r;
    r.status = status;
    // In the shape the route's clients read (OpenAI's, TEI's), where the target is known.
    auto target = parser_ ? origin_form(parser_->get().target()) : std::string{};
    r.body = impl_.routes.error_body_for(target, status, code, message);
    write(std::move(r));
  }

  void write(http_reply reply) {
    replied_ = true;
    unwatched_.store(0, std::memory_order_relaxed);
    if (hung_up_) {
      hung_up_ = false;
      keep_alive_ = false;
    }
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(version_);
    res->result(reply.status);
    res->set(http::field::server, std::string{"arbiter/"} + arbiter::version);
    res->set(http::field::content_type, reply.content_type);
    for (auto& [name, value] : reply.headers) {
      res->set(name, value);
    }
    res->body() = std::move(reply.body);
    // Over the cap (a connection chosen to make room got its request in first), a connection
    // closes once answered, so the count comes back to the cap.
    res->keep_alive(keep_alive_ && !impl_.draining
                    && server_.open_.load() <= impl_.cfg.max_connections);
    res->prepare_payload();
    if (head_) {
      // The headers GET would get, Content-Length included, and no body (RFC 9110 §9.3.2).
      res->body().clear();
    }
    stream_.expires_after(impl_.cfg.read_timeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        self->on_write(ec, res->keep_alive());
                      });
  }

  void on_write(beast::error_code ec, bool keep_alive) {
    server_.replies_.fetch_add(1, std::memory_order_relaxed);
    if (!ec && unread_) {
      return linger();
    }
    if (ec || !keep_alive) {
      return close();
    }
    read_header();
  }

  /// Closing a socket with bytes unread resets the connection, and a client still sending its
  /// body (most send it whole before they read) loses the reply with it. So the send side is
  /// shut (the client sees the reply end) and what arrives is dropped until the client closes,
  /// for at most `linger_time` and `linger_bytes`, as web servers' lingering close does.
  void linger() {
    unread_ = false;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    buffer_.consume(buffer_.size());
    stream_.expires_after(std::min<std::chrono::milliseconds>(impl_.cfg.read_timeout,
                                                              linger_time));
    drop_unread(0);
  }

  void drop_unread(size_t dropped) {
    if (dropped > linger_bytes) {
      return close();
    }
    stream_.async_read_some(buffer_.prepare(64 * 1024),
                            [self = shared_from_this(), dropped](beast::error_code ec, size_t n) {
                              if (ec) {
                                return self->close();
                              }
                              self->drop_unread(dropped + n);
                            });
  }

  void close_now() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  void close() {
    busy_ = false;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  http_server& server_;
  http_server::impl& impl_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::atomic<bool> busy_{false};
  /// Chosen to make room under the cap (`evict`): not chosen twice.
  std::atomic<bool> evicted_{false};
  /// True once the current request's first bytes have arrived.
  bool started_ = false;
  /// Accepted beyond `server.max_connections` with no idle connection to close: its one
  /// request is answered 503.
  bool over_capacity_ = false;
  /// True while code runs on this connection's strand on behalf of a request.
  bool on_strand_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  /// The request in flight is a HEAD: its reply goes without a body.
  bool head_ = false;
  /// The request in flight's `http_request::ticket`, and whether its reply has been written.
  uint64_t ticket_ = 0;
  bool replied_ = true;
  /// The hang-up watch saw the client go (the reply then closes the connection).
  bool hung_up_ = false;
  /// The request being answered was not read to its end: the reply lingers (`linger`).
  bool unread_ = false;
  /// For the server's sweep: when the request in flight was handed on (steady clock, ns), and
  /// its ticket while nobody watches its client (0: answered, or watched).
  std::atomic<int64_t> handed_on_ns_{0};
  std::atomic<uint64_t> unwatched_{0};
};

http_server::http_server(asio::io_context& ioc, const config::server_config& cfg,
                         request_handler& routes, http_metrics& metrics)
  : impl_(std::make_unique<impl>(ioc, cfg, routes, metrics)) {
}

http_server::~http_server() = default;

bool http_server::listen(const std::string& host, uint16_t port, std::string& error) {
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    // A host name ("localhost"): its first IPv4 address, else its first address.
    tcp::resolver resolver{impl_->acceptor.get_executor()};
    auto found = resolver.resolve(host, "", tcp::resolver::passive, ec);
    if (ec || found.empty()) {
      error = "server.host: '" + host + "' is neither an IP address nor a name this machine "
              "resolves (" + (ec ? ec.message() : std::string{"no address"}) + ")";
      return false;
    }
    address = found.begin()->endpoint().address();
    for (const auto& entry : found) {
      if (entry.endpoint().address().is_v4()) {
        address = entry.endpoint().address();
        break;
      }
    }
  }
  tcp::endpoint endpoint{address, port};
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) {
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) {
    acceptor.bind(endpoint, ec);
  }
  if (!ec) {
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    error = "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message();
    return false;
  }
  port_ = acceptor.local_endpoint().port();
  return true;
}

void http_server::start() {
  asio::dispatch(impl_->acceptor.get_executor(), [this] {
    accept_next();
    if (impl_->cfg.abandon_on_hang_up) {
      impl_->sweep_hang_ups();
    }
  });
}

void http_server::impl::sweep_hang_ups() {
  const int64_t cutoff = steady_ns() - std::chrono::nanoseconds{hang_up_sweep_every}.count();
  {
    std::lock_guard<std::mutex> guard{sessions_mutex};
    for (auto& weak : sessions) {
      if (auto session = weak.lock(); session && session->busy()) {
        session->watch_if_slow(cutoff);
      }
    }
  }
  hang_up_sweep->expires_after(hang_up_sweep_every);
  hang_up_sweep->async_wait([this](beast::error_code ec) {
    if (!ec) {
      sweep_hang_ups();
    }
  });
}

bool http_server::impl::evict_idle() {
  std::lock_guard<std::mutex> guard{sessions_mutex};
  for (auto& weak : sessions) {
    if (auto session = weak.lock(); session && session->evict()) {
      return true;
    }
  }
  return false;
}

void http_server::accept_next() {
  auto& im = *impl_;
  im.acceptor.async_accept(
    asio::make_strand(im.ioc), [this, &im](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || im.accepting_stopped) {
          return;
        }
        return accept_failed(ec);
      }
      im.accept_backoff = std::chrono::milliseconds{0};
      socket.set_option(tcp::no_delay(true), ec);
      // Beyond the cap, the longest-open idle connection makes room; when every connection
      // has a request in flight, the newcomer's request is answered 503.
      bool over = open_.load() >= im.cfg.max_connections && !im.evict_idle();
      auto session = std::make_shared<http_session>(std::move(socket), *this, over);
      {
        std::lock_guard<std::mutex> guard{im.sessions_mutex};
        auto& list = im.sessions;
        list.erase(std::remove_if(list.begin(), list.end(),
                                  [](const auto& w) { return w.expired(); }),
                   list.end());
        list.push_back(session);
      }
      session->run();
      accept_next();
    });
}

void http_server::accept_failed(const boost::system::error_code& ec) {
  auto& im = *impl_;
  // Out of file descriptors the same accept fails again at once: pause (10 ms doubling to
  // 1 s) and free a descriptor by closing an idle connection; log once per 10 s.
  const bool no_descriptors = ec == asio::error::no_descriptors
                              || ec.value() == ENFILE || ec.value() == EMFILE;
  if (no_descriptors) {
    im.evict_idle();
  }
  im.accept_backoff = std::clamp(im.accept_backoff * 2, std::chrono::milliseconds{10},
                                 std::chrono::milliseconds{1000});
  auto now = std::chrono::steady_clock::now();
  if (now - im.accept_logged >= std::chrono::seconds{10}) {
    log::warn("accept failed: ", ec.message(),
              no_descriptors ? " (out of file descriptors: lower server.max_connections or "
                               "raise the open-files limit)"
                             : "",
              im.accept_failures_unlogged > 0
                ? "; " + std::to_string(im.accept_failures_unlogged) + " more since the last report"
                : std::string{});
    im.accept_logged = now;
    im.accept_failures_unlogged = 0;
  } else {
    ++im.accept_failures_unlogged;
  }
  im.accept_pause->expires_after(im.accept_backoff);
  im.accept_pause->async_wait([this, &im](beast::error_code e) {
    if (!e && !im.draining) {
      accept_next();
    }
  });
}

void http_server::shutdown() {
  // The timer too: left to ~impl, it outlived the io_context and its destructor called the
  // destroyed timer service (UBSan in the ASan build, at every `serve` exit).
  impl_->accept_pause.reset();
  impl_->hang_up_sweep.reset();
  impl_->acceptor_storage.reset();
}

void http_server::begin_drain() {
  impl_->draining = true;
}

void http_server::finish_drain() {
  auto* im = impl_.get();
  im->accepting_stopped = true;
  asio::post(im->acceptor.get_executor(), [im] {
    beast::error_code ignored;
    im->accept_pause->cancel();
    im->acceptor.close(ignored);
  });
  std::lock_guard<std::mutex> guard{im->sessions_mutex};
  for (auto& weak : im->sessions) {
    if (auto session = weak.lock()) {
      session->close_if_idle();
    }
  }
}

} // namespace arbiter::net
