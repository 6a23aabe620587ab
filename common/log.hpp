#pragma once

#include <sstream>
#include <string>

namespace arbiter::log {

enum class level { debug, info, warn, error };

/// Lines below this level are dropped. Set once at start-up (`--log-level`).
void set_level(level lvl) noexcept;

/// Parses "debug", "info", "warn" or "error"; false when `text` is none of them.
bool parse_level(const std::string& text, level& out) noexcept;

/// Writes one line to stderr ("LEVEL message"), whole lines only, from any thread.
void write(level lvl, const std::string& message);

bool enabled(level lvl) noexcept;

/// Streams its arguments into one log line: `log::info("listening on ", port)`.
template <class... Ts>
void emit(level lvl, const Ts&... xs) {
  if (!enabled(lvl)) {
    return;
  }
  std::ostringstream out;
  (out << ... << xs);
  write(lvl, out.str());
}

template <class... Ts>
void debug(const Ts&... xs) {
  emit(level::debug, xs...);
}

template <class... Ts>
void info(const Ts&... xs) {
  emit(level::info, xs...);
}

template <class... Ts>
void warn(const Ts&... xs) {
  emit(level::warn, xs...);
}

template <class... Ts>
void error(const Ts&... xs) {
  emit(level::error, xs...);
}

} // namespace arbiter::log
