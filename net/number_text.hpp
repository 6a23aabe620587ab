#pragma once

// Numbers given where Arbiter takes text (a `ground_truth`, a trainer's label), turned into the
// text Python's `str(json.loads(token))` gives, so that a label scores the same through
// Arbiter as in the trainer's own Python reward code.

#include <optional>
#include <string>
#include <string_view>

namespace arbiter::net {

/// `str(json.loads(token))` for a JSON number `token`. Python reads a token without a
/// fraction or exponent as an int and any other as a float, so: an int token gives its digits
/// exactly, whatever their number ("-0" gives "0"); a float token gives Python's `repr` of the
/// nearest double: the shortest digits that read back to it, in positional notation with at
/// least one digit after the point ("100.0", "0.0001") while the decimal exponent is within
/// [-4, 16), else in scientific notation with a signed exponent of at least two digits ("1e+16",
/// "1e-05", "1.5e+300"); beyond the double range "inf" or "-inf", below it "0.0" or "-0.0".
/// nullopt when `token` is not a JSON number (surrounding whitespace included).
std::optional<std::string> python_number_text(std::string_view token);

/// Python's `repr(value)` for a double (see above; "nan" for NaN).
std::string python_float_repr(double value);

} // namespace arbiter::net
