#include "actors/reward_graph_actor.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "actors/remote_source_actor.hpp"
#include "backends/cpu/exact_match.hpp"
#include "backends/remote/remote_codec.hpp"
#include "backends/rewards/reward_options.hpp"
#include "backends/rewards/info_gain_math.hpp"
#include "backends/rewards/judge_template.hpp"
#include "backends/rewards/qa_em.hpp"
#include "backends/rewards/text_similarity.hpp"
#include "common/text_excerpt.hpp"

namespace arbiter::actors {

namespace {

using json = nlohmann::json;
namespace rewards = backends::rewards;

/// graph -> itself: the answer to one stage's model calls.
using graph_done_atom = caf::atom_constant<caf::atom("graphdone")>;

/// How long before their item's deadline model calls must end (at most a tenth of the time
/// left).
constexpr nanoseconds call_deadline_margin = std::chrono::milliseconds{50};

/// How much of a judge reply a failure quotes.
constexpr size_t reply_quote_bytes = 80;

/// The first of `keys` that holds a string in `options`, else empty.
std::string option_string(const json& options, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto found = options.find(key);
    if (found != options.end() && found->is_string()) {
      return found->get<std::string>();
    }
  }
  return {};
}

/// One item being computed.
struct job {
  scheduler::batch_id batch = 0;
  size_t index = 0;
  shared_item item;
  size_t priority = 0;
  time_point deadline;
  time_point started;
  /// Provenance over every model call.
  std::set<std::string> sources;
  uint32_t attempts = 0;
  bool all_cached = true;
  /// Graph state: which stage waits, and what the stages need.
  int stage = 0;
  std::vector<size_t> references;
  uint32_t votes = 1;
  backends::info_gain_options ig;
  std::string question;
  std::vector<std::vector<rewards::ig_sample>> sides;
  double exact = 0.0;
  double weight = 0.0;
};

/// A batch whose items are being computed.
struct pending_batch {
  caf::response_promise promise;
  std::vector<item_outcome> outcomes;
  size_t remaining = 0;
};

struct graph_state {
  caf::actor scheduler;
  const backends::reward_catalog* catalog = nullptr;
  std::unordered_map<scheduler::batch_id, pending_batch> batches;
  std::unordered_map<uint64_t, job> jobs;
  uint64_t next_job = 1;
  steady_time_source clock;

  static const char* name;
};

const char* graph_state::name = "arbiter.reward_graph";

using graph_actor = caf::stateful_actor<graph_state>;

/// Ends job `id` with `outcome` (provenance added); answers its batch when it was the last.
void finish(graph_actor* self, uint64_t id, item_outcome outcome) {
  auto& st = self->state;
  auto found = st.jobs.find(id);
  if (found == st.jobs.end()) {
    return;
  }
  auto j = std::move(found->second);
  st.jobs.erase(found);
  outcome.sources.assign(j.sources.begin(), j.sources.end());
  if (outcome.sources.empty()) {
    outcome.sources.push_back(reward_graph_source); // no model call was needed
    outcome.cached = false;
  } else {
    outcome.cached = j.all_cached;
  }
  outcome.attempts = j.attempts;
  outcome.run_ms = std::chrono::duration<double, std::milli>(st.clock.now() - j.started).count();
  auto b = st.batches.find(j.batch);
  if (b == st.batches.end()) {
    return;
  }
  b->second.outcomes[j.index] = std::move(outcome);
  if (--b->second.remaining == 0) {
    auto done = std::move(b->second);
    st.batches.erase(b);
    work_result result;
    result.id = j.batch;
    result.outcomes = std::move(done.outcomes);
    done.promise.deliver(std::move(result));
  }
}

/// A model call for job `j`.
score_item model_call_item(const job& j, const char* kind, model_call call) {
  score_item sub;
  sub.reward = j.item->reward + "/" + kind;
  sub.kind = kind;
  sub.capability = std::string{kind} + j.item->route_suffix;
  sub.call = std::make_shared<const model_call>(std::move(call));
  return sub;
}

/// Sends `items` for job `id` as an internal request; the answer comes back as
/// `(graph_done_atom, id, reply)`.
void send_calls(graph_actor* self, uint64_t id, std::vector<score_item> items) {
  auto& j = self->state.jobs.at(id);
  j.stage += 1;
  score_request req;
  req.priority = j.priority;
  // The calls end a little before the item does, so a call's own failure (its source, its
  // attempts) reaches the caller rather than a bare "deadline passed".
  auto left = j.deadline - self->state.clock.now();
  req.deadline = j.deadline - std::min<nanoseconds>(call_deadline_margin, left / 10);
  req.items = std::move(items);
  req.internal = true;
  auto hdl = caf::actor_cast<caf::actor>(self);
  reply_callback reply_to = [hdl, id](score_reply&& reply) {
    caf::anon_send(hdl, graph_done_atom::value, id, std::move(reply));
  };
  self->send(self->state.scheduler, score_atom::value, std::move(req), std::move(reply_to));
}

/// Records the provenance of `results`; returns the first failure as an outcome, if any.
std::optional<item_outcome> absorb(job& j, const score_reply& reply, const char* what) {
  if (!reply.admitted) {
    return failure(errc::overloaded, std::string{what} + " calls were refused: " + reply.reason);
  }
  std::optional<item_outcome> failed;
  for (size_t i = 0; i < reply.results.size(); ++i) {
    const auto& r = reply.results[i];
    if (!r.source.empty() && r.status != item_status::failed) {
      if (r.sources.empty()) {
        j.sources.insert(r.source);
      } else {
        j.sources.insert(r.sources.begin(), r.sources.end());
      }
    }
    j.attempts += r.attempts;
    j.all_cached = j.all_cached && r.cached;
    if (r.status == item_status::failed && !failed) {
      failed = failure(r.code, std::string{what} + " call " + std::to_string(i + 1) + " of "
                                 + std::to_string(reply.results.size()) + " failed: " + r.error);
    }
  }
  return failed;
}

// ---- judge --------------------------------------------------------------------------------

void start_judge(graph_actor* self, uint64_t id) {
  auto& j = self->state.jobs.at(id);
  const auto& item = *j.item;
  auto options = backends::merged_options(item);
  auto opts = backends::parse_judge_options(options);
  j.references = rewards::filter_references(item.ground_truth, options);
  if (j.references.empty()) {
    finish(self, id, failure(errc::reward_failed, "judge needs at least one reference in "
                                                  "ground_truth"));
    return;
  }
  j.votes = opts.votes;
  auto problem = option_string(options, {"problem", "question"});
  std::vector<score_item> calls;
  for (auto r : j.references) {
    model_call call;
    call.prompt = rewards::render_judge_prompt(opts.prompt_template, problem,
                                               item.ground_truth[r], item.solution_str);
    call.model = opts.model;
    call.temperature = opts.temperature;
    call.top_p = opts.top_p;
    call.max_tokens = opts.max_tokens;
    call.n = opts.votes;
    call.enable_thinking = opts.enable_thinking;
    calls.push_back(model_call_item(j, "chat", std::move(call)));
  }
  send_calls(self, id, std::move(calls));
}

void finish_judge(graph_actor* self, uint64_t id, const score_reply& reply) {
  auto& j = self->state.jobs.at(id);
  if (auto failed = absorb(j, reply, "judge")) {
    finish(self, id, std::move(*failed));
    return;
  }
  double best = 0.0;
  for (size_t r = 0; r < reply.results.size(); ++r) {
    const auto& output = reply.results[r].output;
    if (!output || output->texts.empty()) {
      finish(self, id, failure(errc::internal, "a judge call returned no text"));
      return;
    }
    double sum = 0.0;
    uint32_t scored = 0;
    std::string problem;
    for (const auto& text : output->texts) {
      auto score = backends::remote::extract_judge_score(text.text);
      if (!score) {
        problem = problem.empty() ? "judge reply has no REWARD score: "
                                        + quote_opening(text.text, reply_quote_bytes)
                                  : problem;
        continue;
      }
      if (!(*score >= 0.0 && *score <= 1.0)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", *score);
        problem = problem.empty() ? std::string{"judge score "} + buf + " outside [0, 1]: "
                                      + quote_opening(text.text, reply_quote_bytes)
                                  : problem;
        continue;
      }
      sum += *score;
      ++scored;
    }
    if (scored == 0) {
      finish(self, id, failure(errc::reward_failed, problem));
      return;
    }
    best = std::max(best, sum / scored);
  }
  item_outcome out;
  out.score = best;
  finish(self, id, std::move(out));
}

// ---- info_gain ----------------------------------------------------------------------------

void start_info_gain(graph_actor* self, uint64_t id) {
  auto& j = self->state.jobs.at(id);
  const auto& item = *j.item;
  auto options = backends::merged_options(item);
  j.ig = backends::parse_info_gain_options(options);
  j.question = option_string(options, {"question", "problem"});
  auto found = options.find("context");
  std::string context = found != options.end() && found->is_string() ? found->get<std::string>()
                                                                      : item.solution_str;
  bool needs_answers = j.ig.variant == rewards::ig_variant::soft
                       || j.ig.variant == rewards::ig_variant::hard;
  if (needs_answers && item.ground_truth.empty()) {
    finish(self, id, failure(errc::reward_failed,
                             std::string{"info_gain variant "} + rewards::to_string(j.ig.variant)
                               + " needs at least one gold answer in ground_truth"));
    return;
  }
  std::vector<score_item> calls;
  // With the context, then the baseline (no context).
  for (const std::string& side_context : {context, std::string{}}) {
    model_call call;
    call.prompt = rewards::ig_prompt(j.question, side_context, j.ig.max_context_words);
    call.temperature = j.ig.temperature;
    call.max_tokens = j.ig.max_new_tokens;
    call.n = j.ig.samples;
    call.stop = rewards::ig_stop_sequences();
    call.seed = j.ig.seed;
    calls.push_back(model_call_item(j, "generate", std::move(call)));
  }
  send_calls(self, id, std::move(calls));
}

void sample_answers(graph_actor* self, uint64_t id, const score_reply& reply) {
  auto& j = self->state.jobs.at(id);
  if (auto failed = absorb(j, reply, "generation")) {
    finish(self, id, std::move(*failed));
    return;
  }
  j.sides.clear();
  std::vector<score_item> calls;
  for (const auto& result : reply.results) {
    std::vector<rewards::ig_sample> samples;
    if (result.output) {
      for (const auto& text : result.output->texts) {
        samples.push_back({text.text, text.mean_logprob, text.tokens});
      }
    }
    if (samples.empty()) {
      finish(self, id, failure(errc::internal, "a generation call returned no samples"));
      return;
    }
    for (auto& pair : rewards::ig_side_pairs(j.ig.variant, j.question, samples,
                                             j.item->ground_truth)) {
      model_call call;
      call.prompt = std::move(pair.premise);
      call.hypothesis = std::move(pair.hypothesis);
      calls.push_back(model_call_item(j, "nli", std::move(call)));
    }
    j.sides.push_back(std::move(samples));
  }
  send_calls(self, id, std::move(calls));
}

void finish_info_gain(graph_actor* self, uint64_t id, const score_reply& reply) {
  auto& j = self->state.jobs.at(id);
  if (auto failed = absorb(j, reply, "NLI")) {
    finish(self, id, std::move(*failed));
    return;
  }
  std::vector<rewards::nli_probs> probs;
  probs.reserve(reply.results.size());
  for (const auto& r : reply.results) {
    if (!r.output) {
      finish(self, id, failure(errc::internal, "an NLI call returned no probabilities"));
      return;
    }
    probs.push_back({r.output->entailment, r.output->neutral, r.output->contradiction});
  }
  std::vector<rewards::ig_side_result> sides;
  size_t offset = 0;
  try {
    for (const auto& samples : j.sides) {
      auto count =
        rewards::ig_side_pairs(j.ig.variant, j.question, samples, j.item->ground_truth).size();
      if (offset + count > probs.size()) {
        throw std::invalid_argument{"fewer NLI answers than pairs"};
      }
      std::vector<rewards::nli_probs> side_probs(probs.begin() + static_cast<long>(offset),
                                                 probs.begin() + static_cast<long>(offset + count));
      offset += count;
      sides.push_back(rewards::ig_side_score(j.ig.variant, j.ig.clustering, j.ig.threshold,
                                             j.question, samples, j.item->ground_truth,
                                             side_probs));
    }
    if (sides.size() != 2) {
      throw std::invalid_argument{"expected two sides, got " + std::to_string(sides.size())};
    }
  } catch (const std::exception& e) {
    finish(self, id, failure(errc::internal, std::string{"info_gain: "} + e.what()));
    return;
  }
  item_outcome out;
  out.score = rewards::ig_delta(j.ig.variant, sides[0].value, sides[1].value);
  auto detail = rewards::ig_item_detail(sides[0], sides[1]);
  detail["variant"] = rewards::to_string(j.ig.variant);
  detail["delta"] = out.score;
  out.detail = detail.dump(-1, ' ', false, json::error_handler_t::replace);
  finish(self, id, std::move(out));
}

// ---- em_info_gain -------------------------------------------------------------------------

void start_em_info_gain(graph_actor* self, uint64_t id) {
  auto& j = self->state.jobs.at(id);
  const auto& item = *j.item;
  auto options = backends::merged_options(item);
  auto opts = backends::parse_em_info_gain_options(options);
  auto rollout = rewards::parse_search_rollout(item.solution_str);
  j.exact = 0.0;
  for (const auto& gold : item.ground_truth) {
    if (rollout.answer) {
      j.exact = std::max(j.exact, backends::cpu::exact_match(*rollout.answer, gold));
    }
  }
  j.weight = opts.weight;
  if (rollout.information.empty() || opts.validation || opts.weight == 0.0) {
    item_outcome out;
    out.score = j.exact;
    out.detail = json{{"em", j.exact}, {"information_blocks", rollout.information.size()}}.dump();
    finish(self, id, std::move(out));
    return;
  }
  if (!rollout.question) {
    finish(self, id, failure(errc::reward_failed,
                             "em_info_gain: no question found in the rollout's user turn"));
    return;
  }
  const auto* reward = self->state.catalog->find(opts.info_gain_reward);
  if (reward == nullptr || reward->kind != "info_gain") {
    finish(self, id, failure(errc::reward_failed, "em_info_gain: '" + opts.info_gain_reward
                                                    + "' is not an info_gain reward"));
    return;
  }
  // The nested item carries the info_gain options given to this one.
  json extra = json::object();
  for (const auto& key : backends::option_keys("info_gain")) {
    if (auto found = options.find(key); found != options.end()) {
      extra[key] = *found;
    }
  }
  extra["question"] = *rollout.question;
  extra["context"] = rewards::join_information(rollout.information);
  score_item sub;
  sub.reward = reward->name;
  sub.kind = reward->kind;
  sub.capability = reward->capability;
  sub.ground_truth = item.ground_truth;
  sub.extra_info = extra.dump(-1, ' ', false, json::error_handler_t::replace);
  sub.options = reward->options;
  sub.route_suffix = reward->route_suffix;
  std::vector<score_item> calls;
  calls.push_back(std::move(sub));
  send_calls(self, id, std::move(calls));
}

void finish_em_info_gain(graph_actor* self, uint64_t id, const score_reply& reply) {
  auto& j = self->state.jobs.at(id);
  if (auto failed = absorb(j, reply, "info_gain")) {
    finish(self, id, std::move(*failed));
    return;
  }
  const auto& r = reply.results.front();
  item_outcome out;
  out.score = j.exact + j.weight * r.score;
  json detail = {{"em", j.exact}, {"delta_ig", r.score}, {"weight", j.weight}};
  if (!r.detail.empty()) {
    detail["info_gain"] = json::parse(r.detail, nullptr, false);
  }
  out.detail = detail.dump(-1, ' ', false, json::error_handler_t::replace);
  finish(self, id, std::move(out));
}

// ---- the actor ----------------------------------------------------------------------------

void start(graph_actor* self, uint64_t id) {
  const auto& kind = self->state.jobs.at(id).item->kind;
  if (kind == "judge") {
    start_judge(self, id);
  } else if (kind == "info_gain") {
    start_info_gain(self, id);
  } else if (kind == "em_info_gain") {
    start_em_info_gain(self, id);
  } else {
    finish(self, id, failure(errc::reward_failed, "reward kind '" + kind + "' has no graph"));
  }
}

void advance(graph_actor* self, uint64_t id, const score_reply& reply) {
  auto found = self->state.jobs.find(id);
  if (found == self->state.jobs.end()) {
    return;
  }
  const auto& j = found->second;
  if (!reply.admitted || reply.results.empty()) {
    finish(self, id, failure(reply.rejection == "draining" ? errc::shutting_down : errc::overloaded,
                             "the reward's model calls were refused: " + reply.reason));
    return;
  }
  if (j.item->kind == "judge") {
    finish_judge(self, id, reply);
  } else if (j.item->kind == "info_gain") {
    if (j.stage == 1) {
      sample_answers(self, id, reply);
    } else {
      finish_info_gain(self, id, reply);
    }
  } else {
    finish_em_info_gain(self, id, reply);
  }
}

caf::behavior reward_graph(graph_actor* self, caf::actor scheduler,
                           const backends::reward_catalog* catalog) {
  self->state.scheduler = std::move(scheduler);
  self->state.catalog = catalog;
  return {
    [self](work_atom, work_batch& batch) -> caf::result<work_result> {
      auto& st = self->state;
      auto& pending = st.batches[batch.id];
      pending.promise = self->make_response_promise();
      pending.outcomes.resize(batch.items.size());
      pending.remaining = batch.items.size();
      std::vector<uint64_t> started;
      for (size_t i = 0; i < batch.items.size(); ++i) {
        auto id = st.next_job++;
        job j;
        j.batch = batch.id;
        j.index = i;
        j.item = std::move(batch.items[i]);
        j.priority = batch.priority;
        j.deadline = batch.deadline;
        j.started = st.clock.now();
        st.jobs.emplace(id, std::move(j));
        started.push_back(id);
      }
      for (auto id : started) {
        start(self, id);
      }
      return caf::delegated<work_result>{};
    },
    [self](graph_done_atom, uint64_t id, score_reply& reply) { advance(self, id, reply); },
    [](cancel_atom, scheduler::batch_id) {
      // Graphs are local and never hedged; their calls end at the same deadline.
    },
  };
}

} // namespace

bool serves(const config::source_config& src, const std::string& capability) {
  auto caps = src.capabilities.empty() ? default_capabilities(src.kind) : src.capabilities;
  return std::find(caps.begin(), caps.end(), capability) != caps.end();
}

std::vector<std::string> model_capabilities(const config::model_config& m) {
  if (m.kind == "generator") {
    return {"generate", "chat"};
  }
  if (m.kind == "nli") {
    return {"nli"};
  }
  return {"embed"};
}

std::string served_model(const config::source_config& src) {
  return src.model.empty() ? src.name : src.model;
}

std::string model_route_suffix(const std::string& id) {
  return "@model:" + id;
}

std::vector<std::string> routed_capabilities(const std::string& source,
                                             const std::vector<std::string>& base,
                                             const std::string& model,
                                             const config::arbiter_config& cfg) {
  auto out = base;
  for (const auto& cap : base) {
    if (cap == "chat" || cap == "embed") {
      out.push_back(cap + model_route_suffix(model));
    }
  }
  for (const auto& [name, reward] : cfg.rewards) {
    if (std::find(reward.sources.begin(), reward.sources.end(), source)
        == reward.sources.end()) {
      continue;
    }
    for (const auto& cap : base) {
      out.push_back(cap + "@" + name);
    }
  }
  return out;
}

std::vector<std::string> routed_capabilities(const config::source_config& src,
                                             const config::arbiter_config& cfg) {
  std::vector<std::string> base;
  for (const char* cap : {"chat", "generate", "embed", "nli", "ig"}) {
    if (serves(src, cap)) {
      base.emplace_back(cap);
    }
  }
  return routed_capabilities(src.name, base, served_model(src), cfg);
}

scheduler::source_spec reward_graph_spec(const config::arbiter_config& cfg,
                                         const backends::reward_catalog& catalog) {
  auto any_serves = [&cfg](const std::vector<std::string>& names, const char* capability) {
    auto listed = [&names](const std::string& name) {
      return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
    };
    return std::any_of(cfg.sources.begin(), cfg.sources.end(),
                       [&](const config::source_config& s) {
                         return listed(s.name) && serves(s, capability);
                       })
           || std::any_of(cfg.models.begin(), cfg.models.end(), [&](const config::model_config& m) {
                auto caps = model_capabilities(m);
                return listed(m.name)
                       && std::find(caps.begin(), caps.end(), capability) != caps.end();
              });
  };
  scheduler::source_spec spec;
  spec.name = reward_graph_source;
  spec.max_batch_items = 16;
  spec.max_inflight = 1u << 16;
  spec.remote = false;
  for (const auto& entry : catalog.rewards()) {
    if (!backends::graph_kind(entry.kind)) {
      continue;
    }
    // With the cluster on, worker nodes may bring the generator and NLI models later: the
    // graph takes ΔIG items unless a configured IG service serves them (without any node
    // serving generate and nli, its calls fail at once with no_eligible_source).
    bool can = entry.kind != "info_gain"
               || (any_serves(entry.sources, "generate") && any_serves(entry.sources, "nli"))
               || (cfg.cluster.enabled && entry.sources.empty() && !any_serves({}, "ig"));
    if (can
        && std::find(spec.capabilities.begin(), spec.capabilities.end(), entry.capability)
             == spec.capabilities.end()) {
      spec.capabilities.push_back(entry.capability);
      // What its model calls need, for admission's estimate of a graph item's wait.
      auto& under = spec.feeds[entry.capability];
      for (const auto& kind : backends::call_capabilities(entry.kind)) {
        under.push_back(kind + entry.route_suffix);
      }
    }
  }
  return spec;
}

caf::actor spawn_reward_graph(caf::actor_system& sys, caf::actor scheduler,
                              const backends::reward_catalog& catalog) {
  return sys.spawn(reward_graph, std::move(scheduler), &catalog);
}

} // namespace arbiter::actors
