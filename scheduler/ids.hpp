#pragma once

#include <cstdint>

namespace arbiter::scheduler {

/// Identifies one admitted request inside the scheduler.
using request_id = uint64_t;
/// Identifies one queued item (a task) inside the scheduler.
using task_id = uint64_t;
/// Identifies a source (a worker actor, later a remote endpoint) in the registry.
using source_id = uint32_t;
/// Identifies one batch of tasks sent to a source.
using batch_id = uint64_t;

} // namespace arbiter::scheduler
