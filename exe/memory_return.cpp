#include "exe/memory_return.hpp"

#include <chrono>

#if defined(ARBITER_JEMALLOC)
#include <jemalloc/jemalloc.h>
#define ARBITER_RETURNS_MEMORY 1
#elif defined(__GLIBC__)
#include <malloc.h>
#define ARBITER_RETURNS_MEMORY 1
#endif

#include "common/log.hpp"

namespace arbiter::exe {

namespace {

#if defined(ARBITER_RETURNS_MEMORY)
/// Hands the allocator's free memory back to the OS; says how it went, for the log.
const char* release_free_memory() {
#if defined(ARBITER_JEMALLOC)
  // Every arena's unused pages, at once rather than after jemalloc's decay time.
  static_assert(MALLCTL_ARENAS_ALL == 4096, "the name below spells MALLCTL_ARENAS_ALL");
  return mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) == 0
           ? "jemalloc's arenas purged"
           : "jemalloc's purge failed";
#else
  return malloc_trim(0) != 0 ? "malloc_trim returned memory" : "malloc_trim had nothing to return";
#endif
}
#endif

} // namespace

memory_returner::memory_returner(boost::asio::io_context& ioc, const net::http_server& server)
  : timer_(ioc), server_(server) {
}

void memory_returner::start() {
#if defined(ARBITER_RETURNS_MEMORY)
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
#if defined(ARBITER_RETURNS_MEMORY)
  const uint64_t now = server_.replies_written();
  if (now == seen_ && now != trimmed_at_) {
    const auto start = std::chrono::steady_clock::now();
    const char* how = release_free_memory();
    log::debug("after ", now - trimmed_at_, " replies: ", how, " in ",
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
