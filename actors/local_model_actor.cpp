#include "actors/local_model_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/messages.hpp"
#include "actors/source_capabilities.hpp"
#include "backends/embedding_scoring.hpp"
#include "backends/models/text_classifier.hpp"
#include "backends/models/text_embedder.hpp"
#include "backends/models/text_generator.hpp"
#include "backends/models/devices.hpp"

namespace arbiter::actors {

namespace {

/// The counters one worker updates.
struct worker_counters {
  prometheus::Counter* busy = nullptr;
  prometheus::Counter* tokens = nullptr;
  prometheus::Counter* batches = nullptr;
};

/// The indices of the batch's items that carry a model call; the others fail in `result`
/// (sized to the batch), naming the worker.
std::vector<size_t> items_with_calls(const work_batch& batch, const std::string& name,
                                     work_result& result) {
  result.outcomes.resize(batch.items.size());
  std::vector<size_t> index;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    if (batch.items[i]->call) {
      index.push_back(i);
      continue;
    }
    result.outcomes[i].code = errc::worker_failed;
    result.outcomes[i].error = "local model " + name + ": a " + batch.items[i]->kind
                               + " item carries no model call";
  }
  return index;
}

/// Stamps the batch's time on every outcome and the report, and counts it as `passes` model
/// passes.
void finish_batch(work_result& result, std::chrono::steady_clock::time_point start,
                  const worker_counters& counters, size_t passes = 1) {
  auto elapsed = std::chrono::steady_clock::now() - start;
  const double ms = std::chrono::duration<double, std::milli>(elapsed).count();
  for (auto& outcome : result.outcomes) {
    outcome.run_ms = ms;
  }
  counters.busy->Increment(ms / 1000.0);
  counters.batches->Increment(static_cast<double>(passes));
  result.report.latency = elapsed;
}

/// A batch runs whole as one message, so a cancel for it (its request was abandoned) comes
/// after its answer, which the scheduler ignores.
const auto ignore_cancel = [](cancel_atom, scheduler::batch_id) {};

caf::behavior embedding_worker(caf::event_based_actor*,
                               std::shared_ptr<const backends::models::text_embedder> embedder,
                               std::string model, uint32_t max_batch_tokens,
                               worker_counters counters) {
  return {
    [embedder, model, max_batch_tokens, counters](work_atom, const work_batch& batch) {
      work_result result;
      result.id = batch.id;
      auto start = std::chrono::steady_clock::now();
      try {
        auto inputs = backends::embedding_texts(batch.items, model);
        auto vectors = embedder->embed(inputs.texts, max_batch_tokens, &inputs.tokens);
        counters.tokens->Increment(static_cast<double>(
          std::accumulate(inputs.tokens.begin(), inputs.tokens.end(), uint64_t{0})));
        result.outcomes =
          backends::score_embeddings(batch.items, model, inputs, vectors, batch.record);
        // The tokens each reward item ran, for its step's account and the token metrics,
        // as a remote source's usage gives them.
        backends::charge_reward_tokens(batch.items, inputs, result.outcomes);
      } catch (const std::exception& e) {
        result.outcomes.clear();
        for (size_t i = 0; i < batch.items.size(); ++i) {
          item_outcome failed;
          failed.code = errc::worker_failed;
          failed.error = "local model " + model + ": " + e.what();
          result.outcomes.push_back(std::move(failed));
        }
      }
      finish_batch(result, start, counters);
      return result;
    },
    ignore_cancel,
  };
}

caf::behavior generator_worker(caf::event_based_actor*,
                               std::shared_ptr<const backends::models::text_generator> generator,
                               std::string name, uint32_t max_batch_tokens, bool batch_calls,
                               worker_counters counters) {
  return {
    [generator, name, max_batch_tokens, batch_calls, counters](work_atom,
                                                               const work_batch& batch) {
      work_result result;
      result.id = batch.id;
      auto start = std::chrono::steady_clock::now();
      // The batch's calls decode together (each with its own options and seed); one that
      // cannot run fails alone.
      auto index = items_with_calls(batch, name, result);
      std::vector<backends::models::text_generator::call_ref> calls;
      for (size_t i : index) {
        calls.push_back({batch.items[i]->call.get(), batch.items[i]->kind == "chat"});
      }
      std::vector<backends::models::text_generator::completion> done;
      size_t passes = 0;
      if (batch_calls) {
        done = generator->complete_all(calls, max_batch_tokens, &passes);
      } else {
        for (const auto& call : calls) {
          size_t one = 0;
          done.push_back(std::move(generator->complete_all({call}, max_batch_tokens, &one).at(0)));
          passes += one;
        }
      }
      for (size_t k = 0; k < index.size(); ++k) {
        auto& outcome = result.outcomes[index[k]];
        if (!done[k].output) {
          // A call the model cannot take fails as a provider's 400 would (never retried, the
          // reward's fallback may answer); the model failing is the worker's failure.
          outcome.code = done[k].rejected ? errc::upstream_rejected : errc::worker_failed;
          outcome.error = "local model " + name + ": " + done[k].error;
          continue;
        }
        counters.tokens->Increment(done[k].output->prompt_tokens
                                   + done[k].output->completion_tokens);
        done[k].output->model = name;
        outcome.output = std::make_shared<model_output>(std::move(*done[k].output));
      }
      finish_batch(result, start, counters, passes);
      if (!index.empty() && index.size() == batch.items.size()
          && std::all_of(done.begin(), done.end(), [](const auto& d) { return d.rejected; })) {
        // Every call refused, as a provider's 400 refuses them: so the attempt is counted
        // (arbiter_source_attempts_total said ok) and its instant answer is not taken for the
        // model's pace. The scheduler fails the call alone, or sends a batch's calls again
        // alone, each then refused for its own reason.
        result.report.kind = scheduler::attempt_outcome_kind::bad_request;
        result.report.detail = result.outcomes[index.front()].error;
        result.outcomes.clear();
      }
      return result;
    },
    ignore_cancel,
  };
}

caf::behavior nli_worker(caf::event_based_actor*,
                         std::shared_ptr<const backends::models::text_classifier> classifier,
                         std::string name, uint32_t max_batch_tokens, worker_counters counters) {
  return {
    [classifier, name, max_batch_tokens, counters](work_atom, const work_batch& batch) {
      work_result result;
      result.id = batch.id;
      auto start = std::chrono::steady_clock::now();
      // The batch's pairs run together.
      auto index = items_with_calls(batch, name, result);
      std::vector<std::pair<std::string, std::string>> pairs;
      for (size_t i : index) {
        pairs.emplace_back(batch.items[i]->call->prompt, batch.items[i]->call->hypothesis);
      }
      try {
        size_t tokens = 0;
        auto probs = classifier->nli(pairs, max_batch_tokens, &tokens);
        counters.tokens->Increment(static_cast<double>(tokens));
        for (size_t k = 0; k < index.size(); ++k) {
          auto output = std::make_shared<model_output>();
          output->entailment = probs[k].entailment;
          output->neutral = probs[k].neutral;
          output->contradiction = probs[k].contradiction;
          output->model = name;
          result.outcomes[index[k]].output = std::move(output);
        }
      } catch (const std::exception& e) {
        for (size_t i : index) {
          result.outcomes[i].code = errc::worker_failed;
          result.outcomes[i].error = "local model " + name + ": " + e.what();
        }
      }
      finish_batch(result, start, counters);
      return result;
    },
    ignore_cancel,
  };
}

/// The counters of the worker `name` runs on `device`, whose weights take `weight_bytes`.
worker_counters counters_for(local_model_metrics& metrics, const std::string& name,
                             const std::string& device, uint64_t weight_bytes) {
  const std::map<std::string, std::string> labels = {{"model", name}, {"device", device}};
  metrics.weight_bytes.Add(labels).Set(static_cast<double>(weight_bytes));
  worker_counters counters;
  counters.busy = &metrics.busy_seconds.Add(labels);
  counters.tokens = &metrics.tokens.Add(labels);
  counters.batches = &metrics.batches.Add(labels);
  return counters;
}

} // namespace

local_model_metrics::local_model_metrics(metrics_registry& registry)
  : weight_bytes(registry.gauge("arbiter_model_weight_bytes",
                                "Bytes a local model's weights take on its device")),
    busy_seconds(registry.counter("arbiter_model_busy_seconds_total",
                                  "Time a local model worker spent running batches")),
    tokens(registry.counter("arbiter_model_tokens_total",
                            "Tokens a local model worker ran, padding excluded")),
    batches(registry.counter("arbiter_model_batches_total", "Batches a local model worker ran")) {
}

caf::actor spawn_embedding_worker(caf::actor_system& sys,
                                  std::shared_ptr<const backends::models::text_embedder> embedder,
                                  std::string model, uint32_t max_batch_tokens,
                                  local_model_metrics& metrics, const std::string& name) {
  const auto& info = embedder->info();
  auto counters = counters_for(metrics, name, info.device, info.weight_bytes);
  return sys.spawn<caf::detached>(embedding_worker, std::move(embedder), std::move(model),
                                  max_batch_tokens, counters);
}

caf::actor spawn_generator_worker(caf::actor_system& sys,
                                  std::shared_ptr<const backends::models::text_generator> generator,
                                  uint32_t max_batch_tokens, bool batch_calls,
                                  local_model_metrics& metrics, const std::string& name) {
  const auto& info = generator->info();
  auto counters = counters_for(metrics, name, info.device, info.weight_bytes);
  return sys.spawn<caf::detached>(generator_worker, std::move(generator), name, max_batch_tokens,
                                  batch_calls, counters);
}

caf::actor spawn_nli_worker(caf::actor_system& sys,
                            std::shared_ptr<const backends::models::text_classifier> classifier,
                            uint32_t max_batch_tokens, local_model_metrics& metrics,
                            const std::string& name) {
  const auto& info = classifier->info();
  auto counters = counters_for(metrics, name, info.device, info.weight_bytes);
  return sys.spawn<caf::detached>(nli_worker, std::move(classifier), name, max_batch_tokens,
                                  counters);
}

scheduler::source_spec local_model_spec(const config::model_config& cfg,
                                        const config::arbiter_config& all,
                                        uint32_t max_tokens) {
  scheduler::source_spec spec;
  spec.name = cfg.name;
  spec.capabilities = routed_capabilities(cfg.name, model_capabilities(cfg), cfg.name, all);
  spec.max_batch_items = cfg.max_batch_items;
  spec.max_inflight = 1;
  spec.remote = false;
  spec.local_model = true;
  if (cfg.kind != "generator") {
    spec.max_input_tokens = max_tokens;
  }
  if (const auto wait = config::effective_batch_wait_ms(cfg); wait > 0) {
    spec.batch_wait = std::chrono::milliseconds{wait};
    spec.wait_when_idle = true;
  }
  return spec;
}

std::vector<std::string> model_devices(const config::model_config& cfg) {
  if (cfg.device != "cuda") {
    return {cfg.device};
  }
  std::vector<std::string> out;
  for (int i = 0; i < backends::models::cuda_device_count(); ++i) {
    out.push_back("cuda:" + std::to_string(i));
  }
  return out;
}

} // namespace arbiter::actors
