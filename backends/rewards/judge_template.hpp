#pragma once

// The judge reward's prompt: named templates, custom template strings, and their rendering.

#include <optional>
#include <string>
#include <string_view>

namespace arbiter::backends::rewards {

/// The built-in template called `name` ("default" or "detailed"), or nullopt.
std::optional<std::string_view> named_judge_template(std::string_view name);

/// The template an item asks for with its `prompt_template` option: a built-in name, or
/// (anything else that contains at least one of the placeholders) a custom template string.
/// Throws std::invalid_argument naming the problem for a string that is neither (e.g. a
/// misspelt name: "detialed").
std::string resolve_judge_template(std::string_view prompt_template);

/// Whether a (resolved) template shows the judge a reference: `{REFERENCE_SOLUTION}`.
bool uses_reference(std::string_view resolved_template);

/// `tmpl` with every {PROBLEM}, {REFERENCE_SOLUTION} and {CANDIDATE_SOLUTION} replaced by the
/// trimmed (Python `str.strip()`) values, in one left-to-right pass: text inside the values is
/// never substituted again, and other braces are left as they are.
std::string render_judge_prompt(std::string_view tmpl, std::string_view problem,
                                std::string_view reference, std::string_view candidate);

} // namespace arbiter::backends::rewards
