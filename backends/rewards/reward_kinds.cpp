#include "backends/rewards/reward_kinds.hpp"

#include <algorithm>
#include <utility>

#include "backends/cpu/cpu_rewards.hpp"

namespace arbiter::backends {

namespace {

reward_kind cpu_kind(std::string name, cpu_function score, std::vector<option_rule> options = {},
                     bool can_be_fallback = false) {
  reward_kind k;
  k.name = std::move(name);
  k.runner = reward_runner::cpu;
  k.needs = capability::cpu;
  k.score = score;
  k.options = std::move(options);
  k.can_be_fallback = can_be_fallback;
  return k;
}

reward_kind graph_kind(std::string name, capability needs, std::vector<capability> calls,
                       std::vector<option_rule> options) {
  reward_kind k;
  k.name = std::move(name);
  k.runner = reward_runner::graph;
  k.needs = needs;
  k.calls = std::move(calls);
  k.options = std::move(options);
  return k;
}

std::vector<reward_kind> build() {
  reward_kind embedding;
  embedding.name = "embedding";
  embedding.runner = reward_runner::embedding;
  embedding.needs = capability::embed;
  embedding.default_fallback = "lexical";  // as the seeds do
  embedding.options = embedding_option_rules();

  std::vector<reward_kind> kinds = {
    cpu_kind("lexical", &cpu::score_lexical, {}, /*can_be_fallback=*/true),
    cpu_kind("exact_match", &cpu::score_exact_match, {}, /*can_be_fallback=*/true),
    graph_kind("judge", capability::judge, {capability::chat}, judge_option_rules()),
    std::move(embedding),
    // As a local graph over generate and nli sources; an ig_service source serves "ig" whole.
    graph_kind("info_gain", capability::ig, {capability::generate, capability::nli},
               info_gain_option_rules()),
    // EM plus a weighted ΔIG from a nested info_gain item.
    graph_kind("em_info_gain", capability::em_ig, {capability::ig},
               em_info_gain_option_rules()),
    // verl's rule rewards (backends/cpu/verl_rules.hpp).
    cpu_kind("gsm8k", &cpu::score_gsm8k, gsm8k_option_rules()),
    cpu_kind("math", &cpu::score_math),
    cpu_kind("math_dapo", &cpu::score_math_dapo, math_dapo_option_rules()),
    cpu_kind("search_r1_qa_em", &cpu::score_search_r1_qa_em, search_r1_option_rules()),
  };
  for (auto& k : kinds) {
    k.verl_rule = k.name == "gsm8k" || k.name == "math" || k.name == "math_dapo"
                  || k.name == "search_r1_qa_em";
    k.scores_no_reference = k.name == "search_r1_qa_em";
    if (k.name == "info_gain") {
      // As the graph reads it. em_info_gain finds its question in the rollout.
      k.needs_one_of = {"question", "problem"};
    }
    if (k.name == "math_dapo") {
      // verl's math_dapo returns acc and pred; "[INVALID]" is its own pred for no answer.
      k.failed_extra = R"({"acc":false,"pred":"[INVALID]"})";
    }
    for (const auto& rule : k.options) {
      k.option_keys.push_back(rule.key);
    }
  }
  return kinds;
}

} // namespace

const std::vector<reward_kind>& reward_kinds() {
  static const std::vector<reward_kind> kinds = build();
  return kinds;
}

const reward_kind* find_reward_kind(std::string_view name) {
  const auto& kinds = reward_kinds();
  auto found = std::find_if(kinds.begin(), kinds.end(),
                            [name](const reward_kind& k) { return k.name == name; });
  return found == kinds.end() ? nullptr : &*found;
}

std::vector<std::string> reward_kind_names() {
  std::vector<std::string> names;
  for (const auto& k : reward_kinds()) {
    names.push_back(k.name);
  }
  return names;
}

std::vector<std::string> fallback_names() {
  std::vector<std::string> names;
  for (const auto& k : reward_kinds()) {
    if (k.can_be_fallback) {
      names.push_back(k.name);
    }
  }
  names.emplace_back("none");
  return names;
}

} // namespace arbiter::backends
