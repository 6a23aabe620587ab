// What an error body says: the message of the JSON shapes providers use (OpenAI's
// `error.message`, `message`, FastAPI's `detail`), else the body's printable opening; cut
// short and with anything that looks like a credential redacted (remote_codec.hpp).
#include "backends/remote/remote_codec.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/remote/codec_text.hpp"
#include "backends/remote/redaction.hpp"

namespace arbiter::backends::remote {
namespace {

using json = nlohmann::json;
using namespace detail;

/// How much of a non-JSON error body `error_message` keeps.
constexpr size_t error_body_bytes = 160;
/// How long a message taken from an error body's JSON may be.
constexpr size_t error_message_bytes = 200;
/// How much of a body is looked at (for credentials) before an excerpt is cut from it.
constexpr size_t scanned_body_bytes = 8192;

/// The message of an error body's JSON, or empty when it has none of the known shapes.
std::string message_of(const json& doc) {
  if (!doc.is_object()) {
    return {};
  }
  if (auto error = doc.find("error"); error != doc.end()) {
    if (error->is_string()) {
      return error->get<std::string>();
    }
    if (error->is_object()) {
      auto message = error->find("message");
      if (message != error->end() && message->is_string()) {
        return message->get<std::string>();
      }
    }
  }
  if (auto message = doc.find("message"); message != doc.end() && message->is_string()) {
    return message->get<std::string>();
  }
  auto detail = doc.find("detail");
  if (detail == doc.end()) {
    return {};
  }
  if (detail->is_string()) {
    return detail->get<std::string>();
  }
  if (!detail->is_array()) {
    return {};
  }
  std::string out;
  for (const auto& entry : *detail) {
    std::string part;
    if (entry.is_string()) {
      part = entry.get<std::string>();
    } else if (entry.is_object()) {
      auto msg = entry.find("msg");
      if (msg == entry.end() || !msg->is_string()) {
        continue;
      }
      auto loc = entry.find("loc");
      if (loc != entry.end() && loc->is_array() && !loc->empty()) {
        for (const auto& step : *loc) {
          if (!part.empty()) {
            part += '.';
          }
          part += step.is_string() ? step.get<std::string>() : dump(step);
        }
        part += ": ";
      }
      part += msg->get<std::string>();
    }
    if (!part.empty()) {
      out += out.empty() ? part : "; " + part;
    }
  }
  return out;
}

} // namespace

std::string error_message(std::string_view body, std::string_view known_secret) noexcept {
  try {
    auto first = std::find_if(body.begin(), body.end(), [](char c) { return !is_ascii_space(c); });
    if (first == body.end()) {
      return "(empty body)";
    }
    auto doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded()) {
      auto message = message_of(doc);
      if (!message.empty()) {
        return redacted_excerpt(message, error_message_bytes, known_secret);
      }
    }
    return redacted_excerpt(printable_prefix(body, scanned_body_bytes), error_body_bytes,
                            known_secret);
  } catch (...) {
    return {};
  }
}

} // namespace arbiter::backends::remote
