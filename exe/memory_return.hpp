#pragma once

// Gives freed heap memory back to the OS after a burst (`server.return_memory`). glibc keeps
// what a burst of large requests freed in its arenas, so without this the process holds its
// peak for good; jemalloc (the server's allocator where the build links it) gives it back
// only after its decay time, bit by bit (bench/memory_bench.py, bench/README.md "Memory after
// a burst").

#include <cstdint>

#include <utility>  // Boost 1.74's Asio needs std::exchange declared first.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "net/http_server.hpp"

namespace arbiter::exe {

class memory_returner {
public:
  memory_returner(boost::asio::io_context& ioc, const net::http_server& server);

  /// Checks once a second: when the server wrote replies since the last trim and none in the
  /// last second, purges every jemalloc arena (`arena.<all>.purge`), or under glibc's malloc
  /// calls `malloc_trim(0)`. Does nothing with any other allocator.
  void start();

  /// Stops the checks (before the io_context goes).
  void stop();

private:
  void schedule();
  void tick();

  boost::asio::steady_timer timer_;
  const net::http_server& server_;
  uint64_t seen_ = 0;
  uint64_t trimmed_at_ = 0;
};

} // namespace arbiter::exe
