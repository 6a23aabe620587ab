#pragma once

// The embedding reward's arithmetic, with the seeds' semantics (verl `embedding_remote`):
// cosine mapped to [0, 1], the length penalties and the reference filters. Pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace arbiter::backends::rewards {

/// How a candidate whose length (in whitespace-separated words) differs from its reference's
/// is penalized. Formulas in docs/rewards.md.
enum class length_penalty_kind : uint8_t { none, ratio, sqrt, log, quadratic, exponential };

/// The kind called `name` ("none", "ratio", "sqrt", "log", "quadratic", "exponential"; exact
/// spelling), or nullopt.
std::optional<length_penalty_kind> parse_length_penalty(std::string_view name);

const char* to_string(length_penalty_kind kind) noexcept;

/// The seeds' default `length_threshold`.
inline constexpr double default_length_threshold = 1.5;

/// The penalty factor in [0, 1] (1 = no penalty) for `candidate` against `reference`, with the
/// seeds' semantics: word counts r and c (Python `str.split()`, see `python_split`); kind none
/// → 1; no penalty while 1/threshold <= c/r <= threshold; otherwise with
/// ratio = min(c/r, r/c): ratio → ratio, sqrt → ratio^0.5, log → ln(1+min(r,c)) /
/// ln(1+max(r,c)), quadratic → ratio², exponential → e^−(1−ratio); each capped at 1. Where the
/// seeds divide by zero: both empty → 1 for every kind; one empty → ratio 0 (log: 0;
/// exponential: e^−1).
double length_penalty(std::string_view reference, std::string_view candidate,
                      length_penalty_kind kind, double threshold);

/// Cosine similarity mapped from [−1, 1] to [0, 1]: (cosine + 1) / 2, as the seeds report it.
double cosine_to_unit(double cosine) noexcept;

/// The references an item is scored against, filtered by its options as the seeds do:
/// 1. `target_gt`: a string keeps the references equal to it; a list keeps the references
///    equal to one of its strings; any other type is no filter.
/// 2. When step 1 returned nothing: if `filter_gt_by_prompt_token` is truthy (as Python sees
///    it: true, a non-zero number, a non-empty string, array or object) and `prompt` is
///    present, the prompt's text is a string's own text, a number's JSON text, "True",
///    "False" or "None" for true, false and null (Python's `str()`); arrays and objects are no
///    filter (their Python `str()` differs from JSON). If that text, stripped, is not empty:
///    keep the references whose words (the [A-Za-z0-9]+ runs of the lower-cased reference)
///    include the text's last whitespace-separated word, lower-cased.
/// A filter that keeps nothing is ignored (the next one runs, then all references are kept).
/// `options` that is not an object filters nothing. Lower-casing here is ASCII only (Python
/// also maps a few non-ASCII letters, e.g. U+212A KELVIN SIGN, to ASCII ones). Returns indices
/// into `references`, ascending.
std::vector<size_t> filter_references(const std::vector<std::string>& references,
                                      const nlohmann::json& options);

// ---- Python string semantics, shared by the reward ports ----------------------------------
// Whitespace is Python's `str.isspace()` (also what `re`'s \s matches on `str`): U+0009–U+000D,
// U+001C–U+001F, U+0020, U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F,
// U+205F and U+3000. Text is UTF-8; nothing is decoded beyond recognizing these.

/// The length in bytes of the whitespace character that starts at `text[pos]`, or 0 when
/// none does (or `pos` is past the end).
size_t python_space_at(std::string_view text, size_t pos) noexcept;

/// Python's `str.split()` with no separator: the runs of non-whitespace, in order. The views
/// point into `text`.
std::vector<std::string_view> python_split(std::string_view text);

/// Python's `str.strip()` with no argument. The view points into `text`.
std::string_view python_strip(std::string_view text) noexcept;

/// `text` with ASCII letters lower-cased (other bytes as they are).
std::string ascii_lower(std::string_view text);

} // namespace arbiter::backends::rewards
