// arbiter-loadgen: a small closed-loop HTTP/1.1 load generator for bench/score_bench.py.
//
// Each of N keep-alive connections sends the same pre-serialised POST, waits for the whole
// response, and sends again at once (reconnecting when the server closes). All sockets share
// one io_context run by T threads (default 1) and use asynchronous operations only, so the
// generator stays light on small machines. After the warm-up, per-request latency, status
// codes and errors are recorded; at the end ONE line of JSON goes to stdout.
//
//   arbiter-loadgen --url http://127.0.0.1:PORT/v1/score --body-file FILE
//                   --connections N --duration-s S [--warmup-s W] [--threads T]
//                   [--items-per-request K] [--body-lines]
//
// With --body-lines, every non-empty line of FILE is a separate request body (JSON lines);
// connection i starts at line i and each connection steps through the lines in turn, so a
// server cannot answer the whole run from a cache of one body.
//
// Latency percentiles are taken over successful responses (200 whose body contains
// "scores"); requests counts every response read in the window, whatever its status;
// items = K x successful responses. errors counts transport failures (connect, write, read),
// 200 bodies without "scores" and statuses other than 200 and 429 (429 is back-pressure and
// only shows under "status").

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string url;
  std::string body_file;
  int connections = 8;
  double duration_s = 10.0;
  double warmup_s = 1.0;
  int threads = 1;
  long items_per_request = 1;
  bool body_lines = false;
};

struct Url {
  std::string host;
  std::string port;
  std::string target;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "arbiter-loadgen: " << msg << "\n"
            << "usage: arbiter-loadgen --url http://HOST:PORT/PATH --body-file FILE\n"
               "                       --connections N --duration-s S [--warmup-s W]\n"
               "                       [--threads T] [--items-per-request K] [--body-lines]\n";
  std::exit(2);
}

double parse_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end == nullptr || *end != '\0' || !std::isfinite(d) || d < 0) {
    usage_error("bad value for " + flag + ": '" + v + "'");
  }
  return d;
}

long parse_long(const std::string& flag, const std::string& v, long min) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end == nullptr || *end != '\0' || n < min) {
    usage_error("bad value for " + flag + ": '" + v + "'");
  }
  return n;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool have_value = false;
    if (const auto eq = flag.find('='); eq != std::string::npos && flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      have_value = true;
    }
    if (flag == "-h" || flag == "--help") usage_error("help requested");
    if (flag == "--body-lines" && !have_value) {
      o.body_lines = true;
      continue;
    }
    if (!have_value) {
      if (i + 1 >= argc) usage_error("missing value for " + flag);
      value = argv[++i];
    }
    if (flag == "--url") {
      o.url = value;
    } else if (flag == "--body-file") {
      o.body_file = value;
    } else if (flag == "--connections") {
      o.connections = static_cast<int>(parse_long(flag, value, 1));
    } else if (flag == "--duration-s") {
      o.duration_s = parse_double(flag, value);
    } else if (flag == "--warmup-s") {
      o.warmup_s = parse_double(flag, value);
    } else if (flag == "--threads") {
      o.threads = static_cast<int>(parse_long(flag, value, 1));
    } else if (flag == "--items-per-request") {
      o.items_per_request = parse_long(flag, value, 0);
    } else {
      usage_error("unknown option " + flag);
    }
  }
  if (o.url.empty()) usage_error("--url is required");
  if (o.body_file.empty()) usage_error("--body-file is required");
  if (o.duration_s <= 0) usage_error("--duration-s must be > 0");
  return o;
}

Url parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) usage_error("only http:// URLs are supported: " + url);
  const std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  Url u;
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  const auto colon = authority.rfind(':');
  if (colon == std::string::npos || authority.back() == ']') {
    u.host = authority;
    u.port = "80";
  } else {
    u.host = authority.substr(0, colon);
    u.port = authority.substr(colon + 1);
  }
  if (u.host.size() >= 2 && u.host.front() == '[' && u.host.back() == ']') {
    u.host = u.host.substr(1, u.host.size() - 2);
  }
  if (u.host.empty()) usage_error("no host in URL: " + url);
  return u;
}

// Shared, read-only after start-up.
struct Shared {
  std::vector<std::string> requests;  // whole serialised HTTP requests, sent verbatim
  tcp::resolver::results_type endpoints;
  Clock::time_point measure_from;
  std::atomic<bool> stopping{false};
  std::atomic<int> error_messages_left{5};
};

// Per-connection counters; read by main only after every io thread has been joined.
struct Stats {
  std::vector<std::int64_t> latencies_ns;  // successful responses only
  std::map<unsigned, std::uint64_t> status;
  std::uint64_t requests = 0;
  std::uint64_t ok = 0;
  std::uint64_t errors = 0;
  std::uint64_t connects = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::io_context& ioc, Shared& shared, std::size_t first_body)
      : strand_(asio::make_strand(ioc)),
        socket_(strand_),
        retry_(strand_),
        shared_(shared),
        next_body_(first_body % shared.requests.size()) {}

  void start() {
    asio::post(strand_, [self = shared_from_this()] { self->do_connect(); });
  }

  // Closes the socket from inside the strand; pending operations finish with an error and
  // the connection then stops because shared_.stopping is set.
  void stop() {
    asio::post(strand_, [self = shared_from_this()] {
      beast::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
      self->socket_.close(ignored);
      self->retry_.cancel();
    });
  }

  const Stats& stats() const { return stats_; }

 private:
  bool measuring(Clock::time_point t) const { return t >= shared_.measure_from; }

  void fail(const char* what, const beast::error_code& ec) {
    if (shared_.stopping.load(std::memory_order_relaxed)) return;
    if (measuring(Clock::now())) ++stats_.errors;
    if (shared_.error_messages_left.fetch_sub(1, std::memory_order_relaxed) > 0) {
      std::cerr << "arbiter-loadgen: " << what << ": " << ec.message() << "\n";
    }
    beast::error_code ignored;
    socket_.close(ignored);
    // Back off a little so a refusing server does not turn this into a busy loop.
    retry_.expires_after(std::chrono::milliseconds(20));
    retry_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
      if (!wait_ec && !self->shared_.stopping.load(std::memory_order_relaxed)) {
        self->do_connect();
      }
    });
  }

  void do_connect() {
    if (shared_.stopping.load(std::memory_order_relaxed)) return;
    asio::async_connect(socket_, shared_.endpoints,
                        [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
                          self->on_connect(ec);
                        });
  }

  void on_connect(beast::error_code ec) {
    if (ec) return fail("connect", ec);
    ++stats_.connects;
    beast::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    buffer_.clear();
    do_write();
  }

  void do_write() {
    if (shared_.stopping.load(std::memory_order_relaxed)) return;
    const std::string& request = shared_.requests[next_body_];
    if (++next_body_ == shared_.requests.size()) next_body_ = 0;
    sent_at_ = Clock::now();
    asio::async_write(socket_, asio::buffer(request),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->on_write(ec);
                      });
  }

  void on_write(beast::error_code ec) {
    if (ec) return fail("write", ec);
    parser_.emplace();
    parser_->body_limit(std::uint64_t{256} << 20);
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code read_ec, std::size_t) {
                       self->on_read(read_ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec) return fail("read", ec);
    const auto now = Clock::now();
    if (shared_.stopping.load(std::memory_order_relaxed)) return;
    const auto& res = parser_->get();
    const unsigned code = res.result_int();
    if (measuring(now)) {
      ++stats_.requests;
      ++stats_.status[code];
      if (code == 200) {
        if (res.body().find("\"scores\"") != std::string::npos) {
          ++stats_.ok;
          stats_.latencies_ns.push_back(
              std::chrono::duration_cast<std::chrono::nanoseconds>(now - sent_at_).count());
        } else {
          ++stats_.errors;
          if (shared_.error_messages_left.fetch_sub(1, std::memory_order_relaxed) > 0) {
            std::cerr << "arbiter-loadgen: 200 response without \"scores\": "
                      << res.body().substr(0, 200) << "\n";
          }
        }
      } else if (code != 429) {  // 429 is back-pressure, reported on its own
        ++stats_.errors;
        if (shared_.error_messages_left.fetch_sub(1, std::memory_order_relaxed) > 0) {
          std::cerr << "arbiter-loadgen: HTTP " << code << ": " << res.body().substr(0, 200)
                    << "\n";
        }
      }
    }
    if (!res.keep_alive()) {
      beast::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_both, ignored);
      socket_.close(ignored);
      return do_connect();
    }
    do_write();
  }

  asio::strand<asio::io_context::executor_type> strand_;
  tcp::socket socket_;
  asio::steady_timer retry_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  Clock::time_point sent_at_;
  Shared& shared_;
  std::size_t next_body_;
  Stats stats_;
};

double percentile_ms(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  // Nearest-rank percentile.
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1e6;
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_args(argc, argv);
  const Url url = parse_url(opt.url);

  std::vector<std::string> bodies;
  {
    std::ifstream in(opt.body_file, std::ios::binary);
    if (!in) usage_error("cannot read body file " + opt.body_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!opt.body_lines) {
      bodies.push_back(ss.str());
    } else {
      std::istringstream lines(ss.str());
      for (std::string line; std::getline(lines, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos) bodies.push_back(line);
      }
      if (bodies.empty()) usage_error("no bodies in " + opt.body_file);
    }
  }

  asio::io_context ioc(opt.threads);
  Shared shared;
  for (const std::string& body : bodies) {
    std::ostringstream req;
    const bool default_port = url.port == "80";
    const bool v6 = url.host.find(':') != std::string::npos;
    req << "POST " << url.target << " HTTP/1.1\r\n"
        << "Host: " << (v6 ? "[" + url.host + "]" : url.host)
        << (default_port ? "" : ":" + url.port) << "\r\n"
        << "User-Agent: arbiter-loadgen\r\n"
        << "Content-Type: application/json\r\n"
        << "Accept: application/json\r\n"
        << "Connection: keep-alive\r\n"
        << "Content-Length: " << body.size() << "\r\n\r\n"
        << body;
    shared.requests.push_back(req.str());
  }
  try {
    tcp::resolver resolver(ioc);
    shared.endpoints = resolver.resolve(url.host, url.port);
  } catch (const std::exception& e) {
    std::cerr << "arbiter-loadgen: cannot resolve " << url.host << ":" << url.port << ": "
              << e.what() << "\n";
    return 1;
  }

  const auto start = Clock::now();
  const auto warmup = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(opt.warmup_s));
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(opt.duration_s));
  shared.measure_from = start + warmup;

  std::vector<std::shared_ptr<Connection>> conns;
  conns.reserve(static_cast<std::size_t>(opt.connections));
  for (int i = 0; i < opt.connections; ++i) {
    conns.push_back(std::make_shared<Connection>(ioc, shared, static_cast<std::size_t>(i)));
    conns.back()->start();
  }

  Clock::time_point measure_end{};
  asio::steady_timer end_timer(ioc);
  end_timer.expires_at(shared.measure_from + duration);
  end_timer.async_wait([&](beast::error_code) {
    measure_end = Clock::now();
    shared.stopping.store(true);
    for (auto& c : conns) c->stop();
  });

  std::vector<std::thread> workers;
  for (int i = 1; i < opt.threads; ++i) workers.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& w : workers) w.join();

  // Aggregate.
  std::vector<std::int64_t> lat;
  std::map<unsigned, std::uint64_t> status{{200, 0}, {429, 0}};
  std::uint64_t requests = 0, ok = 0, errors = 0, connects = 0;
  for (const auto& c : conns) {
    const Stats& s = c->stats();
    lat.insert(lat.end(), s.latencies_ns.begin(), s.latencies_ns.end());
    for (const auto& [code, n] : s.status) status[code] += n;
    requests += s.requests;
    ok += s.ok;
    errors += s.errors;
    connects += s.connects;
  }
  std::sort(lat.begin(), lat.end());
  const double secs = std::chrono::duration<double>(measure_end - shared.measure_from).count();
  const auto items = ok * static_cast<std::uint64_t>(opt.items_per_request);

  std::ostringstream out;
  out << "{\"requests\":" << requests << ",\"items\":" << items
      << ",\"duration_s\":" << fmt(secs)
      << ",\"req_per_s\":" << fmt(secs > 0 ? static_cast<double>(requests) / secs : 0.0)
      << ",\"items_per_s\":" << fmt(secs > 0 ? static_cast<double>(items) / secs : 0.0)
      << ",\"p50_ms\":" << fmt(percentile_ms(lat, 50))
      << ",\"p90_ms\":" << fmt(percentile_ms(lat, 90))
      << ",\"p99_ms\":" << fmt(percentile_ms(lat, 99))
      << ",\"max_ms\":" << fmt(lat.empty() ? 0.0 : static_cast<double>(lat.back()) / 1e6)
      << ",\"status\":{";
  bool first = true;
  for (const auto& [code, n] : status) {
    out << (first ? "" : ",") << '"' << code << "\":" << n;
    first = false;
  }
  out << "},\"errors\":" << errors << ",\"ok\":" << ok << ",\"connects\":" << connects
      << ",\"connections\":" << opt.connections << ",\"threads\":" << opt.threads
      << ",\"items_per_request\":" << opt.items_per_request
      << ",\"bodies\":" << shared.requests.size() << "}";
  std::cout << out.str() << std::endl;
  return 0;
}
