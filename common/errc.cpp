#include "common/errc.hpp"

#include "common/enum_names.hpp"

namespace arbiter {

constexpr auto errc_names = names_of<errc::client_closed>(
    "none", "invalid_request", "overloaded", "deadline_exceeded", "no_eligible_source",
    "shutting_down", "reward_failed", "worker_failed", "internal", "upstream_failed",
    "upstream_rejected", "client_closed");

std::string_view to_string(errc code) noexcept {
  return errc_names[code];
}

std::optional<errc> parse_error_code(std::string_view name) noexcept {
  return errc_names.parse(name);
}

} // namespace arbiter
