#include "common/errc.hpp"

namespace arbiter {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::none:
      return "none";
    case errc::invalid_request:
      return "invalid_request";
    case errc::overloaded:
      return "overloaded";
    case errc::deadline_exceeded:
      return "deadline_exceeded";
    case errc::no_eligible_source:
      return "no_eligible_source";
    case errc::shutting_down:
      return "shutting_down";
    case errc::reward_failed:
      return "reward_failed";
    case errc::worker_failed:
      return "worker_failed";
    case errc::internal:
      return "internal";
    case errc::upstream_failed:
      return "upstream_failed";
    case errc::upstream_rejected:
      return "upstream_rejected";
  }
  return "internal";
}

} // namespace arbiter
