#pragma once

#include <string>
#include <string_view>

namespace arbiter::backends::cpu {

/// SQuAD's `normalize_answer`, as in the official evaluation script: lower-case, remove ASCII
/// punctuation (`string.punctuation`), remove the articles a/an/the (as `\b(a|an|the)\b` does
/// on Python `str`), collapse whitespace (`" ".join(s.split())`). UTF-8 in, UTF-8 out.
std::string normalize_answer(std::string_view text);

/// 1.0 when the normalized texts are equal, else 0.0.
double exact_match(std::string_view prediction, std::string_view reference);

} // namespace arbiter::backends::cpu
