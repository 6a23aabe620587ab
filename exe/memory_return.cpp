#include "exe/memory_return.hpp"

#include <chrono>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/log.hpp"

namespace arbiter::exe {

memory_returner::memory_returner(boost::asio::io_context& ioc, const net::http_server& server)
  : timer_(ioc), server_(server) {
}

void memory_returner::start() {
#if defined(__GLIBC__)
  seen_ = trimmed_at_ = server_.replies_written();
  schedule();
#endif
}

void memory_returner::stop() {
  timer_.cancel();
}

void memory_returner::schedule() {
  timer_.expires_after(std::chrono::seconds{1});
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) {
      tick();
    }
  });
}

void memory_returner::tick() {
#if defined(__GLIBC__)
  const uint64_t now = server_.replies_written();
  if (now == seen_ && now != trimmed_at_) {
    const auto start = std::chrono::steady_clock::now();
    const int released = malloc_trim(0);
    log::debug("malloc_trim after ", now - trimmed_at_, " replies: ",
               released != 0 ? "memory returned" : "nothing to return", " in ",
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                 .count(),
               " ms");
    trimmed_at_ = now;
  }
  seen_ = now;
#endif
  schedule();
}

} // namespace arbiter::exe
