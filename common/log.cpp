#include "common/log.hpp"

#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <mutex>

#include "common/enum_names.hpp"

namespace arbiter::log {

namespace {

std::atomic<level> min_level{level::info};
std::mutex write_mutex;

constexpr auto level_names = names_of<level::error>("debug", "info", "warn", "error");

} // namespace

void set_level(level lvl) noexcept {
  min_level = lvl;
}

bool parse_level(const std::string& text, level& out) noexcept {
  auto lvl = level_names.parse(text);
  if (lvl) {
    out = *lvl;
  }
  return lvl.has_value();
}

bool enabled(level lvl) noexcept {
  return lvl >= min_level.load(std::memory_order_relaxed);
}

void write(level lvl, const std::string& message) {
  // UTC to the millisecond, so that a coordinator's and its nodes' lines in one Slurm log can
  // be put in order.
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::lock_guard<std::mutex> guard{write_mutex};
  std::fprintf(stderr, "%s.%03dZ %s %s\n", stamp, static_cast<int>(ms.count() % 1000),
               level_names[lvl], message.c_str());
  std::fflush(stderr);
}

} // namespace arbiter::log
