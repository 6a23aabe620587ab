// The environment over a loaded configuration: one `ARBITER_*` variable per scalar field, the
// `ARBITER_API_KEYS` short name, and today's reward-script variables that name a remote service.
#include "config/config.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <utility>

#include "config/config_fields.hpp"

namespace arbiter::config {

using namespace detail;

namespace {

/// Parses a whole environment value as a decimal integer; nullopt on anything else.
/// Out-of-int64 values come back as nullopt with `overflow` set.
std::optional<int64_t> parse_integer(const std::string& text, bool& overflow) {
  overflow = false;
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (text.empty() || end != last) {
    return std::nullopt;
  }
  if (ec == std::errc::result_out_of_range) {
    overflow = true;
    return std::nullopt;
  }
  if (ec != std::errc{}) {
    return std::nullopt;
  }
  return value;
}
/// One of today's reward-script variables that names a remote service.
struct source_shorthand {
  const char* url;
  const char* name;
  const char* kind;
  const char* capability;
  std::vector<const char*> api_key;
  std::vector<const char*> timeout_s;
  std::vector<const char*> model;
  const char* batch_size;
  /// The model the script sends when none of `model` is set (nullptr: none).
  const char* default_model = nullptr;
};

const std::vector<source_shorthand>& shorthands() {
  static const std::vector<source_shorthand> list = {
      {"EMBEDDING_SERVER_URL", "embedding_server", "openai", "embed",
       {"EMBEDDING_SERVER_API_KEY", "EMBEDDING_API_KEY"},
       {"EMBEDDING_SERVER_TIMEOUT", "EMBEDDING_TIMEOUT"},
       {"EMBEDDING_MODEL", "EMBEDDING_MODEL_NAME"}, nullptr},
      {"LLM_JUDGE_SERVER_URL", "llm_judge_server", "openai", "chat",
       {"LLM_JUDGE_SERVER_API_KEY", "LLM_JUDGE_API_KEY"},
       {"LLM_JUDGE_SERVER_TIMEOUT", "LLM_JUDGE_TIMEOUT"},
       {"LLM_JUDGE_MODEL", "LLM_JUDGE_MODEL_NAME"}, nullptr,
       "Qwen/Qwen3-32B"},  // llm_judge_remote.py's DEFAULT_MODEL_NAME
      {"IG_SERVICE_URL", "ig_service", "ig_service", "ig",
       {"IG_SERVICE_API_KEY", "IG_API_KEY"},
       {"IG_SERVICE_TIMEOUT", "IG_TIMEOUT"},
       {},
       "IG_BATCH_SIZE"},
  };
  return list;
}

} // namespace

const char* shorthand_url_variable(const std::string& name) {
  for (const auto& sh : shorthands()) {
    if (sh.name == name) {
      return sh.url;
    }
  }
  return nullptr;
}

void apply_source_shorthands(
  arbiter_config& cfg, const std::function<std::optional<std::string>(const std::string&)>& env,
  std::vector<config_problem>& problems) {
  for (const auto& sh : shorthands()) {
    auto url = env(sh.url);
    if (!url || url->empty()) {
      continue;
    }
    bool exists = std::any_of(cfg.sources.begin(), cfg.sources.end(),
                              [&](const source_config& s) { return s.name == sh.name; });
    if (exists) {
      continue; // The file's table of that name wins.
    }
    if (!has_http_scheme(*url)) {
      // Named by its variable: the operator has no file with a sources[i] in it.
      problems.push_back({sh.url, http_scheme_problem(*url)});
      continue;
    }
    source_config src;
    src.name = sh.name;
    src.kind = sh.kind;
    src.url = *url;
    src.capabilities = {sh.capability};
    // The first of `names` that is set and not empty: {its name, its value}.
    auto first = [&](const std::vector<const char*>& names)
      -> std::optional<std::pair<std::string, std::string>> {
      for (const auto* n : names) {
        if (auto v = env(n); v && !v->empty()) {
          return std::make_pair(std::string{n}, std::move(*v));
        }
      }
      return std::nullopt;
    };
    if (auto key = first(sh.api_key)) {
      src.api_key = key->second;
    }
    if (auto model = first(sh.model)) {
      src.model = model->second;
    } else if (sh.default_model != nullptr) {
      src.model = sh.default_model;
    }
    if (auto t = first(sh.timeout_s)) {
      const auto seconds = parse_env_number(t->second);
      if (!seconds || !(*seconds > 0.0) || *seconds > 86400.0) {
        problems.push_back({t->first, "expected a positive number of seconds, got "
                                        + quoted(t->second)});
      } else {
        // Whole milliseconds, at least one: 0.0005 s was a 0 ms timeout that failed every call.
        src.timeout = std::chrono::milliseconds{
          std::max<int64_t>(1, static_cast<int64_t>(std::ceil(*seconds * 1000.0)))};
      }
    }
    if (sh.batch_size != nullptr) {
      if (auto b = env(sh.batch_size); b && !b->empty()) {
        bool overflow = false;
        auto n = parse_integer(*b, overflow);
        if (!n || *n < 1 || *n > 100000) {
          problems.push_back({sh.batch_size, "expected a batch size of 1 to 100000, got "
                                               + quoted(*b)});
        } else {
          src.max_batch_items = static_cast<uint32_t>(*n);
        }
      }
    }
    cfg.sources.push_back(std::move(src));
  }
}

void apply_environment(arbiter_config& cfg,
                       const std::function<std::optional<std::string>(const std::string&)>& env,
                       std::vector<config_problem>& problems) {
  for (const auto& field : scalar_fields()) {
    const std::string name = env_name(field.path);
    std::optional<std::string> value = env(name);
    if (!value) {
      continue;
    }
    if (field.type == field_type::string || field.type == field_type::string_list) {
      set_str_checked(field, std::move(*value), name, cfg, problems);
      continue;
    }
    if (field.type == field_type::boolean) {
      if (*value == "true" || *value == "1") {
        field.set_num(cfg, 1.0);
      } else if (*value == "false" || *value == "0") {
        field.set_num(cfg, 0.0);
      } else {
        problems.push_back({name, "expected true or false, got " + quoted(*value)});
      }
      continue;
    }
    if (field.type == field_type::number) {
      if (const auto v = parse_env_number(*value)) {
        set_num_checked(field, *v, name, cfg, problems);
      } else {
        problems.push_back({name, "expected a number, got " + quoted(*value)});
      }
      continue;
    }
    bool overflow = false;
    const std::optional<int64_t> number = parse_integer(*value, overflow);
    if (overflow && field.max == max_i64 && value->front() != '-') {
      // Past every int64: "must be at least" would name the wrong end.
      problems.push_back(
        {name, "must be at most " + std::to_string(max_i64) + " (got " + *value + ")"});
    } else if (overflow) {
      problems.push_back({name, range_reason(field.min, field.max, *value)});
    } else if (!number) {
      problems.push_back({name, "expected an integer, got " + quoted(*value)});
    } else {
      set_int_checked(field, *number, name, cfg, problems);
    }
  }
  // The short name the deployment docs use; the field's own variable wins when both are set.
  if (!env(env_name("server.api_keys"))) {
    if (auto keys = env("ARBITER_API_KEYS")) {
      cfg.server.api_keys = std::move(*keys);
    }
  }
  apply_source_shorthands(cfg, env, problems);
  // After the shorthands, so their sources take variables too.
  apply_element_environment(cfg, env, problems);
}

std::vector<std::pair<std::string, std::string>> environment_variables() {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(scalar_fields().size());
  for (const auto& field : scalar_fields()) {
    out.emplace_back(env_name(field.path), std::string(field.path));
  }
  return out;
}

} // namespace arbiter::config
