#pragma once
// Internal to config/: the field tables (the scalar sections and the array elements) and the
// helpers that loading (load.cpp), the environment (environment.cpp) and validation
// (validate.cpp) share. config/config.hpp is the library's interface; nothing outside config/
// (and its tests) includes this file.

#include <cstdint>
#include <functional>
#include <optional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace arbiter::config::detail {

using problem_list = std::vector<config_problem>;

/// Longest duration any `_ms` field accepts (about 24.8 days). Keeps every duration well inside
/// what the rest of the service converts it to (nanosecond clocks, 32-bit timer arguments).
constexpr int64_t max_duration_ms = std::numeric_limits<int32_t>::max();
constexpr int64_t max_u32 = std::numeric_limits<uint32_t>::max();
constexpr int64_t max_i64 = std::numeric_limits<int64_t>::max();

/// The TOML type a scalar field takes.
enum class field_type : uint8_t {
  string,
  integer,
  /// A float (an integer is accepted too); bounds are `min_num`/`max_num`.
  number,
  /// true or false (environment: true, false, 1, 0).
  boolean,
  /// A string of comma-separated entries; TOML also takes an array of strings (joined with
  /// commas, so no entry may hold one).
  string_list,
  /// An array of strings (array elements' fields only, e.g. `sources[].capabilities`).
  string_array,
};

/// One scalar configuration field: where it lives in TOML, what it accepts, how to read and
/// write it in `arbiter_config`. `load_*`, `apply_environment`, `validate` and
/// `environment_variables` all walk the same table, so they cannot disagree.
struct field_descriptor {
  /// Dotted TOML path, e.g. "server.port". The environment variable is derived from it.
  std::string_view path;
  field_type type;
  /// Integer fields: inclusive bounds. String fields: `min` is the shortest length accepted.
  int64_t min;
  int64_t max;
  int64_t (*get_int)(const arbiter_config&);
  void (*set_int)(arbiter_config&, int64_t);
  const std::string& (*get_str)(const arbiter_config&);
  void (*set_str)(arbiter_config&, std::string);
  /// One-line description (docs/configuration.md says the same at more length).
  std::string_view doc;
  /// Number and boolean fields (a boolean is 0 or 1).
  double (*get_num)(const arbiter_config&) = nullptr;
  void (*set_num)(arbiter_config&, double) = nullptr;
  double min_num = 0.0;
  double max_num = 0.0;
};

/// Every scalar field, in documentation order (fields.cpp).
const std::vector<field_descriptor>& scalar_fields();

/// One field of an `[[sources]]` or `[[models]]` element: its key, its TOML type and bounds,
/// and how it is set on the element. The loader (load.cpp) and the docs test walk these
/// tables, so a new key is one row. Integers: `min`..`max`; numbers: `min_num`..`max_num`;
/// booleans are set as 0 or 1 through `set_num`; `string_array` entries one by one through
/// `set_str`. A `required` field missing from an element is a problem of its own.
template <typename T>
struct element_field {
  std::string_view key;
  field_type type;
  int64_t min = 0;
  int64_t max = 0;
  double min_num = 0.0;
  double max_num = 0.0;
  void (*set_int)(T&, int64_t) = nullptr;
  void (*set_num)(T&, double) = nullptr;
  void (*set_str)(T&, std::string) = nullptr;
  bool required = false;
  /// What a missing `required` field is called.
  std::string_view missing_reason = "required";
  /// Numbers: `min_num` itself is refused ("must be above MIN and at most MAX").
  bool min_exclusive = false;
  /// Strings: why a value is refused (empty: accepted), checked before `set_str`.
  std::string (*check_str)(const std::string&) = nullptr;
};

/// The fields of a `[[sources]]` element, in documentation order (fields.cpp).
const std::vector<element_field<source_config>>& source_fields();

/// The fields of a `[[models]]` element, in documentation order (fields.cpp).
const std::vector<element_field<model_config>>& model_fields();

/// The fields of a `[[scheduler.priorities]]` element (fields.cpp).
const std::vector<element_field<priority_class>>& priority_fields();

/// Looks up an environment variable.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;

/// The array elements' variables: `ARBITER_SOURCES_<NAME>_<KEY>`, `ARBITER_MODELS_<NAME>_<KEY>`
/// and `ARBITER_SCHEDULER_PRIORITIES_<NAME>_<KEY>` (NAME and KEY upper-cased, anything but a
/// letter or digit as `_`) set that field of the element so named, checked as the TOML value
/// is. The name and list fields (`capabilities`) have no variable. A problem names the
/// variable (load.cpp).
void apply_element_environment(arbiter_config& cfg, const env_lookup& env,
                               problem_list& problems);

/// "server.read_timeout_ms" -> "ARBITER_SERVER_READ_TIMEOUT_MS".
std::string env_name(std::string_view path);

/// "fake-a.v2" -> "FAKE_A_V2": an element's name as it stands in a variable name.
std::string env_token(std::string_view text);

/// The scalar field at the dotted `path`, or nullptr.
const field_descriptor* find_field(std::string_view path);

/// A TOML key as a problem names it: the empty key `"" = 1` is written `""`, so no problem's
/// field is ever empty or ends in a bare dot.
std::string key_name(std::string_view key);

/// `text` in double quotes, for problem reasons.
std::string quoted(std::string_view text);

/// "must be between MIN and MAX (got GOT)", or "must be at least MIN" when MAX is unbounded.
std::string range_reason(int64_t min, int64_t max, std::string_view got);

/// An environment variable's number: the whole text, with no blank around it (strtod would
/// skip leading ones). Nullopt when it is not one.
std::optional<double> parse_env_number(const std::string& text);

/// `items` joined with ", ".
std::string join(const std::vector<std::string>& items);

/// Checks `value` against an integer field's bounds; sets it when it fits.
void set_int_checked(const field_descriptor& field, int64_t value, const std::string& where,
                     arbiter_config& cfg, problem_list& problems);

/// Checks `value` against a number field's bounds; sets it when it fits.
void set_num_checked(const field_descriptor& field, double value, const std::string& where,
                     arbiter_config& cfg, problem_list& problems);

/// Checks `value` against a string field's minimum length; sets it when it fits.
void set_str_checked(const field_descriptor& field, std::string value, const std::string& where,
                     arbiter_config& cfg, problem_list& problems);

} // namespace arbiter::config::detail
