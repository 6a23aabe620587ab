#include "backends/http_client.hpp"

#include <utility>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

extern char** environ;

namespace arbiter::backends {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto wait_limit = 20s;
constexpr const char* embed_body = R"({"model":"e","input":"hello world"})";

/// The fake provider as a child process; stopped with SIGTERM on destruction.
class provider_process {
public:
  ~provider_process() {
    stop();
  }

  /// Starts it with `flags`; returns "" or why it failed. Sets `port()`.
  std::string start(const std::vector<std::string>& flags) {
    int fds[2];
    if (pipe(fds) != 0) {
      return "pipe failed";
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    std::vector<std::string> args{FAKE_PROVIDER_BIN, "--port", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, FAKE_PROVIDER_BIN, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    out_fd_ = fds[0];
    if (rc != 0) {
      pid_ = -1;
      return "posix_spawn failed";
    }
    // The first line is "listening on http://127.0.0.1:PORT"; wait for it without a sleep.
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (line.empty() || line.back() != '\n') {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      pollfd p{out_fd_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        return "no 'listening on' line within 10 s";
      }
      char c = 0;
      if (read(out_fd_, &c, 1) != 1) {
        return "fake provider exited early: " + line;
      }
      line.push_back(c);
    }
    auto colon = line.rfind(':');
    if (line.rfind("listening on http://", 0) != 0 || colon == std::string::npos) {
      return "unexpected first line: " + line;
    }
    port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
    return {};
  }

  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (out_fd_ >= 0) {
      close(out_fd_);
      out_fd_ = -1;
    }
  }

  uint16_t port() const {
    return port_;
  }

private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  uint16_t port_ = 0;
};

/// Blocking GET on loopback, for the fake provider's /stats.
std::string blocking_get(uint16_t port, const std::string& target) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(10s);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  return res.body();
}

/// The integer after `"key":` in flat JSON such as /stats, or -1.
long long json_int(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) {
    return -1;
  }
  return std::stoll(json.substr(at + key.size() + 3));
}

http_client_options options(std::size_t max_connections, std::chrono::milliseconds attempt_timeout,
                            std::chrono::milliseconds connect_timeout = 5s) {
  http_client_options o;
  o.max_connections = max_connections;
  o.attempt_timeout = attempt_timeout;
  o.connect_timeout = connect_timeout;
  return o;
}

class HttpClient : public ::testing::Test {
protected:
  void SetUp() override {
    guard_.emplace(asio::make_work_guard(io_));
    io_thread_ = std::thread([this] {
      io_.run();
      io_done_.set_value();
    });
  }

  void TearDown() override {
    pool_.reset();
    stop_io();
    provider_.stop();
  }

  /// Lets the io thread finish the pool's outstanding work and joins it.
  void stop_io() {
    if (!io_thread_.joinable()) {
      return;
    }
    guard_.reset();
    if (io_done_.get_future().wait_for(wait_limit) != std::future_status::ready) {
      ADD_FAILURE() << "io_context still had work " << wait_limit.count() << " s after shutdown";
      io_.stop();
    }
    io_thread_.join();
  }

  /// Starts the fake provider; returns its base URL.
  std::string start_provider(const std::vector<std::string>& flags = {}) {
    auto err = provider_.start(flags);
    EXPECT_EQ(err, "");
    return "http://127.0.0.1:" + std::to_string(provider_.port());
  }

  http_client_pool& make_pool(const std::string& url, http_client_options opts = {}) {
    pool_ = std::make_unique<http_client_pool>(url, io_, std::move(opts));
    return *pool_;
  }

  /// Posts and returns the future result; counts completions in `completions_`.
  std::future<http_result> post(const std::string& path, std::string body = embed_body,
                                uint64_t* id = nullptr) {
    auto promise = std::make_shared<std::promise<http_result>>();
    auto future = promise->get_future();
    auto got = pool_->async_post(path, std::move(body), {}, [this, promise](http_result r) {
      ++completions_;
      promise->set_value(std::move(r));
    });
    if (id != nullptr) {
      *id = got;
    }
    return future;
  }

  static http_result wait(std::future<http_result>& f) {
    if (f.wait_for(wait_limit) != std::future_status::ready) {
      ADD_FAILURE() << "no completion within " << wait_limit.count() << " s";
      http_result r;
      r.error_message = "test: no completion";
      r.error = http_error::cancelled;
      return r;
    }
    return f.get();
  }

  http_result post_and_wait(const std::string& path, std::string body = embed_body) {
    auto f = post(path, std::move(body));
    return wait(f);
  }

  /// Two requests in turn to a server on 127.0.0.1:`port` (the scripted raw-reply servers).
  std::pair<http_result, http_result> post_twice(uint16_t port) {
    make_pool("http://127.0.0.1:" + std::to_string(port));
    auto first = post_and_wait("/x");
    auto second = post_and_wait("/x");
    return {std::move(first), std::move(second)};
  }

  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::promise<void> io_done_;
  std::thread io_thread_;
  provider_process provider_;
  std::unique_ptr<http_client_pool> pool_;
  std::atomic<int> completions_{0};
};

TEST(HttpClientParseUrl, AcceptsHttpAndHttpsWithDefaults) {
  auto a = parse_url("http://example.com");
  ASSERT_TRUE(a.endpoint) << a.error;
  EXPECT_FALSE(a.endpoint->tls);
  EXPECT_EQ(a.endpoint->host, "example.com");
  EXPECT_EQ(a.endpoint->port, 80);
  EXPECT_EQ(a.endpoint->base_path, "");

  auto b = parse_url("HTTPS://api.example.com:8443/v1/");
  ASSERT_TRUE(b.endpoint) << b.error;
  EXPECT_TRUE(b.endpoint->tls);
  EXPECT_EQ(b.endpoint->port, 8443);
  EXPECT_EQ(b.endpoint->base_path, "/v1");

  auto c = parse_url("https://[::1]/x");
  ASSERT_TRUE(c.endpoint) << c.error;
  EXPECT_EQ(c.endpoint->host, "::1");
  EXPECT_EQ(c.endpoint->port, 443);
  EXPECT_EQ(c.endpoint->base_path, "/x");
}

TEST(HttpClientParseUrl, RefusesMalformedUrlsWithReasons) {
  struct bad_case {
    const char* url;
    const char* reason;
  };
  for (auto [url, reason] : {bad_case{"", "empty"}, bad_case{"example.com", "no scheme"},
                             bad_case{"ftp://x", "unsupported scheme 'ftp'"},
                             bad_case{"http://", "no host"}, bad_case{"http://:80", "no host"},
                             bad_case{"http://h:0", "port '0'"},
                             bad_case{"http://h:99999", "port '99999'"},
                             bad_case{"http://h:8a", "port '8a'"},
                             bad_case{"http://h:", "empty port"},
                             bad_case{"http://u:p@h", "user info"},
                             bad_case{"http://h/?q=1", "query"},
                             bad_case{"http://h /x", "whitespace"},
                             bad_case{"http://::1/", "brackets"},
                             bad_case{"http://[::1", "unterminated"}}) {
    auto r = parse_url(url);
    EXPECT_FALSE(r.endpoint) << url;
    EXPECT_NE(r.error.find(reason), std::string::npos) << url << " -> " << r.error;
  }
}

TEST_F(HttpClient, PostsEmbeddingsAndGets200) {
  auto& pool = make_pool(start_provider());
  ASSERT_TRUE(pool.valid());
  auto r = post_and_wait("/v1/embeddings");
  ASSERT_EQ(r.error, http_error::none) << r.error_message;
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.sent);
  EXPECT_NE(r.body.find("\"embedding\""), std::string::npos) << r.body;
  EXPECT_FALSE(r.reused_connection);
  ASSERT_NE(r.header("content-type"), nullptr);
  EXPECT_NE(r.header("content-type")->find("application/json"), std::string::npos);
}

TEST_F(HttpClient, BasePathIsPrefixed) {
  make_pool(start_provider() + "/v1/");
  auto r = post_and_wait("/embeddings");
  ASSERT_EQ(r.error, http_error::none) << r.error_message;
  EXPECT_EQ(r.status, 200);
}

TEST_F(HttpClient, SequentialRequestsReuseOneConnection) {
  make_pool(start_provider());
  for (int i = 0; i < 10; ++i) {
    auto r = post_and_wait("/v1/embeddings");
    ASSERT_EQ(r.error, http_error::none) << r.error_message;
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.reused_connection, i > 0) << "request " << i;
  }
  auto stats = blocking_get(provider_.port(), "/stats");
  EXPECT_EQ(json_int(stats, "requests_total"), 10) << stats;
}

TEST_F(HttpClient, MaxConnectionsCapsRequestsInFlight) {
  make_pool(start_provider({"--latency-median-ms", "50", "--latency-p99-ms", "60"}),
            options(2, 30s));
  std::vector<std::future<http_result>> futures;
  for (int i = 0; i < 8; ++i) {
    futures.push_back(post("/v1/embeddings"));
  }
  int reused = 0;
  for (auto& f : futures) {
    auto r = wait(f);
    ASSERT_EQ(r.error, http_error::none) << r.error_message;
    EXPECT_EQ(r.status, 200);
    reused += r.reused_connection ? 1 : 0;
  }
  // Two connections were opened; the other six requests waited and reused them.
  EXPECT_EQ(reused, 6);
  auto stats = blocking_get(provider_.port(), "/stats");
  EXPECT_EQ(json_int(stats, "requests_total"), 8) << stats;
  EXPECT_LE(json_int(stats, "max_concurrent"), 2) << stats;
  EXPECT_GE(json_int(stats, "max_concurrent"), 1) << stats;
}

TEST_F(HttpClient, AttemptTimeoutFailsWithTimeout) {
  make_pool(start_provider({"--error-rate-timeout", "1.0"}),
            options(8, 300ms));
  auto start = std::chrono::steady_clock::now();
  auto r = post_and_wait("/v1/embeddings");
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.error, http_error::timeout) << r.error_message;
  EXPECT_EQ(r.status, 0);
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 3s);
}

TEST_F(HttpClient, ResetConnectionFailsWithConnectionReset) {
  make_pool(start_provider({"--error-rate-reset", "1.0"}));
  auto r = post_and_wait("/v1/embeddings");
  EXPECT_EQ(r.error, http_error::connection_reset) << r.error_message;
  EXPECT_EQ(r.status, 0);
}

/// A loopback port nothing listens on.
uint16_t closed_port() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto port = acceptor.local_endpoint().port();
  acceptor.close();
  return port;
}

TEST_F(HttpClient, ClosedPortFailsWithConnectFailed) {
  make_pool("http://127.0.0.1:" + std::to_string(closed_port()));
  auto r = post_and_wait("/v1/embeddings");
  EXPECT_EQ(r.error, http_error::connect_failed) << r.error_message;
  EXPECT_NE(r.error_message.find("127.0.0.1"), std::string::npos) << r.error_message;
}

TEST_F(HttpClient, RateLimitedResponseSurfaces429WithRetryAfter) {
  make_pool(start_provider({"--rpm", "1"}));
  auto first = post_and_wait("/v1/embeddings");
  ASSERT_EQ(first.error, http_error::none) << first.error_message;
  EXPECT_EQ(first.status, 200);
  auto second = post_and_wait("/v1/embeddings");
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.status, 429);
  ASSERT_NE(second.header("retry-after"), nullptr);
  EXPECT_GE(std::stoi(*second.header("retry-after")), 1);
  EXPECT_TRUE(second.reused_connection);
}

TEST_F(HttpClient, CancelCompletesInFlightAndQueuedRequestsOnce) {
  make_pool(start_provider({"--error-rate-timeout", "1.0"}),
            options(1, 60s));
  uint64_t running_id = 0;
  uint64_t queued_id = 0;
  auto running = post("/v1/embeddings", embed_body, &running_id);
  auto queued = post("/v1/embeddings", embed_body, &queued_id);
  EXPECT_NE(running_id, queued_id);
  pool_->cancel(queued_id);
  auto q = wait(queued);
  EXPECT_EQ(q.error, http_error::cancelled);
  // It waited for the one connection: nothing of it left (its step does not count it).
  EXPECT_FALSE(q.sent);
  // Loopback: the running one is written well within this (the server never answers it).
  EXPECT_EQ(running.wait_for(500ms), std::future_status::timeout);
  pool_->cancel(running_id);
  auto r = wait(running);
  EXPECT_EQ(r.error, http_error::cancelled);
  EXPECT_TRUE(r.sent) << "it was written: the server may bill it";
  pool_->cancel(running_id);  // finished ids are ignored
  pool_->cancel(12345);       // unknown ids too
  pool_.reset();
  stop_io();  // every handler of the pool has run now
  EXPECT_EQ(completions_.load(), 2);
}

TEST_F(HttpClient, ShutdownCancelsPendingAndLaterRequests) {
  make_pool(start_provider({"--error-rate-timeout", "1.0"}),
            options(1, 60s));
  auto a = post("/v1/embeddings");
  auto b = post("/v1/embeddings");
  pool_->shutdown();
  auto c = post("/v1/embeddings");
  EXPECT_EQ(wait(a).error, http_error::cancelled);
  EXPECT_EQ(wait(b).error, http_error::cancelled);
  EXPECT_EQ(wait(c).error, http_error::cancelled);
  pool_.reset();
  stop_io();
  EXPECT_EQ(completions_.load(), 3);
}

TEST_F(HttpClient, ApiKeyNeverAppearsInErrors) {
  const std::string key = "sk-test-SECRET-7f3a9c";
  http_client_options opts;
  opts.api_key = key;
  // Accepted by the provider (which ignores it) ...
  auto url = start_provider();
  make_pool(url, opts);
  auto ok = post_and_wait("/v1/embeddings");
  ASSERT_EQ(ok.error, http_error::none) << ok.error_message;
  EXPECT_EQ(ok.status, 200);
  // ... and absent from every error text.
  std::vector<http_result> errors;
  make_pool("http://127.0.0.1:" + std::to_string(closed_port()), opts);
  errors.push_back(post_and_wait("/v1/embeddings"));
  make_pool("https://127.0.0.1:" + std::to_string(provider_.port()), opts);
  errors.push_back(post_and_wait("/v1/embeddings"));
  make_pool("http://" + key + "@127.0.0.1:1", opts);
  errors.push_back(post_and_wait("/v1/embeddings"));
  auto& pool = make_pool(url, opts);
  auto promise = std::make_shared<std::promise<http_result>>();
  auto f = promise->get_future();
  pool.async_post("/v1/embeddings", embed_body, {{"x-key", key + "\r\nInjected: 1"}},
                  [promise](http_result r) { promise->set_value(std::move(r)); });
  errors.push_back(wait(f));
  for (const auto& e : errors) {
    EXPECT_NE(e.error, http_error::none);
    EXPECT_FALSE(e.error_message.empty());
    EXPECT_EQ(e.error_message.find(key), std::string::npos) << e.error_message;
    EXPECT_EQ(e.error_message.find("SECRET"), std::string::npos) << e.error_message;
  }
}

TEST_F(HttpClient, HttpsToPlainHttpServerFailsWithTlsFailed) {
  auto url = start_provider();
  auto https = "https://" + url.substr(std::string("http://").size());
  make_pool(https, options(8, 30s, 5s));
  auto start = std::chrono::steady_clock::now();
  auto r = post_and_wait("/v1/embeddings");
  EXPECT_EQ(r.error, http_error::tls_failed) << r.error_message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);

  http_client_options insecure;
  insecure.insecure_skip_verify = true;
  make_pool(https, insecure);
  auto r2 = post_and_wait("/v1/embeddings");
  EXPECT_EQ(r2.error, http_error::tls_failed) << r2.error_message;
}

TEST_F(HttpClient, BadUrlAndBadPathCompleteWithBadUrl) {
  auto& pool = make_pool("ftp://example.com");
  EXPECT_FALSE(pool.valid());
  EXPECT_NE(pool.url_error().find("ftp"), std::string::npos);
  auto r = post_and_wait("/v1/embeddings");
  EXPECT_EQ(r.error, http_error::bad_url);
  EXPECT_EQ(r.error_message, pool.url_error());

  make_pool(start_provider());
  auto r2 = post_and_wait("v1/embeddings");
  EXPECT_EQ(r2.error, http_error::bad_url) << r2.error_message;
}

/// A server that answers each request, on one connection after another, with the next of its
/// raw replies, written as they are. With `close_each`, it closes the connection after each
/// reply, as a server whose idle timeout passed does: the client's next request on it finds
/// it closed.
class scripted_server {
public:
  explicit scripted_server(std::vector<std::string> replies, bool close_each = false)
    : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
      replies_(std::move(replies)) {
    thread_ = std::thread([this, close_each] {
      size_t next = 0;
      while (next < replies_.size()) {
        beast::error_code ec;
        tcp::socket socket(io_);
        acceptor_.accept(socket, ec);
        if (ec) {
          return;
        }
        ++accepted_;
        beast::flat_buffer buffer;
        while (next < replies_.size()) {
          http::request<http::string_body> req;
          http::read(socket, buffer, req, ec);
          if (ec) {
            break;
          }
          asio::write(socket, asio::buffer(replies_[next++]), ec);
          if (close_each) {
            socket.shutdown(tcp::socket::shutdown_both, ec);
            break;
          }
        }
        socket.close(ec);
        ++closed_;
      }
    });
  }

  ~scripted_server() {
    beast::error_code ec;
    acceptor_.close(ec);
    thread_.join();
  }

  uint16_t port() const {
    return acceptor_.local_endpoint().port();
  }

  int accepted() const {
    return accepted_;
  }

  /// Connections it has closed.
  int closed() const {
    return closed_;
  }

private:
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::vector<std::string> replies_;
  std::atomic<int> accepted_{0};
  std::atomic<int> closed_{0};
  std::thread thread_;
};

std::string ok_reply(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"
         + body;
}

TEST_F(HttpClient, StaleKeepAliveConnectionIsRetriedOnAFreshOne) {
  scripted_server server({ok_reply("reply 0"), ok_reply("reply 1")}, /*close_each=*/true);
  auto [first, second] = post_twice(server.port());
  ASSERT_EQ(first.error, http_error::none) << first.error_message;
  EXPECT_EQ(first.body, "reply 0");
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "reply 1");
  EXPECT_FALSE(second.reused_connection);
  EXPECT_EQ(server.accepted(), 2);
}

TEST_F(HttpClient, AStaleConnectionsRetryRefusedAtConnectLeavesTheRequestUnsent) {
  // helper-41: a provider killed under load left the pool its idle connections. Each probe of
  // its ejected source went out on one, then was refused on a fresh one, and counted as a
  // call the provider heard: the ejection doubled (5, 10, 20, 40 s) though nothing listened.
  {
    scripted_server server({ok_reply("reply 0")}, /*close_each=*/true);
    make_pool("http://127.0.0.1:" + std::to_string(server.port()));
    auto first = post_and_wait("/x");
    ASSERT_EQ(first.error, http_error::none) << first.error_message;
  } // gone: its port refuses connections now
  auto second = post_and_wait("/x");
  EXPECT_EQ(second.error, http_error::connect_failed) << second.error_message;
  EXPECT_FALSE(second.sent) << "no server took it";
}

TEST_F(HttpClient, AConnectionThePeerClosedWhileIdleIsNotUsedAgain) {
  // helper-64: after a provider restarted, each pooled connection its old process had closed
  // took a request that failed and was sent once more on a fresh one: a step counted 97
  // calls against the provider's 64.
  scripted_server server({ok_reply("reply 0"), ok_reply("reply 1")}, /*close_each=*/true);
  make_pool("http://127.0.0.1:" + std::to_string(server.port()));
  auto first = post_and_wait("/x");
  ASSERT_EQ(first.error, http_error::none) << first.error_message;
  for (int i = 0; i < 5000 && server.closed() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{1}); // the server closes it
  }
  ASSERT_EQ(server.closed(), 1);
  auto second = post_and_wait("/x");
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "reply 1");
  EXPECT_FALSE(second.resent) << "not written to the closed connection first";
  EXPECT_FALSE(second.reused_connection);
  EXPECT_EQ(server.accepted(), 2);
}

TEST_F(HttpClient, InterimResponsesAreReadPastToTheFinalOne) {
  // 1xx responses before the final one, as proxies and servers may send them unasked. The
  // client must not take one for the answer, nor leave the real answer on the connection for
  // the next request (which would then get this one's reply).
  scripted_server server({"HTTP/1.1 100 Continue\r\n\r\n"
                          "HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n"
                          + ok_reply("reply 0"),
                          ok_reply("reply 1")});
  auto [first, second] = post_twice(server.port());
  ASSERT_EQ(first.error, http_error::none) << first.error_message;
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "reply 0");
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "reply 1");
  EXPECT_TRUE(second.reused_connection);
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(HttpClient, EndlessInterimResponsesFailTheAttemptNamingThem) {
  std::string interim;
  for (int i = 0; i < 40; ++i) {
    interim += "HTTP/1.1 102 Processing\r\n\r\n";
  }
  scripted_server server({interim + ok_reply("late"), ok_reply("fresh")});
  auto [first, second] = post_twice(server.port());
  EXPECT_EQ(first.error, http_error::protocol_error);
  EXPECT_NE(first.error_message.find("interim responses (HTTP 102)"), std::string::npos)
    << first.error_message;
  // The connection is given up, so its unread bytes reach no later request.
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "fresh");
  EXPECT_FALSE(second.reused_connection);
}

TEST_F(HttpClient, AnUnaskedSwitchingProtocolsFailsTheAttemptAndTheConnectionIsGivenUp) {
  // What follows a 101 is another protocol's bytes (here an HTTP-looking reply that must not
  // be taken for anyone's answer).
  scripted_server server({"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
                          + ok_reply("not HTTP any more"),
                          ok_reply("fresh")});
  auto [first, second] = post_twice(server.port());
  EXPECT_EQ(first.error, http_error::protocol_error);
  EXPECT_NE(first.error_message.find("101 Switching Protocols"), std::string::npos)
    << first.error_message;
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "fresh");
  EXPECT_FALSE(second.reused_connection);
  EXPECT_EQ(server.accepted(), 2);
}

TEST_F(HttpClient, BytesPastAResponseAreNotTheNextRequestsAnswer) {
  // A server that writes more than the response it declared (a second, unasked-for response
  // here): the connection is not reused, so the next request gets its own answer.
  scripted_server server({ok_reply("reply 0") + ok_reply("not yours"), ok_reply("reply 1")});
  auto [first, second] = post_twice(server.port());
  ASSERT_EQ(first.error, http_error::none) << first.error_message;
  EXPECT_EQ(first.body, "reply 0");
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "reply 1");
  EXPECT_FALSE(second.reused_connection);
  EXPECT_EQ(server.accepted(), 2);
}

TEST_F(HttpClient, ALineBreakAfterABodyDoesNotCostTheConnection) {
  scripted_server server({ok_reply("reply 0") + "\r\n", ok_reply("reply 1")});
  auto [first, second] = post_twice(server.port());
  ASSERT_EQ(first.error, http_error::none) << first.error_message;
  ASSERT_EQ(second.error, http_error::none) << second.error_message;
  EXPECT_EQ(second.body, "reply 1");
  EXPECT_TRUE(second.reused_connection);
  EXPECT_EQ(server.accepted(), 1);
}

} // namespace
} // namespace arbiter::backends
