#pragma once

#include <caf/fwd.hpp>

#include "config/config.hpp"

namespace arbiter::actors {

/// Spawns a CPU worker: it answers `(work_atom, work_batch)` with a `work_result`, scoring each
/// item with `backends::cpu::evaluate`. An exception on one item fails that item with
/// `worker_failed`; the worker carries on.
caf::actor spawn_cpu_worker(caf::actor_system& sys, const config::cpu_config& cfg);

} // namespace arbiter::actors
