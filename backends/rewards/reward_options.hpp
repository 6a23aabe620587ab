#pragma once

// The options a reward takes: from its `[rewards.NAME.options]` table, overridden key by key
// by the item's `extra_info` (the seeds read them from extra_info). Known keys are checked
// (type and range) at the ingress, so a bad value is a 400 naming the field; unknown keys are
// ignored, since extra_info carries the trainer's own data too.

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/verl_rules.hpp"
#include "backends/rewards/info_gain_math.hpp"
#include "backends/rewards/text_similarity.hpp"
#include "common/score_types.hpp"

namespace arbiter::backends {

/// A bad option: its key (e.g. "length_penalty") and why.
struct option_problem {
  std::string key;
  std::string reason;
};

// ---- writing a kind's option rules ------------------------------------------------------

/// Why a value is bad, or nullopt when it is fine.
using check_fn = std::function<std::optional<std::string>(const nlohmann::json&)>;

/// One known option: its key and how its value is checked.
struct option_rule {
  std::string key;
  check_fn check;
};

/// How a number's bounds are written and tested.
enum class bound : uint8_t { open, closed };

/// No bound on that side.
inline constexpr double no_bound = std::numeric_limits<double>::infinity();

/// A string that names one of `names`.
check_fn one_of(std::vector<std::string> names);
check_fn a_string();
check_fn a_boolean();
/// A string or a list of strings.
check_fn strings();
/// A finite number in the interval from `low` to `high` (an infinite bound is no bound).
check_fn number_in(double low, bound low_kind, double high, bound high_kind);
/// An integer from `low` to `high` (both included); 4.0 counts as 4.
check_fn integer_in(uint64_t low, uint64_t high);

/// The built-in kinds' rules, in the order their keys are listed (the registry,
/// `reward_kinds.cpp`, points at them).
std::vector<option_rule> embedding_option_rules();
std::vector<option_rule> judge_option_rules();
std::vector<option_rule> info_gain_option_rules();
std::vector<option_rule> em_info_gain_option_rules();
std::vector<option_rule> gsm8k_option_rules();
std::vector<option_rule> math_dapo_option_rules();
std::vector<option_rule> search_r1_option_rules();

// ---- reading options --------------------------------------------------------------------

/// `options` (the reward's, a JSON object's text or empty) with every key of `extra_info` (a
/// JSON object's text or empty) laid over it. Text that is not a JSON object counts as empty.
nlohmann::json merged_options(std::string_view options, std::string_view extra_info);

/// The item's merged options (see above).
nlohmann::json merged_options(const score_item& item);

/// The item's merged options where only the extra_info keys in `keys` are read: the same
/// values as merged_options(item) under those keys, for well-formed extra_info (the codecs
/// refuse any other). The other fields are skipped unparsed, which matters when a trainer
/// passes its whole row (verl: the question and the reference solution) in extra_info.
nlohmann::json merged_options(const score_item& item, const std::vector<std::string>& keys);

/// The known option keys of `kind` (its registry entry's), checked in `check_options`; empty
/// for kinds without options.
const std::vector<std::string>& option_keys(std::string_view kind);

/// Checks the known keys of `options` for `kind`; nullopt when they are fine.
std::optional<option_problem> check_options(std::string_view kind,
                                            const nlohmann::json& options);

/// The embedding reward's options.
struct embedding_options {
  /// `length_penalty` (default none) and `length_threshold` (default 1.5, > 0).
  rewards::length_penalty_kind length_penalty = rewards::length_penalty_kind::none;
  double length_threshold = rewards::default_length_threshold;
  /// `instruction`: the task for instruction-following embedding models (Qwen3-Embedding):
  /// the candidate is sent as "Instruct: {instruction}\nQuery:{candidate}". Unset: the
  /// default task when the source's model asks for it (its name contains "qwen3-embedding",
  /// any case), else none; "" turns it off.
  std::optional<std::string> instruction;
  /// `dimensions`: keep the first d dimensions and re-normalize (Matryoshka); 0 = all.
  uint32_t dimensions = 0;
};

/// The default task of instruction-following embedding models.
inline constexpr std::string_view default_embedding_instruction =
  "Retrieve semantically similar text";

/// The judge reward's options. Unset fields leave the source's settings.
struct judge_options {
  /// `prompt_template`: "default", "detailed" or a custom template string (resolved).
  std::string prompt_template;
  /// `model_name` (or `model`).
  std::string model;
  std::optional<double> temperature;
  std::optional<double> top_p;
  /// `max_new_tokens` (or `max_tokens`).
  std::optional<uint32_t> max_tokens;
  std::optional<bool> enable_thinking;
  /// `n`: votes per reference, averaged (1..16).
  uint32_t votes = 1;
};

/// The info_gain reward's options (defaults: InfoReasoner's service).
struct info_gain_options {
  rewards::ig_variant variant = rewards::ig_variant::soft;
  rewards::ig_clustering clustering = rewards::ig_clustering::strict;
  double threshold = rewards::default_ig_threshold;
  /// `num_samples` per side (1..64).
  uint32_t samples = rewards::default_ig_samples;
  double temperature = rewards::default_ig_temperature;
  uint32_t max_new_tokens = rewards::default_ig_max_new_tokens;
  size_t max_context_words = rewards::default_ig_max_context_words;
  std::optional<uint64_t> seed;
};

/// The em_info_gain composite's options.
struct em_info_gain_options {
  /// `info_gain_weight`: ΔIG's weight (InfoReasoner: 0.6).
  double weight = 0.6;
  /// `info_gain_reward`: the reward that computes ΔIG (default "info_gain").
  std::string info_gain_reward = "info_gain";
  /// `validation`: true scores EM only (InfoReasoner drops ΔIG in validation).
  bool validation = false;
};

/// Typed options; they assume `check_options` passed (a bad value falls back to the default).
embedding_options parse_embedding_options(const nlohmann::json& options);
judge_options parse_judge_options(const nlohmann::json& options);
info_gain_options parse_info_gain_options(const nlohmann::json& options);
em_info_gain_options parse_em_info_gain_options(const nlohmann::json& options);
/// verl's rule rewards: `method` ("strict"/"flexible"), `format_score`, `score` (gsm8k);
/// `strict_box_verify` (math_dapo); `format_score`, `score` (search_r1_qa_em).
cpu::verl::gsm8k_options parse_gsm8k_options(const nlohmann::json& options);
bool parse_strict_box_verify(const nlohmann::json& options);
cpu::verl::search_r1_options parse_search_r1_options(const nlohmann::json& options);

} // namespace arbiter::backends
