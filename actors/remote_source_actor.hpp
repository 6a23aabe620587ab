#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <caf/fwd.hpp>

#include "config/config.hpp"
#include "scheduler/source_registry.hpp"

namespace arbiter::actors {

/// Calls in flight at first to an endpoint configured without limits (`initial_concurrency`
/// unset): two probes, whose answers' `x-ratelimit-*` headers usually say what the endpoint
/// allows (pacing then takes over at full concurrency); without them the limit doubles per
/// round of good answers (slow start) until the endpoint pushes back.
inline constexpr uint32_t unconfigured_initial_concurrency = 2;

/// What the scheduler needs to know of a configured remote source: its capabilities, batch
/// size, pacing, concurrency and breaker, from `cfg` and the routing settings. Without
/// `requests_per_minute` or `tokens_per_minute` (and without `initial_concurrency`), the
/// source starts at `unconfigured_initial_concurrency` calls in slow start.
scheduler::source_spec remote_source_spec(const config::source_config& cfg,
                                          const config::routing_config& routing);

/// Items per call when the source's config sets none, from what it serves: 1 when it serves
/// "chat" or "generate" (one prompt a call), else 32 for "nli" or "embed", else 8 for "ig".
uint32_t default_max_batch_items(const std::vector<std::string>& capabilities);

/// The API key of `cfg`: `api_key`, else the value of the variable `api_key_env` (empty when
/// neither is set), without the blanks and line breaks around it (a Kubernetes Secret made
/// with --from-file ends in a newline, which went into the header as a bare LF, reset the
/// connection and escaped redaction).
std::string resolve_api_key(const config::source_config& cfg);

/// The base URL `cfg`'s calls go to: its `url`, less a trailing `/v1` for an `openai` source,
/// whose API paths begin with it. OpenAI's SDKs take the base URL with `/v1`, so one copied
/// from there would otherwise call /v1/v1/chat/completions and be ejected on its 404s.
std::string base_url(const config::source_config& cfg);

/// Spawns the actor for one remote endpoint. It answers `(work_atom, work_batch)` with a
/// `work_result` whose report says how the one HTTP attempt went (status class, Retry-After,
/// `x-ratelimit-*` headers, latency) and, when it went well, one outcome per item; it never
/// retries on its own (the scheduler decides). `(cancel_atom, batch_id)` abandons a batch.
/// HTTP runs on `io`, which the caller runs and keeps alive while the actor lives.
caf::actor spawn_remote_source(caf::actor_system& sys, boost::asio::io_context& io,
                               const config::source_config& cfg);

} // namespace arbiter::actors
