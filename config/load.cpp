// Reading a TOML document (toml++) over the embedded default: the scalar sections through the
// field table, the array and map sections (`[[scheduler.priorities]]`, `[rewards.NAME]`,
// `[data_sources]`, `[[sources]]`, `[[models]]`) by hand; then `validate` for what spans fields.
#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

#include "config/config_fields.hpp"

namespace arbiter::config {

using namespace detail;

namespace {

/// "an integer", "a string" ... for "expected X, got Y" messages.
std::string type_phrase(toml::node_type type) {
  switch (type) {
    case toml::node_type::none:
      return "nothing";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
  }
  return "an unknown value";
}

std::string wrong_type(std::string_view expected, const toml::node& node) {
  return "expected " + std::string(expected) + ", got " + type_phrase(node.type());
}


/// A TOML float or integer as a double; nullopt for anything else.
std::optional<double> number_of(const toml::node& node) {
  if (const auto* f = node.as_floating_point()) {
    return f->get();
  }
  if (const auto* i = node.as_integer()) {
    return static_cast<double>(i->get());
  }
  return std::nullopt;
}

/// Reads one scalar field from its TOML node.
void load_scalar(const field_descriptor& field, const toml::node& node, arbiter_config& cfg,
                 problem_list& problems) {
  const std::string where(field.path);
  if (field.type == field_type::number || field.type == field_type::boolean) {
    double v = 0.0;
    if (field.type == field_type::boolean) {
      const auto* b = node.as_boolean();
      if (b == nullptr) {
        problems.push_back({where, wrong_type("a boolean", node)});
        return;
      }
      v = b->get() ? 1.0 : 0.0;
    } else if (auto number = number_of(node)) {
      v = *number;
    } else {
      problems.push_back({where, wrong_type("a number", node)});
      return;
    }
    set_num_checked(field, v, where, cfg, problems);
    return;
  }
  if (field.type == field_type::integer) {
    const auto* value = node.as_integer();
    if (value == nullptr) {
      problems.push_back({where, wrong_type("an integer", node)});
      return;
    }
    set_int_checked(field, value->get(), where, cfg, problems);
    return;
  }
  if (field.type == field_type::string_list) {
    if (const auto* array = node.as_array()) {
      std::string joined;
      for (size_t i = 0; i < array->size(); ++i) {
        const auto* entry = array->get(i)->as_string();
        const std::string at = where + "[" + std::to_string(i) + "]";
        if (entry == nullptr) {
          problems.push_back({at, wrong_type("a string", *array->get(i))});
          return;
        }
        if (entry->get().find(',') != std::string::npos) {
          problems.push_back({at, "must not contain a comma"});
          return;
        }
        joined += (i == 0 ? "" : ",") + entry->get();
      }
      field.set_str(cfg, std::move(joined));
      return;
    }
  }
  const auto* value = node.as_string();
  if (value == nullptr) {
    problems.push_back({where, wrong_type(field.type == field_type::string_list
                                            ? "a string or an array of strings"
                                            : "a string",
                                          node)});
    return;
  }
  set_str_checked(field, value->get(), where, cfg, problems);
}

/// Reads an array of strings at `field` into `out`.
void read_string_list(const toml::node& node, const std::string& field,
                      std::vector<std::string>& out, problem_list& problems) {
  const auto* list = node.as_array();
  if (list == nullptr) {
    problems.push_back({field, wrong_type("an array of strings", node)});
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (const auto* text = list->get(i)->as_string()) {
      out.push_back(text->get());
    } else {
      problems.push_back({field + "[" + std::to_string(i) + "]", wrong_type("a string", *list->get(i))});
    }
  }
}

/// Reads the keys of `table` into `element` through its field table; returns which fields
/// were given.
template <typename T>
std::vector<bool> read_fields(const std::vector<element_field<T>>& fields,
                              const toml::table& table, T& element, const std::string& where,
                              problem_list& problems) {
  std::vector<bool> seen(fields.size(), false);
  for (const auto& entry : table) {
    const std::string_view key = entry.first.str();
    const toml::node& value = entry.second;
    const std::string at = where + "." + key_name(key);
    auto found = std::find_if(fields.begin(), fields.end(),
                              [key](const element_field<T>& f) { return f.key == key; });
    if (found == fields.end()) {
      problems.push_back({at, "unknown field"});
      continue;
    }
    const auto& field = *found;
    seen[static_cast<size_t>(found - fields.begin())] = true;
    switch (field.type) {
      case field_type::string:
      case field_type::string_list:
        if (const auto* t = value.as_string()) {
          std::string why = field.check_str ? field.check_str(t->get()) : std::string{};
          if (why.empty()) {
            field.set_str(element, t->get());
          } else {
            problems.push_back({at, std::move(why)});
          }
        } else {
          problems.push_back({at, wrong_type("a string", value)});
        }
        break;
      case field_type::string_array: {
        std::vector<std::string> entries;
        read_string_list(value, at, entries, problems);
        for (auto& text : entries) {
          field.set_str(element, std::move(text));
        }
        break;
      }
      case field_type::integer: {
        const auto* i = value.as_integer();
        if (i == nullptr) {
          problems.push_back({at, wrong_type("an integer", value)});
        } else if (i->get() < field.min || i->get() > field.max) {
          problems.push_back({at, range_reason(field.min, field.max, std::to_string(i->get()))});
        } else {
          field.set_int(element, i->get());
        }
        break;
      }
      case field_type::number: {
        const auto number = number_of(value);
        if (!number) {
          problems.push_back({at, wrong_type("a number", value)});
          break;
        }
        const double got = *number;
        const bool above_min = field.min_exclusive ? got > field.min_num : got >= field.min_num;
        if (!(above_min && got <= field.max_num)) {
          // Bounds and value as written ("1000000", not "1e+06": a weight of 1000001 read
          // "at most 1000000 (got 1e+06)").
          auto bound = [](double x) {
            std::ostringstream out;
            if (std::floor(x) == x && std::fabs(x) < 1e15) {
              out << static_cast<long long>(x);
            } else {
              char digits[32];
              std::snprintf(digits, sizeof digits, "%.15g", x);
              out << digits;
            }
            return out.str();
          };
          std::ostringstream text;
          if (field.min_exclusive) {
            text << "must be above " << bound(field.min_num) << " and at most "
                 << bound(field.max_num) << " (got " << bound(got) << ")";
          } else {
            text << "must be between " << bound(field.min_num) << " and " << bound(field.max_num)
                 << " (got " << bound(got) << ")";
          }
          problems.push_back({at, text.str()});
          break;
        }
        field.set_num(element, got);
        break;
      }
      case field_type::boolean:
        if (const auto* b = value.as_boolean()) {
          field.set_num(element, b->get() ? 1.0 : 0.0);
        } else {
          problems.push_back({at, wrong_type("a boolean", value)});
        }
        break;
    }
  }
  return seen;
}

/// Reads one array element (`[[sources]]`, `[[models]]`, `[[scheduler.priorities]]`) through
/// its field table.
template <typename T>
T load_element(const std::vector<element_field<T>>& fields, const toml::node& node,
               const std::string& where, problem_list& problems) {
  T element;
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({where, wrong_type("a table", node)});
    return element;
  }
  auto seen = read_fields(fields, *table, element, where, problems);
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].required && !seen[i]) {
      problems.push_back(
        {where + "." + std::string{fields[i].key}, std::string{fields[i].missing_reason}});
    }
  }
  return element;
}

/// `PREFIX_<NAME>_<KEY>` variables over each element of `elements` (see
/// `apply_element_environment`).
template <typename T>
void element_environment(std::string_view prefix, std::vector<T>& elements,
                         const std::vector<element_field<T>>& fields, const env_lookup& env,
                         problem_list& problems) {
  for (auto& element : elements) {
    for (const auto& field : fields) {
      if (field.key == "name" || field.type == field_type::string_array) {
        continue; // The name picks the element; a list has no one-variable form.
      }
      const std::string name =
        std::string{prefix} + "_" + env_token(element.name) + "_" + env_token(field.key);
      auto value = env(name);
      if (!value) {
        continue;
      }
      toml::table one;
      const std::string key{field.key};
      if (field.type == field_type::string || field.type == field_type::string_list) {
        one.insert(key, *value);
      } else if (field.type == field_type::boolean) {
        if (*value == "true" || *value == "1") {
          one.insert(key, true);
        } else if (*value == "false" || *value == "0") {
          one.insert(key, false);
        } else {
          problems.push_back({name, "expected true or false, got " + quoted(*value)});
          continue;
        }
      } else {
        const char* first = value->c_str();
        const char* last = first + value->size();
        if (field.type == field_type::integer) {
          int64_t n = 0;
          auto [end, ec] = std::from_chars(first, last, n);
          if (value->empty() || end != last || ec != std::errc{}) {
            problems.push_back({name, "expected an integer, got " + quoted(*value)});
            continue;
          }
          one.insert(key, n);
        } else {
          const auto x = parse_env_number(*value);
          if (!x) {
            problems.push_back({name, "expected a number, got " + quoted(*value)});
            continue;
          }
          one.insert(key, *x);
        }
      }
      // The field's own checks; a problem names the variable.
      auto before = problems.size();
      read_fields(fields, one, element, name, problems);
      for (auto i = before; i < problems.size(); ++i) {
        problems[i].field = name;
      }
    }
  }
}

/// Reads `[[scheduler.priorities]]`; a present array replaces the default classes.
void load_priorities(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const std::string where = "scheduler.priorities";
  const auto* array = node.as_array();
  if (array == nullptr) {
    problems.push_back({where, wrong_type("an array of tables", node)});
    return;
  }
  std::vector<priority_class> classes;
  classes.reserve(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    // Broken elements still take their slot so later indices match the file.
    classes.push_back(load_element(priority_fields(), *array->get(i),
                                   where + "[" + std::to_string(i) + "]", problems));
  }
  cfg.scheduler.priorities = std::move(classes);
}

/// Reads one of the scalar sections (`[server]`, `[scheduler]`, `[cpu]`).
void load_section(std::string_view section, const toml::node& node, arbiter_config& cfg,
                  problem_list& problems) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({std::string(section), wrong_type("a table", node)});
    return;
  }
  for (const auto& [key, value] : *table) {
    const std::string path = std::string(section) + "." + key_name(key.str());
    if (const auto* field = find_field(path)) {
      load_scalar(*field, value, cfg, problems);
    } else if (path == "scheduler.priorities") {
      load_priorities(value, cfg, problems);
    } else {
      problems.push_back({path, "unknown field"});
    }
  }
}


/// Reads `[rewards.NAME]` tables.
void load_rewards(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({"rewards", wrong_type("a table", node)});
    return;
  }
  for (const auto& [key, value] : *table) {
    const std::string name(key.str());
    const std::string where = "rewards." + key_name(name);
    reward_config reward;
    reward.name = name;
    if (const auto* body = value.as_table()) {
      bool has_kind = false;
      for (const auto& [inner_key, inner] : *body) {
        const std::string_view k = inner_key.str();
        const std::string field = where + "." + key_name(k);
        if (k == "kind") {
          has_kind = true;
          if (const auto* text = inner.as_string()) {
            reward.kind = text->get();
          } else {
            problems.push_back({field, wrong_type("a string", inner)});
          }
        } else if (k == "fallback") {
          if (const auto* text = inner.as_string()) {
            reward.fallback = text->get();
          } else {
            problems.push_back({field, wrong_type("a string", inner)});
          }
        } else if (k == "sources") {
          read_string_list(inner, field, reward.sources, problems);
        } else if (k == "options") {
          if (const auto* options = inner.as_table()) {
            std::ostringstream json;
            json << toml::json_formatter{*options};
            reward.options = json.str();
          } else {
            problems.push_back({field, wrong_type("a table", inner)});
          }
        } else {
          problems.push_back({field, "unknown field"});
        }
      }
      if (!has_kind) {
        problems.push_back({where + ".kind", "missing required field"});
      }
    } else {
      problems.push_back({where, wrong_type("a table", value)});
    }
    // Kept even when broken, so data_sources naming it do not add a second complaint.
    cfg.rewards[name] = std::move(reward);
  }
}

/// Reads `[data_sources]`; a present table replaces the default map.
void load_data_sources(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    problems.push_back({"data_sources", wrong_type("a table", node)});
    return;
  }
  std::map<std::string, std::string> sources;
  for (const auto& [key, value] : *table) {
    const std::string prefix(key.str());
    if (const auto* text = value.as_string()) {
      sources[prefix] = text->get();
    } else {
      problems.push_back({"data_sources." + key_name(prefix), wrong_type("a string", value)});
    }
  }
  cfg.data_sources = std::move(sources);
}

/// Reads `[[sources]]`.
void load_sources(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* list = node.as_array();
  if (list == nullptr) {
    problems.push_back({"sources", wrong_type("an array of tables ([[sources]])", node)});
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    cfg.sources.push_back(load_element(source_fields(), *list->get(i),
                                       "sources[" + std::to_string(i) + "]", problems));
  }
}

void load_models(const toml::node& node, arbiter_config& cfg, problem_list& problems) {
  const auto* list = node.as_array();
  if (list == nullptr) {
    problems.push_back({"models", wrong_type("an array of tables ([[models]])", node)});
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    cfg.models.push_back(load_element(model_fields(), *list->get(i),
                                      "models[" + std::to_string(i) + "]", problems));
  }
}

/// Walks the parsed document over the defaults.
void load_root(const toml::table& root, arbiter_config& cfg, problem_list& problems) {
  for (const auto& [key, value] : root) {
    const std::string_view name = key.str();
    if (name == "server" || name == "scheduler" || name == "cpu" || name == "routing"
        || name == "protocols" || name == "cluster" || name == "replay") {
      load_section(name, value, cfg, problems);
    } else if (name == "rewards") {
      load_rewards(value, cfg, problems);
    } else if (name == "data_sources") {
      load_data_sources(value, cfg, problems);
    } else if (name == "sources") {
      load_sources(value, cfg, problems);
    } else if (name == "models") {
      load_models(value, cfg, problems);
    } else {
      problems.push_back({key_name(name), "unknown field"});
    }
  }
}


/// Runs `validate` after loading, dropping what it says about fields that already have a
/// problem (a missing name is not also an empty name).
void validate_after_load(const arbiter_config& cfg, size_t first_load_problem,
                         problem_list& problems) {
  problem_list cross;
  validate(cfg, cross);
  std::vector<std::string> reported;
  for (size_t i = first_load_problem; i < problems.size(); ++i) {
    reported.push_back(problems[i].field);
  }
  for (auto& problem : cross) {
    const bool duplicate =
        std::any_of(reported.begin(), reported.end(),
                    [&](const std::string& parent) { return covered_by(problem.field, parent); });
    if (!duplicate) {
      problems.push_back(std::move(problem));
    }
  }
}

}  // namespace

bool covered_by(const std::string& field, const std::string& parent) {
  if (field.compare(0, parent.size(), parent) != 0) {
    return false;
  }
  return field.size() == parent.size() || field[parent.size()] == '.' ||
         field[parent.size()] == '[';
}

arbiter_config embedded_default() {
  return arbiter_config{};
}

void validate_loaded(const arbiter_config& cfg, std::vector<config_problem>& problems) {
  validate_after_load(cfg, 0, problems);
}

arbiter_config load_string(const std::string& toml_text, const std::string& origin,
                           std::vector<config_problem>& problems, load_checks checks) {
  arbiter_config cfg = embedded_default();
  const size_t first = problems.size();
#if TOML_EXCEPTIONS
  try {
    const toml::table root = toml::parse(toml_text, origin);
    load_root(root, cfg, problems);
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    problems.push_back({origin + ":" + std::to_string(begin.line) + ":" +
                            std::to_string(begin.column),
                        std::string(error.description())});
    return cfg;
  }
#else
  const toml::parse_result result = toml::parse(toml_text, origin);
  if (!result) {
    const auto& error = result.error();
    const auto& begin = error.source().begin;
    problems.push_back({origin + ":" + std::to_string(begin.line) + ":" +
                            std::to_string(begin.column),
                        std::string(error.description())});
    return cfg;
  }
  load_root(result.table(), cfg, problems);
#endif
  if (checks == load_checks::all) {
    validate_after_load(cfg, first, problems);
  }
  return cfg;
}

arbiter_config load_file(const std::string& path, std::vector<config_problem>& problems,
                         load_checks checks) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    problems.push_back({path, std::string("cannot read file: ") + std::strerror(error)});
    return embedded_default();
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const size_t got = std::fread(buffer, 1, sizeof buffer, file);
    text.append(buffer, got);
    if (got < sizeof buffer) {
      break;
    }
  }
  const int error = errno;
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    problems.push_back({path, std::string("cannot read file: ") + std::strerror(error)});
    return embedded_default();
  }
  return load_string(text, path, problems, checks);
}

void detail::apply_element_environment(arbiter_config& cfg, const env_lookup& env,
                                       problem_list& problems) {
  element_environment("ARBITER_SOURCES", cfg.sources, source_fields(), env, problems);
  element_environment("ARBITER_MODELS", cfg.models, model_fields(), env, problems);
  element_environment("ARBITER_SCHEDULER_PRIORITIES", cfg.scheduler.priorities,
                      priority_fields(), env, problems);
}

} // namespace arbiter::config
