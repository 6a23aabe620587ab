#pragma once

// What a provider says goes no further than it must: its error text reaches item errors, logs
// and `/info`, so it is cut short and anything that looks like a credential is blanked first
// (an upstream that echoes the API key in its 401 body must not hand it to our clients).

#include <string>
#include <string_view>

namespace arbiter::backends::remote {

/// The text that stands in for a blanked credential.
inline constexpr std::string_view redacted = "[redacted]";

/// `text` with credential-like spans replaced by `[redacted]`: every occurrence of
/// `known_secret` (the source's own key, when not empty); `sk-`/`pk-`/`rk-` keys; the token
/// after `Bearer` or `Basic`; the value after `api_key`, `token`, `secret`, `password`,
/// `authorization` and their spellings (`apiKey`, `access_token`, `x-api-key`, ...) with `:`
/// or `=`; AWS access key ids; JSON Web Tokens; and any run of 32 or more token characters
/// (letters, digits, `-_+/=.`) that mixes letters and digits.
std::string redact_secrets(std::string_view text, std::string_view known_secret = {});

/// `redact_secrets(text)` cut to at most `max_bytes` on a UTF-8 boundary, "..." added when cut.
/// Redacts before cutting, so a key is never left half-shown at the cut.
std::string redacted_excerpt(std::string_view text, size_t max_bytes,
                             std::string_view known_secret = {});

} // namespace arbiter::backends::remote
