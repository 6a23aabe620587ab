#pragma once

#include <string>
#include <vector>

#include "common/metrics.hpp"
#include "common/score_types.hpp"
#include "config/config.hpp"
#include "scheduler/scheduler_metrics.hpp"

namespace arbiter::scheduler::testing {

/// A lexical item needing the "cpu" capability.
inline score_item cpu_item(std::string text = "a", std::string reward = "lexical") {
  score_item item;
  item.reward = std::move(reward);
  item.kind = "lexical";
  item.capability = "cpu";
  item.solution_str = std::move(text);
  item.ground_truth = {"a"};
  return item;
}

inline std::vector<score_item> cpu_items(size_t n) {
  std::vector<score_item> items;
  for (size_t i = 0; i < n; ++i) {
    items.push_back(cpu_item("item " + std::to_string(i)));
  }
  return items;
}

/// Metrics registered in a registry of their own.
struct metrics_fixture {
  explicit metrics_fixture(const config::scheduler_config& cfg)
    : metrics(registry, names(cfg)) {
  }

  static std::vector<std::string> names(const config::scheduler_config& cfg) {
    std::vector<std::string> out;
    for (const auto& p : cfg.priorities) {
      out.push_back(p.name);
    }
    return out;
  }

  metrics_registry registry;
  scheduler_metrics metrics;
};

inline item_outcome ok_outcome(double score, double run_ms = 1.0) {
  item_outcome o;
  o.score = score;
  o.run_ms = run_ms;
  return o;
}

} // namespace arbiter::scheduler::testing
