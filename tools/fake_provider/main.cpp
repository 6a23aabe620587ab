/// arbiter-fake-provider: an HTTP server that stands in for remote model APIs (OpenAI chat,
/// completions and embeddings; TEI embed and predict; an info-gain service) in tests,
/// benchmarks and demos. Replies are deterministic functions of the request (rules.hpp);
/// rate limits, latency, faults and outages are configured by flags. See README.md.

#include <utility>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "tools/fake_provider/rules.hpp"

namespace arbiter::fake_provider {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ondemand = simdjson::ondemand;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;

/// A scheduled window, in seconds after start, during which every API request gets 503.
struct outage_window {
  double start_s = 0;
  double end_s = 0;
};

struct options {
  std::string host = "127.0.0.1";
  unsigned short port = 0;
  std::uint64_t seed = 1;
  unsigned threads = 1;
  double rpm = 0;
  double tpm = 0;
  /// Seconds of the per-minute limit a bucket holds (60 = a full minute, OpenAI's default).
  double burst_seconds = 60;
  std::string model = "fake-model";
  std::size_t max_concurrency = 0;
  double latency_median_ms = 0;
  double latency_p99_ms = 0;
  double latency_per_token_ms = 0;
  double error_rate_500 = 0;
  double error_rate_503 = 0;
  double error_rate_timeout = 0;
  double error_rate_reset = 0;
  double error_rate_malformed = 0;
  std::size_t embedding_dim = 64;
  std::vector<outage_window> outages;
  /// When set, API requests must carry `Authorization: Bearer KEY`, else 401.
  std::string api_key;
  /// The 401's message quotes the Authorization header it got (some providers echo the key).
  bool echo_key = false;
  /// Most choices a chat or completions reply holds per prompt, whatever `n` asks (0 = no cap),
  /// like servers that ignore or cap `n`.
  std::size_t max_n = 0;
  /// TEI's longest input for /embed and /predict, in words (0 = no cap): a longer input is a 413
  /// unless the body asks `truncate: true`, which cuts it to that many words first.
  std::size_t max_input_tokens = 0;
  /// TEI's --max-client-batch-size: most inputs of one /embed, /predict or /v1/embeddings call
  /// (0 = no cap); more is a 413.
  std::size_t max_batch_size = 0;
};

/// Continuous-refill token bucket: it refills at `per_minute` / 60 per second and holds at
/// most `per_minute` * `burst_seconds` / 60 (at least `min_capacity`), starting full. Not
/// thread-safe: the provider holds its mutex around every call.
class token_bucket {
public:
  token_bucket(double per_minute, double burst_seconds, double min_capacity,
               steady::time_point now)
    : per_minute_(per_minute),
      capacity_(std::max(min_capacity, per_minute * burst_seconds / 60.0)),
      tokens_(capacity_),
      per_ms_(per_minute / 60000.0),
      last_(now) {
  }

  void refill(steady::time_point now) {
    auto elapsed = std::chrono::duration<double, std::milli>(now - last_).count();
    tokens_ = std::min(capacity_, tokens_ + elapsed * per_ms_);
    last_ = now;
  }

  [[nodiscard]] bool can_take(double n) const { return tokens_ >= n; }

  void take(double n) { tokens_ -= n; }

  /// How long until `n` tokens are available (a full minute when `n` exceeds capacity).
  [[nodiscard]] std::chrono::milliseconds time_until(double n) const {
    if (n > capacity_) {
      return std::chrono::milliseconds{60000};
    }
    return std::chrono::milliseconds{
      static_cast<long long>(std::ceil(std::max(0.0, n - tokens_) / per_ms_))};
  }

  /// How long until the bucket is full again.
  [[nodiscard]] std::chrono::milliseconds reset_after() const {
    return std::chrono::milliseconds{
      static_cast<long long>(std::ceil((capacity_ - tokens_) / per_ms_))};
  }

  [[nodiscard]] long long remaining() const {
    return static_cast<long long>(std::floor(std::max(0.0, tokens_)));
  }

  /// The per-minute limit (what x-ratelimit-limit-* report), not the bucket's capacity.
  [[nodiscard]] long long limit() const { return static_cast<long long>(per_minute_); }

private:
  double per_minute_;
  double capacity_;
  double tokens_;
  double per_ms_;
  steady::time_point last_;
};

/// What a connection does with one request.
enum class action_kind { respond, hang, reset };

struct reply {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

struct action {
  action_kind kind = action_kind::respond;
  reply response;
  std::chrono::milliseconds delay{0};
  /// Endpoint label for /stats; empty for requests that are not counted.
  std::string endpoint;
  /// Status label for /stats ("200", "429", "timeout", "reset").
  std::string outcome;
  /// True when the request holds a concurrency slot until `complete()`.
  bool holds_slot = false;
  /// The token counts the answer's `usage` reports (0 for failures), for /stats.
  std::size_t prompt_tokens = 0;
  std::size_t completion_tokens = 0;
};

/// A 400 raised while decoding a request body.
struct bad_request {
  std::string message;
  std::string param;
};

/// Decoded request fields the endpoints need; the tokens count is for the TPM limit.
struct decoded {
  std::string model;
  std::string prompt_text;                // judge / completion source text
  std::vector<std::string> inputs;        // prompts, embedding inputs
  bool inputs_is_list = false;
  std::vector<std::pair<std::string, std::string>> pairs;  // NLI
  bool pairs_is_list = true;
  json info_items = json::array();        // decoded /compute_info_gain items
  std::vector<std::string> stop;          // chat/completions stop sequences (non-empty ones)
  bool truncate = false;                  // /embed, /predict: cut inputs past the cap
  std::size_t n = 1;
  std::optional<std::uint64_t> seed;      // completions: changes the sampled words
  std::size_t max_tokens = 16;
  bool max_tokens_set = false;
  bool logprobs = false;
  std::size_t dimensions = 0;
  double prompt_words = 0;
};

namespace {

json error_body(const std::string& message, const std::string& type, const std::string& code,
                const std::string& param = {}) {
  json err{{"message", message}, {"type", type}, {"code", code}};
  err["param"] = param.empty() ? json(nullptr) : json(param);
  return json{{"error", err}};
}

reply json_reply(unsigned status, const json& body) {
  reply r;
  r.status = status;
  r.body = body.dump();
  return r;
}

std::string need_string(ondemand::value value, const std::string& field) {
  std::string_view view;
  if (value.get_string().get(view)) {
    throw bad_request{field + ": expected a string", field};
  }
  return std::string{view};
}

double need_number(ondemand::value value, const std::string& field) {
  double d = 0;
  if (value.get_double().get(d)) {
    throw bad_request{field + ": expected a number", field};
  }
  return d;
}

/// A string, or a list of strings (`is_list` tells which).
std::vector<std::string> need_strings(ondemand::value value, const std::string& field,
                                      bool& is_list) {
  ondemand::json_type type;
  if (value.type().get(type)) {
    throw bad_request{field + ": malformed value", field};
  }
  if (type == ondemand::json_type::string) {
    is_list = false;
    return {need_string(value, field)};
  }
  if (type != ondemand::json_type::array) {
    throw bad_request{field + ": expected a string or a list of strings", field};
  }
  is_list = true;
  std::vector<std::string> out;
  ondemand::array items;
  if (value.get_array().get(items)) {
    throw bad_request{field + ": malformed list", field};
  }
  for (auto item : items) {
    ondemand::value v;
    auto sub = field + "[" + std::to_string(out.size()) + "]";
    if (item.get(v)) {
      throw bad_request{sub + ": malformed value", sub};
    }
    out.push_back(need_string(v, sub));
  }
  if (out.empty()) {
    throw bad_request{field + ": must not be empty", field};
  }
  return out;
}

/// Text of a chat message's content: a string, null, or a list of {"type":"text","text"}.
std::string content_text(ondemand::value value, const std::string& field) {
  ondemand::json_type type;
  if (value.type().get(type)) {
    throw bad_request{field + ": malformed value", field};
  }
  if (type == ondemand::json_type::null) {
    return {};
  }
  if (type == ondemand::json_type::string) {
    return need_string(value, field);
  }
  if (type != ondemand::json_type::array) {
    throw bad_request{field + ": expected a string or a list of parts", field};
  }
  std::string out;
  ondemand::array parts;
  if (value.get_array().get(parts)) {
    throw bad_request{field + ": malformed list", field};
  }
  for (auto part : parts) {
    ondemand::object obj;
    if (part.get_object().get(obj)) {
      throw bad_request{field + ": expected content parts to be objects", field};
    }
    for (auto f : obj) {
      std::string_view key;
      ondemand::value v;
      if (f.unescaped_key().get(key) || f.value().get(v)) {
        throw bad_request{field + ": malformed part", field};
      }
      if (key == "text") {
        if (!out.empty()) {
          out += "\n";
        }
        out += need_string(v, field + ".text");
      }
    }
  }
  return out;
}

void read_pair(ondemand::value value, const std::string& field,
               std::vector<std::pair<std::string, std::string>>& out) {
  bool is_list = false;
  auto texts = need_strings(value, field, is_list);
  if (!is_list || texts.size() != 2) {
    throw bad_request{field + ": expected a [premise, hypothesis] pair", field};
  }
  out.emplace_back(texts[0], texts[1]);
}

/// Decodes one /compute_info_gain item into {"question","context","answers"} or an error.
json read_info_item(ondemand::value value, const std::string& field) {
  ondemand::object obj;
  if (value.get_object().get(obj)) {
    return json{{"error", field + ": expected an object"}};
  }
  json item = json::object();
  for (auto f : obj) {
    std::string_view key;
    ondemand::value v;
    if (f.unescaped_key().get(key) || f.value().get(v)) {
      throw bad_request{field + ": malformed field", field};
    }
    try {
      if (key == "question" || key == "context") {
        item[std::string{key}] = need_string(v, field + "." + std::string{key});
      } else if (key == "answers") {
        bool is_list = false;
        item["answers"] = need_strings(v, field + ".answers", is_list);
      }
    } catch (const bad_request& e) {
      item["error"] = e.message;
    }
  }
  if (!item.contains("error")) {
    for (const char* required : {"question", "context", "answers"}) {
      if (!item.contains(required)) {
        item["error"] = field + ": missing field '" + required + "'";
        break;
      }
    }
  }
  return item;
}

/// Stop sequences: null, a string or a list of strings. Empty strings are dropped (they
/// would match before the first character).
std::vector<std::string> read_stop(ondemand::value value) {
  ondemand::json_type type;
  if (value.type().get(type)) {
    throw bad_request{"stop: malformed value", "stop"};
  }
  std::vector<std::string> out;
  if (type == ondemand::json_type::null) {
    return out;
  }
  if (type == ondemand::json_type::string) {
    out.push_back(need_string(value, "stop"));
  } else if (type == ondemand::json_type::array) {
    ondemand::array items;
    if (value.get_array().get(items)) {
      throw bad_request{"stop: malformed list", "stop"};
    }
    std::size_t i = 0;
    for (auto item : items) {
      auto sub = "stop[" + std::to_string(i++) + "]";
      ondemand::value v;
      if (item.get(v)) {
        throw bad_request{sub + ": malformed value", sub};
      }
      out.push_back(need_string(v, sub));
    }
  } else {
    throw bad_request{"stop: expected a string or a list of strings", "stop"};
  }
  out.erase(std::remove(out.begin(), out.end(), std::string{}), out.end());
  return out;
}

/// Cuts `text` before the first occurrence of any of `stop`; true when it cut.
bool apply_stop(std::string& text, const std::vector<std::string>& stop) {
  auto cut = std::string::npos;
  for (const auto& s : stop) {
    cut = std::min(cut, text.find(s));
  }
  if (cut == std::string::npos) {
    return false;
  }
  text.resize(cut);
  return true;
}

/// Decodes the body of an API endpoint; throws `bad_request`. `model` is the reply's model
/// when the request names none.
decoded decode(const std::string& endpoint, const std::string& body, const std::string& model) {
  decoded d;
  d.model = model;
  simdjson::padded_string padded{body};
  ondemand::parser parser;
  ondemand::document doc;
  if (parser.iterate(padded).get(doc)) {
    throw bad_request{"request body is not valid JSON", ""};
  }
  ondemand::object root;
  if (doc.get_object().get(root)) {
    throw bad_request{"request body must be a JSON object", ""};
  }
  bool has_messages = false;
  bool has_prompt = false;
  bool has_input = false;
  bool has_items = false;
  for (auto field : root) {
    std::string_view key_view;
    ondemand::value value;
    if (field.unescaped_key().get(key_view) || field.value().get(value)) {
      throw bad_request{"request body is not valid JSON", ""};
    }
    std::string key{key_view};
    if (key == "model") {
      d.model = need_string(value, key);
    } else if (key == "n") {
      auto n = need_number(value, key);
      if (n < 1 || n > 128) {
        throw bad_request{"n: must be between 1 and 128", key};
      }
      d.n = static_cast<std::size_t>(n);
    } else if (key == "seed"
               && (endpoint == "/v1/chat/completions" || endpoint == "/v1/completions")) {
      ondemand::json_type type;
      if (!value.type().get(type) && type == ondemand::json_type::null) {
        continue;
      }
      // A signed 64-bit integer, as OpenAI's and vLLM's seed is: past 2^63 - 1 is refused.
      std::int64_t seed = 0;
      if (value.get_int64().get(seed)) {
        throw bad_request{"seed: expected an integer from -2^63 to 2^63 - 1", key};
      }
      d.seed = static_cast<std::uint64_t>(seed);
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      ondemand::json_type type;
      if (!value.type().get(type) && type == ondemand::json_type::null) {
        continue;
      }
      auto m = need_number(value, key);
      if (m < 0 || m > 100000) {
        throw bad_request{key + ": must be between 0 and 100000", key};
      }
      d.max_tokens = static_cast<std::size_t>(m);
      d.max_tokens_set = true;
    } else if (key == "logprobs") {
      ondemand::json_type type;
      if (value.type().get(type)) {
        throw bad_request{"logprobs: malformed value", key};
      }
      if (type == ondemand::json_type::boolean) {
        bool b = false;
        if (value.get_bool().get(b)) {
          throw bad_request{"logprobs: malformed value", key};
        }
        d.logprobs = b;
      } else if (type == ondemand::json_type::number) {
        d.logprobs = true;  // legacy completions: logprobs = k
      } else if (type != ondemand::json_type::null) {
        throw bad_request{"logprobs: expected a boolean or a number", key};
      }
    } else if (key == "stop"
               && (endpoint == "/v1/chat/completions" || endpoint == "/v1/completions")) {
      d.stop = read_stop(value);
    } else if (key == "truncate" && (endpoint == "/embed" || endpoint == "/predict")) {
      bool flag = false;
      if (value.get_bool().get(flag)) {
        throw bad_request{"truncate: expected a boolean", key};
      }
      d.truncate = flag;
    } else if (key == "dimensions") {
      auto dim = need_number(value, key);
      if (dim < 1 || dim > 4096) {
        throw bad_request{"dimensions: must be between 1 and 4096", key};
      }
      d.dimensions = static_cast<std::size_t>(dim);
    } else if (key == "messages" && endpoint == "/v1/chat/completions") {
      has_messages = true;
      ondemand::array messages;
      if (value.get_array().get(messages)) {
        throw bad_request{"messages: expected a list", key};
      }
      std::size_t i = 0;
      std::size_t count = 0;
      for (auto m : messages) {
        auto sub = "messages[" + std::to_string(i++) + "]";
        ondemand::object msg;
        if (m.get_object().get(msg)) {
          throw bad_request{sub + ": expected an object", sub};
        }
        std::string role;
        std::string text;
        bool has_content = false;
        for (auto f : msg) {
          std::string_view k;
          ondemand::value v;
          if (f.unescaped_key().get(k) || f.value().get(v)) {
            throw bad_request{sub + ": malformed field", sub};
          }
          if (k == "role") {
            role = need_string(v, sub + ".role");
          } else if (k == "content") {
            has_content = true;
            text = content_text(v, sub + ".content");
          }
        }
        if (role.empty()) {
          throw bad_request{sub + ": missing field 'role'", sub + ".role"};
        }
        if (!has_content) {
          throw bad_request{sub + ": missing field 'content'", sub + ".content"};
        }
        d.prompt_words += static_cast<double>(count_words(text));
        if (role == "user") {
          d.prompt_text = text;
        }
        ++count;
      }
      if (count == 0) {
        throw bad_request{"messages: must not be empty", key};
      }
    } else if (key == "prompt" && endpoint == "/v1/completions") {
      has_prompt = true;
      d.inputs = need_strings(value, key, d.inputs_is_list);
    } else if ((key == "input" && endpoint == "/v1/embeddings")
               || (key == "inputs" && endpoint == "/embed")) {
      has_input = true;
      d.inputs = need_strings(value, key, d.inputs_is_list);
    } else if (key == "inputs" && endpoint == "/predict") {
      has_input = true;
      ondemand::array items;
      if (value.get_array().get(items)) {
        throw bad_request{"inputs: expected a pair or a list of pairs", key};
      }
      std::vector<std::string> flat;
      std::size_t i = 0;
      for (auto item : items) {
        auto sub = "inputs[" + std::to_string(i++) + "]";
        ondemand::value v;
        ondemand::json_type type;
        if (item.get(v) || v.type().get(type)) {
          throw bad_request{sub + ": malformed value", sub};
        }
        if (type == ondemand::json_type::string) {
          d.pairs_is_list = false;
          flat.push_back(need_string(v, sub));
        } else {
          read_pair(v, sub, d.pairs);
        }
      }
      if (!d.pairs_is_list) {
        if (flat.size() != 2 || !d.pairs.empty()) {
          throw bad_request{"inputs: expected a [premise, hypothesis] pair", key};
        }
        d.pairs.emplace_back(flat[0], flat[1]);
      }
      if (d.pairs.empty()) {
        throw bad_request{"inputs: must not be empty", key};
      }
    } else if (key == "items" && endpoint == "/compute_info_gain") {
      has_items = true;
      ondemand::array items;
      if (value.get_array().get(items)) {
        throw bad_request{"items: expected a list", key};
      }
      std::size_t i = 0;
      for (auto item : items) {
        auto sub = "items[" + std::to_string(i++) + "]";
        ondemand::value v;
        if (item.get(v)) {
          throw bad_request{sub + ": malformed value", sub};
        }
        d.info_items.push_back(read_info_item(v, sub));
      }
    }
  }
  if (const char* trailing = nullptr; !doc.current_location().get(trailing)) {
    throw bad_request{"trailing content after the JSON object", ""};
  }
  if (endpoint == "/v1/chat/completions" && !has_messages) {
    throw bad_request{"missing required field 'messages'", "messages"};
  }
  if (endpoint == "/v1/completions" && !has_prompt) {
    throw bad_request{"missing required field 'prompt'", "prompt"};
  }
  if (endpoint == "/v1/embeddings" && !has_input) {
    throw bad_request{"missing required field 'input'", "input"};
  }
  if ((endpoint == "/embed" || endpoint == "/predict") && !has_input) {
    throw bad_request{"missing required field 'inputs'", "inputs"};
  }
  if (endpoint == "/compute_info_gain" && !has_items) {
    throw bad_request{"missing required field 'items'", "items"};
  }
  for (const auto& text : d.inputs) {
    d.prompt_words += static_cast<double>(count_words(text));
  }
  for (const auto& [premise, hypothesis] : d.pairs) {
    d.prompt_words += static_cast<double>(count_words(premise) + count_words(hypothesis));
  }
  return d;
}

json embedding_json(const std::string& text, std::size_t dim) {
  return json(embed(text, dim));
}

/// Chat logprobs object for `content`.
json chat_logprobs(const std::string& context, const std::string& content) {
  json tokens = json::array();
  std::size_t i = 0;
  for (const auto& token : split_tokens(content)) {
    json bytes = json::array();
    for (unsigned char c : token) {
      bytes.push_back(static_cast<int>(c));
    }
    tokens.push_back({{"token", token},
                      {"logprob", token_logprob(context, token, i++)},
                      {"bytes", bytes},
                      {"top_logprobs", json::array()}});
  }
  return json{{"content", tokens}};
}

/// Legacy completions logprobs object for `text`.
json completion_logprobs(const std::string& context, const std::string& text) {
  json tokens = json::array();
  json logprobs = json::array();
  json offsets = json::array();
  std::size_t offset = 0;
  std::size_t i = 0;
  for (const auto& token : split_tokens(text)) {
    tokens.push_back(token);
    logprobs.push_back(token_logprob(context, token, i++));
    offsets.push_back(offset);
    offset += token.size();
  }
  return json{{"tokens", tokens},
              {"token_logprobs", logprobs},
              {"top_logprobs", nullptr},
              {"text_offset", offsets}};
}

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    out += " " + w;
  }
  return out;
}

}  // namespace

/// Shared state of the process: options, RNG, buckets, counters. Every public member
/// function may be called from any connection's strand; one mutex guards all of it.
class provider {
public:
  explicit provider(options opts)
    : opts_(std::move(opts)), rng_(opts_.seed), start_(steady::now()) {
    // The request bucket holds at least one request, so a tiny rpm × burst still admits
    // requests (one at a time) instead of refusing all of them forever.
    if (opts_.rpm > 0) {
      requests_.emplace(opts_.rpm, opts_.burst_seconds, 1.0, start_);
    }
    if (opts_.tpm > 0) {
      tokens_.emplace(opts_.tpm, opts_.burst_seconds, 0.0, start_);
    }
  }

  /// Decides what to do with one request. When the result holds a slot, the caller must
  /// call `complete()` once the request is finished (replied, reset or abandoned).
  action handle(const std::string& method, const std::string& path, const std::string& body,
                const std::string& authorization = {}) {
    std::lock_guard lock{mutex_};
    action act;
    act.endpoint = path;
    if (path == "/health") {
      act.response = reply{200, R"({"status":"ok"})", "application/json", {}};
      act.endpoint.clear();
      return act;
    }
    if (path == "/stats") {
      act.response = json_reply(200, stats_json());
      act.endpoint.clear();
      return act;
    }
    if (path == "/v1/models") {
      act.endpoint.clear();
      if (method != "GET") {
        act.response = json_reply(405, error_body("use GET for " + path,
                                                  "invalid_request_error",
                                                  "method_not_allowed"));
        return act;
      }
      act.response = json_reply(
        200, {{"object", "list"},
              {"data", json::array({{{"id", opts_.model},
                                     {"object", "model"},
                                     {"owned_by", "arbiter-fake-provider"}}})}});
      return act;
    }
    static const std::set<std::string> api{"/v1/chat/completions", "/v1/completions",
                                           "/v1/embeddings", "/embed", "/predict",
                                           "/compute_info_gain"};
    if (api.count(path) == 0) {
      act.endpoint = "other";
      return finish_now(act, json_reply(404, error_body("unknown path " + path,
                                                        "invalid_request_error",
                                                        "not_found")));
    }
    if (method != "POST") {
      return finish_now(act, json_reply(405, error_body("use POST for " + path,
                                                        "invalid_request_error",
                                                        "method_not_allowed")));
    }
    if (!opts_.api_key.empty() && authorization != "Bearer " + opts_.api_key) {
      return finish_now(act, json_reply(401, error_body(authorization.empty()
                                                          ? "missing API key"
                                                          : opts_.echo_key
                                                          ? "incorrect API key provided: "
                                                              + authorization
                                                          : "incorrect API key provided",
                                                        "invalid_request_error",
                                                        "invalid_api_key")));
    }
    auto now = steady::now();
    if (in_outage(now)) {
      ++faults_["outage"];
      return finish_now(act, json_reply(503, error_body("scheduled outage",
                                                        "server_error",
                                                        "service_unavailable")));
    }
    if (opts_.max_concurrency > 0 && in_flight_ >= opts_.max_concurrency) {
      ++rate_limited_;
      auto r = json_reply(429, error_body("too many concurrent requests (limit "
                                            + std::to_string(opts_.max_concurrency) + ")",
                                          "concurrency", "rate_limit_exceeded"));
      r.headers.emplace_back("Retry-After", "1");
      r.headers.emplace_back("retry-after-ms", "1000");
      return finish_now(act, std::move(r));
    }
    decoded d;
    try {
      d = decode(path, body, opts_.model);
    } catch (const bad_request& e) {
      return finish_now(act, json_reply(400, error_body(e.message, "invalid_request_error",
                                                        "invalid_request", e.param)));
    }
    if (auto inputs = std::max(d.inputs.size(), d.pairs.size());
        opts_.max_batch_size > 0 && inputs > opts_.max_batch_size
        && (path == "/embed" || path == "/predict" || path == "/v1/embeddings")) {
      // TEI's words for a call over --max-client-batch-size.
      ++faults_["batch_too_large"];
      return finish_now(act, json_reply(413, error_body(
                                               "batch size " + std::to_string(inputs)
                                                 + " > maximum allowed batch size "
                                                 + std::to_string(opts_.max_batch_size),
                                               "validation", "batch_too_large", "inputs")));
    }
    if (auto refusal = cap_inputs(d); refusal) {
      ++faults_["input_too_long"];
      return finish_now(act, json_reply(413, error_body(*refusal, "validation",
                                                        "input_too_long", "inputs")));
    }
    double cost = d.prompt_words;
    if (path == "/v1/chat/completions" || path == "/v1/completions") {
      cost += static_cast<double>(d.max_tokens * d.n);
    }
    if (requests_) {
      requests_->refill(now);
    }
    if (tokens_) {
      tokens_->refill(now);
    }
    if (requests_ && !requests_->can_take(1)) {
      return finish_now(act, rate_limited("requests", requests_->time_until(1),
                                          "requests per minute", requests_->limit()));
    }
    if (tokens_ && !tokens_->can_take(cost)) {
      return finish_now(act, rate_limited("tokens", tokens_->time_until(cost),
                                          "tokens per minute", tokens_->limit()));
    }
    if (requests_) {
      requests_->take(1);
    }
    if (tokens_) {
      tokens_->take(cost);
    }
    // Two draws per admitted request, always in this order, so a seed fixes the sequence.
    double fault = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    double normal = std::normal_distribution<double>{0.0, 1.0}(rng_);
    std::size_t output_tokens = 0;
    act.response = answer(path, d, output_tokens, act.prompt_tokens, act.completion_tokens);
    act.delay = latency(normal, output_tokens);
    act.holds_slot = true;
    ++in_flight_;
    max_concurrent_ = std::max(max_concurrent_, in_flight_);
    double edge = opts_.error_rate_500;
    if (fault < edge) {
      ++faults_["500"];
      act.response = json_reply(500, error_body("injected internal error", "server_error",
                                                "internal_error"));
    } else if (fault < (edge += opts_.error_rate_503)) {
      ++faults_["503"];
      act.response = json_reply(503, error_body("injected overload", "server_error",
                                                "service_unavailable"));
    } else if (fault < (edge += opts_.error_rate_timeout)) {
      ++faults_["timeout"];
      act.kind = action_kind::hang;
      act.outcome = "timeout";
    } else if (fault < (edge += opts_.error_rate_reset)) {
      ++faults_["reset"];
      act.kind = action_kind::reset;
      act.outcome = "reset";
    } else if (fault < (edge += opts_.error_rate_malformed)) {
      ++faults_["malformed"];
      act.response.status = 200;
      act.response.body = R"({"id": "broken", "choices": [{"index": 0, "message": )";
    }
    if (fault < edge) {
      act.prompt_tokens = act.completion_tokens = 0; // a fault replaced the answer
    }
    if (act.outcome.empty()) {
      act.outcome = std::to_string(act.response.status);
    }
    add_limit_headers(act.response);
    return act;
  }

  /// Records the end of a request that `handle()` admitted or answered.
  void complete(const action& act) {
    count(act);
    release(act);
  }

  /// Counts a request's outcome and tokens in /stats. An answer is counted before it is
  /// written: a client that has read it finds it in /stats, whichever thread answers that.
  void count(const action& act) {
    std::lock_guard lock{mutex_};
    if (!act.endpoint.empty()) {
      ++by_endpoint_[act.endpoint][act.outcome];
    }
    prompt_tokens_ += act.prompt_tokens;
    completion_tokens_ += act.completion_tokens;
  }

  /// Frees a request's concurrency slot, once its answer is written.
  void release(const action& act) {
    if (act.holds_slot) {
      std::lock_guard lock{mutex_};
      --in_flight_;
    }
  }

private:
  /// With `--max-input-tokens`, TEI's check of /embed and /predict inputs: TEI's 413 message
  /// for the first input past the cap, or, when the body asked `truncate: true`, every input
  /// cut to the cap (a pair's longer side first) and nullopt.
  std::optional<std::string> cap_inputs(decoded& d) const {
    auto cap = opts_.max_input_tokens;
    if (cap == 0) {
      return std::nullopt;
    }
    auto too_long = [cap](std::size_t words) {
      return "Input validation error: `inputs` must have less than " + std::to_string(cap)
             + " tokens. Given: " + std::to_string(words);
    };
    for (auto& text : d.inputs) {
      if (auto words = count_words(text); words > cap) {
        if (!d.truncate) {
          return too_long(words);
        }
        text = std::string{first_words(text, cap)};
      }
    }
    for (auto& [premise, hypothesis] : d.pairs) {
      auto a = count_words(premise);
      auto b = count_words(hypothesis);
      if (a + b <= cap) {
        continue;
      }
      if (!d.truncate) {
        return too_long(a + b);
      }
      // Longest first: the longer side loses words until both fit.
      auto keep_shorter = std::min(std::min(a, b), cap / 2);
      auto keep_a = a <= b ? keep_shorter : cap - keep_shorter;
      premise = std::string{first_words(premise, keep_a)};
      hypothesis = std::string{first_words(hypothesis, cap - keep_a)};
    }
    d.prompt_words = 0;
    for (const auto& text : d.inputs) {
      d.prompt_words += static_cast<double>(count_words(text));
    }
    for (const auto& [premise, hypothesis] : d.pairs) {
      d.prompt_words += static_cast<double>(count_words(premise) + count_words(hypothesis));
    }
    return std::nullopt;
  }
  bool in_outage(steady::time_point now) const {
    auto since = std::chrono::duration<double>(now - start_).count();
    for (const auto& w : opts_.outages) {
      if (since >= w.start_s && since < w.end_s) {
        return true;
      }
    }
    return false;
  }

  action finish_now(action& act, reply r) {
    add_limit_headers(r);
    act.response = std::move(r);
    act.outcome = std::to_string(act.response.status);
    return act;
  }

  reply rate_limited(const std::string& type, std::chrono::milliseconds wait,
                     const std::string& what, long long limit) {
    ++rate_limited_;
    auto r = json_reply(429, error_body("Rate limit reached on " + what + ": limit "
                                          + std::to_string(limit) + ". Please try again in "
                                          + go_duration(wait) + ".",
                                        type, "rate_limit_exceeded"));
    auto ms = std::max<long long>(wait.count(), 1);
    r.headers.emplace_back("Retry-After", std::to_string(std::max<long long>(1, (ms + 999) / 1000)));
    r.headers.emplace_back("retry-after-ms", std::to_string(ms));
    return r;
  }

  void add_limit_headers(reply& r) const {
    if (requests_) {
      r.headers.emplace_back("x-ratelimit-limit-requests", std::to_string(requests_->limit()));
      r.headers.emplace_back("x-ratelimit-remaining-requests",
                             std::to_string(requests_->remaining()));
      r.headers.emplace_back("x-ratelimit-reset-requests", go_duration(requests_->reset_after()));
    }
    if (tokens_) {
      r.headers.emplace_back("x-ratelimit-limit-tokens", std::to_string(tokens_->limit()));
      r.headers.emplace_back("x-ratelimit-remaining-tokens",
                             std::to_string(tokens_->remaining()));
      r.headers.emplace_back("x-ratelimit-reset-tokens", go_duration(tokens_->reset_after()));
    }
  }

  std::chrono::milliseconds latency(double normal, std::size_t output_tokens) const {
    double ms = 0;
    if (opts_.latency_median_ms > 0) {
      double sigma = opts_.latency_p99_ms > opts_.latency_median_ms
                       ? std::log(opts_.latency_p99_ms / opts_.latency_median_ms) / 2.326
                       : 0.0;
      ms = opts_.latency_median_ms * std::exp(sigma * normal);
    }
    ms += opts_.latency_per_token_ms * static_cast<double>(output_tokens);
    return std::chrono::milliseconds{static_cast<long long>(std::llround(ms))};
  }

  std::string next_id(const char* prefix) { return prefix + std::to_string(++ids_); }

  /// The answer to a decoded request, with the token counts its `usage` reports.
  reply answer(const std::string& path, const decoded& d, std::size_t& output_tokens,
               std::size_t& usage_prompt, std::size_t& usage_completion) {
    auto created = static_cast<long long>(std::time(nullptr));
    auto usage = [&](std::size_t completion) {
      auto prompt = static_cast<std::size_t>(d.prompt_words);
      usage_prompt = prompt;
      usage_completion = completion;
      return json{{"prompt_tokens", prompt},
                  {"completion_tokens", completion},
                  {"total_tokens", prompt + completion}};
    };
    if (path == "/v1/chat/completions") {
      auto sections = find_sections(d.prompt_text);
      std::string content;
      const char* finish = "stop";
      if (sections.has_reference && sections.has_candidate) {
        content = format_reward(jaccard(sections.candidate, sections.reference));
      } else {
        auto text = join_words(completion_words(d.prompt_text, d.max_tokens));
        content = text.empty() ? text : text.substr(1);
        finish = "length";
      }
      if (apply_stop(content, d.stop)) {
        finish = "stop";
      }
      auto per_choice = split_tokens(content).size();
      json choices = json::array();
      auto n = opts_.max_n > 0 ? std::min(d.n, opts_.max_n) : d.n;
      for (std::size_t i = 0; i < n; ++i) {
        choices.push_back(
          {{"index", i},
           {"message", {{"role", "assistant"}, {"content", content}}},
           {"logprobs", d.logprobs ? chat_logprobs(d.prompt_text, content) : json(nullptr)},
           {"finish_reason", finish}});
      }
      output_tokens = per_choice * n;
      return json_reply(200, {{"id", next_id("chatcmpl-fake-")},
                              {"object", "chat.completion"},
                              {"created", created},
                              {"model", d.model},
                              {"choices", choices},
                              {"usage", usage(output_tokens)}});
    }
    if (path == "/v1/completions") {
      json choices = json::array();
      auto n = opts_.max_n > 0 ? std::min(d.n, opts_.max_n) : d.n;
      for (const auto& prompt : d.inputs) {
        for (std::size_t i = 0; i < n; ++i) {
          auto text = join_words(sample_words(prompt, d.seed, i, d.max_tokens));
          bool stopped = apply_stop(text, d.stop);
          auto tokens = stopped ? split_tokens(text).size() : d.max_tokens;
          choices.push_back(
            {{"index", choices.size()},
             {"text", text},
             {"logprobs", d.logprobs ? completion_logprobs(prompt, text) : json(nullptr)},
             {"finish_reason", stopped ? "stop" : "length"}});
          output_tokens += tokens;
        }
      }
      return json_reply(200, {{"id", next_id("cmpl-fake-")},
                              {"object", "text_completion"},
                              {"created", created},
                              {"model", d.model},
                              {"choices", choices},
                              {"usage", usage(output_tokens)}});
    }
    if (path == "/v1/embeddings") {
      auto dim = d.dimensions > 0 ? d.dimensions : opts_.embedding_dim;
      json data = json::array();
      for (std::size_t i = 0; i < d.inputs.size(); ++i) {
        data.push_back({{"object", "embedding"},
                        {"index", i},
                        {"embedding", embedding_json(d.inputs[i], dim)}});
      }
      usage_prompt = static_cast<std::size_t>(d.prompt_words);
      return json_reply(200, {{"object", "list"},
                              {"data", data},
                              {"model", d.model},
                              {"usage", {{"prompt_tokens", static_cast<std::size_t>(d.prompt_words)},
                                         {"total_tokens", static_cast<std::size_t>(d.prompt_words)}}}});
    }
    if (path == "/embed") {
      json out = json::array();
      for (const auto& text : d.inputs) {
        out.push_back(embedding_json(text, opts_.embedding_dim));
      }
      return json_reply(200, out);
    }
    if (path == "/predict") {
      json out = json::array();
      for (const auto& [premise, hypothesis] : d.pairs) {
        auto s = nli(premise, hypothesis);
        std::vector<std::pair<double, const char*>> ranked{
          {s.entailment, "entailment"}, {s.neutral, "neutral"}, {s.contradiction, "contradiction"}};
        std::stable_sort(ranked.begin(), ranked.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        json labels = json::array();
        for (const auto& [score, label] : ranked) {
          labels.push_back({{"label", label}, {"score", score}});
        }
        out.push_back(labels);
      }
      return json_reply(200, d.pairs_is_list ? out : out[0]);
    }
    // /compute_info_gain
    json scores = json::array();
    json errors = json::array();
    json details = json::array();
    for (const auto& item : d.info_items) {
      if (item.contains("error")) {
        scores.push_back(nullptr);
        errors.push_back(item["error"]);
        details.push_back(nullptr);
        continue;
      }
      auto g = compute_info_gain(item["question"].get<std::string>(),
                                 item["context"].get<std::string>(),
                                 item["answers"].get<std::vector<std::string>>());
      scores.push_back(g.score);
      errors.push_back(nullptr);
      details.push_back(
        {{"with_context", g.with_context}, {"without_context", g.without_context}});
    }
    return json_reply(200, {{"scores", scores}, {"errors", errors}, {"details", details}});
  }

  json stats_json() const {
    json endpoints = json::object();
    long long total = 0;
    for (const auto& [endpoint, outcomes] : by_endpoint_) {
      for (const auto& [outcome, count] : outcomes) {
        endpoints[endpoint][outcome] = count;
        total += count;
      }
    }
    json faults = json::object();
    for (const auto& [kind, count] : faults_) {
      faults[kind] = count;
    }
    return json{{"requests_total", total},
                {"requests", endpoints},
                {"rate_limited_total", rate_limited_},
                {"prompt_tokens_total", prompt_tokens_},
                {"completion_tokens_total", completion_tokens_},
                {"faults", faults},
                {"in_flight", in_flight_},
                {"max_concurrent", max_concurrent_},
                {"uptime_s", std::chrono::duration<double>(steady::now() - start_).count()}};
  }

  options opts_;
  std::mutex mutex_;
  std::mt19937_64 rng_;
  steady::time_point start_;
  std::optional<token_bucket> requests_;
  std::optional<token_bucket> tokens_;
  std::size_t in_flight_ = 0;
  std::size_t max_concurrent_ = 0;
  long long rate_limited_ = 0;
  std::size_t prompt_tokens_ = 0;
  std::size_t completion_tokens_ = 0;
  long long ids_ = 0;
  std::map<std::string, std::map<std::string, long long>> by_endpoint_;
  std::map<std::string, long long> faults_;
};

/// One client connection, on its own strand. Reads a request, asks the provider what to do,
/// waits out the latency on a timer, then replies, resets or hangs; repeats on keep-alive.
class session : public std::enable_shared_from_this<session> {
public:
  session(tcp::socket&& socket, provider& p)
    : stream_(std::move(socket)), provider_(p), timer_(stream_.get_executor()) {
  }

  void run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

private:
  void read() {
    parser_.emplace();
    parser_->body_limit(64 * 1024 * 1024);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      return close();
    }
    auto req = parser_->release();
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    std::string target{req.target()};
    if (auto q = target.find('?'); q != std::string::npos) {
      target.resize(q);
    }
    act_ = provider_.handle(std::string{req.method_string()}, target, req.body(),
                            std::string{req[http::field::authorization]});
    if (act_.delay.count() <= 0) {
      return perform();
    }
    timer_.expires_after(act_.delay);
    timer_.async_wait([self = shared_from_this()](beast::error_code e) {
      if (!e) {
        self->perform();
      }
    });
  }

  void perform() {
    switch (act_.kind) {
      case action_kind::respond:
        return write();
      case action_kind::reset:
        return reset();
      case action_kind::hang:
        return hang();
    }
  }

  void write() {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(version_);
    res->result(act_.response.status);
    res->set(http::field::server, "arbiter-fake-provider");
    res->set(http::field::content_type, act_.response.content_type);
    for (const auto& [name, value] : act_.response.headers) {
      res->set(name, value);
    }
    res->body() = std::move(act_.response.body);
    res->keep_alive(keep_alive_);
    res->prepare_payload();
    provider_.count(act_);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
                        self->provider_.release(self->act_);
                        if (ec || !res->keep_alive()) {
                          return self->close();
                        }
                        self->read();
                      });
  }

  /// Closes with SO_LINGER 0 so the peer sees a TCP RST instead of a reply.
  void reset() {
    provider_.complete(act_);
    beast::error_code ignored;
    stream_.socket().set_option(tcp::socket::linger(true, 0), ignored);
    stream_.socket().close(ignored);
  }

  /// Never answers: reads and discards until the client closes the connection.
  void hang() {
    stream_.socket().async_read_some(
      asio::buffer(sink_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
        if (ec) {
          self->provider_.complete(self->act_);
          return self->close();
        }
        self->hang();
      });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  provider& provider_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  action act_;
  std::array<char, 4096> sink_{};
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

class listener : public std::enable_shared_from_this<listener> {
public:
  listener(asio::io_context& ioc, tcp::endpoint endpoint, provider& p)
    : ioc_(ioc), acceptor_(asio::make_strand(ioc)), provider_(p) {
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
  }

  [[nodiscard]] unsigned short port() const { return acceptor_.local_endpoint().port(); }

  void accept() {
    acceptor_.async_accept(asio::make_strand(ioc_),
                           [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
                             if (!ec) {
                               s.set_option(tcp::no_delay(true), ec);
                               std::make_shared<session>(std::move(s), self->provider_)->run();
                             }
                             self->accept();
                           });
  }

private:
  asio::io_context& ioc_;
  tcp::acceptor acceptor_;
  provider& provider_;
};

}  // namespace arbiter::fake_provider

int main(int argc, char** argv) {
  using namespace arbiter::fake_provider;
  options opts;
  std::vector<std::string> outages;
  std::string burst_seconds = "60";
  CLI::App app{"arbiter-fake-provider: deterministic stand-in for remote model APIs"};
  app.add_option("--host", opts.host, "address to bind")->capture_default_str();
  app.add_option("--port", opts.port, "port to bind (0 = any free port)")->capture_default_str();
  app.add_option("--seed", opts.seed, "seed of the fault and latency RNG")->capture_default_str();
  app.add_option("--threads", opts.threads, "I/O threads")->capture_default_str()
    ->check(CLI::Range(1u, 256u));
  app.add_option("--rpm", opts.rpm, "requests per minute (0 = unlimited)")
    ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--tpm", opts.tpm, "tokens per minute (0 = unlimited)")
    ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--burst-seconds", burst_seconds,
                 "seconds of the per-minute limits a bucket holds (positive; 60 = a minute)")
    ->capture_default_str();
  app.add_option("--model", opts.model, "model id of GET /v1/models and of replies to requests "
                 "that name none")->capture_default_str();
  app.add_option("--max-concurrency", opts.max_concurrency,
                 "requests in flight at once; more get 429 (0 = unlimited)")
    ->capture_default_str();
  app.add_option("--latency-median-ms", opts.latency_median_ms, "median latency")
    ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--latency-p99-ms", opts.latency_p99_ms, "99th percentile latency")
    ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--latency-per-token-ms", opts.latency_per_token_ms,
                 "extra latency per output token")
    ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--error-rate-500", opts.error_rate_500)->capture_default_str()
    ->check(CLI::Range(0.0, 1.0));
  app.add_option("--error-rate-503", opts.error_rate_503)->capture_default_str()
    ->check(CLI::Range(0.0, 1.0));
  app.add_option("--error-rate-timeout", opts.error_rate_timeout)->capture_default_str()
    ->check(CLI::Range(0.0, 1.0));
  app.add_option("--error-rate-reset", opts.error_rate_reset)->capture_default_str()
    ->check(CLI::Range(0.0, 1.0));
  app.add_option("--error-rate-malformed", opts.error_rate_malformed)->capture_default_str()
    ->check(CLI::Range(0.0, 1.0));
  app.add_option("--embedding-dim", opts.embedding_dim, "default embedding dimension")
    ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--outage", outages, "START_S:END_S window of 503s (repeatable)");
  app.add_option("--api-key", opts.api_key,
                 "require Authorization: Bearer KEY on API requests (else 401)");
  app.add_flag("--echo-key", opts.echo_key,
               "the 401's message quotes the Authorization header it got, as some providers do");
  app.add_option("--max-input-tokens", opts.max_input_tokens,
                 "TEI's longest /embed or /predict input, in words: a longer one is a 413 unless "
                 "the body asks truncate: true (0 = no cap)")
    ->capture_default_str();
  app.add_option("--max-batch-size", opts.max_batch_size,
                 "TEI's --max-client-batch-size: most inputs of one /embed, /predict or "
                 "/v1/embeddings call; more is a 413 (0 = no cap)")
    ->capture_default_str();
  app.add_option("--max-n", opts.max_n,
                 "most choices per prompt in chat and completions replies, whatever n asks "
                 "(0 = no cap)")
    ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every bad flag exits 2, like the checks below.
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    std::size_t used = 0;
    opts.burst_seconds = std::stod(burst_seconds, &used);
    if (used != burst_seconds.size() || !std::isfinite(opts.burst_seconds)
        || opts.burst_seconds <= 0) {
      throw std::invalid_argument{burst_seconds};
    }
  } catch (const std::exception&) {
    std::cerr << "--burst-seconds: expected a positive number of seconds, got '" << burst_seconds
              << "'\n";
    return 2;
  }

  for (const auto& spec : outages) {
    auto colon = spec.find(':');
    try {
      if (colon == std::string::npos) {
        throw std::invalid_argument{spec};
      }
      outage_window w{std::stod(spec.substr(0, colon)), std::stod(spec.substr(colon + 1))};
      if (w.end_s < w.start_s) {
        throw std::invalid_argument{spec};
      }
      opts.outages.push_back(w);
    } catch (const std::exception&) {
      std::cerr << "--outage: expected START_S:END_S with START_S <= END_S, got '" << spec
                << "'\n";
      return 2;
    }
  }
  double total_rate = opts.error_rate_500 + opts.error_rate_503 + opts.error_rate_timeout
                      + opts.error_rate_reset + opts.error_rate_malformed;
  if (total_rate > 1.0 + 1e-9) {
    std::cerr << "error rates sum to " << total_rate << ", more than 1\n";
    return 2;
  }

  try {
    boost::asio::io_context ioc{static_cast<int>(opts.threads)};
    provider p{opts};
    auto address = boost::asio::ip::make_address(opts.host);
    auto l = std::make_shared<listener>(ioc, tcp::endpoint{address, opts.port}, p);
    l->accept();
    boost::asio::signal_set signals{ioc, SIGINT, SIGTERM};
    signals.async_wait([&ioc](const boost::system::error_code&, int) { ioc.stop(); });
    std::cout << "listening on http://" << opts.host << ":" << l->port() << std::endl;
    std::vector<std::thread> workers;
    for (unsigned i = 1; i < opts.threads; ++i) {
      workers.emplace_back([&ioc] { ioc.run(); });
    }
    ioc.run();
    for (auto& t : workers) {
      t.join();
    }
  } catch (const std::exception& e) {
    std::cerr << "arbiter-fake-provider: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
