#include "backends/rewards/reward_options.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include <simdjson.h>

#include "backends/rewards/judge_template.hpp"
#include "backends/rewards/reward_kinds.hpp"
#include "common/text_excerpt.hpp"

namespace arbiter::backends {

namespace {

using json = nlohmann::json;

/// `text` parsed as a JSON object; an empty object for empty text, bad JSON and non-objects.
json parse_object(std::string_view text) {
  if (text.empty()) {
    return json::object();
  }
  auto parsed = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : json::object();
}

/// "'cubic'" for a string, the JSON text otherwise ("-1", "true", "[1]"); past its first 64
/// bytes (cut on a character boundary) a value is shown as its opening and "...", so an
/// error never echoes a whole megabyte back.
std::string shown(const json& value) {
  constexpr size_t most = 64;
  const bool text = value.is_string();
  std::string whole =
    text ? value.get<std::string>() : value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out = text ? "'" : "";
  out += utf8_prefix(whole, most);
  out += text ? "'" : "";
  if (whole.size() > most) {
    out += "...";
  }
  return out;
}

std::string got(const json& value) {
  return " (got " + shown(value) + ")";
}

/// A finite number's value.
std::optional<double> number_of(const json& value) {
  if (!value.is_number()) {
    return std::nullopt;
  }
  auto d = value.get<double>();
  return std::isfinite(d) ? std::optional<double>{d} : std::nullopt;
}

/// A non-negative integer's value: a JSON integer, or a number with no fraction (4.0, as
/// trainers' data frames write integers).
std::optional<uint64_t> unsigned_of(const json& value) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>();
  }
  if (value.is_number_integer()) {
    auto n = value.get<int64_t>();
    return n >= 0 ? std::optional<uint64_t>{static_cast<uint64_t>(n)} : std::nullopt;
  }
  if (value.is_number_float()) {
    auto d = value.get<double>();
    // 2^64 is exactly representable; everything below it with no fraction converts exactly.
    if (d >= 0.0 && d < 18446744073709551616.0 && std::floor(d) == d) {
      return static_cast<uint64_t>(d);
    }
  }
  return std::nullopt;
}

} // namespace

// ---- the rule builders (reward_options.hpp) ----------------------------------------------

/// A string that names one of `names` (joined by ", " in the reason).
check_fn one_of(std::vector<std::string> names) {
  return [names = std::move(names)](const json& v) -> std::optional<std::string> {
    if (v.is_string()) {
      for (const auto& name : names) {
        if (v.get_ref<const std::string&>() == name) {
          return std::nullopt;
        }
      }
    }
    std::string list;
    for (const auto& name : names) {
      list += list.empty() ? name : ", " + name;
    }
    return "must be one of " + list + got(v);
  };
}

check_fn a_string() {
  return [](const json& v) -> std::optional<std::string> {
    if (v.is_string()) {
      return std::nullopt;
    }
    return "must be a string" + got(v);
  };
}

check_fn a_boolean() {
  return [](const json& v) -> std::optional<std::string> {
    if (v.is_boolean()) {
      return std::nullopt;
    }
    return "must be true or false" + got(v);
  };
}

check_fn strings() {
  return [](const json& v) -> std::optional<std::string> {
    if (v.is_string()) {
      return std::nullopt;
    }
    if (v.is_array()) {
      bool all = true;
      for (const auto& x : v) {
        all = all && x.is_string();
      }
      if (all) {
        return std::nullopt;
      }
    }
    return std::string{"must be a string or a list of strings"};
  };
}

/// A finite number in the interval from `low` to `high` (an infinite bound is no bound).
check_fn number_in(double low, bound low_kind, double high, bound high_kind) {
  std::string what = "must be a number";
  bool has_low = std::isfinite(low);
  bool has_high = std::isfinite(high);
  auto text = [](double x) {
    // Integers without a fraction ("2"), others as JSON writes them ("0.5").
    return std::floor(x) == x ? std::to_string(static_cast<long long>(x)) : json(x).dump();
  };
  if (has_low && has_high && low_kind == bound::closed && high_kind == bound::closed) {
    what += " from " + text(low) + " to " + text(high);
  } else {
    if (has_low) {
      what += (low_kind == bound::open ? " > " : " >= ") + text(low);
    }
    if (has_high) {
      what += (has_low ? " and" : "") + std::string{high_kind == bound::open ? " < " : " <= "}
              + text(high);
    }
  }
  return [=](const json& v) -> std::optional<std::string> {
    auto d = number_of(v);
    bool ok = d.has_value();
    if (ok && has_low) {
      ok = low_kind == bound::open ? *d > low : *d >= low;
    }
    if (ok && has_high) {
      ok = high_kind == bound::open ? *d < high : *d <= high;
    }
    if (ok) {
      return std::nullopt;
    }
    return what + got(v);
  };
}

/// An integer from `low` to `high` (both included).
check_fn integer_in(uint64_t low, uint64_t high) {
  std::string what = high == std::numeric_limits<uint64_t>::max()
                       ? "must be an integer >= " + std::to_string(low)
                       : "must be an integer from " + std::to_string(low) + " to "
                           + std::to_string(high);
  return [=](const json& v) -> std::optional<std::string> {
    auto n = unsigned_of(v);
    if (n && *n >= low && *n <= high) {
      return std::nullopt;
    }
    return what + got(v);
  };
}

namespace {

check_fn judge_template() {
  return [](const json& v) -> std::optional<std::string> {
    if (!v.is_string()) {
      return "must be a string" + got(v);
    }
    try {
      rewards::resolve_judge_template(v.get_ref<const std::string&>());
    } catch (const std::invalid_argument& e) {
      return std::string{e.what()};
    }
    return std::nullopt;
  };
}

std::vector<std::string> length_penalty_names() {
  std::vector<std::string> names;
  for (auto k : {rewards::length_penalty_kind::none, rewards::length_penalty_kind::ratio,
                 rewards::length_penalty_kind::sqrt, rewards::length_penalty_kind::log,
                 rewards::length_penalty_kind::quadratic,
                 rewards::length_penalty_kind::exponential}) {
    names.emplace_back(rewards::to_string(k));
  }
  return names;
}

/// The reference filters the embedding and judge rewards share (rewards::filter_references).
std::vector<option_rule> reference_filter_rules() {
  return {{"target_gt", strings()},
          {"filter_gt_by_prompt_token", a_boolean()},
          {"prompt", a_string()}};
}

} // namespace

// ---- each kind's rules (the registry, reward_kinds.cpp, points at them) -----------------

std::vector<option_rule> embedding_option_rules() {
  std::vector<option_rule> rules{
    {"length_penalty", one_of(length_penalty_names())},
    {"length_threshold", number_in(0.0, bound::open, no_bound, bound::open)},
  };
  for (auto& rule : reference_filter_rules()) {
    rules.push_back(std::move(rule));
  }
  rules.push_back({"instruction", a_string()});
  rules.push_back({"dimensions", integer_in(0, 65536)});
  return rules;
}

std::vector<option_rule> judge_option_rules() {
  std::vector<option_rule> rules{
    {"prompt_template", judge_template()},
    {"model_name", a_string()},
    {"model", a_string()},
    {"temperature", number_in(0.0, bound::closed, 2.0, bound::closed)},
    {"top_p", number_in(0.0, bound::open, 1.0, bound::closed)},
    {"max_new_tokens", integer_in(1, 131072)},
    {"max_tokens", integer_in(1, 131072)},
    {"enable_thinking", a_boolean()},
    {"n", integer_in(1, 16)},
  };
  for (auto& rule : reference_filter_rules()) {
    rules.push_back(std::move(rule));
  }
  rules.push_back({"problem", a_string()});
  rules.push_back({"question", a_string()});
  return rules;
}

std::vector<option_rule> info_gain_option_rules() {
  std::vector<std::string> variants;
  for (auto v : {rewards::ig_variant::soft, rewards::ig_variant::hard, rewards::ig_variant::se_rao,
                 rewards::ig_variant::se_discrete}) {
    variants.emplace_back(rewards::to_string(v));
  }
  std::vector<std::string> clusterings;
  for (auto c : {rewards::ig_clustering::strict, rewards::ig_clustering::loose}) {
    clusterings.emplace_back(rewards::to_string(c));
  }
  return {
    {"variant", one_of(std::move(variants))},
    {"clustering", one_of(std::move(clusterings))},
    {"threshold", number_in(0.0, bound::open, 1.0, bound::open)},
    {"num_samples", integer_in(1, 64)},
    {"temperature", number_in(0.0, bound::closed, 2.0, bound::closed)},
    {"max_new_tokens", integer_in(1, 4096)},
    {"max_context_words", integer_in(1, 1000000)},
    {"seed", integer_in(0, std::numeric_limits<uint64_t>::max())},
    {"question", a_string()},
    {"context", a_string()},
  };
}

std::vector<option_rule> em_info_gain_option_rules() {
  std::vector<option_rule> rules{
    {"info_gain_weight", number_in(-no_bound, bound::open, no_bound, bound::open)},
    {"info_gain_reward", a_string()},
    {"validation", a_boolean()},
  };
  for (auto& rule : info_gain_option_rules()) {
    rules.push_back(std::move(rule));
  }
  return rules;
}

/// verl's rule rewards: the keyword arguments of their compute_score.
std::vector<option_rule> gsm8k_option_rules() {
  return {{"method", one_of({"strict", "flexible"})},
          {"format_score", number_in(-no_bound, bound::open, no_bound, bound::open)},
          {"score", number_in(-no_bound, bound::open, no_bound, bound::open)}};
}

std::vector<option_rule> math_dapo_option_rules() {
  return {{"strict_box_verify", a_boolean()}};
}

std::vector<option_rule> search_r1_option_rules() {
  return {{"format_score", number_in(-no_bound, bound::open, no_bound, bound::open)},
          {"score", number_in(-no_bound, bound::open, no_bound, bound::open)}};
}

namespace {

/// The rules of `kind` (none for kinds without options or unknown kinds).
const std::vector<option_rule>& rules_of(std::string_view kind) {
  static const std::vector<option_rule> none;
  const auto* found = find_reward_kind(kind);
  return found == nullptr ? none : found->options;
}

// ---- typed reads (a bad value reads as absent) -------------------------------------------

/// The value under `key` unless it is null.
const json* find(const json& options, const char* key) {
  if (!options.is_object()) {
    return nullptr;
  }
  auto found = options.find(key);
  return found == options.end() || found->is_null() ? nullptr : &*found;
}

/// The value under `key` when `kind`'s rule for it accepts it.
const json* valid(const json& options, std::string_view kind, const char* key) {
  const auto* value = find(options, key);
  if (value == nullptr) {
    return nullptr;
  }
  for (const auto& rule : rules_of(kind)) {
    if (rule.key == key) {
      return rule.check(*value) ? nullptr : value;
    }
  }
  return nullptr;
}

std::optional<std::string> read_string(const json& options, std::string_view kind,
                                       const char* key) {
  const auto* v = valid(options, kind, key);
  return v != nullptr && v->is_string() ? std::optional<std::string>{v->get<std::string>()}
                                        : std::nullopt;
}

std::optional<bool> read_bool(const json& options, std::string_view kind, const char* key) {
  const auto* v = valid(options, kind, key);
  return v != nullptr && v->is_boolean() ? std::optional<bool>{v->get<bool>()} : std::nullopt;
}

std::optional<double> read_number(const json& options, std::string_view kind, const char* key) {
  const auto* v = valid(options, kind, key);
  return v != nullptr ? number_of(*v) : std::nullopt;
}

std::optional<uint64_t> read_unsigned(const json& options, std::string_view kind,
                                      const char* key) {
  const auto* v = valid(options, kind, key);
  return v != nullptr ? unsigned_of(*v) : std::nullopt;
}

} // namespace

nlohmann::json merged_options(std::string_view options, std::string_view extra_info) {
  auto merged = parse_object(options);
  auto extra = parse_object(extra_info);
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    if (!it->is_null()) {
      merged[it.key()] = std::move(*it);
    }
  }
  return merged;
}

nlohmann::json merged_options(const score_item& item) {
  return merged_options(item.options, item.extra_info);
}

namespace {

/// The raw JSON text of `value`, whatever its type.
bool raw_text(simdjson::ondemand::value& value, std::string_view& raw) {
  simdjson::ondemand::json_type type;
  if (value.type().get(type)) {
    return false;
  }
  if (type == simdjson::ondemand::json_type::object) {
    simdjson::ondemand::object object;
    return !value.get_object().get(object) && !object.raw_json().get(raw);
  }
  if (type == simdjson::ondemand::json_type::array) {
    simdjson::ondemand::array array;
    return !value.get_array().get(array) && !array.raw_json().get(raw);
  }
  raw = value.raw_json_token();
  return true;
}

/// The fields of the JSON object `text` named in `keys`, each value parsed as parse_object
/// parses it (the last of repeated keys wins); nullopt where simdjson cannot walk the text as
/// an object, for the caller to parse it whole.
std::optional<json> wanted_fields(std::string_view text, const std::vector<std::string>& keys) {
  thread_local simdjson::ondemand::parser parser;
  thread_local std::string buffer; // simdjson reads up to SIMDJSON_PADDING bytes past the end
  buffer.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  buffer.assign(text.data(), text.size());
  simdjson::ondemand::document doc;
  simdjson::ondemand::object object;
  if (parser.iterate(buffer.data(), buffer.size(), buffer.capacity()).get(doc)
      || doc.get_object().get(object)) {
    return std::nullopt;
  }
  json out = json::object();
  for (auto field : object) {
    std::string_view key;
    simdjson::ondemand::value value;
    if (field.unescaped_key().get(key) || field.value().get(value)) {
      return std::nullopt;
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      continue; // the iteration skips the value
    }
    std::string name{key};
    std::string_view raw;
    if (!raw_text(value, raw)) {
      return std::nullopt;
    }
    auto parsed = json::parse(raw.begin(), raw.end(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return std::nullopt;
    }
    out[name] = std::move(parsed);
  }
  return out;
}

} // namespace

nlohmann::json merged_options(const score_item& item, const std::vector<std::string>& keys) {
  if (item.extra_info.empty()) {
    return parse_object(item.options);
  }
  auto extra = wanted_fields(item.extra_info, keys);
  if (!extra) {
    return merged_options(item);
  }
  auto merged = parse_object(item.options);
  for (auto it = extra->begin(); it != extra->end(); ++it) {
    if (!it->is_null()) {
      merged[it.key()] = std::move(*it);
    }
  }
  return merged;
}

const std::vector<std::string>& option_keys(std::string_view kind) {
  static const std::vector<std::string> none;
  const auto* found = find_reward_kind(kind);
  return found == nullptr ? none : found->option_keys;
}

std::optional<option_problem> check_options(std::string_view kind,
                                            const nlohmann::json& options) {
  if (!options.is_object()) {
    return std::nullopt;
  }
  for (const auto& rule : rules_of(kind)) {
    const auto* value = find(options, rule.key.c_str());
    if (value == nullptr) {
      continue;
    }
    if (auto reason = rule.check(*value)) {
      return option_problem{rule.key, std::move(*reason)};
    }
  }
  return std::nullopt;
}

embedding_options parse_embedding_options(const nlohmann::json& options) {
  constexpr std::string_view kind = "embedding";
  embedding_options out;
  if (auto name = read_string(options, kind, "length_penalty")) {
    out.length_penalty = rewards::parse_length_penalty(*name).value_or(out.length_penalty);
  }
  out.length_threshold = read_number(options, kind, "length_threshold").value_or(out.length_threshold);
  out.instruction = read_string(options, kind, "instruction");
  out.dimensions = static_cast<uint32_t>(read_unsigned(options, kind, "dimensions").value_or(0));
  return out;
}

judge_options parse_judge_options(const nlohmann::json& options) {
  constexpr std::string_view kind = "judge";
  judge_options out;
  out.prompt_template = rewards::resolve_judge_template(
    read_string(options, kind, "prompt_template").value_or("default"));
  out.model = read_string(options, kind, "model_name")
                .value_or(read_string(options, kind, "model").value_or(""));
  out.temperature = read_number(options, kind, "temperature");
  out.top_p = read_number(options, kind, "top_p");
  auto max_tokens = read_unsigned(options, kind, "max_new_tokens");
  if (!max_tokens) {
    max_tokens = read_unsigned(options, kind, "max_tokens");
  }
  if (max_tokens) {
    out.max_tokens = static_cast<uint32_t>(*max_tokens);
  }
  out.enable_thinking = read_bool(options, kind, "enable_thinking");
  out.votes = static_cast<uint32_t>(read_unsigned(options, kind, "n").value_or(out.votes));
  return out;
}

info_gain_options parse_info_gain_options(const nlohmann::json& options) {
  constexpr std::string_view kind = "info_gain";
  info_gain_options out;
  if (auto name = read_string(options, kind, "variant")) {
    out.variant = rewards::parse_ig_variant(*name).value_or(out.variant);
  }
  if (auto name = read_string(options, kind, "clustering")) {
    out.clustering = rewards::parse_ig_clustering(*name).value_or(out.clustering);
  }
  out.threshold = read_number(options, kind, "threshold").value_or(out.threshold);
  out.samples =
    static_cast<uint32_t>(read_unsigned(options, kind, "num_samples").value_or(out.samples));
  out.temperature = read_number(options, kind, "temperature").value_or(out.temperature);
  out.max_new_tokens = static_cast<uint32_t>(
    read_unsigned(options, kind, "max_new_tokens").value_or(out.max_new_tokens));
  out.max_context_words = static_cast<size_t>(
    read_unsigned(options, kind, "max_context_words").value_or(out.max_context_words));
  out.seed = read_unsigned(options, kind, "seed");
  return out;
}

em_info_gain_options parse_em_info_gain_options(const nlohmann::json& options) {
  constexpr std::string_view kind = "em_info_gain";
  em_info_gain_options out;
  out.weight = read_number(options, kind, "info_gain_weight").value_or(out.weight);
  out.info_gain_reward =
    read_string(options, kind, "info_gain_reward").value_or(out.info_gain_reward);
  out.validation = read_bool(options, kind, "validation").value_or(out.validation);
  return out;
}

cpu::verl::gsm8k_options parse_gsm8k_options(const nlohmann::json& options) {
  constexpr std::string_view kind = "gsm8k";
  cpu::verl::gsm8k_options out;
  out.flexible = read_string(options, kind, "method").value_or("strict") == "flexible";
  out.format_score = read_number(options, kind, "format_score").value_or(out.format_score);
  out.score = read_number(options, kind, "score").value_or(out.score);
  return out;
}

bool parse_strict_box_verify(const nlohmann::json& options) {
  return read_bool(options, "math_dapo", "strict_box_verify").value_or(false);
}

cpu::verl::search_r1_options parse_search_r1_options(const nlohmann::json& options) {
  constexpr std::string_view kind = "search_r1_qa_em";
  cpu::verl::search_r1_options out;
  out.format_score = read_number(options, kind, "format_score").value_or(out.format_score);
  out.score = read_number(options, kind, "score").value_or(out.score);
  return out;
}

} // namespace arbiter::backends
