#pragma once

// Worker actors for local models (`[[models]]`): one per device, each a scheduler source like
// a remote endpoint. In its own library (arbiter_local_models) because it links libtorch;
// only the executable and its own tests pay for that.

#include <memory>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "common/metrics.hpp"
#include "config/config.hpp"
#include "scheduler/source_registry.hpp"

namespace arbiter::backends::models {
class text_classifier;
class text_embedder;
class text_generator;
}

namespace arbiter::actors {

/// Metrics of the local model workers (docs/metrics.md), labelled by model and device.
struct local_model_metrics {
  explicit local_model_metrics(metrics_registry& registry);
  /// arbiter_model_weight_bytes: bytes the weights take on the device.
  prometheus::Family<prometheus::Gauge>& weight_bytes;
  /// arbiter_model_busy_seconds_total: time the worker spent running batches.
  prometheus::Family<prometheus::Counter>& busy_seconds;
  /// arbiter_model_tokens_total: tokens run (padding excluded).
  prometheus::Family<prometheus::Counter>& tokens;
  /// arbiter_model_batches_total: batches run (a generator's: decode passes).
  prometheus::Family<prometheus::Counter>& batches;
};

/// Spawns a detached worker (libtorch calls block) that answers `(work_atom, work_batch)` for
/// `embedding` items — rewards and /v1/embeddings calls — with the embedder's vectors, in
/// forward passes of at most `max_batch_tokens` padded tokens. `model` is the name that
/// selects the Qwen3-Embedding instruction (the folder's path will do). An exception fails the
/// batch's items with `worker_failed` and the reason; the worker carries on with the next
/// batch.
caf::actor spawn_embedding_worker(caf::actor_system& sys,
                                  std::shared_ptr<const backends::models::text_embedder> embedder,
                                  std::string model, uint32_t max_batch_tokens,
                                  local_model_metrics& metrics, const std::string& name);

/// Spawns a detached worker that answers `(work_atom, work_batch)` for `generate` and `chat`
/// model calls with the generator's completions: the batch's calls decode together, in
/// left-padded passes of at most `max_batch_tokens` padded tokens, each with its own sampling
/// options and seed; with `batch_calls` false, one call after another. A call that cannot run
/// (its prompt too long) fails with `worker_failed`; the others and the worker carry on.
caf::actor spawn_generator_worker(caf::actor_system& sys,
                                  std::shared_ptr<const backends::models::text_generator> generator,
                                  uint32_t max_batch_tokens, bool batch_calls,
                                  local_model_metrics& metrics, const std::string& name);

/// Spawns a detached worker that answers `(work_atom, work_batch)` for `nli` model calls (the
/// premise in `prompt`, the hypothesis in `hypothesis`) with the classifier's entailment,
/// neutral and contradiction probabilities, the batch's pairs together in forward passes of at
/// most `max_batch_tokens` padded tokens. An exception fails the batch's items with
/// `worker_failed`; the worker carries on.
caf::actor spawn_nli_worker(caf::actor_system& sys,
                            std::shared_ptr<const backends::models::text_classifier> classifier,
                            uint32_t max_batch_tokens, local_model_metrics& metrics,
                            const std::string& name);

/// The scheduler's view of a local model worker named `cfg.name`: its capabilities (embed;
/// generate and chat; or nli; each also @model:NAME and @REWARD for the rewards that name it), one
/// batch at a time, up to `cfg.max_batch_items` items. An embedder's or NLI model's items
/// weigh by their texts' tokens, each capped at `max_tokens` (its longest input).
scheduler::source_spec local_model_spec(const config::model_config& cfg,
                                        const config::arbiter_config& all, uint32_t max_tokens);

/// The devices `cfg.device` names: {"cpu"}, {"cuda:0", ...} for "cuda" (every visible GPU;
/// none when there is none), or the one given.
std::vector<std::string> model_devices(const config::model_config& cfg);

} // namespace arbiter::actors
