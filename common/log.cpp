#include "common/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace arbiter::log {

namespace {

std::atomic<level> min_level{level::info};
std::mutex write_mutex;

const char* name(level lvl) noexcept {
  switch (lvl) {
    case level::debug:
      return "debug";
    case level::info:
      return "info";
    case level::warn:
      return "warn";
    default:
      return "error";
  }
}

} // namespace

void set_level(level lvl) noexcept {
  min_level = lvl;
}

bool parse_level(const std::string& text, level& out) noexcept {
  for (auto lvl : {level::debug, level::info, level::warn, level::error}) {
    if (text == name(lvl)) {
      out = lvl;
      return true;
    }
  }
  return false;
}

bool enabled(level lvl) noexcept {
  return lvl >= min_level.load(std::memory_order_relaxed);
}

void write(level lvl, const std::string& message) {
  std::lock_guard<std::mutex> guard{write_mutex};
  std::fprintf(stderr, "%s %s\n", name(lvl), message.c_str());
  std::fflush(stderr);
}

} // namespace arbiter::log
