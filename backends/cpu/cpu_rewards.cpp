#include "backends/cpu/cpu_rewards.hpp"

#include <algorithm>
#include <chrono>

#include <utf8proc.h>

#include "backends/cpu/exact_match.hpp"
#include "backends/cpu/lexical.hpp"
#include "backends/cpu/verl_rules.hpp"
#include "backends/rewards/reward_options.hpp"
#include "backends/rewards/text_similarity.hpp"
#include "common/json_text.hpp"

namespace arbiter::backends::cpu {

item_outcome score_lexical(const score_item& item, const cpu_limits& limits) {
  auto candidate = decode_utf8(item.solution_str);
  auto too_long = [&](size_t n, const char* field) {
    return failure(std::string{field} + " has " + std::to_string(n)
                   + " characters; lexical accepts at most "
                   + std::to_string(limits.max_lexical_chars) + " (cpu.max_lexical_chars)");
  };
  if (candidate.size() > limits.max_lexical_chars) {
    return too_long(candidate.size(), "solution_str");
  }
  item_outcome out;
  for (const auto& reference : item.ground_truth) {
    auto ref = decode_utf8(reference);
    if (ref.size() > limits.max_lexical_chars) {
      return too_long(ref.size(), "ground_truth");
    }
    out.score = std::max(out.score, sequence_matcher_ratio(candidate, ref));
  }
  return out;
}

item_outcome score_exact_match(const score_item& item, const cpu_limits& /*limits*/) {
  item_outcome out;
  for (const auto& reference : item.ground_truth) {
    out.score = std::max(out.score, exact_match(item.solution_str, reference));
  }
  return out;
}

item_outcome score_gsm8k(const score_item& item, const cpu_limits& /*limits*/) {
  auto options = parse_gsm8k_options(merged_options(item, option_keys(item.kind)));
  return success(verl::gsm8k(item.solution_str, item.ground_truth, options));
}

item_outcome score_math(const score_item& item, const cpu_limits& /*limits*/) {
  return success(verl::math(item.solution_str, item.ground_truth));
}

item_outcome score_math_dapo(const score_item& item, const cpu_limits& /*limits*/) {
  auto r = verl::math_dapo(item.solution_str, item.ground_truth,
                           parse_strict_box_verify(merged_options(item, option_keys(item.kind))));
  item_outcome out;
  out.score = r.score;
  out.extra = r.acc ? R"({"acc":true,"pred":)" : R"({"acc":false,"pred":)";
  if (r.pred) {
    append_json_string(out.extra, *r.pred);
  } else {
    out.extra += "null";
  }
  out.extra += '}';
  return out;
}

item_outcome score_search_r1_qa_em(const score_item& item, const cpu_limits& /*limits*/) {
  auto options = parse_search_r1_options(merged_options(item, option_keys(item.kind)));
  return success(verl::search_r1_qa_em(item.solution_str, item.ground_truth, options));
}

namespace {

/// `text` lower-cased code point by code point (UTF-8 in, UTF-8 out).
std::string lower(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : decode_utf8(text)) {
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

} // namespace

item_outcome evaluate_fallback(const score_item& item, const cpu_limits& limits) {
  try {
    score_item copy;
    copy.reward = item.reward;
    copy.kind = item.fallback;
    copy.solution_str = lower(item.solution_str);
    auto options = merged_options(item);
    for (auto i : rewards::filter_references(item.ground_truth, options)) {
      copy.ground_truth.push_back(lower(item.ground_truth[i]));
    }
    return evaluate(copy, limits);
  } catch (const std::exception& e) {
    return failure(std::string{"fallback failed: "} + e.what());
  }
}

item_outcome evaluate(const score_item& item, const cpu_limits& limits) {
  auto start = std::chrono::steady_clock::now();
  const auto* kind = find_reward_kind(item.kind);
  item_outcome out;
  if (kind == nullptr || kind->score == nullptr) {
    out = failure("kind '" + item.kind + "' is not a CPU reward");
  } else if (item.ground_truth.empty() && !kind->scores_no_reference) {
    out = failure("ground_truth is empty");
  } else {
    try {
      out = kind->score(item, limits);
    } catch (const std::exception& e) {
      // e.g. a regular expression past PCRE2's match limit: Python would only have been slow.
      out = failure(item.kind + ": " + e.what());
    }
  }
  out.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                 .count();
  return out;
}

} // namespace arbiter::backends::cpu
