#include "backends/models/passes.hpp"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

using namespace arbiter::backends::models;

namespace {

size_t computed(const std::vector<forward_pass>& passes, size_t overhead) {
  size_t tokens = 0;
  for (const auto& p : passes) {
    tokens += p.inputs.size() * p.padded_length + overhead;
  }
  return tokens;
}

} // namespace

TEST(PlanPasses, EveryInputRunsOnceShortestFirst) {
  std::vector<size_t> lengths{50, 3, 12, 3, 200, 12, 50};
  auto passes = plan_passes(lengths, 16384);
  std::vector<size_t> seen;
  size_t previous = 0;
  for (const auto& p : passes) {
    for (auto i : p.inputs) {
      seen.push_back(i);
      EXPECT_GE(lengths[i], previous);
      EXPECT_LE(lengths[i], p.padded_length);
      previous = lengths[i];
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<size_t> all(lengths.size());
  std::iota(all.begin(), all.end(), size_t{0});
  EXPECT_EQ(seen, all);
}

TEST(PlanPasses, MixedLengthsAreCutWherePaddingCostsMoreThanAPass) {
  // Ten short inputs and two long ones: one pass would pad the ten to 120 tokens.
  std::vector<size_t> lengths(10, 8);
  lengths.push_back(120);
  lengths.push_back(118);
  auto passes = plan_passes(lengths, 16384, 32);
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[0].inputs.size(), 10u);
  EXPECT_EQ(passes[0].padded_length, 8u);
  EXPECT_EQ(passes[1].padded_length, 120u);
  // Inputs of nearly equal length share a pass: a second pass would cost more than it saves.
  auto close = plan_passes({30, 31, 32, 33}, 16384, 32);
  EXPECT_EQ(close.size(), 1u);
}

TEST(PlanPasses, NoCheaperCutExists) {
  // The plan is optimal: check it against every way of cutting a small sorted batch.
  std::vector<size_t> lengths{4, 9, 9, 17, 30, 31, 64, 65, 200};
  const size_t overhead = 32;
  auto plan = computed(plan_passes(lengths, 16384, overhead), overhead);
  size_t best = SIZE_MAX;
  for (unsigned mask = 0; mask < (1u << (lengths.size() - 1)); ++mask) {
    size_t cost = 0;
    size_t start = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (i + 1 == lengths.size() || (mask & (1u << i)) != 0) {
        cost += (i + 1 - start) * lengths[i] + overhead;
        start = i + 1;
      }
    }
    best = std::min(best, cost);
  }
  EXPECT_EQ(plan, best);
}

TEST(PlanPasses, NoPassExceedsTheTokenBudget) {
  std::vector<size_t> lengths(100, 64);
  auto passes = plan_passes(lengths, 1000);
  for (const auto& p : passes) {
    EXPECT_LE(p.inputs.size() * p.padded_length, 1000u);
  }
  // An input longer than the budget runs alone.
  auto alone = plan_passes({5000, 10}, 1000);
  ASSERT_EQ(alone.size(), 2u);
  EXPECT_EQ(alone[1].inputs, std::vector<size_t>{0});
}

TEST(PlanPasses, APassCostsMoreOnAGpu) {
  EXPECT_EQ(pass_overhead_tokens(-1, false, false, 32), 32u);
  EXPECT_EQ(pass_overhead_tokens(-1, false, true, 0), 0u);
  EXPECT_EQ(pass_overhead_tokens(-1, true, false, 32), 2048u);
  EXPECT_EQ(pass_overhead_tokens(-1, true, true, 32), no_cut_overhead);
  EXPECT_EQ(pass_overhead_tokens(0, true, true, 32), 0u);
  EXPECT_EQ(pass_overhead_tokens(500, false, false, 32), 500u);
  // bf16 on a GPU: one pass for any mix of lengths within the token budget.
  EXPECT_EQ(plan_passes({3, 40, 200, 7, 90}, 1 << 20, no_cut_overhead).size(), 1u);
  EXPECT_EQ(plan_passes({3, 40, 200, 7, 90}, 400, no_cut_overhead).size(), 2u);
  // Inputs of 10 and 20 tokens: one padded pass on a GPU, two tight ones at a small cost.
  EXPECT_EQ(plan_passes({10, 20}, 1 << 20, 2048).size(), 1u);
  EXPECT_EQ(plan_passes({10, 20}, 1 << 20, 4).size(), 2u);
}
