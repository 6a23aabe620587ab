// libFuzzer target: an HTTP request read the way net/http_server.cpp reads one: Beast's
// request parser with the body limit (server.max_body_bytes: the default, or the smallest
// allowed) and the 64 KiB header limit, the buffered body put at once as `on_header` does,
// then the route's view of it (method, target, `?reward=`, keep-alive, Expect).
//
// Input: one selector byte (bit 0: the smallest body limit; bits 1-7: the chunk size the
// bytes arrive in for the second parse), then the bytes of the connection.
// Invariants: a parsed request's body is within the limit and as long as its Content-Length
// says; parsing the same bytes arriving in chunks ends the same way (same request, or an
// error both times).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "config/config.hpp"
#include "fuzz/fuzz_support.hpp"
#include "net/trainer_codec.hpp"

namespace beast = boost::beast;
namespace http = beast::http;
using namespace arbiter;

namespace {

struct parse_end {
  bool done = false;
  std::string method;
  std::string target;
  std::string body;
  bool keep_alive = false;
};

/// Feeds `bytes` to a parser configured as http_session::read_header does, `chunk` bytes at a
/// time (0: all at once), and returns how it ended.
parse_end parse(std::string_view bytes, uint64_t body_limit, size_t chunk) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  parser.header_limit(64 * 1024);
  beast::flat_buffer buffer;
  beast::error_code ec;
  size_t fed = 0;
  auto feed = [&] {
    size_t n = chunk == 0 ? bytes.size() - fed : std::min(chunk, bytes.size() - fed);
    if (n > 0) {
      auto dst = buffer.prepare(n);
      std::memcpy(dst.data(), bytes.data() + fed, n);
      buffer.commit(n);
    }
    fed += n;
    return n > 0;
  };
  feed();
  while (!parser.is_done()) {
    ec = {};
    auto used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more || (used == 0 && !ec)) {
      if (!feed()) {
        // The peer closed: what the server's read sees at end of stream.
        ec = {};
        parser.put_eof(ec);
        if (ec || !parser.is_done()) {
          return {};
        }
        break;
      }
      continue;
    }
    if (ec) {
      return {};
    }
  }
  parse_end end;
  end.done = true;
  const auto& req = parser.get();
  end.keep_alive = req.keep_alive();
  if (auto length = parser.content_length(); length && !parser.chunked()) {
    fuzz::check(req.body().size() == *length, "a body that is not Content-Length long");
  }
  end.method = std::string{req.method_string()};
  end.target = std::string{req.target()};
  end.body = req.body();
  fuzz::check(end.body.size() <= body_limit, "a body past the body limit");
  // What the router reads next.
  if (auto reward = net::query_parameter(end.target, "reward")) {
    fuzz::check(reward->size() <= end.target.size(), "a query parameter longer than the target");
  }
  (void)beast::iequals(req[http::field::expect], "100-continue");
  (void)req[http::field::content_type];
  return end;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint64_t default_limit = config::embedded_default().server.max_body_bytes;
  if (size < 1) {
    return 0;
  }
  const uint64_t body_limit = (data[0] & 1u) ? 1024 : default_limit;
  const size_t chunk = 1 + (data[0] >> 1);
  std::string_view bytes{reinterpret_cast<const char*>(data) + 1, size - 1};

  auto whole = parse(bytes, body_limit, 0);
  auto chunked = parse(bytes, body_limit, chunk);
  fuzz::check(whole.done == chunked.done, "the parse depends on how the bytes arrive");
  if (whole.done) {
    fuzz::check(whole.method == chunked.method && whole.target == chunked.target
                  && whole.body == chunked.body && whole.keep_alive == chunked.keep_alive,
                "the request depends on how the bytes arrive");
  }
  return 0;
}
