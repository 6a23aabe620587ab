#include "backends/reward_graphs.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "backends/cpu/exact_match.hpp"
#include "backends/remote/remote_codec.hpp"
#include "backends/rewards/info_gain_math.hpp"
#include "backends/rewards/judge_template.hpp"
#include "backends/rewards/qa_em.hpp"
#include "backends/rewards/reward_options.hpp"
#include "backends/rewards/text_similarity.hpp"
#include "common/text_excerpt.hpp"

namespace arbiter::backends {

namespace {

using json = nlohmann::json;

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

graph_step calls_step(std::vector<score_item> calls) {
  graph_step step;
  step.calls = std::move(calls);
  return step;
}

graph_step outcome_step(item_outcome outcome) {
  graph_step step;
  step.outcome = std::move(outcome);
  return step;
}

// ---- judge: one chat call per kept reference, n votes each; the best reference's mean ------

class judge_graph final : public reward_graph {
public:
  using reward_graph::reward_graph;

  graph_step start() override {
    auto options = merged_options(item());
    auto opts = parse_judge_options(options);
    auto references = rewards::filter_references(item().ground_truth, options);
    const bool reference_free = !rewards::uses_reference(opts.prompt_template);
    if (references.empty() && !reference_free) {
      return outcome_step(
        failure(errc::reward_failed, "judge needs at least one reference in ground_truth"));
    }
    auto problem = option_string(options, {"problem", "question"});
    // A template that shows no reference is asked once, whatever the references.
    std::vector<std::string_view> shown;
    for (auto r : references) {
      shown.emplace_back(item().ground_truth[r]);
    }
    if (reference_free) {
      shown.assign(1, std::string_view{});
    }
    std::vector<score_item> calls;
    for (auto reference : shown) {
      model_call call;
      call.prompt = rewards::render_judge_prompt(opts.prompt_template, problem, reference,
                                                 item().solution_str);
      call.model = opts.model;
      call.temperature = opts.temperature;
      call.top_p = opts.top_p;
      call.max_tokens = opts.max_tokens;
      call.n = opts.votes;
      call.enable_thinking = opts.enable_thinking;
      calls.push_back(call_item(capability::chat, std::move(call)));
    }
    return calls_step(std::move(calls));
  }

protected:
  const char* calls_name() const override {
    return "judge";
  }

  graph_step next(const std::vector<item_result>& answers) override {
    double best = 0.0;
    for (const auto& answer : answers) {
      if (!answer.output || answer.output->texts.empty()) {
        return outcome_step(failure(errc::internal, "a judge call returned no text"));
      }
      double sum = 0.0;
      uint32_t scored = 0;
      std::string problem;
      for (const auto& text : answer.output->texts) {
        bool at_end = false;
        auto score = remote::extract_judge_score(text.text, &at_end);
        if (text.finish_reason == "content_filter") {
          if (problem.empty()) {
            problem = "judge reply was withheld by the provider's content filter";
          }
          continue;
        }
        if (score && at_end && text.finish_reason == "length") {
          // Cut at max_tokens inside its number: the digits after the cut are unknown.
          if (problem.empty()) {
            problem = "judge reply was cut at max_tokens inside its REWARD score: "
                      + quote_opening(text.text, reply_quote_bytes);
          }
          continue;
        }
        if (!score) {
          if (problem.empty()) {
            problem = "judge reply has no REWARD score: "
                      + quote_opening(text.text, reply_quote_bytes);
          }
          continue;
        }
        if (!(*score >= 0.0 && *score <= 1.0)) {
          if (problem.empty()) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%g", *score);
            problem = std::string{"judge score "} + buf + " outside [0, 1]: "
                      + quote_opening(text.text, reply_quote_bytes);
          }
          continue;
        }
        sum += *score;
        ++scored;
      }
      if (scored == 0) {
        return outcome_step(failure(errc::reward_failed, problem));
      }
      best = std::max(best, sum / scored);
    }
    item_outcome out;
    out.score = best;
    return outcome_step(std::move(out));
  }
};

// ---- info_gain: samples with and without the context, NLI over them, ΔIG ------------------

class info_gain_graph final : public reward_graph {
public:
  using reward_graph::reward_graph;

  graph_step start() override {
    auto options = merged_options(item());
    ig_ = parse_info_gain_options(options);
    question_ = option_string(options, {"question", "problem"});
    auto found = options.find("context");
    std::string context = found != options.end() && found->is_string()
                            ? found->get<std::string>()
                            : item().solution_str;
    bool needs_answers =
      ig_.variant == rewards::ig_variant::soft || ig_.variant == rewards::ig_variant::hard;
    if (needs_answers && item().ground_truth.empty()) {
      return outcome_step(failure(errc::reward_failed,
                                  std::string{"info_gain variant "} + rewards::to_string(ig_.variant)
                                    + " needs at least one gold answer in ground_truth"));
    }
    std::vector<score_item> calls;
    // With the context, then the baseline (no context).
    for (const std::string& side_context : {context, std::string{}}) {
      model_call call;
      call.prompt = rewards::ig_prompt(question_, side_context, ig_.max_context_words);
      call.temperature = ig_.temperature;
      call.max_tokens = ig_.max_new_tokens;
      call.n = ig_.samples;
      call.stop = rewards::ig_stop_sequences();
      call.seed = ig_.seed;
      calls.push_back(call_item(capability::generate, std::move(call)));
    }
    return calls_step(std::move(calls));
  }

protected:
  const char* calls_name() const override {
    return sides_.empty() ? "generation" : "NLI";
  }

  graph_step next(const std::vector<item_result>& answers) override {
    return sides_.empty() ? judge_samples(answers) : score(answers);
  }

private:
  /// The NLI calls over each side's samples.
  graph_step judge_samples(const std::vector<item_result>& answers) {
    std::vector<score_item> calls;
    for (const auto& answer : answers) {
      std::vector<rewards::ig_sample> samples;
      if (answer.output) {
        for (const auto& text : answer.output->texts) {
          samples.push_back({text.text, text.mean_logprob, text.tokens});
        }
      }
      if (samples.empty()) {
        return outcome_step(failure(errc::internal, "a generation call returned no samples"));
      }
      for (auto& pair :
           rewards::ig_side_pairs(ig_.variant, question_, samples, item().ground_truth)) {
        model_call call;
        call.prompt = std::move(pair.premise);
        call.hypothesis = std::move(pair.hypothesis);
        calls.push_back(call_item(capability::nli, std::move(call)));
      }
      sides_.push_back(std::move(samples));
    }
    return calls_step(std::move(calls));
  }

  graph_step score(const std::vector<item_result>& answers) {
    std::vector<rewards::nli_probs> probs;
    probs.reserve(answers.size());
    for (const auto& r : answers) {
      if (!r.output) {
        return outcome_step(failure(errc::internal, "an NLI call returned no probabilities"));
      }
      probs.push_back({r.output->entailment, r.output->neutral, r.output->contradiction});
    }
    std::vector<rewards::ig_side_result> sides;
    size_t offset = 0;
    try {
      for (const auto& samples : sides_) {
        auto count =
          rewards::ig_side_pairs(ig_.variant, question_, samples, item().ground_truth).size();
        if (offset + count > probs.size()) {
          throw std::invalid_argument{"fewer NLI answers than pairs"};
        }
        std::vector<rewards::nli_probs> side_probs(
          probs.begin() + static_cast<long>(offset),
          probs.begin() + static_cast<long>(offset + count));
        offset += count;
        sides.push_back(rewards::ig_side_score(ig_.variant, ig_.clustering, ig_.threshold,
                                               question_, samples, item().ground_truth,
                                               side_probs));
      }
      if (sides.size() != 2) {
        throw std::invalid_argument{"expected two sides, got " + std::to_string(sides.size())};
      }
    } catch (const std::exception& e) {
      return outcome_step(failure(errc::internal, std::string{"info_gain: "} + e.what()));
    }
    item_outcome out;
    out.score = rewards::ig_delta(ig_.variant, sides[0].value, sides[1].value);
    auto detail = rewards::ig_item_detail(sides[0], sides[1]);
    detail["variant"] = rewards::to_string(ig_.variant);
    detail["delta"] = out.score;
    out.detail = detail.dump(-1, ' ', false, json::error_handler_t::replace);
    return outcome_step(std::move(out));
  }

  info_gain_options ig_;
  std::string question_;
  /// Each side's samples, once generated.
  std::vector<std::vector<rewards::ig_sample>> sides_;
};

// ---- em_info_gain: EM of the rollout's answer plus a weighted ΔIG of its information -------

class em_info_gain_graph final : public reward_graph {
public:
  em_info_gain_graph(shared_item item, const reward_catalog& catalog)
    : reward_graph(std::move(item)), catalog_(catalog) {}

  graph_step start() override {
    auto options = merged_options(item());
    auto opts = parse_em_info_gain_options(options);
    auto rollout = rewards::parse_search_rollout(item().solution_str);
    exact_ = 0.0;
    for (const auto& gold : item().ground_truth) {
      if (rollout.answer) {
        exact_ = std::max(exact_, cpu::exact_match(*rollout.answer, gold));
      }
    }
    weight_ = opts.weight;
    if (!rollout.answer) {
      // As qa_em.py: a rollout with no <answer> anywhere (the prompt's example included)
      // scores 0, its information unweighed, so no ΔIG is asked for.
      item_outcome out;
      out.score = 0.0;
      out.detail = json{{"em", 0.0},
                        {"information_blocks", rollout.information.size()},
                        {"answer", nullptr}}
                     .dump();
      return outcome_step(std::move(out));
    }
    if (rollout.information.empty() || opts.validation || opts.weight == 0.0) {
      item_outcome out;
      out.score = exact_;
      out.detail =
        json{{"em", exact_}, {"information_blocks", rollout.information.size()}}.dump();
      return outcome_step(std::move(out));
    }
    if (!rollout.question) {
      return outcome_step(failure(errc::reward_failed,
                                  "em_info_gain: no question found in the rollout's user turn"));
    }
    const auto* reward = catalog_.find(opts.info_gain_reward);
    if (reward == nullptr || reward->kind != "info_gain") {
      return outcome_step(failure(errc::reward_failed, "em_info_gain: '" + opts.info_gain_reward
                                                         + "' is not an info_gain reward"));
    }
    // The nested item carries the info_gain options given to this one.
    json extra = json::object();
    for (const auto& key : option_keys("info_gain")) {
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
    sub.ground_truth = item().ground_truth;
    sub.extra_info = extra.dump(-1, ' ', false, json::error_handler_t::replace);
    sub.options = reward->options;
    sub.route_suffix = reward->route_suffix;
    sub.group = item().group;
    sub.step = item().step;
    std::vector<score_item> calls;
    calls.push_back(std::move(sub));
    return calls_step(std::move(calls));
  }

protected:
  const char* calls_name() const override {
    return "info_gain";
  }

  graph_step next(const std::vector<item_result>& answers) override {
    const auto& r = answers.front();
    item_outcome out;
    out.score = exact_ + weight_ * r.score;
    json detail = {{"em", exact_}, {"delta_ig", r.score}, {"weight", weight_}};
    if (!r.detail.empty()) {
      detail["info_gain"] = json::parse(r.detail, nullptr, false);
    }
    out.detail = detail.dump(-1, ' ', false, json::error_handler_t::replace);
    return outcome_step(std::move(out));
  }

private:
  const reward_catalog& catalog_;
  double exact_ = 0.0;
  double weight_ = 0.0;
};

} // namespace

graph_step reward_graph::advance(const std::vector<item_result>& answers) {
  std::optional<item_outcome> failed;
  double longest_wait = 0.0;
  for (size_t i = 0; i < answers.size(); ++i) {
    const auto& r = answers[i];
    longest_wait = std::max(longest_wait, r.queue_ms);
    // A failed call's source too: a failed item names the source that failed it.
    if (!r.source.empty()) {
      if (r.sources.empty()) {
        sources_.insert(r.source);
      } else {
        sources_.insert(r.sources.begin(), r.sources.end());
      }
    }
    attempts_ += r.attempts;
    all_cached_ = all_cached_ && r.cached;
    all_shared_ = all_shared_ && (r.cached || r.coalesced);
    if (r.status == item_status::failed && !failed) {
      failed = failure(r.code, std::string{calls_name()} + " call " + std::to_string(i + 1)
                                 + " of " + std::to_string(answers.size()) + " failed: " + r.error);
      failed->retry_after_ms = r.retry_after_ms;
    }
  }
  queued_ms_ += longest_wait;
  if (failed) {
    return outcome_step(std::move(*failed));
  }
  return next(answers);
}

score_item reward_graph::call_item(capability needs, model_call call) const {
  score_item sub;
  // A model call's item kind is the capability it needs ("chat", "generate", "nli").
  sub.kind = std::string{name_of(needs)};
  sub.reward = item_->reward + "/" + sub.kind;
  sub.capability = routing_key(needs, item_->route_suffix);
  sub.group = item_->group;
  sub.step = item_->step;
  sub.call = std::make_shared<const model_call>(std::move(call));
  return sub;
}

std::unique_ptr<reward_graph> make_reward_graph(shared_item item,
                                                const reward_catalog& catalog) {
  const auto& kind = item->kind;
  if (kind == "judge") {
    return std::make_unique<judge_graph>(std::move(item));
  }
  if (kind == "info_gain") {
    return std::make_unique<info_gain_graph>(std::move(item));
  }
  if (kind == "em_info_gain") {
    return std::make_unique<em_info_gain_graph>(std::move(item), catalog);
  }
  return nullptr;
}

} // namespace arbiter::backends
