#include "actors/messages.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>

namespace arbiter::actors {

std::string exit_text(caf::actor_system& sys, const caf::error& reason) {
  if (reason == caf::exit_reason::remote_link_unreachable) {
    return "its connection closed, or stayed silent past the heartbeat timeout "
           "(remote_link_unreachable)";
  }
  if (reason == caf::exit_reason::user_shutdown) {
    return "it was shut down (user_shutdown)";
  }
  return sys.render(reason);
}

} // namespace arbiter::actors
