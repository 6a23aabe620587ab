#include "backends/replay/replayer.hpp"

#include <charconv>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_rewards.hpp"
#include "backends/embedding_scoring.hpp"
#include "backends/reward_graphs.hpp"
#include "common/enum_names.hpp"

namespace arbiter::backends::replay {

namespace {

/// Bit-for-bit equality (so 0.1 + 0.2 is not "equal enough" to 0.3).
bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (a == 0.0 && b == 0.0);
}

/// The shortest text that reads back as `x` (0.8, not 0.80000000000000004).
std::string number(double x) {
  char buf[40];
  auto end = std::to_chars(buf, buf + sizeof buf, x).ptr;
  return {buf, end};
}

item_outcome replay_embedding(const shared_item& item, const std::string& evidence) {
  auto e = decode_embedding(evidence);
  std::vector<shared_item> items{item};
  auto inputs = embedding_texts(items, e.model);
  if (inputs.texts.size() != e.vectors.size()) {
    throw std::invalid_argument{"the item needs " + std::to_string(inputs.texts.size())
                                + " vectors, the log recorded "
                                + std::to_string(e.vectors.size())};
  }
  return score_embeddings(items, e.model, inputs, e.vectors).front();
}

item_outcome replay_graph(shared_item item, const std::string& evidence,
                          const reward_catalog& catalog) {
  auto trace = graph_trace::decode(evidence);
  auto graph = make_reward_graph(item, catalog);
  if (!graph) {
    throw std::invalid_argument{"reward kind '" + item->kind + "' has no graph"};
  }
  auto step = graph->start();
  size_t k = 0;
  for (const auto& recorded : trace.steps()) {
    ++k;
    if (step.done()) {
      // A graph that ends early says why (an option this catalog lacks, say).
      const auto& why = step.outcome.error;
      throw std::invalid_argument{"the graph ended after " + std::to_string(k - 1)
                                  + " steps; the log recorded "
                                  + std::to_string(trace.steps().size())
                                  + (why.empty() ? std::string{} : ": " + why)};
    }
    if (step.calls.size() != recorded.calls.size()) {
      throw std::invalid_argument{"step " + std::to_string(k) + " makes "
                                  + std::to_string(step.calls.size())
                                  + " calls; the log recorded "
                                  + std::to_string(recorded.calls.size())};
    }
    for (size_t i = 0; i < step.calls.size(); ++i) {
      const auto& call = step.calls[i];
      auto hash = call.call ? prompt_hash(*call.call) : std::string{};
      if (hash != recorded.calls[i].prompt_hash) {
        throw std::invalid_argument{"step " + std::to_string(k) + ", call "
                                    + std::to_string(i + 1)
                                    + ": its prompt differs from the recorded call's"};
      }
    }
    if (recorded.answers.size() != step.calls.size()) {
      throw std::invalid_argument{"step " + std::to_string(k) + " has "
                                  + std::to_string(recorded.answers.size())
                                  + " recorded answers for " + std::to_string(step.calls.size())
                                  + " calls"};
    }
    step = graph->advance(recorded.answers);
  }
  if (!step.done()) {
    throw std::invalid_argument{"the graph wants more calls than the log recorded ("
                                + std::to_string(trace.steps().size()) + " steps)"};
  }
  return std::move(step.outcome);
}

} // namespace

constexpr auto verdict_names = names_of<verdict::not_replayable>("identical", "differs",
                                                                 "not_replayable");

const char* to_string(verdict v) noexcept {
  return verdict_names[v];
}

replay_result replay_item(const record& r, const reward_catalog& catalog,
                          const cpu_limits& limits) {
  replay_result out;
  const auto& recorded = r.result;
  auto item = std::make_shared<const score_item>(r.item);
  const auto* kind = find_reward_kind(item->kind);
  try {
    if (r.type != record_type::item) {
      throw std::invalid_argument{"not an item record"};
    }
    if (recorded.status == item_status::fallback) {
      out.recomputed = cpu::evaluate_fallback(*item, limits);
    } else if (kind == nullptr) {
      throw std::invalid_argument{"reward kind '" + item->kind
                                  + "' is not one this binary knows (a log from another "
                                    "version?)"};
    } else if (kind != nullptr && kind->runner == reward_runner::cpu
               && (recorded.status == item_status::ok || recorded.code == errc::reward_failed)) {
      out.recomputed = cpu::evaluate(*item, limits);
    } else if (recorded.evidence.empty() && recorded.status != item_status::failed
               && item->kind != "info_gain") {
      // Only an IG service computes an item whole; every other model reward records what its
      // score came from (an item answered from the cache borrows its computing record's).
      throw std::invalid_argument{"its record holds no evidence, which a " + item->kind
                                  + " item that was scored always has: the record is damaged"};
    } else if (recorded.evidence.empty()) {
      out.outcome = verdict::not_replayable;
      out.reason = recorded.status == item_status::failed
                     ? "failed before its reward was computed ("
                         + std::string{arbiter::to_string(recorded.code)} + ": "
                         + recorded.error + ")"
                     : "computed whole by source '" + recorded.source
                         + "': nothing was recorded to recompute it from";
      return out;
    } else if (kind != nullptr && kind->runner == reward_runner::embedding) {
      out.recomputed = replay_embedding(item, recorded.evidence);
    } else if (kind != nullptr && kind->runner == reward_runner::graph) {
      out.recomputed = replay_graph(item, recorded.evidence, catalog);
    } else {
      throw std::invalid_argument{"unknown reward kind '" + item->kind + "'"};
    }
  } catch (const std::exception& e) {
    out.outcome = verdict::differs;
    out.reason = std::string{"cannot replay: "} + e.what();
    return out;
  }
  const auto& got = out.recomputed;
  bool was_scored = recorded.status != item_status::failed;
  bool is_scored = got.code == errc::none;
  if (was_scored != is_scored) {
    out.outcome = verdict::differs;
    out.reason = was_scored ? "scored " + number(recorded.score) + " then, fails now ("
                                + std::string{arbiter::to_string(got.code)} + ": " + got.error
                                + ")"
                            : "failed then (" + std::string{arbiter::to_string(recorded.code)}
                                + "), scores " + number(got.score) + " now";
  } else if (was_scored && !same_bits(recorded.score, got.score)) {
    out.outcome = verdict::differs;
    out.reason = "score " + number(recorded.score) + " then, " + number(got.score) + " now";
  } else if (was_scored && recorded.extra != got.extra) {
    out.outcome = verdict::differs;
    out.reason = "extra " + (recorded.extra.empty() ? "{}" : recorded.extra) + " then, "
                 + (got.extra.empty() ? "{}" : got.extra) + " now";
  } else if (!was_scored && recorded.code != got.code) {
    out.outcome = verdict::differs;
    out.reason = "failed with " + std::string{arbiter::to_string(recorded.code)} + " then, "
                 + std::string{arbiter::to_string(got.code)} + " now: " + got.error;
  }
  return out;
}

} // namespace arbiter::backends::replay
