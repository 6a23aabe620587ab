#include "common/log.hpp"

#include <atomic>
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
  std::lock_guard<std::mutex> guard{write_mutex};
  std::fprintf(stderr, "%s %s\n", level_names[lvl], message.c_str());
  std::fflush(stderr);
}

} // namespace arbiter::log
