#include "net/http_server.hpp"

#include <utility>

#include <algorithm>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "arbiter/version.hpp"
#include "common/log.hpp"
#include "net/score_codec.hpp"

namespace arbiter::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct http_server::impl {
  asio::io_context& ioc;
  config::server_config cfg;
  request_handler& routes;
  http_metrics& metrics;
  std::optional<tcp::acceptor> acceptor_storage;
  tcp::acceptor& acceptor;
  std::atomic<bool> draining{false};
  std::mutex sessions_mutex;
  std::vector<std::weak_ptr<http_session>> sessions;

  impl(asio::io_context& io, const config::server_config& c, request_handler& r,
       http_metrics& m)
    : ioc(io), cfg(c), routes(r), metrics(m),
      acceptor_storage(std::in_place, asio::make_strand(io)), acceptor(*acceptor_storage) {
  }
};

/// One client connection. Reads a request, hands it to the router, writes the reply, and
/// repeats while the client keeps the connection alive. Only one request is in flight per
/// connection; the next is read after the reply is written.
class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(tcp::socket&& socket, http_server& server)
    : stream_(std::move(socket)), server_(server), impl_(*server.impl_) {
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

  /// Closes the connection if it waits for a request (used when draining).
  void close_if_idle() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) {
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        self->stream_.close();
      }
    });
  }

private:
  void read_header() {
    if (impl_.draining) {
      return close();
    }
    busy_ = false;
    parser_.emplace();
    parser_->body_limit(impl_.cfg.max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(impl_.cfg.idle_timeout);
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
    stream_.expires_after(impl_.cfg.read_timeout);
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
    stream_.expires_never();
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
    impl_.routes.handle(std::string_view{req.method_string().data(), req.method_string().size()},
                        std::string_view{req.target().data(), req.target().size()},
                        std::move(req.body()), std::move(reply), std::move(defer));
    on_strand_ = false;
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
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted
        || ec == asio::error::connection_reset || ec == asio::error::eof
        || ec == asio::error::bad_descriptor) {
      return close();
    }
    if (ec == beast::error::timeout) {
      if (busy_) {
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

  void write_error(unsigned status, const std::string& code, const std::string& message) {
    keep_alive_ = false;
    http_reply r;
    r.status = status;
    r.body = encode_error(code, message);
    write(std::move(r));
  }

  void write(http_reply reply) {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(version_);
    res->result(reply.status);
    res->set(http::field::server, std::string{"arbiter/"} + arbiter::version);
    res->set(http::field::content_type, reply.content_type);
    for (auto& [name, value] : reply.headers) {
      res->set(name, value);
    }
    res->body() = std::move(reply.body);
    res->keep_alive(keep_alive_ && !impl_.draining);
    res->prepare_payload();
    stream_.expires_after(impl_.cfg.read_timeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        self->on_write(ec, res->keep_alive());
                      });
  }

  void on_write(beast::error_code ec, bool keep_alive) {
    if (ec || !keep_alive) {
      return close();
    }
    read_header();
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
  bool busy_ = false;
  /// True while code runs on this connection's strand on behalf of a request.
  bool on_strand_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
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
    error = "server.host: '" + host + "' is not an IP address (" + ec.message() + ")";
    return false;
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
  asio::dispatch(impl_->acceptor.get_executor(), [this] { accept_next(); });
}

void http_server::accept_next() {
  auto& im = *impl_;
  im.acceptor.async_accept(
    asio::make_strand(im.ioc), [this, &im](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec != asio::error::operation_aborted && !im.draining) {
          log::warn("accept failed: ", ec.message());
          accept_next();
        }
        return;
      }
      if (im.draining) {
        return;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto session = std::make_shared<http_session>(std::move(socket), *this);
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

void http_server::shutdown() {
  impl_->acceptor_storage.reset();
}

void http_server::begin_drain() {
  auto* im = impl_.get();
  im->draining = true;
  asio::post(im->acceptor.get_executor(), [im] {
    beast::error_code ignored;
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
